//! Every operator, precedence and grouping, quoting, missing fields, types, the
//! limits, and the errors' offsets.

use serde_json::{Value, json};

use crate::{Filter, FilterError, MAX_DEPTH, MAX_LEN};

fn item() -> Value {
    json!({
        "ID": "n1",
        "Name": "host-1",
        "Status": "ready",
        "Drain": false,
        "CreateIndex": 12,
        "Score": 0.5,
        "Datacenters": ["dc1", "dc2"],
        "Meta": {"rack": "r1", "with.dot": "x", "empty": ""},
        "CSINodePlugins": {"ebs": {"Healthy": true, "Provider": "ebs.csi.aws.com"}},
        "Nothing": null,
        "NoTags": [],
    })
}

fn yes(src: &str) -> bool {
    Filter::parse(src)
        .unwrap_or_else(|e| panic!("{src}: {e}"))
        .matches(&item())
}

#[test]
fn comparisons_follow_the_fields_type() {
    for (src, want) in [
        (r#"Status == "ready""#, true),
        ("Status == ready", true),
        ("Status == `ready`", true),
        (r#"Status != "ready""#, false),
        ("Drain == false", true),
        ("Drain == true", false),
        ("CreateIndex == 12", true),
        ("CreateIndex == 12.0", true),
        (r#"CreateIndex == "12""#, true),
        ("CreateIndex > 10", true),
        ("CreateIndex >= 12", true),
        ("CreateIndex < 12", false),
        ("CreateIndex <= 11", false),
        ("Score < 1", true),
        ("Name > host-0", true),
        ("Name < a", false),
        ("Meta.rack == r1", true),
        (r#"Meta["with.dot"] == x"#, true),
        ("CSINodePlugins.ebs.Healthy == true", true),
        (r#"CSINodePlugins.ebs.Provider == "ebs.csi.aws.com""#, true),
    ] {
        assert_eq!(yes(src), want, "{src}");
    }
}

#[test]
fn contains_in_empty_and_matches() {
    for (src, want) in [
        ("Datacenters contains dc1", true),
        ("Datacenters contains dc3", false),
        ("Datacenters not contains dc3", true),
        ("dc2 in Datacenters", true),
        (r#""dc9" not in Datacenters"#, true),
        ("rack in Meta", true),
        ("Name contains ost", true),
        ("ost in Name", true),
        ("NoTags is empty", true),
        ("Nothing is empty", true),
        ("Missing is empty", true),
        ("Meta.empty is empty", true),
        ("Datacenters is not empty", true),
        ("Datacenters is empty", false),
        (r#"Name matches "^host-[0-9]+$""#, true),
        (r#"Name not matches "^db""#, true),
        (r#"Status matches "^down""#, false),
    ] {
        assert_eq!(yes(src), want, "{src}");
    }
}

#[test]
fn logic_precedence_and_parentheses() {
    for (src, want) in [
        ("Status == ready and Drain == false", true),
        ("Status == down or Drain == false", true),
        ("Status == down or Status == ready and Drain == true", false),
        (
            "(Status == down or Status == ready) and Drain == false",
            true,
        ),
        ("not Status == down", true),
        ("not (Status == ready and Drain == false)", false),
        ("not not Status == ready", true),
        (
            "Status == down or not Drain == true and Name == host-1",
            true,
        ),
    ] {
        assert_eq!(yes(src), want, "{src}");
    }
}

#[test]
fn a_selector_that_names_nothing_never_matches() {
    for src in [
        "Missing == x",
        "Missing != x",
        "Missing contains x",
        "Missing not contains x",
        "x in Missing",
        "Status.Deeper == x",
        r#"Missing matches "x""#,
        "Missing is not empty",
    ] {
        assert!(!yes(src), "{src}");
    }
}

#[test]
fn errors_say_where_and_quote_little() {
    for (src, offset) in [
        ("Status ==", 9),
        ("Status = ready", 7),
        ("(Status == ready", 16),
        ("Status == ready and", 19),
        ("Status ready", 7),
        (r#"Status == "ready"#, 10),
        ("Meta[rack] == x", 5),
        ("and == x", 0),
        ("", 0),
        ("Status == ready )", 16),
    ] {
        match Filter::parse(src) {
            Err(FilterError::Expected { offset: at, .. }) => assert_eq!(at, offset, "{src}"),
            other => panic!("{src}: {other:?}"),
        }
    }
    let long = format!("Name == \"{}\"", "x".repeat(1000));
    let e = Filter::parse(&format!("{long} and"))
        .unwrap_err()
        .to_string();
    assert!(e.len() < 200, "{e}");
    assert!(matches!(
        Filter::parse(r#"Name matches "(""#),
        Err(FilterError::BadRegex { .. })
    ));
}

#[test]
fn length_and_depth_are_bounded() {
    let long = format!("Name == {}", "x".repeat(MAX_LEN));
    assert!(matches!(
        Filter::parse(&long),
        Err(FilterError::TooLong { .. })
    ));
    let deep = format!(
        "{}Status == ready{}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    assert!(matches!(
        Filter::parse(&deep),
        Err(FilterError::TooDeep { .. })
    ));
    let nots = format!("{}Status == ready", "not ".repeat(MAX_DEPTH + 1));
    assert!(matches!(
        Filter::parse(&nots),
        Err(FilterError::TooDeep { .. })
    ));
    let ok = format!(
        "{}Status == ready{}",
        "(".repeat(MAX_DEPTH),
        ")".repeat(MAX_DEPTH)
    );
    assert!(yes(&ok));
    // A hostile regular expression is refused, not compiled without bound.
    let big = format!(r#"Name matches "{}""#, "(a{1000}){1000}");
    assert!(Filter::parse(&big).is_err());
}

/// A tiny generator: random expressions printed, parsed back, evaluated against a
/// reference evaluation of the same tree.
#[test]
fn printed_expressions_parse_back_to_the_same_meaning() {
    let atoms = [
        ("Status == ready", true),
        ("Drain == true", false),
        ("CreateIndex > 5", true),
        ("dc1 in Datacenters", true),
        ("Name matches \"^x\"", false),
        ("Meta is empty", false),
    ];
    let mut seed: u64 = 0x5eed;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    fn build(
        next: &mut dyn FnMut(u64) -> u64,
        atoms: &[(&str, bool)],
        depth: u32,
    ) -> (String, bool) {
        if depth == 0 || next(3) == 0 {
            let (src, v) = atoms[next(atoms.len() as u64) as usize];
            return (src.to_string(), v);
        }
        match next(3) {
            0 => {
                let (s, v) = build(next, atoms, depth - 1);
                (format!("not ({s})"), !v)
            }
            1 => {
                let (a, x) = build(next, atoms, depth - 1);
                let (b, y) = build(next, atoms, depth - 1);
                (format!("({a}) and ({b})"), x && y)
            }
            _ => {
                let (a, x) = build(next, atoms, depth - 1);
                let (b, y) = build(next, atoms, depth - 1);
                (format!("({a}) or ({b})"), x || y)
            }
        }
    }
    for _ in 0..500 {
        let (src, want) = build(&mut next, &atoms, 5);
        assert_eq!(yes(&src), want, "{src}");
    }
}

#[test]
fn quoting_and_escapes() {
    let item = json!({
        "Q": "say \"hi\"", "B": "a\\b", "NL": "a\nb", "T": "a\tb",
        "Meta": {"k\"ey": 1, "1.5": "flat", "1": {"5": "deep"}, "in": "kw", "": "blank"},
    });
    for (src, want) in [
        (r#"Q == "say \"hi\"""#, true),
        (r#"B == "a\\b""#, true),
        (r"B == `a\b`", true),
        (r#"NL == "a\nb""#, true),
        (r#"T == "a\tb""#, true),
        (r#"T == "a\u0009b""#, true),
        (r#"Q == "say \u0022hi\u0022""#, true),
        (r#"NL != "a\rb""#, true),
        (r#"Meta["k\"ey"] == 1"#, true),
        (r#"Meta["1.5"] == flat"#, true),
        // Dots in a selector separate parts, numbers' dots included.
        ("Meta.1.5 == deep", true),
        ("Meta.1.5 == flat", false),
        // A keyword after a dot is a key.
        ("Meta.in == kw", true),
        (r#"Meta[""] == blank"#, true),
        (r#"Meta[`k"ey`] == 1"#, true),
    ] {
        let f = Filter::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert_eq!(f.matches(&item), want, "{src}");
    }
}

#[test]
fn numbers_strings_and_booleans() {
    let item = json!({
        "Time": 1_700_000_000_000_000_001_i64, "Index": u64::MAX, "Neg": -3,
        "Version": "12", "Flag": true, "F": 2.5,
    });
    for (src, want) in [
        // Beyond f64's integers: compared exactly.
        ("Time > 1700000000000000000", true),
        ("Time == 1700000000000000000", false),
        ("Time == 1700000000000000001", true),
        ("Index == 18446744073709551615", true),
        ("Index > 18446744073709551614", true),
        ("Neg == -3", true),
        ("Neg < -2", true),
        ("Neg >= \"-3\"", true),
        ("F > 2", true),
        ("F == 2.5", true),
        ("F < 2.5e1", true),
        // A value that is no number never matches a number field (but != does).
        ("Neg == abc", false),
        ("Neg < abc", false),
        ("Neg != abc", true),
        // A string field compares as text, a number literal included.
        ("Version == 12", true),
        ("Version > 9", false),
        ("Flag == true", true),
        (r#"Flag == "true""#, true),
        ("Flag != false", true),
        ("Flag < true", false),
    ] {
        assert_eq!(
            Filter::parse(src).map(|f| f.matches(&item)),
            Ok(want),
            "{src}"
        );
    }
}

#[test]
fn contains_and_in_by_the_fields_shape() {
    let item = json!({"Ports": [80, 443], "Names": ["a b"], "Map": {"k": 1}, "N": 5});
    for (src, want) in [
        ("Ports contains 443", true),
        ("443 in Ports", true),
        (r#""80" in Ports"#, true),
        (r#""a b" in Names"#, true),
        ("a in Names", false),
        ("k in Map", true),
        ("Map contains k", true),
        ("Map contains 1", false),
        // Neither a string, an array nor a map: nothing in it.
        ("N contains 5", false),
        ("N not contains 5", true),
        ("N is empty", false),
    ] {
        assert_eq!(yes_on(&item, src), want, "{src}");
    }
}

fn yes_on(item: &Value, src: &str) -> bool {
    Filter::parse(src)
        .unwrap_or_else(|e| panic!("{src}: {e}"))
        .matches(item)
}

#[test]
fn matches_is_a_search_with_the_regex_crates_syntax() {
    for (src, want) in [
        (r#"Name matches "ost""#, true),
        (r#"Name matches "(?i)^HOST""#, true),
        (r#"Name matches "^HOST""#, false),
        (r"Name matches `^host-\d$`", true),
        // Only strings match.
        (r#"CreateIndex matches "12""#, false),
        (r#"CreateIndex not matches "12""#, false),
        (r#"Datacenters matches "dc""#, false),
    ] {
        assert_eq!(yes(src), want, "{src}");
    }
}

#[test]
fn regex_errors_give_the_reason_not_the_pattern() {
    let pattern = format!("{}(", "a".repeat(500));
    let e = Filter::parse(&format!("Name matches \"{pattern}\"")).unwrap_err();
    let FilterError::BadRegex { offset, reason } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(*offset, 13);
    assert!(reason.contains("without closing ')'"), "{reason}");
    assert!(!e.to_string().contains("aaaa"), "{e}");
    let big = Filter::parse(r"Name matches `((\w{100}){100}){100}`").unwrap_err();
    assert!(
        matches!(&big, FilterError::BadRegex { reason, .. } if reason.contains("limit")),
        "{big:?}"
    );
}

#[test]
fn more_error_offsets() {
    for (src, offset) in [
        ("Meta.1..2 == x", 5),
        ("Meta. == x", 6),
        ("Meta[ == x", 6),
        (r#"Meta["k" == x"#, 9),
        ("Status is full", 10),
        ("Status contains", 15),
        ("x in", 4),
        ("Status == ready or or", 19),
        ("not", 3),
        ("()", 1),
        ("Status == ready) and (x == y", 15),
        ("Name == \"é\" & x", 13),
        // Unknown escapes are refused where they start (Go's strings refuse them too).
        (r#"Name matches "^host-\d+$""#, 20),
        (r#"Name == "\u00""#, 9),
        (r#"Name == "\ud800""#, 9),
        (r#"Name == "x\"#, 8),
    ] {
        match Filter::parse(src) {
            Err(FilterError::Expected { offset: at, .. }) => assert_eq!(at, offset, "{src}"),
            other => panic!("{src}: {other:?}"),
        }
    }
    // An error quotes at most 40 characters, on a character boundary.
    let e = Filter::parse(&format!("Name == x {}", "é".repeat(100))).unwrap_err();
    let FilterError::Expected { near, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(near.chars().count(), 40);
}

#[test]
fn many_operands_stay_flat() {
    // Far more operands than MAX_DEPTH: a list, not a nesting, so within the limits.
    let src = vec!["Drain == 1"; 250].join(" or ") + " or Status == ready";
    assert!(src.len() <= MAX_LEN);
    assert!(yes(&src));
    let src = vec!["ID == n1"; 250].join(" and ");
    assert!(src.len() <= MAX_LEN);
    assert!(yes(&src));
}

#[test]
fn display_is_canonical_and_parses_back() {
    for (src, printed) in [
        ("Status == ready", r#"Status == "ready""#),
        ("dc1 in Datacenters", r#"Datacenters contains "dc1""#),
        ("x not in Tags", r#"Tags not contains "x""#),
        (
            "(a == 1 or b == 2) and not (c is empty)",
            "(a == 1 or b == 2) and not c is empty",
        ),
        ("((a == 1))", "a == 1"),
        (
            "a == 1 or (b == 2 or c == 3)",
            "a == 1 or (b == 2 or c == 3)",
        ),
        (
            r#"Meta["with.dot"].x != `q"`"#,
            r#"Meta["with.dot"].x != "q\"""#,
        ),
        ("not not Name matches `^h`", r#"not not Name matches "^h""#),
    ] {
        let f = Filter::parse(src).unwrap();
        assert_eq!(f.to_string(), printed, "{src}");
        assert_eq!(Filter::parse(printed).unwrap().expr, f.expr, "{src}");
    }
}
