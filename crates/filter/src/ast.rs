//! The expression tree, and its canonical text (`Display`): the printed form of a
//! parsed tree parses back to an equal tree, which the round-trip tests and the fuzz
//! target hold the parser to.

use std::fmt;

use regex_lite::Regex;

use crate::lex::{self, Kind};

/// A path into the item: object keys, in order.
pub(crate) type Selector = Vec<String>;

/// A literal as written; compared by the field's type at evaluation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Value {
    pub text: String,
    /// Written as a number (unquoted).
    pub numeric: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A compiled `matches` pattern. Equal when written the same: `Regex` itself has no
/// equality, and the tests compare trees.
#[derive(Debug, Clone)]
pub(crate) struct Pattern(pub Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

/// `and` and `or` hold their operands in a list rather than as a chain of pairs, so
/// that the tree (and the evaluation's recursion) is only as deep as the expression's
/// parentheses and `not`s, which the parser bounds, however many operands there are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    /// Two or more operands.
    And(Vec<Expr>),
    /// Two or more operands.
    Or(Vec<Expr>),
    Not(Box<Expr>),
    Compare(Selector, Cmp, Value),
    /// `is empty`; negated: `is not empty`.
    Empty(Selector, bool),
    /// `selector contains value` / `value in selector`; negated with `not`.
    Contains(Selector, Value, bool),
    /// `selector matches "re"`; negated with `not`.
    Matches(Selector, Pattern, bool),
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::And(items) => list(f, items, " and ", |e| {
                matches!(e, Expr::And(_) | Expr::Or(_))
            }),
            Expr::Or(items) => list(f, items, " or ", |e| matches!(e, Expr::Or(_))),
            Expr::Not(e) if matches!(**e, Expr::And(_) | Expr::Or(_)) => {
                write!(f, "not ({e})")
            }
            Expr::Not(e) => write!(f, "not {e}"),
            Expr::Compare(s, cmp, v) => {
                let op = match cmp {
                    Cmp::Eq => "==",
                    Cmp::Ne => "!=",
                    Cmp::Lt => "<",
                    Cmp::Le => "<=",
                    Cmp::Gt => ">",
                    Cmp::Ge => ">=",
                };
                write!(f, "{} {op} {}", Sel(s), v)
            }
            Expr::Empty(s, negated) => {
                write!(f, "{} is {}empty", Sel(s), not(*negated))
            }
            // Always the `contains` form: it means the same as `in`, and has one tree.
            Expr::Contains(s, v, negated) => {
                write!(f, "{} {}contains {}", Sel(s), not(*negated), v)
            }
            Expr::Matches(s, p, negated) => {
                let pattern = Value {
                    text: p.0.as_str().to_string(),
                    numeric: false,
                };
                write!(f, "{} {}matches {}", Sel(s), not(*negated), pattern)
            }
        }
    }
}

fn not(negated: bool) -> &'static str {
    if negated { "not " } else { "" }
}

/// `items` joined by `sep`, the ones `needs_parens` says in parentheses: only those the
/// source must have had in parentheses too, so printing never nests deeper than the
/// expression that was parsed.
fn list(
    f: &mut fmt::Formatter<'_>,
    items: &[Expr],
    sep: &str,
    needs_parens: fn(&Expr) -> bool,
) -> fmt::Result {
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        if needs_parens(e) {
            write!(f, "({e})")?;
        } else {
            write!(f, "{e}")?;
        }
    }
    Ok(())
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.numeric {
            // As written: the lexer took it as a number, and will again.
            return f.write_str(&self.text);
        }
        quoted(f, &self.text)
    }
}

fn quoted(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

/// A selector printed with dots where a part reads back as itself, `["…"]` elsewhere.
struct Sel<'a>(&'a Selector);

impl fmt::Display for Sel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, part) in self.0.iter().enumerate() {
            if i == 0 {
                // The grammar has no brackets for the first part; the parser only
                // makes first parts that read back bare.
                f.write_str(part)?;
            } else if reads_back_bare(part) {
                write!(f, ".{part}")?;
            } else {
                f.write_str("[")?;
                quoted(f, part)?;
                f.write_str("]")?;
            }
        }
        Ok(())
    }
}

/// Whether `.part` lexes back as this one path part: asks the lexer itself rather than
/// restating its rules.
fn reads_back_bare(part: &str) -> bool {
    if part.contains('.') {
        return false;
    }
    match lex::tokens(part).as_deref() {
        Ok([t]) => matches!(&t.kind, Kind::Name(n) | Kind::Number(n) if n == part),
        _ => false,
    }
}
