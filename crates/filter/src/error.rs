//! [`FilterError`]: why an expression does not parse, with where.

/// How many characters of the input an error quotes at most.
const QUOTED: usize = 40;

/// An expression that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// Longer than [`MAX_LEN`](crate::MAX_LEN).
    #[error("the expression is {len} bytes long, over the limit of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    #[error("the expression nests deeper than {max} levels at byte {offset}")]
    TooDeep {
        /// Where.
        offset: usize,
        /// The limit.
        max: usize,
    },
    /// Something else was expected.
    #[error("at byte {offset} ({near:?}): expected {expected}")]
    Expected {
        /// Where.
        offset: usize,
        /// What was expected.
        expected: String,
        /// A little of the input there.
        near: String,
    },
    /// A `matches` pattern that is not a valid (or is too large a) regular expression.
    #[error("at byte {offset}: not a usable regular expression: {reason}")]
    BadRegex {
        /// Where.
        offset: usize,
        /// Why (regex-lite's words, cut short).
        reason: String,
    },
}

/// At most [`QUOTED`] characters of `src` from `offset`.
pub(crate) fn near(src: &str, offset: usize) -> String {
    src.get(offset..)
        .unwrap_or("")
        .chars()
        .take(QUOTED)
        .collect()
}

/// The most characters of a regex error's reason kept.
const REASON: usize = 100;

/// Why a pattern was refused, without the pattern: regex-lite's errors are fixed
/// sentences that never quote the pattern; still cut short, so a future version that
/// quotes it cannot echo untrusted input at length.
pub(crate) fn regex_reason(e: &regex_lite::Error) -> String {
    e.to_string().trim().chars().take(REASON).collect()
}

pub(crate) fn expected(src: &str, offset: usize, what: &str) -> FilterError {
    FilterError::Expected {
        offset,
        expected: what.to_string(),
        near: near(src, offset),
    }
}
