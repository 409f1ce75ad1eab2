//! The `commands` fuzz target; the logic is in `harness::commands` (see `fuzz/README.md`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    schedstate_fuzz::harness::commands::run(data);
});
