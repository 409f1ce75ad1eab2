//! The expression tree over one JSON item (the crate's doc says the semantics).

use serde_json::Value as Json;

use std::cmp::Ordering;

use crate::ast::{Cmp, Expr, Selector, Value};

/// Recurses only as deep as the tree, which the parser bounds (see [`Expr`]).
pub(crate) fn eval(e: &Expr, item: &Json) -> bool {
    match e {
        Expr::And(items) => items.iter().all(|e| eval(e, item)),
        Expr::Or(items) => items.iter().any(|e| eval(e, item)),
        Expr::Not(a) => !eval(a, item),
        Expr::Compare(s, cmp, v) => resolve(item, s).is_some_and(|f| compare(f, *cmp, v)),
        Expr::Empty(s, negated) => {
            let empty = resolve(item, s).is_none_or(is_empty);
            empty != *negated
        }
        Expr::Contains(s, v, negated) => {
            resolve(item, s).is_some_and(|f| contains(f, v) != *negated)
        }
        Expr::Matches(s, re, negated) => resolve(item, s)
            .and_then(Json::as_str)
            .is_some_and(|text| re.0.is_match(text) != *negated),
    }
}

/// The value at `path` in `item`, if the path names one.
fn resolve<'a>(item: &'a Json, path: &Selector) -> Option<&'a Json> {
    let mut at = item;
    for key in path {
        at = at.as_object()?.get(key)?;
    }
    Some(at)
}

fn is_empty(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// A number field against a literal read as a number: exactly when both are integers
/// (Nomad's indexes are u64 and its times nanoseconds in i64, beyond f64's 2^53),
/// as floats otherwise. `None`: the literal is no number, or a NaN is involved.
fn number_order(n: &serde_json::Number, text: &str) -> Option<Ordering> {
    let field = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
    if let (Some(a), Ok(b)) = (field, text.parse::<i128>()) {
        return Some(a.cmp(&b));
    }
    n.as_f64()?.partial_cmp(&text.parse::<f64>().ok()?)
}

/// Whether a field equals a literal, by the field's type.
fn equals(field: &Json, v: &Value) -> bool {
    match field {
        Json::String(s) => *s == v.text,
        Json::Number(n) => number_order(n, &v.text) == Some(Ordering::Equal),
        Json::Bool(b) => v.text == if *b { "true" } else { "false" },
        Json::Null => v.text == "null" && !v.numeric,
        _ => false,
    }
}

fn compare(field: &Json, cmp: Cmp, v: &Value) -> bool {
    let order = match field {
        Json::Number(n) => number_order(n, &v.text),
        Json::String(s) => Some(s.as_str().cmp(v.text.as_str())),
        _ => None,
    };
    match cmp {
        Cmp::Eq => equals(field, v),
        Cmp::Ne => !equals(field, v),
        Cmp::Lt => order.is_some_and(Ordering::is_lt),
        Cmp::Le => order.is_some_and(Ordering::is_le),
        Cmp::Gt => order.is_some_and(Ordering::is_gt),
        Cmp::Ge => order.is_some_and(Ordering::is_ge),
    }
}

fn contains(field: &Json, v: &Value) -> bool {
    match field {
        Json::String(s) => s.contains(v.text.as_str()),
        Json::Array(items) => items.iter().any(|i| equals(i, v)),
        Json::Object(o) => o.contains_key(&v.text),
        _ => false,
    }
}
