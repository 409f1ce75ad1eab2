//! Exactly-once writes: the replicated table of recent write keys.
//!
//! A client that does not know whether its write landed (a timeout, a leader lost
//! under it) retries it with the same key. The key travels inside the Raft entry
//! ([`WriteKey`] beside its command); every server's state machine keeps the recent
//! keys with the outcome of their first apply ([`WriteKeys`]), so a second entry with
//! a known key is not applied again: it answers the first outcome and the first
//! index. The same key with another request is refused ([`ProposeError::KeyReused`]).
//!
//! Everything here is decided by the log alone, so every replica keeps the same keys:
//! a keyed entry carries its leader's clock ([`ProposalKeys::at_ms`]); the table's
//! clock is the largest seen (a new leader's clock running behind cannot move it
//! back), keys older than [`WRITE_KEY_TTL_MS`] by it are dropped, and past
//! [`MAX_WRITE_KEYS`] the oldest go first. The table is part of every snapshot (see
//! [`crate::snapshot_file`]), so restarts and snapshot installs keep it.
//!
//! [`ProposeError::KeyReused`]: crate::ProposeError::KeyReused

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::{Committed, ProposeError};

/// How long a key is remembered, by the log's clock: a retry later than this is a
/// new write.
pub const WRITE_KEY_TTL_MS: u64 = 10 * 60 * 1000;

/// The most keys remembered; the oldest go first. At ~120 bytes a key, the table
/// stays under ~12 MiB, and at the cluster's peak rate of keyed writes (~13k/s) it
/// still covers several seconds — the time a client takes to find the new leader.
pub const MAX_WRITE_KEYS: usize = 100_000;

/// The longest refusal message kept with a key (a refusal replayed with a longer
/// message is cut at a character boundary).
const MAX_KEPT_MESSAGE: usize = 512;

/// The key of one logical write: who asked and the key they chose (hashed together
/// into `id`), and a digest of what they asked for (`fingerprint`). Made by the
/// caller (the agent hashes the token's accessor and the `Idempotency-Key` header, and
/// the command), so the state machine compares 64 bytes, whatever the key's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriteKey {
    /// Identifies the write: the same for every retry of it.
    pub id: [u8; 32],
    /// Identifies the request: a retry with another fingerprint is refused.
    pub fingerprint: [u8; 32],
}

/// The keys of a proposal's commands, when any has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalKeys {
    /// The proposing leader's wall clock, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Per command, in order: its key, if it has one.
    pub keys: Vec<Option<WriteKey>>,
}

/// What the first apply of a keyed write gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptOutcome {
    /// The request's fingerprint.
    pub fingerprint: [u8; 32],
    /// The log index the write was applied (or refused) at.
    pub index: u64,
    /// The table's clock when it was applied.
    pub at_ms: u64,
    /// The rule that refused it, as kind and message; `None` if it committed.
    pub refusal: Option<(String, String)>,
}

/// What a keyed command is, before it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyCheck {
    /// Never seen (or forgotten): apply it.
    Fresh,
    /// Seen with the same request: answer the kept outcome, apply nothing.
    Replay(KeptOutcome),
    /// Seen with another request: refuse, apply nothing.
    Reused {
        /// The index the key was first used at.
        index: u64,
    },
}

/// The replicated table of recent write keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteKeys {
    by_id: HashMap<[u8; 32], KeptOutcome>,
    /// Ids in the order they were kept (and so by `at_ms`): eviction takes the front.
    order: VecDeque<[u8; 32]>,
    /// The largest `at_ms` of any keyed entry applied.
    clock_ms: u64,
}

/// The table as it is written in a snapshot: the clock and the keys, oldest first.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WriteKeysRecord {
    pub clock_ms: u64,
    pub keys: Vec<([u8; 32], KeptOutcome)>,
}

impl WriteKeys {
    /// How many keys are kept.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no key is kept.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The outcome kept for `id`, if any.
    pub fn get(&self, id: &[u8; 32]) -> Option<&KeptOutcome> {
        self.by_id.get(id)
    }

    /// What `key` is against the table as it stands.
    pub(crate) fn check(&self, key: &WriteKey) -> KeyCheck {
        match self.by_id.get(&key.id) {
            None => KeyCheck::Fresh,
            Some(kept) if kept.fingerprint == key.fingerprint => KeyCheck::Replay(kept.clone()),
            Some(kept) => KeyCheck::Reused { index: kept.index },
        }
    }

    /// Moves the clock to `at_ms` (never back) and forgets the keys it made too old.
    pub(crate) fn advance(&mut self, at_ms: u64) {
        self.clock_ms = self.clock_ms.max(at_ms);
        let horizon = self.clock_ms.saturating_sub(WRITE_KEY_TTL_MS);
        while let Some(front) = self.order.front() {
            match self.by_id.get(front) {
                Some(kept) if kept.at_ms >= horizon => break,
                _ => {
                    let id = self.order.pop_front().expect("front exists");
                    self.by_id.remove(&id);
                }
            }
        }
    }

    /// Keeps the outcome of `key`'s first apply at `index`; the oldest key goes when
    /// the table is full.
    pub(crate) fn keep(&mut self, key: &WriteKey, index: u64, refusal: Option<(String, String)>) {
        let refusal = refusal.map(|(kind, message)| (kind, cut(message)));
        let kept = KeptOutcome {
            fingerprint: key.fingerprint,
            index,
            at_ms: self.clock_ms,
            refusal,
        };
        if self.by_id.insert(key.id, kept).is_none() {
            self.order.push_back(key.id);
        }
        while self.order.len() > MAX_WRITE_KEYS {
            if let Some(id) = self.order.pop_front() {
                self.by_id.remove(&id);
            }
        }
    }

    pub(crate) fn to_record(&self) -> WriteKeysRecord {
        WriteKeysRecord {
            clock_ms: self.clock_ms,
            keys: self
                .order
                .iter()
                .filter_map(|id| self.by_id.get(id).map(|k| (*id, k.clone())))
                .collect(),
        }
    }

    /// The table a snapshot wrote, checked: ids unique, at most [`MAX_WRITE_KEYS`],
    /// oldest first, none from the future.
    pub(crate) fn from_record(record: WriteKeysRecord) -> Result<WriteKeys, String> {
        if record.keys.len() > MAX_WRITE_KEYS {
            return Err(format!(
                "{} write keys, over the limit of {MAX_WRITE_KEYS}",
                record.keys.len()
            ));
        }
        let mut table = WriteKeys {
            clock_ms: record.clock_ms,
            ..WriteKeys::default()
        };
        let mut previous = 0;
        for (id, kept) in record.keys {
            if kept.at_ms < previous || kept.at_ms > record.clock_ms {
                return Err("write keys out of order".into());
            }
            previous = kept.at_ms;
            if table.by_id.insert(id, kept).is_some() {
                return Err("a write key listed twice".into());
            }
            table.order.push_back(id);
        }
        Ok(table)
    }
}

/// The answer to a write whose key was kept: committed or refused at `index`, as the
/// first time.
pub(crate) fn kept_answer(
    index: u64,
    refusal: Option<(String, String)>,
) -> Result<Committed, ProposeError> {
    match refusal {
        None => Ok(Committed {
            index,
            replayed: true,
        }),
        Some((kind, message)) => Err(ProposeError::RefusedRemotely {
            index,
            kind,
            message,
        }),
    }
}

fn cut(mut message: String) -> String {
    if message.len() > MAX_KEPT_MESSAGE {
        let mut end = MAX_KEPT_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8, body: u8) -> WriteKey {
        WriteKey {
            id: [n; 32],
            fingerprint: [body; 32],
        }
    }

    #[test]
    fn a_kept_key_replays_with_its_request_and_refuses_another() {
        let mut t = WriteKeys::default();
        t.advance(1_000);
        assert_eq!(t.check(&key(1, 1)), KeyCheck::Fresh);
        t.keep(&key(1, 1), 7, None);
        match t.check(&key(1, 1)) {
            KeyCheck::Replay(kept) => assert_eq!((kept.index, kept.refusal), (7, None)),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.check(&key(1, 2)), KeyCheck::Reused { index: 7 });
        assert_eq!(t.check(&key(2, 1)), KeyCheck::Fresh);
    }

    #[test]
    fn keys_expire_by_the_log_clock_which_never_goes_back() {
        let mut t = WriteKeys::default();
        t.advance(1_000);
        t.keep(&key(1, 1), 1, None);
        t.advance(5_000);
        t.keep(&key(2, 1), 2, None);
        // A leader whose clock runs behind does not move the table's clock back.
        t.advance(10);
        t.keep(&key(3, 1), 3, None);
        assert_eq!(t.get(&[3; 32]).unwrap().at_ms, 5_000);
        t.advance(1_000 + WRITE_KEY_TTL_MS + 1);
        assert_eq!(t.check(&key(1, 1)), KeyCheck::Fresh);
        assert!(matches!(t.check(&key(2, 1)), KeyCheck::Replay(_)));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn past_the_bound_the_oldest_key_goes_first() {
        let mut t = WriteKeys::default();
        for i in 0..MAX_WRITE_KEYS as u64 + 2 {
            let mut id = [0; 32];
            id[..8].copy_from_slice(&i.to_le_bytes());
            t.keep(
                &WriteKey {
                    id,
                    fingerprint: [0; 32],
                },
                i + 1,
                None,
            );
        }
        assert_eq!(t.len(), MAX_WRITE_KEYS);
        let first = [0; 32];
        assert!(t.get(&first).is_none());
        let mut third = [0; 32];
        third[..8].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(t.get(&third).unwrap().index, 3);
    }

    #[test]
    fn the_snapshot_record_round_trips_and_bad_ones_are_refused() {
        let mut t = WriteKeys::default();
        t.advance(100);
        t.keep(
            &key(1, 1),
            4,
            Some(("NodeNotFound".into(), "x".repeat(2_000))),
        );
        t.advance(200);
        t.keep(&key(2, 2), 5, None);
        let back = WriteKeys::from_record(t.to_record()).unwrap();
        assert_eq!(back, t);
        assert_eq!(
            back.get(&[1; 32])
                .unwrap()
                .refusal
                .as_ref()
                .unwrap()
                .1
                .len(),
            512
        );

        let mut twice = t.to_record();
        twice.keys.push(twice.keys[0].clone());
        twice.keys[2].1.at_ms = 200;
        assert!(WriteKeys::from_record(twice).is_err());
        let mut backwards = t.to_record();
        backwards.keys.reverse();
        assert!(WriteKeys::from_record(backwards).is_err());
    }
}
