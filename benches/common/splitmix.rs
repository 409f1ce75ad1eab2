//! SplitMix64 (Steele, Lea, Flood 2014) and its UUID-like ids: the generator and the
//! draws of the go-memdb peer benchmark (`../shared/peers/go-memdb/RESULTS.md` §4.2).
//!
//! One copy for every bench target, each including it with
//! `#[path = "…/common/splitmix.rs"] mod splitmix;`, so that all of them generate
//! exactly the peer's data.

/// SplitMix64: small, fast, deterministic; the tuple field is the state (the seed).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `next_u64() % n` (the modulo bias is part of the spec).
    pub fn intn(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Two draws a, b; the 16 big-endian bytes of a‖b as a UUID-like id: 36 characters,
    /// `8-4-4-4-12` lowercase hex digits.
    pub fn uuid(&mut self) -> String {
        let (a, b) = (self.next_u64(), self.next_u64());
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }
}
