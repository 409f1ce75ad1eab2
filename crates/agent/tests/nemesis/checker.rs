//! A linearizability checker for read/write registers whose writes are all of
//! distinct values — what the nemesis clients record — in O(n log n).
//!
//! Linearizability is local (Herlihy & Wing): a history of several registers is
//! linearizable iff each register's sub-history is, so each register is checked
//! alone.
//!
//! **The condition.** With distinct values, every read names the one write it read
//! from, so the write order is the only unknown, and Gibbons & Korach's zone test
//! ("Testing shared memories", SIAM J. Comput. 1997, the read-mapping case) decides
//! it. Group the operations into *clusters*: the write of value `v` and every read
//! returning `v` (reads of the initial, absent value form a cluster with a virtual
//! write at −∞). For a cluster let
//!
//! - `f` = the earliest completion of its operations,
//! - `s` = the latest invocation of its operations.
//!
//! If `f < s` the cluster has a *forward zone* `(f, s)`: some operation of it ended
//! before another began, so its linearization points span the whole zone and no
//! other value can be current inside it. Otherwise it has a *backward zone*
//! `[s, f]`: all its operations overlap at every instant of it, so the whole cluster
//! can be linearized at any one point of the zone. The history is linearizable iff
//!
//! 1. no read returns a value that was never written, nor completes before its
//!    value's write was invoked (a read from the future);
//! 2. no two forward zones intersect;
//! 3. no backward zone lies inside another cluster's forward zone.
//!
//! Intersections are strict: two operations whose completion and invocation carry
//! the same instant are taken as concurrent.
//!
//! **Unknown outcomes.** A write that never got an answer (or whose answers were all
//! "outcome unknown") may or may not have happened: its completion is +∞, so it
//! never ends a zone early. A write known not to have happened (never read, and
//! absent from every server afterwards) is left out by the caller.
//!
//! **Cost.** Zones are built in one pass; forward zones are sorted by start and
//! checked pairwise in order (disjoint zones sorted by start also have ordered ends);
//! each backward zone finds the one forward zone that could contain it by binary
//! search. O(n log n) for n operations.

use std::collections::HashMap;
use std::fmt;

/// A value written to a register; `None` is the initial, absent value.
pub type Value = Option<u64>;

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Wrote this (distinct) value.
    Write(u64),
    /// Read this value.
    Read(Value),
}

/// One operation of a client: its invocation and completion in nanoseconds from a
/// common origin; `complete: None` for a write whose outcome stayed unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub op: Op,
    pub invoke: u64,
    pub complete: Option<u64>,
    /// Which client made it (for the report).
    pub client: usize,
}

/// Why a history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A read returned a value no write wrote.
    NeverWritten { read: Event },
    /// A read ended before the write of its value began.
    ReadFromFuture { read: Event, write: Event },
    /// Two values were each current over overlapping intervals.
    ForwardZonesOverlap { a: Zone, b: Zone },
    /// A value that must be current at some instant of `inner` cannot be: `outer`'s
    /// value is current all along it.
    BackwardInsideForward { inner: Zone, outer: Zone },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::NeverWritten { read } => {
                write!(f, "read of a value never written: {read:?}")
            }
            Violation::ReadFromFuture { read, write } => {
                write!(
                    f,
                    "read completed before its write began: {read:?} / {write:?}"
                )
            }
            Violation::ForwardZonesOverlap { a, b } => {
                write!(
                    f,
                    "values {:?} and {:?} both current over an overlap: {a:?} / {b:?}",
                    a.value, b.value
                )
            }
            Violation::BackwardInsideForward { inner, outer } => write!(
                f,
                "value {:?} must be current within {inner:?}, inside {:?}'s forward zone {outer:?}",
                inner.value, outer.value
            ),
        }
    }
}

/// A cluster's zone: `[start, end]` in nanoseconds (`i128` so −∞ and +∞ fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    pub value: Value,
    pub start: i128,
    pub end: i128,
}

const NEG_INF: i128 = i128::MIN / 2;
const POS_INF: i128 = i128::MAX / 2;

/// Checks one register's history (see the module's doc).
///
/// # Errors
/// The first [`Violation`] found.
pub fn check_register(history: &[Event]) -> Result<(), Violation> {
    // Per value: (earliest completion, latest invocation) over its cluster.
    let mut writes: HashMap<u64, Event> = HashMap::new();
    for e in history {
        if let Op::Write(v) = e.op {
            let previous = writes.insert(v, *e);
            assert!(
                previous.is_none(),
                "value {v} written twice: values must be distinct"
            );
        }
    }
    let mut clusters: HashMap<Value, (i128, i128)> = HashMap::new();
    let widen = |c: &mut (i128, i128), f: i128, s: i128| {
        c.0 = c.0.min(f);
        c.1 = c.1.max(s);
    };
    for e in history {
        let f = e.complete.map_or(POS_INF, i128::from);
        let s = i128::from(e.invoke);
        match e.op {
            Op::Write(v) => widen(clusters.entry(Some(v)).or_insert((POS_INF, NEG_INF)), f, s),
            Op::Read(None) => widen(clusters.entry(None).or_insert((NEG_INF, NEG_INF)), f, s),
            Op::Read(Some(v)) => {
                let Some(w) = writes.get(&v) else {
                    return Err(Violation::NeverWritten { read: *e });
                };
                if f < i128::from(w.invoke) {
                    return Err(Violation::ReadFromFuture {
                        read: *e,
                        write: *w,
                    });
                }
                widen(clusters.entry(Some(v)).or_insert((POS_INF, NEG_INF)), f, s);
            }
        }
    }
    let mut forward = Vec::new();
    let mut backward = Vec::new();
    for (value, (f, s)) in clusters {
        if f < s {
            forward.push(Zone {
                value,
                start: f,
                end: s,
            });
        } else {
            backward.push(Zone {
                value,
                start: s,
                end: f,
            });
        }
    }
    forward.sort_by_key(|z| (z.start, z.end));
    for pair in forward.windows(2) {
        if pair[1].start < pair[0].end {
            return Err(Violation::ForwardZonesOverlap {
                a: pair[0],
                b: pair[1],
            });
        }
    }
    for inner in &backward {
        // The forward zone starting last before this one starts: the only one that
        // could contain it, the forward zones being disjoint.
        let i = forward.partition_point(|z| z.start < inner.start);
        if let Some(outer) = i.checked_sub(1).map(|i| forward[i])
            && inner.end < outer.end
        {
            return Err(Violation::BackwardInsideForward {
                inner: *inner,
                outer,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: u64, invoke: u64, complete: u64) -> Event {
        Event {
            op: Op::Write(v),
            invoke,
            complete: Some(complete),
            client: 0,
        }
    }
    fn w_unknown(v: u64, invoke: u64) -> Event {
        Event {
            op: Op::Write(v),
            invoke,
            complete: None,
            client: 0,
        }
    }
    fn r(v: Value, invoke: u64, complete: u64) -> Event {
        Event {
            op: Op::Read(v),
            invoke,
            complete: Some(complete),
            client: 1,
        }
    }
    /// Whether `e` is one of the two zone conditions (which one a history breaks
    /// first depends on how its clusters happen to fall).
    fn zones(e: &Violation) -> bool {
        matches!(
            e,
            Violation::BackwardInsideForward { .. } | Violation::ForwardZonesOverlap { .. }
        )
    }

    #[test]
    fn sequential_and_overlapping_histories_that_linearize_pass() {
        // One after the other.
        check_register(&[
            r(None, 0, 1),
            w(1, 2, 3),
            r(Some(1), 4, 5),
            w(2, 6, 7),
            r(Some(2), 8, 9),
        ])
        .unwrap();
        // Concurrent writes, read in either order while they overlap.
        check_register(&[w(1, 0, 10), w(2, 0, 10), r(Some(2), 1, 2), r(Some(1), 3, 4)]).unwrap();
        check_register(&[w(1, 0, 10), w(2, 0, 10), r(Some(1), 1, 2), r(Some(2), 3, 4)]).unwrap();
        // A read overlapping a write may see either value.
        check_register(&[w(1, 0, 2), w(2, 3, 10), r(Some(1), 4, 5)]).unwrap();
        check_register(&[w(1, 0, 2), w(2, 3, 10), r(Some(2), 4, 5)]).unwrap();
        // The initial value read while the first write is under way.
        check_register(&[w(1, 0, 10), r(None, 1, 2), r(Some(1), 3, 4)]).unwrap();
        // An empty history, and a write never read.
        check_register(&[]).unwrap();
        check_register(&[w(7, 0, 1)]).unwrap();
    }

    #[test]
    fn unknown_writes_may_take_effect_late_or_never() {
        // Never answered, read much later: it happened late.
        check_register(&[
            w_unknown(1, 0),
            w(2, 5, 6),
            r(Some(2), 7, 8),
            r(Some(1), 20, 21),
        ])
        .unwrap();
        // Never answered, never read: it may not have happened.
        check_register(&[w_unknown(1, 0), w(2, 5, 6), r(Some(2), 7, 8)]).unwrap();
        // But it cannot happen before it was invoked.
        let e = check_register(&[w_unknown(1, 10), r(Some(1), 2, 3)]).unwrap_err();
        assert!(matches!(e, Violation::ReadFromFuture { .. }), "{e}");
    }

    #[test]
    fn a_stale_read_is_caught() {
        // 2 was written after 1 completed; a read starting after 2 completed sees 1.
        let e = check_register(&[w(1, 0, 1), w(2, 2, 3), r(Some(1), 4, 5)]).unwrap_err();
        assert!(zones(&e), "{e}");
        // The initial value read after a write completed.
        let e = check_register(&[w(1, 0, 1), r(None, 2, 3)]).unwrap_err();
        assert!(zones(&e), "{e}");
    }

    #[test]
    fn values_flipping_back_and_forth_are_caught() {
        // Reads in sequence see 1, then 2, then 1 again: 1 would be current twice.
        let e = check_register(&[
            w(1, 0, 10),
            w(2, 0, 10),
            r(Some(1), 1, 2),
            r(Some(2), 3, 4),
            r(Some(1), 5, 6),
        ])
        .unwrap_err();
        assert!(zones(&e), "{e}");
    }

    #[test]
    fn two_values_each_seen_current_over_overlapping_spans_are_caught() {
        // 1 is current from 1 (its write ended) to 5 (a read of it began); 2 from 3
        // to 7: they cannot both be.
        let e = check_register(&[w(1, 0, 1), w(2, 2, 3), r(Some(1), 5, 6), r(Some(2), 7, 8)])
            .unwrap_err();
        assert!(matches!(e, Violation::ForwardZonesOverlap { .. }), "{e}");
    }

    #[test]
    fn a_lost_write_is_caught() {
        // 2 was acknowledged, yet a later read sees the value before it.
        let e = check_register(&[w(1, 0, 1), r(Some(1), 2, 3), w(2, 4, 5), r(Some(1), 6, 7)])
            .unwrap_err();
        assert!(zones(&e), "{e}");
        // An acknowledged write, then reads of the initial value.
        let e = check_register(&[w(1, 0, 1), r(None, 2, 3), r(None, 4, 5)]).unwrap_err();
        assert!(zones(&e), "{e}");
    }

    #[test]
    fn reads_of_values_never_written_or_from_the_future_are_caught() {
        let e = check_register(&[w(1, 0, 1), r(Some(9), 2, 3)]).unwrap_err();
        assert!(matches!(e, Violation::NeverWritten { .. }), "{e}");
        let e = check_register(&[r(Some(1), 0, 1), w(1, 2, 3)]).unwrap_err();
        assert!(matches!(e, Violation::ReadFromFuture { .. }), "{e}");
    }

    #[test]
    fn a_write_overlapped_by_a_whole_other_cluster_is_caught() {
        // 2's write and read both happen strictly between a read of 1 and a later
        // read of 1: 1 is current the whole time, so 2 never could be.
        let e = check_register(&[
            w(1, 0, 1),
            r(Some(1), 2, 3),
            w(2, 4, 5),
            r(Some(2), 5, 6),
            r(Some(1), 8, 9),
        ])
        .unwrap_err();
        assert!(zones(&e), "{e}");
    }

    #[test]
    fn ties_count_as_concurrent() {
        // A read invoked at the very instant a write completed may miss it.
        check_register(&[w(1, 0, 5), r(None, 5, 6)]).unwrap();
    }

    #[test]
    fn a_large_sequential_history_is_checked_quickly() {
        let mut h = Vec::new();
        for i in 0..100_000u64 {
            h.push(w(i, 10 * i, 10 * i + 4));
            h.push(r(Some(i), 10 * i + 5, 10 * i + 9));
        }
        let start = std::time::Instant::now();
        check_register(&h).unwrap();
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        // One stale read at the end breaks it.
        h.push(r(Some(5), 10 * 100_000 + 1, 10 * 100_000 + 2));
        assert!(check_register(&h).is_err());
    }

    /// Linearizability by exhaustive search (Wing & Gong): some operation whose
    /// invocation no other pending operation's completion precedes goes next; an
    /// unknown write may also never happen. Exponential: for tiny histories only.
    fn brute_force(pending: &mut Vec<Event>, value: Value) -> bool {
        if pending.is_empty() {
            return true;
        }
        let earliest_end = pending
            .iter()
            .filter_map(|e| e.complete)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..pending.len() {
            let e = pending[i];
            // It may go first only if no other operation ended before it began.
            if e.invoke > earliest_end {
                continue;
            }
            let next = match e.op {
                Op::Write(v) => Some(Some(v)),
                Op::Read(v) => (v == value).then_some(value),
            };
            if let Some(next) = next {
                pending.remove(i);
                let ok = brute_force(pending, next);
                pending.insert(i, e);
                if ok {
                    return true;
                }
            }
            if e.complete.is_none() {
                pending.remove(i);
                let ok = brute_force(pending, value);
                pending.insert(i, e);
                if ok {
                    return true;
                }
            }
        }
        false
    }

    #[test]
    fn the_zone_check_agrees_with_an_exhaustive_search_on_random_small_histories() {
        let mut rng = crate::workload::Rng::new(26);
        let (mut yes, mut no) = (0, 0);
        for _ in 0..20_000 {
            let n = 1 + rng.below(6);
            let writes = 1 + rng.below(3);
            let mut h = Vec::new();
            for i in 0..n {
                let invoke = rng.below(20) as u64;
                let complete = invoke + 1 + rng.below(8) as u64;
                let op = if i < writes {
                    Op::Write(i as u64 + 1)
                } else {
                    // Mostly values that were written, sometimes the initial one.
                    let v = rng.below(writes + 1);
                    Op::Read((v > 0).then_some(v as u64))
                };
                let unknown = matches!(op, Op::Write(_)) && rng.below(4) == 0;
                h.push(Event {
                    op,
                    invoke,
                    complete: (!unknown).then_some(complete),
                    client: i,
                });
            }
            let expected = brute_force(&mut h.clone(), None);
            let got = check_register(&h);
            assert_eq!(
                got.is_ok(),
                expected,
                "{h:#?}: zone check {got:?}, exhaustive search {expected}"
            );
            if expected { yes += 1 } else { no += 1 }
        }
        // Both kinds were actually exercised.
        assert!(yes > 1_000 && no > 1_000, "{yes} linearizable, {no} not");
    }
}
