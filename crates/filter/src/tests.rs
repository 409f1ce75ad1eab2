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
