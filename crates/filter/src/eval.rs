//! The expression tree over one JSON item (the crate's doc says the semantics).

use serde_json::Value as Json;

use crate::parse::{Cmp, Expr, Selector, Value};

pub(crate) fn eval(e: &Expr, item: &Json) -> bool {
    match e {
        Expr::And(a, b) => eval(a, item) && eval(b, item),
        Expr::Or(a, b) => eval(a, item) || eval(b, item),
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
            .is_some_and(|text| re.is_match(text) != *negated),
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

/// Whether a field equals a literal, by the field's type.
fn equals(field: &Json, v: &Value) -> bool {
    match field {
        Json::String(s) => *s == v.text,
        Json::Number(n) => match (n.as_f64(), v.text.parse::<f64>()) {
            (Some(a), Ok(b)) => a == b,
            _ => false,
        },
        Json::Bool(b) => v.text == if *b { "true" } else { "false" },
        Json::Null => v.text == "null" && !v.numeric,
        _ => false,
    }
}

fn compare(field: &Json, cmp: Cmp, v: &Value) -> bool {
    let order = match field {
        Json::Number(n) => match (n.as_f64(), v.text.parse::<f64>()) {
            (Some(a), Ok(b)) => a.partial_cmp(&b),
            _ => None,
        },
        Json::String(s) => Some(s.as_str().cmp(v.text.as_str())),
        _ => None,
    };
    match cmp {
        Cmp::Eq => equals(field, v),
        Cmp::Ne => !equals(field, v),
        Cmp::Lt => order.is_some_and(std::cmp::Ordering::is_lt),
        Cmp::Le => order.is_some_and(std::cmp::Ordering::is_le),
        Cmp::Gt => order.is_some_and(std::cmp::Ordering::is_gt),
        Cmp::Ge => order.is_some_and(std::cmp::Ordering::is_ge),
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
