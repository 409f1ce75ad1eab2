//! A cache prefetch hint, for code that knows several addresses it will read before
//! it reads any of them (batched lookups, `pmap/batch.rs`; the store's denormalize).
//!
//! A lookup in a large map is a chain of dependent cache misses (node, its key heads,
//! the key, the value, the row); one at a time, each waits for the one before. Asking
//! for the next line of several independent lookups first lets the memory system
//! fetch them together.

/// Asks the CPU to bring the cache line holding `p` closer. A hint: it never faults,
/// whatever `p` is, and it changes nothing the program can observe. A no-op on
/// targets without a stable prefetch instruction.
#[inline(always)]
pub fn prefetch<T: ?Sized>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is in the
    // target's baseline); a prefetch does not dereference its address in the
    // language's sense and never faults, so any pointer value is fine.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
