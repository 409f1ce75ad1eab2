//! Bytes to tokens: names (selector parts and barewords), strings (`"…"` with
//! backslash escapes, `` `…` `` raw), numbers, operators, punctuation. Keywords are
//! names the parser recognises in place.

use crate::error::{FilterError, expected};

/// One token and the byte offset it starts at.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub offset: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A name or bareword: letters, digits, `_`, `-`, `/`, `:`, `@`.
    Name(String),
    /// A quoted or raw string, unescaped.
    Str(String),
    /// A number, as written (kept as text: compared as a number only against one).
    Number(String),
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LParen,
    RParen,
    LBracket,
    RBracket,
    Dot,
}

fn name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | ':' | '@')
}

/// The tokens of `src`.
pub(crate) fn tokens(src: &str) -> Result<Vec<Token>, FilterError> {
    let mut out = Vec::new();
    let mut chars = src.char_indices().peekable();
    while let Some(&(offset, c)) = chars.peek() {
        let kind = match c {
            c if c.is_whitespace() => {
                chars.next();
                continue;
            }
            '(' | ')' | '[' | ']' | '.' => {
                chars.next();
                match c {
                    '(' => Kind::LParen,
                    ')' => Kind::RParen,
                    '[' => Kind::LBracket,
                    ']' => Kind::RBracket,
                    _ => Kind::Dot,
                }
            }
            '=' | '!' | '<' | '>' => {
                chars.next();
                let eq = chars.next_if(|&(_, n)| n == '=').is_some();
                match (c, eq) {
                    ('=', true) => Kind::Eq,
                    ('!', true) => Kind::Ne,
                    ('<', false) => Kind::Lt,
                    ('<', true) => Kind::Le,
                    ('>', false) => Kind::Gt,
                    ('>', true) => Kind::Ge,
                    _ => return Err(expected(src, offset, "==, !=, <, <=, > or >=")),
                }
            }
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((at, '\\')) => s.push(escape(src, offset, at, &mut chars)?),
                        Some((_, ch)) => s.push(ch),
                        None => return Err(expected(src, offset, "a closing \"")),
                    }
                }
                Kind::Str(s)
            }
            '`' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some((_, '`')) => break,
                        Some((_, ch)) => s.push(ch),
                        None => return Err(expected(src, offset, "a closing `")),
                    }
                }
                Kind::Str(s)
            }
            c if c.is_ascii_digit() || (c == '-' && starts_number(src, offset)) => {
                let mut s = String::new();
                while let Some((_, ch)) = chars.next_if(|&(_, n)| {
                    n.is_ascii_digit() || matches!(n, '.' | '-' | '+' | 'e' | 'E')
                }) {
                    s.push(ch);
                }
                // `12abc` is a bareword, not a number followed by a name.
                if chars.peek().is_some_and(|&(_, n)| name_char(n)) {
                    while let Some((_, ch)) = chars.next_if(|&(_, n)| name_char(n)) {
                        s.push(ch);
                    }
                    Kind::Name(s)
                } else {
                    Kind::Number(s)
                }
            }
            c if name_char(c) => {
                let mut s = String::new();
                while let Some((_, ch)) = chars.next_if(|&(_, n)| name_char(n)) {
                    s.push(ch);
                }
                Kind::Name(s)
            }
            _ => {
                return Err(expected(
                    src,
                    offset,
                    "a name, a value, an operator or a parenthesis",
                ));
            }
        };
        out.push(Token { kind, offset });
    }
    Ok(out)
}

/// The character an escape after the backslash at `at` stands for, in the string
/// opened at `open`. Go's escapes
/// (go-bexpr unquotes as Go does), less the rare ones; an unknown escape is an error
/// rather than the letter itself, so that `"\d+"` is not quietly the pattern `d+`
/// (regexes are better written `` `\d+` ``).
fn escape(
    src: &str,
    open: usize,
    at: usize,
    chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>,
) -> Result<char, FilterError> {
    const KNOWN: &str = "an escape: \\\", \\\\, \\n, \\r, \\t or \\u and 4 hex digits";
    let c = match chars.next() {
        Some((_, '"')) => '"',
        Some((_, '\\')) => '\\',
        Some((_, 'n')) => '\n',
        Some((_, 'r')) => '\r',
        Some((_, 't')) => '\t',
        None => return Err(expected(src, open, "a closing \"")),
        Some((_, 'u')) => {
            // Exactly four digits: nothing read depends on a number in the input.
            let mut code = 0;
            for _ in 0..4 {
                let digit = chars.next().and_then(|(_, d)| d.to_digit(16));
                code = code * 16 + digit.ok_or_else(|| expected(src, at, KNOWN))?;
            }
            char::from_u32(code).ok_or_else(|| expected(src, at, KNOWN))?
        }
        _ => return Err(expected(src, at, KNOWN)),
    };
    Ok(c)
}

fn starts_number(src: &str, offset: usize) -> bool {
    src[offset + 1..]
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit())
}
