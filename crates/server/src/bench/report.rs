//! What a load run measured, and how it is printed: one run's figures, the medians
//! of several, as text or JSON.

use std::time::Duration;

use serde::Serialize;

/// p50 and p99 of a set of durations, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// How many were measured.
    pub count: usize,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `samples` (all zero when there are none).
    pub fn of(samples: &[Duration]) -> Percentiles {
        if samples.is_empty() {
            return Percentiles::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |p: f64| {
            let r = (p * sorted.len() as f64).ceil() as usize;
            sorted[r.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e6
        };
        Percentiles {
            count: sorted.len(),
            p50_us: rank(0.50),
            p99_us: rank(0.99),
        }
    }
}

/// One run: an agent, N blocked clients, writes with and without them.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RunReport {
    /// Blocked clients (one connection and one blocking query each).
    pub clients: usize,
    /// The agent's RSS with no client blocked, and with all of them, KiB.
    pub rss_none_kib: u64,
    pub rss_blocked_kib: u64,
    /// (RSS blocked − RSS none) / clients, KiB (0 without clients).
    pub rss_per_waiter_kib: f64,
    /// Writes to rows nobody watches, one after the other, acknowledged over HTTP:
    /// before any client blocked, and while all of them were.
    pub commit_without_waiters: Percentiles,
    pub commit_with_waiters: Percentiles,
    /// From sending a write to a watched row to its waiter's answer arriving.
    pub wake: Percentiles,
    /// Waiters woken by a write to their row.
    pub woken: usize,
    /// Written rows whose waiter did not answer within the run's patience.
    pub missed: usize,
    /// Waiters that answered before their wait ran out although their row was not
    /// written (or with an index not above the one they sent).
    pub false_wakes: usize,
    /// The run's length, seconds.
    pub seconds: f64,
}

/// Several runs and the median of each figure.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    pub runs: Vec<RunReport>,
    pub median: RunReport,
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if !values.len().is_multiple_of(2) {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

fn median_of(runs: &[RunReport], f: impl Fn(&RunReport) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

fn median_percentiles(runs: &[RunReport], f: impl Fn(&RunReport) -> Percentiles) -> Percentiles {
    Percentiles {
        count: median_of(runs, |r| f(r).count as f64) as usize,
        p50_us: median_of(runs, |r| f(r).p50_us),
        p99_us: median_of(runs, |r| f(r).p99_us),
    }
}

impl Report {
    /// The runs with their medians, figure by figure (each figure's own median: the
    /// median run of one figure need not be that of another).
    pub fn new(command: String, runs: Vec<RunReport>) -> Report {
        let m = |f: fn(&RunReport) -> f64| median_of(&runs, f);
        let median = RunReport {
            clients: m(|r| r.clients as f64) as usize,
            rss_none_kib: m(|r| r.rss_none_kib as f64) as u64,
            rss_blocked_kib: m(|r| r.rss_blocked_kib as f64) as u64,
            rss_per_waiter_kib: m(|r| r.rss_per_waiter_kib),
            commit_without_waiters: median_percentiles(&runs, |r| r.commit_without_waiters),
            commit_with_waiters: median_percentiles(&runs, |r| r.commit_with_waiters),
            wake: median_percentiles(&runs, |r| r.wake),
            woken: m(|r| r.woken as f64) as usize,
            missed: m(|r| r.missed as f64) as usize,
            false_wakes: m(|r| r.false_wakes as f64) as usize,
            seconds: m(|r| r.seconds),
        };
        Report {
            command,
            runs,
            median,
        }
    }

    /// Whether every run ended as it must: no false wake, no missed wake.
    pub fn clean(&self) -> bool {
        self.runs
            .iter()
            .all(|r| r.false_wakes == 0 && r.missed == 0)
    }

    /// The text form: a line per run, then the medians.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n", self.command);
        for (i, r) in self.runs.iter().enumerate() {
            out.push_str(&format!("run {}: {}\n", i + 1, line(r)));
        }
        if self.runs.len() > 1 {
            out.push_str(&format!(
                "median of {} runs: {}\n",
                self.runs.len(),
                line(&self.median)
            ));
        }
        out
    }
}

fn ms(us: f64) -> String {
    format!("{:.2} ms", us / 1000.0)
}

fn line(r: &RunReport) -> String {
    let ratio = if r.commit_without_waiters.p50_us > 0.0 {
        r.commit_with_waiters.p50_us / r.commit_without_waiters.p50_us
    } else {
        0.0
    };
    format!(
        "{} clients; agent RSS {:.1} → {:.1} MiB, {:.2} KiB per waiter; commit p50/p99 {} / {} without waiters, \
         {} / {} with (p50 ×{ratio:.2}); wake p50/p99 {} / {} ({} woken, {} missed); {} false wakes; {:.1} s",
        r.clients,
        r.rss_none_kib as f64 / 1024.0,
        r.rss_blocked_kib as f64 / 1024.0,
        r.rss_per_waiter_kib,
        ms(r.commit_without_waiters.p50_us),
        ms(r.commit_without_waiters.p99_us),
        ms(r.commit_with_waiters.p50_us),
        ms(r.commit_with_waiters.p99_us),
        ms(r.wake.p50_us),
        ms(r.wake.p99_us),
        r.woken,
        r.missed,
        r.false_wakes,
        r.seconds,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let p = Percentiles::of(&samples);
        assert_eq!((p.count, p.p50_us, p.p99_us), (100, 50.0, 99.0));
        let one = Percentiles::of(&[Duration::from_millis(2)]);
        assert_eq!((one.p50_us, one.p99_us), (2000.0, 2000.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
    }

    #[test]
    fn medians_figure_by_figure() {
        let run = |rss: f64, fw: usize| RunReport {
            rss_per_waiter_kib: rss,
            false_wakes: fw,
            ..RunReport::default()
        };
        let r = Report::new("x".into(), vec![run(9.0, 0), run(3.0, 0), run(5.0, 2)]);
        assert_eq!(r.median.rss_per_waiter_kib, 5.0);
        assert_eq!(r.median.false_wakes, 0);
        assert!(!r.clean(), "one run had false wakes");
        assert_eq!(median(vec![1.0, 4.0]), 2.5);
    }
}
