//! Tokens to the expression tree, by recursive descent with an explicit depth bound
//! (`not` and parentheses are the only ways to nest; each level is counted, so the
//! recursion is bounded whatever the input).

use regex_lite::RegexBuilder;

use crate::MAX_DEPTH;
use crate::ast::{Cmp, Expr, Pattern, Selector, Value};
use crate::error::{FilterError, expected, regex_reason};
use crate::lex::{Kind, Token};

/// The most memory one `matches` pattern may compile to.
const REGEX_BYTES: usize = 1 << 20;

struct Parser<'a> {
    src: &'a str,
    tokens: &'a [Token],
    at: usize,
    depth: usize,
}

pub(crate) fn parse(src: &str, tokens: &[Token]) -> Result<Expr, FilterError> {
    let mut p = Parser {
        src,
        tokens,
        at: 0,
        depth: 0,
    };
    if tokens.is_empty() {
        return Err(expected(src, 0, "an expression"));
    }
    let e = p.or()?;
    if p.at < tokens.len() {
        return Err(expected(src, p.offset(), "and, or, or the end"));
    }
    Ok(e)
}

impl Parser<'_> {
    fn offset(&self) -> usize {
        self.tokens
            .get(self.at)
            .map_or(self.src.len(), |t| t.offset)
    }

    fn peek(&self) -> Option<&Kind> {
        self.tokens.get(self.at).map(|t| &t.kind)
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Kind::Name(n)) if n == word)
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        let yes = self.keyword(word);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn or(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.and()?];
        while self.eat_keyword("or") {
            items.push(self.and()?);
        }
        Ok(one_or(items, Expr::Or))
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut items = vec![self.unary()?];
        while self.eat_keyword("and") {
            items.push(self.unary()?);
        }
        Ok(one_or(items, Expr::And))
    }

    fn deeper(&mut self) -> Result<(), FilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(FilterError::TooDeep {
                offset: self.offset(),
                max: MAX_DEPTH,
            });
        }
        Ok(())
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        if self.eat_keyword("not") {
            self.deeper()?;
            let e = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(e)));
        }
        if self.peek() == Some(&Kind::LParen) {
            self.at += 1;
            self.deeper()?;
            let e = self.or()?;
            self.depth -= 1;
            if self.peek() != Some(&Kind::RParen) {
                return Err(expected(self.src, self.offset(), "a closing )"));
            }
            self.at += 1;
            return Ok(e);
        }
        self.matcher()
    }

    /// A selector (`a.b["c"]`) starting at the current token.
    fn selector(&mut self) -> Result<Selector, FilterError> {
        let mut path = Vec::new();
        match self.peek() {
            // A number first: `0.x == y` names the field "0" (it never parses as a
            // value here, `value in` having been tried first).
            Some(Kind::Name(n) | Kind::Number(n)) if !is_keyword(n) => {
                let n = n.clone();
                self.dotted(&n, &mut path)?;
            }
            _ => return Err(expected(self.src, self.offset(), "a field name")),
        }
        loop {
            match self.peek() {
                Some(Kind::Dot) => {
                    self.at += 1;
                    match self.peek() {
                        Some(Kind::Name(n) | Kind::Number(n)) => {
                            let n = n.clone();
                            self.dotted(&n, &mut path)?;
                        }
                        _ => return Err(expected(self.src, self.offset(), "a field name after .")),
                    }
                }
                Some(Kind::LBracket) => {
                    self.at += 1;
                    match self.peek() {
                        Some(Kind::Str(s)) => path.push(s.clone()),
                        _ => return Err(expected(self.src, self.offset(), "a quoted key in [ ]")),
                    }
                    self.at += 1;
                    if self.peek() != Some(&Kind::RBracket) {
                        return Err(expected(self.src, self.offset(), "]"));
                    }
                    self.at += 1;
                }
                _ => return Ok(path),
            }
        }
    }

    /// Consumes the current token, `text`, as path parts. The lexer reads `1.5` (and
    /// `1.5x`) as one token, so in a selector its dots separate parts: `Meta.1.5` is the
    /// path Meta → 1 → 5, as its dots say, not the key "1.5" (that is `Meta["1.5"]`).
    fn dotted(&mut self, text: &str, path: &mut Selector) -> Result<(), FilterError> {
        for part in text.split('.') {
            if part.is_empty() {
                return Err(expected(
                    self.src,
                    self.offset(),
                    "a field name between dots",
                ));
            }
            path.push(part.to_string());
        }
        self.at += 1;
        Ok(())
    }

    fn value(&mut self) -> Result<Value, FilterError> {
        let v = match self.peek() {
            Some(Kind::Str(s)) => Value {
                text: s.clone(),
                numeric: false,
            },
            Some(Kind::Number(n)) => Value {
                text: n.clone(),
                numeric: true,
            },
            Some(Kind::Name(n)) if !is_keyword(n) => Value {
                text: n.clone(),
                numeric: false,
            },
            _ => return Err(expected(self.src, self.offset(), "a value")),
        };
        self.at += 1;
        Ok(v)
    }

    /// Whether the tokens from here read `[not] in`: the current operand is a value.
    fn value_in_ahead(&self) -> bool {
        let next = |k: usize| match self.tokens.get(self.at + k).map(|t| &t.kind) {
            Some(Kind::Name(n)) => Some(n.as_str()),
            _ => None,
        };
        next(1) == Some("in") || (next(1) == Some("not") && next(2) == Some("in"))
    }

    fn matcher(&mut self) -> Result<Expr, FilterError> {
        if self.value_in_ahead() {
            let v = self.value()?;
            let negated = self.eat_keyword("not");
            self.eat_keyword("in");
            let s = self.selector()?;
            return Ok(Expr::Contains(s, v, negated));
        }
        let s = self.selector()?;
        let cmp = match self.peek() {
            Some(Kind::Eq) => Some(Cmp::Eq),
            Some(Kind::Ne) => Some(Cmp::Ne),
            Some(Kind::Lt) => Some(Cmp::Lt),
            Some(Kind::Le) => Some(Cmp::Le),
            Some(Kind::Gt) => Some(Cmp::Gt),
            Some(Kind::Ge) => Some(Cmp::Ge),
            _ => None,
        };
        if let Some(cmp) = cmp {
            self.at += 1;
            let v = self.value()?;
            return Ok(Expr::Compare(s, cmp, v));
        }
        if self.eat_keyword("is") {
            let negated = self.eat_keyword("not");
            if !self.eat_keyword("empty") {
                return Err(expected(self.src, self.offset(), "empty"));
            }
            return Ok(Expr::Empty(s, negated));
        }
        let negated = self.eat_keyword("not");
        if self.eat_keyword("contains") {
            let v = self.value()?;
            return Ok(Expr::Contains(s, v, negated));
        }
        if self.keyword("matches") {
            self.at += 1;
            let offset = self.offset();
            let v = self.value()?;
            let re = RegexBuilder::new(&v.text)
                .size_limit(REGEX_BYTES)
                .nest_limit(MAX_DEPTH as u32)
                .build()
                .map_err(|e| FilterError::BadRegex {
                    offset,
                    reason: regex_reason(&e),
                })?;
            return Ok(Expr::Matches(s, Pattern(re), negated));
        }
        Err(expected(
            self.src,
            self.offset(),
            "==, !=, <, <=, >, >=, is [not] empty, [not] contains, [not] matches",
        ))
    }
}

fn is_keyword(n: &str) -> bool {
    matches!(
        n,
        "and" | "or" | "not" | "in" | "is" | "empty" | "contains" | "matches"
    )
}

/// The expression of a one-item list, or `make` of the list.
fn one_or(mut items: Vec<Expr>, make: fn(Vec<Expr>) -> Expr) -> Expr {
    if items.len() == 1
        && let Some(only) = items.pop()
    {
        return only;
    }
    make(items)
}
