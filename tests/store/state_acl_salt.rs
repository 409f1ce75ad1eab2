//! Salted token digests (format 3, docs/rules.md §4.9): the salt set by the bootstrap
//! or — on a state of format 2 with unsalted digests — by the first token write that
//! carries one or by `SetAclSalt`, which re-keys every stored digest in the same write
//! so that the same secrets still authenticate; digests keyed with another salt are
//! refused; the same secret has unrelated digests in two clusters; the salt survives
//! the log, snapshots and a restart.

use schedstate::model::{AclSalt, AclScope, AclToken, unsalted_digest};
use schedstate::persist::DurableStore;
use schedstate::state::{Command, StateStore};

use crate::persist_golden_v2_acl::{SECRETS, check_golden_state, golden};
use crate::support::persist::{copy_dir, fast, snapshot_bytes};
use crate::support::{TempDir, assert_invariants, assert_rejected, canonical, ok};

const SALT: AclSalt = AclSalt([7; 32]);

/// Every golden secret finds its own token by the digest this state computes for it.
#[track_caller]
fn secrets_authenticate(store: &StateStore) {
    let snap = store.snapshot();
    let v = snap.view();
    for (accessor, secret, _) in SECRETS {
        let t = v
            .acl_token_by_secret_hash(&v.acl_digest_of(secret))
            .unwrap_or_else(|| panic!("{accessor}'s secret no longer authenticates"));
        assert_eq!(&*t.accessor_id, accessor);
    }
    assert!(
        v.acl_token_by_secret_hash(&v.acl_digest_of("not-a-secret"))
            .is_none()
    );
}

#[test]
fn a_version_2_state_gets_salted_and_its_secrets_still_authenticate() {
    let work = TempDir::new("salt-v2");
    copy_dir(&golden().join("data"), work.path());
    let (db, _) = DurableStore::open(work.path(), fast()).unwrap();
    check_golden_state(db.store());
    secrets_authenticate(db.store());
    assert!(db.store().snapshot().view().acl_salt().is_none());

    let commit = db.apply(60, &Command::SetAclSalt { salt: SALT }).unwrap();
    // Every token row re-keyed in that one write (the salt itself is no row of a table).
    assert_eq!(commit.changes().count(), SECRETS.len());
    {
        let snap = db.store().snapshot();
        let v = snap.view();
        assert_eq!((v.acl_salt(), v.acl_salt_index()), (Some(SALT), Some(60)));
        for (accessor, secret, unsalted) in SECRETS {
            let t = v.acl_token(accessor).unwrap();
            assert_eq!(t.secret_hash, SALT.digest(secret));
            assert_eq!(t.modify_index, 60);
            // The bare SHA-256 is nobody's digest any more.
            assert!(v.acl_token_by_secret_hash(unsalted).is_none());
        }
    }
    secrets_authenticate(db.store());
    assert_invariants(db.store());
    let salted = canonical(db.store());

    // Once: a second salt, or a write keyed otherwise, is refused.
    assert_eq!(
        assert_rejected(
            db.store(),
            61,
            &Command::SetAclSalt {
                salt: AclSalt([8; 32])
            }
        )
        .kind(),
        "AclAlreadySalted"
    );
    let mut t = AclToken::new(
        "acc-x",
        "x",
        vec![AclScope::Read],
        unsalted_digest("x-secret"),
    );
    t.create_time = 1;
    for salt in [None, Some(AclSalt([8; 32]))] {
        let cmd = Command::CreateAclTokens {
            tokens: vec![t.clone()],
            salt,
        };
        assert_eq!(
            assert_rejected(db.store(), 61, &cmd).kind(),
            "AclSaltMismatch"
        );
    }

    // The salt is in the log: a restart replays it; and in a compaction's snapshot.
    drop(db);
    let (db, _) = DurableStore::open(work.path(), fast()).unwrap();
    assert!(canonical(db.store()) == salted);
    secrets_authenticate(db.store());
    db.compact().unwrap();
    drop(db);
    let (db, report) = DurableStore::open(work.path(), fast()).unwrap();
    assert_eq!(report.replayed, 0);
    assert!(canonical(db.store()) == salted);
    let bytes = snapshot_bytes(db.store());
    let copy = StateStore::new();
    copy.restore_from(&mut bytes.as_slice()).unwrap();
    assert!(canonical(&copy) == salted);
    secrets_authenticate(&copy);
}

#[test]
fn the_first_token_write_with_a_salt_salts_an_older_state() {
    let bytes = std::fs::read(golden().join("state.snap")).unwrap();
    let store = StateStore::new();
    store.restore_from(&mut bytes.as_slice()).unwrap();
    let mut t = AclToken::new(
        "acc-new",
        "new",
        vec![AclScope::Read],
        SALT.digest("new-secret"),
    );
    t.create_time = 1;
    ok(
        &store,
        60,
        Command::CreateAclTokens {
            tokens: vec![t],
            salt: Some(SALT),
        },
    );
    secrets_authenticate(&store);
    let snap = store.snapshot();
    let v = snap.view();
    assert_eq!(v.acl_salt(), Some(SALT));
    let found = v.acl_token_by_secret_hash(&v.acl_digest_of("new-secret"));
    assert_eq!(&*found.unwrap().accessor_id, "acc-new");
    assert_invariants(&store);
}

#[test]
fn the_same_secret_has_unrelated_digests_in_two_clusters() {
    let cluster = |salt: AclSalt| {
        let store = StateStore::new();
        let mut root = AclToken::new(
            "root",
            "root",
            vec![AclScope::Management],
            salt.digest("shared-bootstrap-secret"),
        );
        root.create_time = 1;
        ok(
            &store,
            1,
            Command::AclBootstrap {
                token: root,
                salt: Some(salt),
            },
        );
        let v = store.snapshot();
        let view = v.view();
        let digest = view.acl_token("root").unwrap().secret_hash.clone();
        assert_eq!(view.acl_digest_of("shared-bootstrap-secret"), digest);
        digest
    };
    let (a, b) = (cluster(AclSalt([1; 32])), cluster(AclSalt([2; 32])));
    assert_ne!(a, b);
    assert_ne!(a, unsalted_digest("shared-bootstrap-secret"));
}

#[test]
fn a_salt_needs_a_bootstrapped_cluster() {
    let store = StateStore::new();
    assert_eq!(
        assert_rejected(&store, 1, &Command::SetAclSalt { salt: SALT }).kind(),
        "AclNotBootstrapped"
    );
    // An unsalted state encodes as before salts existed.
    let mut root = AclToken::new(
        "root",
        "root",
        vec![AclScope::Management],
        unsalted_digest("s"),
    );
    root.create_time = 1;
    ok(
        &store,
        1,
        Command::AclBootstrap {
            token: root,
            salt: None,
        },
    );
    let before = canonical(&store);
    ok(&store, 2, Command::SetAclSalt { salt: SALT });
    assert!(canonical(&store).len() > before.len());
}
