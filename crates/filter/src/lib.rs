//! Nomad's `?filter=` expressions (the grammar of HashiCorp's go-bexpr), for the
//! agent's list endpoints: parsed once from untrusted input, evaluated over each item as
//! the API shows it (`serde_json::Value`).
//!
//! ```text
//! expr     := and ("or" and)*
//! and      := unary ("and" unary)*
//! unary    := "not" unary | "(" expr ")" | match
//! match    := selector ("==" | "!=" | "<" | "<=" | ">" | ">=") value
//!           | selector "is" ["not"] "empty"
//!           | selector ["not"] ("contains" | "matches") value
//!           | value ["not"] "in" selector
//! selector := part ("." part | "[" string "]")*       part := name | number
//! value    := "quoted" | `raw` | number | true | false | bareword
//! ```
//!
//! Keywords (`and or not in is empty contains matches`) are names the parser
//! recognises in place; they cannot be a selector's first part nor a bareword value,
//! but may follow a dot (`Meta.in`). Strings take `\"`, `\\`, `\n` and `\t` escapes;
//! a backquoted string takes none.
//!
//! ```
//! use schedstate_filter::Filter;
//! use serde_json::json;
//!
//! let f: Filter = r#"Status == "ready" and not ("drain" in Tags) and Meta.rack == r1"#
//!     .parse()
//!     .unwrap();
//! assert!(f.matches(&json!({"Status": "ready", "Meta": {"rack": "r1"}, "Tags": ["gpu"]})));
//! assert!(!f.matches(&json!({"Status": "ready", "Meta": {"rack": "r1"}, "Tags": ["drain"]})));
//! assert!(!f.matches(&json!({"Status": "down"})));
//! ```
//!
//! Semantics where go-bexpr leaves room: a selector that names nothing (a missing
//! field, or a path through a non-object) makes its match false — whatever the
//! operator, negated ones included — except `is empty`, which is true for it (and for
//! `null`, `""`, `[]`, `{}`). Numbers compare numerically (a value is parsed as a
//! number against a number field; exactly when both are integers, so nanosecond times
//! and u64 indexes compare right), strings lexically, booleans with `true`/`false`.
//! `contains` and `in` look for a substring in a string, an element in an array, a key
//! in an object. `matches` searches a string with a regular expression in the syntax
//! of the `regex` family ([regex-lite]): like Go's RE2, which go-bexpr uses, `\d`, `\w`
//! and `\s` are ASCII classes and matching takes time linear in the input; unlike it,
//! `(?i)` folds ASCII case only and `\p{..}` classes are not available.
//!
//! [regex-lite]: https://docs.rs/regex-lite
//!
//! Untrusted input: at most [`MAX_LEN`] bytes and [`MAX_DEPTH`] levels of nesting (no
//! unbounded recursion), regular expressions compiled with memory limits, no panic on
//! any input (a fuzz target holds it to that), errors quoting at most a few dozen
//! characters of the input (a pattern's error is its reason, never the pattern).
//!
//! Design: a lexer makes the whole token list (the input is bounded), a recursive
//! descent parser counts its nesting, and the tree it builds holds everything the
//! evaluation needs — compiled regexes included — so [`Filter::matches`] allocates
//! nothing and never fails. `and`/`or` keep their operands in lists, so the tree is
//! only as deep as the parentheses and `not`s. A filter prints ([`Display`]) as
//! canonical text that parses back to the same filter.
//!
//! [`Display`]: std::fmt::Display
//!
//! | file | what |
//! |---|---|
//! | `lex.rs` | bytes to tokens |
//! | `ast.rs` | the expression tree, and its canonical text |
//! | `parse.rs` | tokens to the tree |
//! | `eval.rs` | the tree over a JSON value |
//! | `error.rs` | `FilterError` |

mod ast;
mod error;
mod eval;
mod lex;
mod parse;

pub use error::FilterError;

/// The longest expression accepted, in bytes.
pub const MAX_LEN: usize = 4096;

/// The deepest nesting accepted (`not`, parentheses).
pub const MAX_DEPTH: usize = 64;

/// A parsed filter expression: cheap to evaluate on many items.
#[derive(Debug, Clone)]
pub struct Filter {
    expr: ast::Expr,
}

impl Filter {
    /// Parses `src`.
    ///
    /// # Errors
    /// [`FilterError`] with the byte offset of the problem.
    pub fn parse(src: &str) -> Result<Filter, FilterError> {
        if src.len() > MAX_LEN {
            return Err(FilterError::TooLong {
                len: src.len(),
                max: MAX_LEN,
            });
        }
        let tokens = lex::tokens(src)?;
        let expr = parse::parse(src, &tokens)?;
        Ok(Filter { expr })
    }

    /// Whether `item` passes the filter.
    pub fn matches(&self, item: &serde_json::Value) -> bool {
        eval::eval(&self.expr, item)
    }
}

/// The canonical text of the filter: the same meaning, `in` written as `contains`,
/// strings quoted, only the parentheses the meaning needs. It parses back to an equal
/// filter (when it fits [`MAX_LEN`]: quoting barewords can lengthen it).
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.expr.fmt(f)
    }
}

impl std::str::FromStr for Filter {
    type Err = FilterError;

    fn from_str(src: &str) -> Result<Filter, FilterError> {
        Filter::parse(src)
    }
}

#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod tests;
