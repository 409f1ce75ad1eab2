//! The `filter` target: bytes as a `?filter=` expression off the network — parsed
//! (`schedstate_filter::Filter`) and, when it parses, evaluated on a few JSON items of
//! the shapes the agent lists.
//!
//! What must hold: no panic and no hang on any input (the length and depth limits, the
//! regex size limits); an expression that parses evaluates to the same answer twice
//! and its negation `not (…)` to the opposite; its canonical text (`Display`) parses
//! back (when within the length limit) to a filter with the same text and answers.
#![no_main]

use schedstate_filter::Filter;
use serde_json::{Value, json};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    run(data);
});

fn items() -> [Value; 3] {
    [
        json!({
            "ID": "n1", "Name": "host-1", "Status": "ready", "Drain": false,
            "SchedulingEligibility": "eligible", "CreateIndex": 12,
            "CSINodePlugins": {"ebs": {"Healthy": true, "Provider": "ebs.csi.aws.com"}},
        }),
        json!({
            "ID": "a1", "Namespace": "default", "JobID": "web", "ClientStatus": "running",
            "Tags": ["x", "y"], "Meta": {"k": ""}, "Score": -1.5, "Nothing": null,
        }),
        json!([1, "two", {"three": 3}]),
    ]
}

fn run(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(filter) = Filter::parse(src) else {
        return;
    };
    let negated = Filter::parse(&format!("not ({src})"));
    let text = filter.to_string();
    let again = if text.len() <= schedstate_filter::MAX_LEN {
        match Filter::parse(&text) {
            Ok(again) => {
                assert_eq!(again.to_string(), text, "{src:?}");
                Some(again)
            }
            Err(e) => panic!("{src:?} printed as {text:?} does not parse: {e}"),
        }
    } else {
        None
    };
    for item in items() {
        let once = filter.matches(&item);
        assert_eq!(once, filter.matches(&item), "{src}");
        if let Some(again) = &again {
            assert_eq!(again.matches(&item), once, "{src:?} printed as {text:?}");
        }
        if let Ok(n) = &negated {
            assert_eq!(n.matches(&item), !once, "not ({src})");
        }
    }
}
