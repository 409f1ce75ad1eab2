//! The `txn` fuzz target; the logic is in `harness::txn` (see `fuzz/README.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    schedstate_fuzz::harness::txn::run(data);
});
