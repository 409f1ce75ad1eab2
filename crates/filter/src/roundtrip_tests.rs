//! Properties, by proptest: a random tree prints to text that parses back to the same
//! tree; random token soup never panics, and what of it parses prints and parses back
//! the same; integer comparisons are exact across the whole i64/u64 range.

use proptest::prelude::*;
use regex_lite::Regex;
use serde_json::json;

use crate::Filter;
use crate::ast::{Cmp, Expr, Pattern, Selector, Value};

const KEYWORDS: [&str; 8] = [
    "and", "or", "not", "in", "is", "empty", "contains", "matches",
];

/// A first selector part: a name the lexer reads as one non-keyword name, or a number.
fn first_part() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z_][A-Za-z0-9_/:@-]{0,6}",
        "-?[0-9]{1,3}",
        "[0-9]{1,2}[a-z]{1,2}",
    ]
    .prop_filter("not a keyword", |s| !KEYWORDS.contains(&s.as_str()))
}

/// Any later part: keywords, numbers, and arbitrary text (dots, quotes, empty).
fn later_part() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z_][A-Za-z0-9_-]{0,5}",
        proptest::sample::select(KEYWORDS.to_vec()).prop_map(String::from),
        "-?[0-9][0-9eE+-]{0,3}",
        "\\PC{0,5}",
        "[ .\"\\\\`\\[\\]\n\t]{0,4}",
    ]
}

fn selector() -> impl Strategy<Value = Selector> {
    (first_part(), proptest::collection::vec(later_part(), 0..4)).prop_map(|(first, rest)| {
        let mut s = vec![first];
        s.extend(rest);
        s
    })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        "-?[0-9][0-9.eE+-]{0,5}".prop_map(|text| Value {
            text,
            numeric: true
        }),
        "\\PC{0,8}".prop_map(|text| Value {
            text,
            numeric: false
        }),
        "[\"\\\\\n\t `a]{0,6}".prop_map(|text| Value {
            text,
            numeric: false
        }),
    ]
}

fn cmp() -> impl Strategy<Value = Cmp> {
    proptest::sample::select(vec![Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge])
}

fn pattern() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        proptest::sample::select(vec!["^host-[0-9]+$", "a|b", "(?i)READY", "\\d{2,3}", ""])
            .prop_map(String::from),
        "\\PC{0,6}".prop_map(|s| regex_lite::escape(&s)),
    ]
    .prop_map(|p| Pattern(Regex::new(&p).expect("a valid pattern")))
}

fn atom() -> impl Strategy<Value = Expr> {
    prop_oneof![
        (selector(), cmp(), value()).prop_map(|(s, c, v)| Expr::Compare(s, c, v)),
        (selector(), any::<bool>()).prop_map(|(s, n)| Expr::Empty(s, n)),
        (selector(), value(), any::<bool>()).prop_map(|(s, v, n)| Expr::Contains(s, v, n)),
        (selector(), pattern(), any::<bool>()).prop_map(|(s, p, n)| Expr::Matches(s, p, n)),
    ]
}

fn expr() -> impl Strategy<Value = Expr> {
    atom().prop_recursive(5, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::Or),
            inner.prop_map(|e| Expr::Not(Box::new(e))),
        ]
    })
}

/// Token soup: the language's words, operators and punctuation in random order, with
/// and without spaces between them.
fn soup() -> impl Strategy<Value = String> {
    let word = proptest::sample::select(vec![
        "and",
        "or",
        "not",
        "in",
        "is",
        "empty",
        "contains",
        "matches",
        "Status",
        "Meta",
        "Tags",
        "ready",
        "x",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "(",
        ")",
        "[",
        "]",
        ".",
        "\"k.ey\"",
        "`raw`",
        "\"a\\\"b\"",
        "12",
        "-3",
        "1.5",
        "1e3",
        "12ab",
        "\"",
        "`",
        "=",
        "!",
        "-",
        "\\",
        "é",
        "\"^a+$\"",
        "\"(\"",
    ]);
    proptest::collection::vec((word, any::<bool>()), 0..16).prop_map(|ws| {
        let mut s = String::new();
        for (w, space) in ws {
            s.push_str(w);
            if space {
                s.push(' ');
            }
        }
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn a_printed_tree_parses_back_to_itself(e in expr()) {
        let text = e.to_string();
        match Filter::parse(&text) {
            Ok(f) => prop_assert_eq!(&f.expr, &e, "printed as {}", text),
            Err(err) => prop_assert!(false, "{} does not parse: {}", text, err),
        }
    }

    #[test]
    fn soup_never_panics_and_what_parses_round_trips(src in soup()) {
        if let Ok(f) = Filter::parse(&src) {
            let text = f.to_string();
            let again = Filter::parse(&text);
            prop_assert!(again.is_ok(), "{:?} printed as {:?}: {:?}", src, text, again);
            if let Ok(again) = again {
                prop_assert_eq!(&again.expr, &f.expr, "{:?} printed as {:?}", src, text);
            }
            let items = [
                json!({"Status": "ready", "Meta": {"k.ey": "x", "x": 12}, "Tags": ["x", 12]}),
                json!({"Status": ["a"], "Meta": null, "x": -3}),
            ];
            for item in &items {
                prop_assert_eq!(f.matches(item), again_matches(&text, item));
            }
        }
    }

    #[test]
    fn integers_compare_exactly(a in any::<i64>(), b in any::<i64>(), big in any::<u64>()) {
        let item = json!({"I": a, "U": big});
        for (src, want) in [
            (format!("I < {b}"), a < b),
            (format!("I <= {b}"), a <= b),
            (format!("I == {b}"), a == b),
            (format!("I != {b}"), a != b),
            (format!("I > {b}"), a > b),
            (format!("I >= \"{b}\""), a >= b),
            (format!("U == {big}"), true),
            (format!("U > {}", big.saturating_sub(1)), big > 0),
            (format!("U < {b}"), i128::from(big) < i128::from(b)),
        ] {
            prop_assert_eq!(Filter::parse(&src).map(|f| f.matches(&item)), Ok(want), "{}", src);
        }
    }
}

fn again_matches(text: &str, item: &serde_json::Value) -> bool {
    Filter::parse(text).is_ok_and(|f| f.matches(item))
}
