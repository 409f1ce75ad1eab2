//! Reading decisions out of the fuzzer's bytes.
//!
//! Deliberately tiny and dependency-free (no `arbitrary`): the same bytes must decode to
//! the same decisions in the libFuzzer targets, in the plain replay binaries and in
//! `cargo test` (which cannot depend on `arbitrary`). Every read past the end yields
//! zeros, so a short input still decodes to a (short) well-formed run.

/// A cursor over the input bytes.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data` from its first byte.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// How many bytes are left.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number in `0..n` (`n` in `1..=256`).
    pub fn below(&mut self, n: usize) -> usize {
        debug_assert!((1..=256).contains(&n));
        usize::from(self.byte()) % n
    }

    /// A coin flip.
    pub fn bool(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// True with probability about `percent` / 100.
    pub fn chance(&mut self, percent: u8) -> bool {
        self.byte() % 100 < percent
    }

    /// One element of `from` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// The next `n` bytes, or fewer if the input ends.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }

    /// Every byte left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::Input;

    #[test]
    fn reads_past_the_end_are_zero() {
        let mut i = Input::new(&[7, 1, 2]);
        assert_eq!(i.byte(), 7);
        assert_eq!(i.u16(), 0x0201);
        assert!(i.is_empty());
        assert_eq!(i.u64(), 0);
        assert_eq!(i.below(5), 0);
        assert!(i.take(3).is_empty());
    }
}
