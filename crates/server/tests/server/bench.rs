//! `schedstate bench clients` at a tiny size: it starts an agent, blocks its clients,
//! reports every figure, finds no false wake and misses no wake, and refuses sizes
//! beyond its bounds.

use crate::support::{fails, ok};

#[test]
fn bench_clients_reports_every_figure_and_no_false_wake() {
    let out = ok(&[
        "bench",
        "clients",
        "--clients",
        "40",
        "--unwatched",
        "60",
        "--writes",
        "20",
        "--wakes",
        "8",
        "--runs",
        "2",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert!(
        report["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("schedstate bench clients --clients 40")),
        "{out}"
    );
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    for run in runs.iter().chain([&report["median"]]) {
        assert_eq!(run["clients"], 40, "{run}");
        assert_eq!(run["false_wakes"], 0, "{run}");
        assert_eq!(
            (run["woken"].as_u64(), run["missed"].as_u64()),
            (Some(8), Some(0))
        );
        assert!(
            run["rss_none_kib"].as_u64().is_some_and(|k| k > 1_000),
            "{run}"
        );
        assert!(
            run["rss_blocked_kib"].as_u64().is_some_and(|k| k > 1_000),
            "{run}"
        );
        assert!(run["rss_per_waiter_kib"].as_f64().is_some(), "{run}");
        for phase in ["commit_without_waiters", "commit_with_waiters"] {
            assert_eq!(run[phase]["count"], 20, "{run}");
            assert!(
                run[phase]["p50_us"].as_f64().is_some_and(|p| p > 0.0),
                "{run}"
            );
        }
        assert_eq!(run["wake"]["count"], 8, "{run}");
        let wake = &run["wake"];
        assert!(wake["p99_us"].as_f64() >= wake["p50_us"].as_f64(), "{run}");
    }
}

#[test]
fn bench_clients_refuses_sizes_beyond_its_bounds() {
    let e = fails(&["bench", "clients", "--clients", "20001"]);
    assert!(
        e.contains("--clients 20001 is over the limit of 20000"),
        "{e}"
    );
    let e = fails(&["bench", "clients", "--clients", "5", "--wakes", "6"]);
    assert!(e.contains("--wakes 6 is more than --clients 5"), "{e}");
    let e = fails(&["bench", "clients", "--runs", "0"]);
    assert!(e.contains("--runs must be 1 to 10"), "{e}");
    let e = fails(&["bench", "clients", "--timeout", "10m"]);
    assert!(e.contains("--timeout must be above 0 and below"), "{e}");
}
