//! The event stream's memory: the change sets of the last committed writes, so that a
//! client streaming `GET /v1/event/stream?index=N` gets every write after `N` that the
//! server still holds — and is told plainly when `N` is older than that.
//!
//! The buffer is filled on the apply path by the server's
//! [`ApplyObserver`](schedstate_raft::ApplyObserver) (a push of the write's
//! [`Commit`], whose rows are shared, not copied); rows become JSON only when a stream
//! sends them. It holds every write with an index above [`held_after`]: that starts
//! at the index the server opened its state at, moves up as old writes are dropped
//! (capacity), and jumps when a snapshot from the leader replaces the state (the writes
//! it covers were never seen one by one here).
//!
//! [`held_after`]: EventBuffer::held_after

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use schedstate::ChangeKind;
use schedstate::state::{Commit, Row, RowChange, Table};
use tokio::sync::watch;

use crate::api::Event;
use crate::api::nomad::{NomadAllocation, NomadCsiPlugin, NomadCsiVolume, NomadNode};

/// The topics of the stream, one per table, named as Nomad names them.
pub const TOPICS: [(&str, Table); 5] = [
    ("Node", Table::Nodes),
    ("Allocation", Table::Allocs),
    ("CSIPlugin", Table::CsiPlugins),
    ("CSIVolume", Table::CsiVolumes),
    ("Job", Table::Jobs),
];

/// A stream's filter: `Topic` or `Topic:Key` (`*` for every key); empty = everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicFilter(Vec<(Table, Option<String>)>);

impl TopicFilter {
    /// Parses one `topic=` value and adds it.
    ///
    /// # Errors
    /// An unknown topic, named with the ones there are.
    pub fn add(&mut self, spec: &str) -> Result<(), String> {
        let (name, key) = match spec.split_once(':') {
            Some((n, "*")) => (n, None),
            Some((n, k)) => (n, Some(k.to_string())),
            None => (spec, None),
        };
        if name == "*" {
            self.0.extend(TOPICS.iter().map(|(_, t)| (*t, key.clone())));
            return Ok(());
        }
        let table = TOPICS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                let names: Vec<&str> = TOPICS.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown topic {name:?} (topics: {}, or *)",
                    names.join(", ")
                )
            })?;
        self.0.push((table, key));
        Ok(())
    }

    /// Whether an event of `table` with `key` (or one of its `filter_keys`, as Nomad
    /// matches them) passes.
    fn matches(&self, table: Table, key: &str, filter_keys: &[String]) -> bool {
        self.0.is_empty()
            || self.0.iter().any(|(t, k)| {
                *t == table
                    && k.as_deref()
                        .is_none_or(|k| k == key || filter_keys.iter().any(|f| f == k))
            })
    }
}

fn topic(table: Table) -> &'static str {
    TOPICS
        .iter()
        .find(|(_, t)| *t == table)
        .map_or("Unknown", |(n, _)| n)
}

/// The key, namespace and other filter keys of a row.
fn identity(row: &Row) -> (String, String, Vec<String>) {
    match row {
        Row::Node(n) => (n.id.to_string(), String::new(), Vec::new()),
        Row::Alloc(a) => (
            a.id.to_string(),
            a.namespace.to_string(),
            vec![a.job_id.to_string(), a.node_id.to_string()],
        ),
        Row::CsiPlugin(p) => (p.id.to_string(), String::new(), Vec::new()),
        Row::CsiVolume(v) => (
            v.id.to_string(),
            v.namespace.to_string(),
            vec![v.plugin_id.to_string()],
        ),
        Row::AclToken(t) => (t.accessor_id.to_string(), String::new(), Vec::new()),
        Row::Job(j) => (j.id.to_string(), j.namespace.to_string(), Vec::new()),
    }
}

/// The row in Nomad's shape, under its kind's name (Nomad's `Payload`).
fn payload(row: &Row) -> serde_json::Value {
    let value = match row {
        Row::Node(n) => serde_json::to_value(NomadNode::from(&**n)).map(|v| ("Node", v)),
        Row::Alloc(a) => {
            serde_json::to_value(NomadAllocation::from(&**a)).map(|v| ("Allocation", v))
        }
        Row::CsiPlugin(p) => {
            serde_json::to_value(NomadCsiPlugin::from(&**p)).map(|v| ("CSIPlugin", v))
        }
        Row::CsiVolume(v) => {
            let mut v = (**v).clone();
            crate::api::redact(&mut v);
            serde_json::to_value(NomadCsiVolume::from(&v)).map(|v| ("CSIVolume", v))
        }
        // As a read answers it: the registered definition with the row laid over it.
        Row::Job(j) => Ok(("Job", crate::api::nomad::job_answer(j))),
        // Never streamed (see `event_of`); nothing of a token leaves here.
        Row::AclToken(_) => return serde_json::Value::Null,
    };
    match value {
        Ok((name, v)) => serde_json::json!({ name: v }),
        Err(_) => serde_json::Value::Null,
    }
}

/// The event type, as Nomad names it where Nomad has the event.
fn event_type(before: Option<&Row>, after: Option<&Row>) -> &'static str {
    match (before, after) {
        (None, Some(Row::Node(_))) => "NodeRegistration",
        (Some(Row::Node(_)), None) => "NodeDeregistration",
        (Some(Row::Node(b)), Some(Row::Node(a))) if b.drain != a.drain => "NodeDrain",
        (Some(Row::Node(b)), Some(Row::Node(a))) if b.eligible != a.eligible => "NodeEligibility",
        (_, Some(Row::Node(_))) => "NodeEvent",
        (_, Some(Row::Alloc(_))) => "AllocationUpdated",
        (Some(Row::Alloc(_)), None) => "AllocationDeleted",
        (_, Some(Row::CsiPlugin(_))) => "CSIPluginUpdated",
        (Some(Row::CsiPlugin(_)), None) => "CSIPluginDeleted",
        (None, Some(Row::CsiVolume(_))) => "CSIVolumeRegistered",
        (Some(Row::CsiVolume(_)), Some(Row::CsiVolume(_))) => "CSIVolumeUpdated",
        (Some(Row::CsiVolume(_)), None) => "CSIVolumeDeregistered",
        (_, Some(Row::Job(_))) => "JobRegistered",
        (Some(Row::Job(_)), None) => "JobDeregistered",
        _ => "Unknown",
    }
}

/// The event of one change of the write at `index`, if it passes `filter`.
fn event_of(change: &RowChange, index: u64, filter: &TopicFilter) -> Option<Event> {
    // Only the tables of a topic: ACL tokens are not a topic, and who holds which
    // token is nobody's business but a management token's.
    if !TOPICS.iter().any(|(_, t)| *t == change.table()) {
        return None;
    }
    let (before, after) = (change.before(), change.after());
    let kind = event_type(before.as_ref(), after.as_ref());
    let row = match change.kind() {
        ChangeKind::Delete => before?,
        _ => after?,
    };
    let (key, namespace, filter_keys) = identity(&row);
    if !filter.matches(change.table(), &key, &filter_keys) {
        return None;
    }
    Some(Event {
        topic: topic(change.table()).to_string(),
        kind: kind.to_string(),
        key,
        namespace,
        filter_keys,
        index,
        payload: payload(&row),
    })
}

struct Held {
    held_after: u64,
    writes: VecDeque<Arc<Commit>>,
}

/// The last committed writes of one server.
pub struct EventBuffer {
    capacity: usize,
    held: Mutex<Held>,
    /// The newest index pushed (or jumped to), for streams waiting for more.
    newest: watch::Sender<u64>,
}

/// What a stream asking for the writes after `after` gets.
#[derive(Debug)]
pub enum Since {
    /// The writes (possibly none yet), in index order: shared with the buffer, not
    /// copied (a write of hundreds of rows has as many change records).
    Writes(Vec<Arc<Commit>>),
    /// `after` is older than what is held: the first index that can be asked for.
    Compacted {
        /// The oldest `index=` that is still answered.
        held_after: u64,
    },
}

impl EventBuffer {
    /// A buffer keeping the last `capacity` writes.
    pub fn new(capacity: usize) -> Arc<EventBuffer> {
        Arc::new(EventBuffer {
            capacity: capacity.max(1),
            held: Mutex::new(Held {
                held_after: 0,
                writes: VecDeque::new(),
            }),
            newest: watch::channel(0).0,
        })
    }

    /// Every write above this index is held.
    pub fn held_after(&self) -> u64 {
        self.held.lock().held_after
    }

    /// The state was opened or replaced at `index`: nothing before it is known.
    pub fn reset(&self, index: u64) {
        let mut h = self.held.lock();
        h.writes.clear();
        h.held_after = index;
        drop(h);
        self.newest.send_replace(index);
    }

    /// A write committed.
    pub fn push(&self, commit: Commit) {
        let index = commit.index();
        let mut h = self.held.lock();
        if h.writes.len() == self.capacity
            && let Some(old) = h.writes.pop_front()
        {
            h.held_after = old.index();
        }
        h.writes.push_back(Arc::new(commit));
        drop(h);
        self.newest.send_replace(index);
    }

    /// The held writes after `after`, at most `limit` of them.
    pub fn since(&self, after: u64, limit: usize) -> Since {
        let h = self.held.lock();
        if after < h.held_after {
            return Since::Compacted {
                held_after: h.held_after,
            };
        }
        let start = h.writes.partition_point(|c| c.index() <= after);
        Since::Writes(h.writes.range(start..).take(limit).cloned().collect())
    }

    /// A receiver told whenever a write is pushed or the buffer jumps.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// The streamed line of `commit` under `filter`, or `None` if nothing in it passes.
    #[cfg(test)]
    pub fn line(commit: &Commit, filter: &TopicFilter) -> Option<Vec<u8>> {
        Self::line_from(commit, filter, 0, usize::MAX).0
    }

    /// A line of `commit`'s events under `filter` from its change number `from`, in
    /// Nomad's envelope: events are added until the line reaches `max_bytes` (one
    /// at least, so a line may pass it by one event), and the change number to go on
    /// from (`None`: the write is done). A large write (hundreds of nodes) is streamed
    /// as several lines of the same index, each made when the client reads on,
    /// instead of one line of megabytes held for it.
    pub fn line_from(
        commit: &Commit,
        filter: &TopicFilter,
        from: usize,
        max_bytes: usize,
    ) -> (Option<Vec<u8>>, Option<usize>) {
        let index = commit.index();
        let mut line = format!("{{\"Index\":{index},\"Events\":[").into_bytes();
        let mut events = 0usize;
        for (at, change) in commit.changes().enumerate().skip(from) {
            if events > 0 && line.len() >= max_bytes {
                line.extend_from_slice(b"]}\n");
                return (Some(line), Some(at));
            }
            let Some(event) = event_of(&change, index, filter) else {
                continue;
            };
            if events > 0 {
                line.push(b',');
            }
            if serde_json::to_writer(&mut line, &event).is_err() {
                continue;
            }
            events += 1;
        }
        if events == 0 {
            return (None, None);
        }
        line.extend_from_slice(b"]}\n");
        (Some(line), None)
    }
}

#[cfg(test)]
mod tests {
    use schedstate::state::{Command, StateStore};

    use super::*;
    use crate::api::EventBatch;

    #[test]
    fn a_large_write_streams_as_lines_of_its_index_that_add_up_to_it() {
        let store = StateStore::new();
        let nodes = (0..200)
            .map(|i| schedstate::model::Node::new(format!("n{i:03}"), format!("host-{i}")))
            .collect();
        let commit = store.apply(1, &Command::UpsertNodes { nodes }).unwrap();
        let filter = TopicFilter::default();
        let whole: EventBatch =
            serde_json::from_slice(&EventBuffer::line(&commit, &filter).unwrap()).unwrap();
        let mut pieces = Vec::new();
        let mut from = Some(0);
        while let Some(at) = from {
            let (line, next) = EventBuffer::line_from(&commit, &filter, at, 4096);
            let line = line.expect("a line");
            assert_eq!(line.last(), Some(&b'\n'));
            // One event at most over the bound.
            let batch: EventBatch = serde_json::from_slice(&line).unwrap();
            assert_eq!(batch.index, 1);
            assert!(line.len() < 4096 + 2048, "{}", line.len());
            pieces.extend(batch.events);
            from = next;
        }
        assert!(pieces.len() == whole.events.len() && pieces.len() >= 200);
        assert_eq!(pieces, whole.events);
    }
}
