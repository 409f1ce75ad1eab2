//! The `persist` fuzz target; the logic is in `harness::persist` (see `fuzz/README.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    schedstate_fuzz::harness::persist::run(data);
});
