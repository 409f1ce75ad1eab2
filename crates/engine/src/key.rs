//! Order-preserving byte keys.
//!
//! Every table and secondary index of the engine maps a [`Key`] to a row. A key is a
//! sequence of typed components (strings and integers) encoded so that comparing the
//! encoded bytes gives the same order as comparing the components one by one. That lets
//! one generic map type serve every table, lets compound keys (`namespace`, `id`) work
//! with plain byte comparisons, and turns "all rows whose first component is X" into a
//! byte-prefix scan.
//!
//! Encoding:
//! - a string component is its UTF-8 bytes with every `0x00` escaped as `0x00 0xFF`,
//!   followed by the terminator `0x00 0x01`. The terminator sorts before any escaped or
//!   ordinary byte, so `"a" < "a\0" < "ab"` holds for the encodings too, and no complete
//!   component is a prefix of another;
//! - a `u64` component is its 8 big-endian bytes.
//!
//! A *prefix* ([`KeyBuilder::str_prefix`]) is a string encoded without its terminator:
//! every key whose component starts with that string begins with those bytes.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use smallvec::SmallVec;

/// Keys up to this many encoded bytes live inline, without a heap allocation: a UUID
/// (38 bytes encoded) and a compound of two UUIDs (76) both fit, so building a key for
/// a lookup, a change set entry or a watch allocates nothing. (The maps do not store
/// `Key`s: `PMap` copies the encoded bytes into its nodes.)
const INLINE: usize = 78;

/// An encoded, order-preserving key. Cheap to clone: short keys are copied inline,
/// longer ones share one reference-counted buffer.
///
/// ```
/// use schedstate_engine::Key;
/// let a = Key::builder().str("default").str("vol-1").build();
/// let b = Key::builder().str("default").str("vol-2").build();
/// assert!(a < b);
/// assert!(a.starts_with(&Key::str("default")));
/// ```
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Arc<[u8]>),
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        compare(self.as_bytes(), other.as_bytes())
    }
}

/// Byte order, deciding on the first eight bytes with one integer comparison when both
/// have them and they differ — the common case inside a tree node (ids differ early),
/// where a call to `memcmp` per probe was a visible share of every lookup.
#[inline]
fn compare(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl Key {
    /// A key of one string component.
    pub fn str(s: &str) -> Key {
        // Every index lookup by one id builds one: written in place when it fits and
        // needs no escape, without the builder's buffer and its copy.
        let b = s.as_bytes();
        if b.len() + 2 <= INLINE && !b.contains(&0) {
            let mut bytes = [0u8; INLINE];
            bytes[..b.len()].copy_from_slice(b);
            bytes[b.len() + 1] = 1;
            // INLINE < 256, so the length fits a byte.
            return Key(Repr::Inline {
                len: (b.len() + 2) as u8,
                bytes,
            });
        }
        KeyBuilder::new().str(s).build()
    }

    /// A key of one integer component.
    pub fn u64(n: u64) -> Key {
        KeyBuilder::new().u64(n).build()
    }

    /// Starts a compound key.
    pub fn builder() -> KeyBuilder {
        KeyBuilder::new()
    }

    /// Wraps bytes that are already encoded (for example a key read back from a change
    /// set or a file).
    pub fn from_encoded(bytes: &[u8]) -> Key {
        if bytes.len() <= INLINE {
            let mut inline = [0u8; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            // INLINE < 256, so the length fits a byte.
            Key(Repr::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            })
        } else {
            Key(Repr::Heap(Arc::from(bytes)))
        }
    }

    /// The encoded bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(b) => b,
        }
    }

    /// Appends the encoded bytes of `other` (an index key followed by a primary key):
    /// in place when the whole fits inline.
    pub(crate) fn append(&mut self, other: &[u8]) {
        if let Repr::Inline { len, bytes } = &mut self.0 {
            let at = usize::from(*len);
            if at + other.len() <= INLINE {
                bytes[at..at + other.len()].copy_from_slice(other);
                // INLINE < 256, so the length fits a byte.
                *len = (at + other.len()) as u8;
                return;
            }
        }
        *self = Key::builder().key(self.as_bytes()).key(other).build();
    }

    /// Whether this key begins with the bytes of `prefix`.
    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        self.as_bytes().starts_with(prefix)
    }

    /// Decodes the string components of a key made only of string components
    /// (for messages and debugging). Returns `None` for any other shape.
    pub fn decode_strs(&self) -> Option<Vec<String>> {
        decode_strs(self.as_bytes())
    }
}

fn decode_strs(mut bytes: &[u8]) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    while !bytes.is_empty() {
        let mut part = Vec::new();
        loop {
            match bytes {
                [0, 1, rest @ ..] => {
                    bytes = rest;
                    break;
                }
                [0, 0xFF, rest @ ..] => {
                    part.push(0);
                    bytes = rest;
                }
                [0, ..] | [] => return None,
                [b, rest @ ..] => {
                    part.push(*b);
                    bytes = rest;
                }
            }
        }
        parts.push(String::from_utf8(part).ok()?);
    }
    Some(parts)
}

impl Deref for Key {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for Key {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The bytes so far, so that built keys can be looked up without finishing them
/// (`View::get_many` over a `Vec<KeyBuilder>`).
impl AsRef<[u8]> for KeyBuilder {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.decode_strs() {
            Some(parts) => write!(f, "Key({})", parts.join("/")),
            None => write!(f, "Key({:02x?})", self.as_bytes()),
        }
    }
}

/// Builds a compound [`Key`] (or a prefix of one) component by component. Keys that
/// fit inline are built without touching the heap: every lookup builds one.
#[derive(Debug, Default, Clone)]
pub struct KeyBuilder {
    buf: SmallVec<[u8; INLINE]>,
}

impl KeyBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        KeyBuilder {
            buf: SmallVec::new(),
        }
    }

    /// Appends a complete string component.
    pub fn str(mut self, s: &str) -> Self {
        push_escaped(&mut self.buf, s.as_bytes());
        self.buf.extend_from_slice(&[0, 1]);
        self
    }

    /// Appends a string *prefix*: matches every string component starting with `s`.
    /// Only meaningful as the last component of a prefix scan.
    pub fn str_prefix(mut self, s: &str) -> Self {
        push_escaped(&mut self.buf, s.as_bytes());
        self
    }

    /// Appends an integer component.
    pub fn u64(mut self, n: u64) -> Self {
        self.buf.extend_from_slice(&n.to_be_bytes());
        self
    }

    /// Appends an already encoded key (for example a primary key after a secondary
    /// index value).
    pub fn key(mut self, k: &[u8]) -> Self {
        self.buf.extend_from_slice(k);
        self
    }

    /// The encoded bytes so far, without allocating a [`Key`]; for lookups.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Finishes the key.
    pub fn build(self) -> Key {
        Key::from_encoded(&self.buf)
    }
}

fn push_escaped(buf: &mut SmallVec<[u8; INLINE]>, bytes: &[u8]) {
    if !bytes.contains(&0) {
        buf.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        if b == 0 {
            buf.extend_from_slice(&[0, 0xFF]);
        } else {
            buf.push(b);
        }
    }
}

/// The smallest byte string greater than every string that starts with `prefix`, or
/// `None` when there is none (empty prefix or all `0xFF`): the exclusive upper bound of
/// a prefix scan.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<SmallVec<[u8; INLINE]>> {
    // On the stack for keys of ordinary length: every prefix scan makes one.
    let mut end = SmallVec::<[u8; INLINE]>::from_slice(prefix);
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_gives_the_builders_key_inline_or_not() {
        for (a, b) in [
            ("", "x"),
            ("node", "alloc"),
            (&*"x".repeat(40), &*"y".repeat(40)),
        ] {
            let mut k = Key::str(a);
            k.append(Key::str(b).as_bytes());
            assert_eq!(k, Key::builder().str(a).str(b).build(), "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_one_string_key_is_the_builders() {
        for s in [
            "",
            "a",
            "n\0x",
            &"x".repeat(75),
            &"x".repeat(76),
            &"y".repeat(200),
        ] {
            let built = KeyBuilder::new().str(s).build();
            assert_eq!(Key::str(s).as_bytes(), built.as_bytes(), "{s:?}");
        }
    }

    #[test]
    fn string_order_is_preserved() {
        let words = ["", "\0", "a", "a\0", "a\0b", "ab", "b", "\u{00ff}"];
        for x in words {
            for y in words {
                assert_eq!(Key::str(x).cmp(&Key::str(y)), x.cmp(y), "{x:?} vs {y:?}");
            }
        }
    }

    #[test]
    fn compound_keys_order_by_components() {
        let k = |a: &str, b: &str| Key::builder().str(a).str(b).build();
        assert!(k("a", "z") < k("ab", "a"));
        assert!(k("a", "a") < k("a", "b"));
        assert!(!k("ab", "x").starts_with(&Key::str("a")));
        assert!(k("ab", "x").starts_with(KeyBuilder::new().str_prefix("a").as_bytes()));
    }

    #[test]
    fn the_fast_comparison_agrees_with_byte_order() {
        let samples: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"abcdefg",
            b"abcdefgha",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\0\0\0\0\0\0\0\0\0",
            b"zz",
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(compare(a, b), a.cmp(b), "{a:?} vs {b:?}");
                let (ka, kb) = (Key::from_encoded(a), Key::from_encoded(b));
                assert_eq!(ka.cmp(&kb), a.cmp(b));
            }
        }
    }

    #[test]
    fn integers_order_numerically() {
        assert!(Key::u64(2) < Key::u64(10));
        assert!(Key::u64(255) < Key::u64(256));
    }

    #[test]
    fn long_keys_compare_like_short_ones() {
        let long = "x".repeat(200);
        let a = Key::builder().str(&long).str("a").build();
        let b = Key::builder().str(&long).str("b").build();
        assert!(a < b);
        assert_eq!(a, Key::from_encoded(a.as_bytes()));
        assert!(Key::str("x") < a);
    }

    #[test]
    fn decode_round_trips() {
        let key = Key::builder().str("ns\0x").str("id").build();
        assert_eq!(
            key.decode_strs(),
            Some(vec!["ns\0x".to_string(), "id".to_string()])
        );
        assert_eq!(Key::u64(7).decode_strs(), None);
    }

    #[test]
    fn successor_bounds_a_prefix() {
        assert_eq!(prefix_successor(b"ab").as_deref(), Some(b"ac".as_slice()));
        assert_eq!(
            prefix_successor(&[1, 0xFF]).as_deref(),
            Some([2].as_slice())
        );
        assert_eq!(prefix_successor(&[0xFF]), None);
        assert_eq!(prefix_successor(b""), None);
    }
}
