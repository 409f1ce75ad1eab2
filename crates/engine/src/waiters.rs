//! The waiters of one watched thing (a key, a prefix, a whole table): a list that
//! registers, unregisters and fires without ever scanning more than it must.
//!
//! Watch sets get their ids from one counter, in registration order, and a set pushes
//! its items as soon as it has its id: every list is therefore sorted by id without
//! sorting. Unregistering finds the entry by binary search and leaves a tombstone; the
//! list is compacted when tombstones outnumber live entries. So removal stays
//! O(log n) amortized even when thousands of sets wait on one key (every client
//! watching the same plugin) and all of them re-register after one wake — a `retain`
//! per removal made that O(n²).

use std::sync::Arc;

use super::watch::Signal;

/// One registration: the watch set's id and its signal (`None` once unregistered).
struct Slot {
    id: u64,
    signal: Option<Arc<Signal>>,
}

/// The waiters of one watched thing, sorted by watch-set id.
#[derive(Default)]
pub(crate) struct Waiters {
    slots: Vec<Slot>,
    /// Tombstones in `slots`.
    dead: usize,
}

impl Waiters {
    /// Adds set `id`. Ids arrive in increasing order (see the module comment); an
    /// older id is still placed in order, at the price of a shift.
    pub(crate) fn push(&mut self, id: u64, signal: Arc<Signal>) {
        let slot = Slot {
            id,
            signal: Some(signal),
        };
        match self.slots.last() {
            Some(last) if last.id > id => {
                let at = self.slots.partition_point(|s| s.id <= id);
                self.slots.insert(at, slot);
            }
            _ => self.slots.push(slot),
        }
    }

    /// Removes one registration of set `id` (a set that read the same thing twice
    /// registered it twice, and unregisters it twice). Returns whether one was found.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let start = self.slots.partition_point(|s| s.id < id);
        let found = self.slots[start..]
            .iter_mut()
            .take_while(|s| s.id == id)
            .find(|s| s.signal.is_some());
        let Some(slot) = found else {
            return false;
        };
        slot.signal = None;
        self.dead += 1;
        if self.dead * 2 > self.slots.len() {
            self.slots.retain(|s| s.signal.is_some());
            self.dead = 0;
        }
        true
    }

    /// Number of live registrations.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.dead
    }

    /// Whether no live registration is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fires every live registration.
    pub(crate) fn fire(&self) {
        for s in &self.slots {
            if let Some(signal) = &s.signal {
                signal.fire();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signals(n: usize) -> Vec<Arc<Signal>> {
        (0..n).map(|_| Arc::new(Signal::default())).collect()
    }

    #[test]
    fn remove_finds_each_id_and_compacts() {
        let sig = signals(10);
        let mut w = Waiters::default();
        for (i, s) in sig.iter().enumerate() {
            w.push(i as u64, Arc::clone(s));
        }
        assert_eq!(w.len(), 10);
        for id in [3, 0, 9, 4, 5, 6] {
            assert!(w.remove(id));
            assert!(!w.remove(id), "removed twice");
        }
        assert_eq!(w.len(), 4);
        assert!(w.slots.len() < 10, "tombstones past half are compacted");
        w.fire();
        for (i, s) in sig.iter().enumerate() {
            assert_eq!(s.is_fired(), [1, 2, 7, 8].contains(&i), "signal {i}");
        }
    }

    #[test]
    fn duplicate_registrations_of_one_set_are_removed_one_by_one() {
        let sig = signals(2);
        let mut w = Waiters::default();
        w.push(1, Arc::clone(&sig[0]));
        w.push(2, Arc::clone(&sig[1]));
        w.push(2, Arc::clone(&sig[1]));
        assert!(w.remove(2));
        assert_eq!(w.len(), 2);
        assert!(w.remove(2));
        assert!(!w.remove(2));
        assert!(w.remove(1));
        assert!(w.is_empty());
    }

    #[test]
    fn an_older_id_is_placed_in_order() {
        let sig = signals(3);
        let mut w = Waiters::default();
        w.push(5, Arc::clone(&sig[0]));
        w.push(9, Arc::clone(&sig[1]));
        w.push(7, Arc::clone(&sig[2]));
        assert!(w.slots.windows(2).all(|p| p[0].id <= p[1].id));
        assert!(w.remove(7) && w.remove(5) && w.remove(9));
        assert!(w.is_empty());
    }
}
