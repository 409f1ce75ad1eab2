//! Concurrency: readers never see part of a transaction, the writer lock is exclusive
//! and survives panics, and snapshots and transactions can cross threads.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::Duration;

use schedstate_engine::{Db, Key, Schema, Snapshot, Table, WatchSet, WriteTxn};

const ACCOUNTS: u64 = 16;
const START_BALANCE: i64 = 1_000;
const TOTAL: i64 = ACCOUNTS as i64 * START_BALANCE;
const TXNS: u64 = 2_000;
const READERS: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Account {
    id: u64,
    balance: i64,
    /// The log index of the last transaction that wrote this row.
    version: u64,
}

fn bank() -> (Db, Table<Account>) {
    let mut schema = Schema::new();
    let accounts = schema
        .table("accounts", |a: &Account| Key::u64(a.id))
        .unwrap();
    let db = Db::new(schema);
    let mut txn = db.begin_write(1).unwrap();
    for id in 0..ACCOUNTS {
        txn.insert(
            accounts,
            Arc::new(Account {
                id,
                balance: START_BALANCE,
                version: 1,
            }),
        )
        .unwrap();
    }
    txn.commit().unwrap();
    (db, accounts)
}

/// SplitMix64: a deterministic stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Moves `amount` from account `from` to account `to` inside `txn`.
fn transfer(txn: &mut WriteTxn, accounts: Table<Account>, from: u64, to: u64, amount: i64) {
    let index = txn.index();
    for (id, delta) in [(from, -amount), (to, amount)] {
        let row = txn.view().get(accounts, &Key::u64(id)).unwrap();
        txn.insert(
            accounts,
            Arc::new(Account {
                id,
                balance: row.balance + delta,
                version: index,
            }),
        )
        .unwrap();
    }
}

/// The sum of every balance, and checks of the snapshot's own consistency.
fn audit(snap: &Snapshot, accounts: Table<Account>) -> i64 {
    let view = snap.view();
    let rows: Vec<Arc<Account>> = view.iter(accounts).collect();
    assert_eq!(rows.len(), ACCOUNTS as usize, "row count");
    // No row is newer than the version the snapshot claims.
    let newest = rows.iter().map(|r| r.version).max().unwrap();
    assert!(newest <= snap.last_applied(), "row from the future");
    assert_eq!(view.table_index(accounts), snap.last_applied());
    rows.iter().map(|r| r.balance).sum()
}

#[test]
fn readers_never_see_a_torn_transaction() {
    let (db, accounts) = bank();
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(READERS + 1));
    let first = db.snapshot();

    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let db = db.clone();
            let done = Arc::clone(&done);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let mut snapshots = 0u64;
                let mut last_seen = 0;
                loop {
                    // Read the flag first: the snapshot taken after it is set is final.
                    let finished = done.load(Ordering::Acquire);
                    let snap = db.snapshot();
                    assert_eq!(audit(&snap, accounts), TOTAL, "torn read");
                    assert!(snap.last_applied() >= last_seen, "time went backwards");
                    last_seen = snap.last_applied();
                    snapshots += 1;
                    if finished {
                        return (snapshots, last_seen);
                    }
                }
            })
        })
        .collect();

    start.wait();
    // Sets `done` however the writer ends, so a failing writer cannot leave the readers
    // spinning forever.
    let _stop_readers = StopOnDrop(Arc::clone(&done));
    let mut rng = Rng(0x5EED);
    let mut index = 1;
    let mut committed = 0;
    while committed < TXNS {
        let mut txn = db.begin_write(index + 1).unwrap();
        for _ in 0..=rng.below(3) {
            let from = rng.below(ACCOUNTS);
            let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
            let amount = rng.below(500) as i64;
            transfer(&mut txn, accounts, from, to, amount);
        }
        if rng.below(10) == 0 {
            // Unbalanced and then aborted: must never be seen.
            let mut stray = txn;
            stray
                .insert(
                    accounts,
                    Arc::new(Account {
                        id: 0,
                        balance: 1_000_000,
                        version: index + 1,
                    }),
                )
                .unwrap();
            drop(stray);
            continue;
        }
        index = txn.commit().unwrap().index;
        committed += 1;
    }
    done.store(true, Ordering::Release);

    for reader in readers {
        let (snapshots, last_seen) = reader.join().unwrap();
        assert!(snapshots >= 1);
        assert_eq!(last_seen, index, "the final snapshot sees the last commit");
    }
    // A snapshot held through every commit still reads the initial state.
    assert_eq!(first.last_applied(), 1);
    assert!(
        first
            .view()
            .iter(accounts)
            .all(|a| a.balance == START_BALANCE && a.version == 1)
    );
    assert_eq!(audit(&db.snapshot(), accounts), TOTAL);
}

struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn kv() -> (Db, Table<(String, u64)>) {
    let mut schema = Schema::new();
    let kv = schema
        .table("kv", |r: &(String, u64)| Key::str(&r.0))
        .unwrap();
    (Db::new(schema), kv)
}

fn row(k: &str, v: u64) -> Arc<(String, u64)> {
    Arc::new((k.to_string(), v))
}

/// Starts a thread that begins a write at `index`, reporting when it starts trying and
/// setting `acquired` once it holds the writer; the transaction is handed back.
fn contender(
    db: &Db,
    index: u64,
    acquired: &Arc<AtomicBool>,
) -> (mpsc::Receiver<()>, thread::JoinHandle<WriteTxn>) {
    let (started_tx, started_rx) = mpsc::channel();
    let db = db.clone();
    let acquired = Arc::clone(acquired);
    let handle = thread::spawn(move || {
        started_tx.send(()).unwrap();
        let txn = db.begin_write(index).unwrap();
        acquired.store(true, Ordering::Release);
        txn
    });
    (started_rx, handle)
}

#[test]
fn second_begin_write_waits_until_the_first_commits() {
    let (db, kv) = kv();
    let mut first = db.begin_write(1).unwrap();
    first.insert(kv, row("a", 1)).unwrap();

    let acquired = Arc::new(AtomicBool::new(false));
    let (started, handle) = contender(&db, 2, &acquired);
    started.recv().unwrap();
    thread::sleep(Duration::from_millis(50));
    assert!(
        !acquired.load(Ordering::Acquire),
        "second writer got in while the first was open"
    );

    first.commit().unwrap();
    let mut second = handle.join().unwrap();
    assert!(acquired.load(Ordering::Acquire));
    // The second transaction starts from the first one's commit.
    assert_eq!(second.view().get(kv, &Key::str("a")).unwrap().1, 1);
    second.insert(kv, row("b", 2)).unwrap();
    second.commit().unwrap();
    assert_eq!(db.last_applied(), 2);
}

#[test]
fn second_begin_write_waits_until_the_first_is_dropped() {
    let (db, kv) = kv();
    let mut first = db.begin_write(1).unwrap();
    first.insert(kv, row("a", 1)).unwrap();

    let acquired = Arc::new(AtomicBool::new(false));
    // Index 1 again: the first transaction never commits, so 1 is still free.
    let (started, handle) = contender(&db, 1, &acquired);
    started.recv().unwrap();
    thread::sleep(Duration::from_millis(50));
    assert!(!acquired.load(Ordering::Acquire));

    drop(first);
    let second = handle.join().unwrap();
    assert!(
        second.view().get(kv, &Key::str("a")).is_none(),
        "abort leaked"
    );
    second.commit().unwrap();
    assert_eq!(db.last_applied(), 1);
}

/// `begin_write` from another thread, failing the test instead of hanging if the
/// writer lock is wedged.
fn begin_write_elsewhere(db: &Db, index: u64) -> WriteTxn {
    let (tx, rx) = mpsc::channel();
    let db = db.clone();
    thread::spawn(move || {
        let txn = db.begin_write(index);
        let _ = tx.send(txn);
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("writer lock wedged")
        .expect("begin_write")
}

#[test]
fn panic_inside_a_write_txn_does_not_wedge_the_store() {
    let (db, kv) = kv();
    let snap_before = db.snapshot();
    let watch = WatchSet::new();
    _ = snap_before.watched(&watch).get(kv, &Key::str("a"));

    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut txn = db.begin_write(1).unwrap();
        txn.insert(kv, row("a", 1)).unwrap();
        panic!("boom while holding the transaction");
    }));
    assert!(result.is_err());

    // The writer lock was released and nothing was published, not even the index.
    let mut txn = begin_write_elsewhere(&db, 1);
    assert!(txn.view().get(kv, &Key::str("a")).is_none());
    assert!(db.snapshot().view().get(kv, &Key::str("a")).is_none());
    assert_eq!(db.last_applied(), 0);
    assert!(!watch.is_fired());
    txn.insert(kv, row("b", 2)).unwrap();
    txn.commit().unwrap();
    assert_eq!(db.snapshot().view().len(kv), 1);
}

#[test]
fn panic_in_an_index_function_does_not_wedge_the_store() {
    let mut schema = Schema::new();
    let kv = schema
        .table("kv", |r: &(String, u64)| Key::str(&r.0))
        .unwrap();
    schema
        .index(kv, "by_value", false, |r: &(String, u64)| {
            assert!(r.1 != 13, "unlucky row");
            Some(Key::u64(r.1))
        })
        .unwrap();
    let db = Db::new(schema);

    let mut txn = db.begin_write(1).unwrap();
    txn.insert(kv, row("a", 1)).unwrap();
    let result = catch_unwind(AssertUnwindSafe(move || {
        txn.insert(kv, row("b", 13)).unwrap();
        txn.commit().unwrap();
    }));
    assert!(result.is_err());

    let mut txn = begin_write_elsewhere(&db, 1);
    assert_eq!(txn.view().len(kv), 0);
    txn.insert(kv, row("c", 3)).unwrap();
    txn.commit().unwrap();
    assert_eq!(db.snapshot().view().len(kv), 1);
}

#[test]
fn snapshot_and_write_txn_can_cross_threads() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    fn send_static<T: Send + 'static>() {}
    send_sync_static::<Snapshot>();
    send_sync_static::<Db>();
    send_sync_static::<WatchSet>();
    send_static::<WriteTxn>();

    let (db, kv) = kv();
    let mut txn = db.begin_write(1).unwrap();
    txn.insert(kv, row("a", 1)).unwrap();
    // A transaction begun on one thread is finished on another.
    let info = thread::spawn(move || txn.commit().unwrap()).join().unwrap();
    assert_eq!(info.index, 1);

    // One snapshot shared by several threads, outliving the database handle.
    let snap = db.snapshot();
    drop(db);
    let seen = Arc::new(AtomicU64::new(0));
    thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let v = snap.view().get(kv, &Key::str("a")).unwrap().1;
                seen.fetch_add(v, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(seen.load(Ordering::Relaxed), 3);
}
