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
//! selector := name ("." name | "[" string "]")*
//! value    := "quoted" | `raw` | number | true | false | bareword
//! ```
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
//! number against a number field), strings lexically, booleans with `true`/`false`.
//! `contains` and `in` look for a substring in a string, an element in an array, a key
//! in an object.
//!
//! Untrusted input: at most [`MAX_LEN`] bytes and [`MAX_DEPTH`] levels of nesting (no
//! unbounded recursion), regular expressions compiled with memory limits, no panic on
//! any input (a fuzz target holds it to that), errors quoting at most a few dozen
//! characters of the input.
//!
//! | file | what |
//! |---|---|
//! | `lex.rs` | bytes to tokens |
//! | `parse.rs` | tokens to the expression tree |
//! | `eval.rs` | the tree over a JSON value |
//! | `error.rs` | `FilterError` |

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
    expr: parse::Expr,
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

impl std::str::FromStr for Filter {
    type Err = FilterError;

    fn from_str(src: &str) -> Result<Filter, FilterError> {
        Filter::parse(src)
    }
}

#[cfg(test)]
mod tests;
