//! ACL tokens as rows of the state (docs/rules.md §4.9): bootstrap once, create with
//! unique accessor ids and secret hashes, revoke atomically, never the last management
//! token that never expires; tokens survive a snapshot round trip, and a refused write
//! leaves the state as it was.

use crate::support::canonical;
use schedstate::Table;
use schedstate::model::{AclScope, AclToken};
use schedstate::state::{Command, StateError, StateStore};

fn hash(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn token(accessor: &str, scopes: &[AclScope], n: u8) -> AclToken {
    AclToken::new(accessor, accessor, scopes.to_vec(), hash(n))
}

fn refused(store: &StateStore, index: u64, command: Command, kind: &str) -> StateError {
    let before = canonical(store);
    let err = store.apply(index, &command).expect_err("refused");
    assert_eq!(err.kind(), kind, "{err}");
    assert_eq!(canonical(store), before, "a refused write changes nothing");
    err
}

fn bootstrapped() -> StateStore {
    let store = StateStore::new();
    assert!(!store.snapshot().view().acl_bootstrapped());
    let root = token("root", &[AclScope::Management], 1);
    store
        .apply(
            5,
            &Command::AclBootstrap {
                token: root,
                salt: None,
            },
        )
        .unwrap();
    store
}

#[test]
fn bootstrap_runs_once_even_after_every_other_token_is_gone() {
    let store = bootstrapped();
    let snap = store.snapshot();
    let v = snap.view();
    assert!(v.acl_bootstrapped());
    let root = v.acl_token("root").unwrap();
    assert_eq!((root.create_index, root.modify_index), (5, 5));
    assert_eq!(
        v.acl_token_by_secret_hash(&hash(1)).unwrap().accessor_id,
        root.accessor_id
    );
    assert_eq!(v.table_index(Table::AclTokens), 5);
    refused(
        &store,
        6,
        Command::AclBootstrap {
            token: token("again", &[AclScope::Management], 2),
            salt: None,
        },
        "AclAlreadyBootstrapped",
    );
    // Another management token, then the first revoked: still no second bootstrap.
    store
        .apply(
            7,
            &Command::CreateAclTokens {
                tokens: vec![token("ops", &[AclScope::Management], 3)],
                salt: None,
            },
        )
        .unwrap();
    store
        .apply(
            8,
            &Command::DeleteAclTokens {
                accessor_ids: vec!["root".into()],
            },
        )
        .unwrap();
    refused(
        &store,
        9,
        Command::AclBootstrap {
            token: token("again", &[AclScope::Management], 2),
            salt: None,
        },
        "AclAlreadyBootstrapped",
    );
}

#[test]
fn bootstrap_must_be_a_management_token_that_never_expires() {
    let store = StateStore::new();
    refused(
        &store,
        1,
        Command::AclBootstrap {
            token: token("r", &[AclScope::Read], 1),
            salt: None,
        },
        "InvalidInput",
    );
    let mut expiring = token("m", &[AclScope::Management], 1);
    expiring.create_time = 10;
    expiring.expiration_time = Some(20);
    refused(
        &store,
        1,
        Command::AclBootstrap {
            token: expiring,
            salt: None,
        },
        "InvalidInput",
    );
    refused(
        &store,
        1,
        Command::CreateAclTokens {
            tokens: vec![token("r", &[AclScope::Read], 1)],
            salt: None,
        },
        "AclNotBootstrapped",
    );
}

#[test]
fn created_tokens_are_unique_by_accessor_and_by_secret_and_atomic() {
    let store = bootstrapped();
    let err = refused(
        &store,
        6,
        Command::CreateAclTokens {
            tokens: vec![
                token("dash", &[AclScope::Read], 2),
                token("sched", &[AclScope::Read, AclScope::Write], 1),
            ],
            salt: None,
        },
        "AclSecretInUse",
    );
    assert!(!err.to_string().contains(&hash(1)), "the hash is not shown");
    assert!(
        store.snapshot().view().acl_token("dash").is_none(),
        "atomic"
    );
    refused(
        &store,
        6,
        Command::CreateAclTokens {
            tokens: vec![token("root", &[AclScope::Read], 9)],
            salt: None,
        },
        "AclTokenExists",
    );
    store
        .apply(
            6,
            &Command::CreateAclTokens {
                tokens: vec![token(
                    "sched",
                    &[AclScope::Write, AclScope::Read, AclScope::Write],
                    2,
                )],
                salt: None,
            },
        )
        .unwrap();
    let sched = store.snapshot().view().acl_token("sched").unwrap();
    assert_eq!(
        sched.scopes,
        vec![AclScope::Read, AclScope::Write],
        "sorted, once"
    );
    assert!(sched.allows(AclScope::Write) && !sched.allows(AclScope::Operator));
}

#[test]
fn bad_tokens_are_input_errors() {
    let store = bootstrapped();
    let mut no_scope = token("a", &[], 2);
    let mut bad_hash = token("b", &[AclScope::Read], 2);
    bad_hash.secret_hash = "ABCD".repeat(16);
    let mut bad_id = token("c d", &[AclScope::Read], 3);
    for t in [&mut no_scope, &mut bad_hash, &mut bad_id] {
        refused(
            &store,
            6,
            Command::CreateAclTokens {
                tokens: vec![t.clone()],
                salt: None,
            },
            "InvalidInput",
        );
    }
    refused(
        &store,
        6,
        Command::CreateAclTokens {
            tokens: vec![],
            salt: None,
        },
        "EmptyRequest",
    );
}

#[test]
fn revocation_is_atomic_and_keeps_a_lasting_management_token() {
    let store = bootstrapped();
    let mut temp = token("temp-admin", &[AclScope::Management], 2);
    temp.create_time = 100;
    temp.expiration_time = Some(200);
    store
        .apply(
            6,
            &Command::CreateAclTokens {
                tokens: vec![temp, token("dash", &[AclScope::Read], 3)],
                salt: None,
            },
        )
        .unwrap();
    refused(
        &store,
        7,
        Command::DeleteAclTokens {
            accessor_ids: vec!["dash".into(), "ghost".into()],
        },
        "AclTokenNotFound",
    );
    refused(
        &store,
        7,
        Command::DeleteAclTokens {
            accessor_ids: vec!["root".into()],
        },
        "LastManagementToken",
    );
    store
        .apply(
            7,
            &Command::DeleteAclTokens {
                accessor_ids: vec!["dash".into(), "temp-admin".into()],
            },
        )
        .unwrap();
    let snap = store.snapshot();
    let names: Vec<String> = snap
        .view()
        .acl_tokens()
        .map(|t| t.accessor_id.to_string())
        .collect();
    assert_eq!(names, ["root"]);
    assert!(snap.view().acl_token_by_secret_hash(&hash(3)).is_none());
}

#[test]
fn tokens_survive_a_snapshot_and_acl_commands_are_marked() {
    let store = bootstrapped();
    store
        .apply(
            6,
            &Command::CreateAclTokens {
                tokens: vec![token("dash", &[AclScope::Read], 3)],
                salt: None,
            },
        )
        .unwrap();
    let mut bytes = Vec::new();
    store.snapshot_to(&mut bytes).unwrap();
    let copy = StateStore::new();
    copy.restore_from(&mut bytes.as_slice()).unwrap();
    assert_eq!(canonical(&copy), canonical(&store));
    let snap = copy.snapshot();
    assert_eq!(snap.view().acl_token("dash").unwrap().create_index, 6);
    assert!(snap.view().acl_bootstrapped());
    assert!(
        Command::DeleteAclTokens {
            accessor_ids: vec!["x".into()]
        }
        .is_acl()
    );
    assert!(!Command::DeleteAllocs { ids: vec![] }.is_acl());
}

fn update(accessor: &str, name: &str, scopes: &[AclScope]) -> Command {
    Command::UpdateAclToken {
        accessor_id: accessor.into(),
        name: name.into(),
        scopes: scopes.to_vec(),
    }
}

#[test]
fn an_update_changes_name_and_scopes_only_and_keeps_a_lasting_manager() {
    let store = bootstrapped();
    let mut dash = token("dash", &[AclScope::Read], 3);
    dash.create_time = 100;
    dash.expiration_time = Some(10_000);
    store
        .apply(
            6,
            &Command::CreateAclTokens {
                tokens: vec![dash],
                salt: None,
            },
        )
        .unwrap();
    assert!(update("dash", "x", &[AclScope::Read]).is_acl());
    store
        .apply(
            7,
            &update("dash", "dashboards", &[AclScope::Write, AclScope::Read]),
        )
        .unwrap();
    let t = store.snapshot().view().acl_token("dash").unwrap();
    assert_eq!(t.name, "dashboards");
    assert_eq!(t.scopes, vec![AclScope::Read, AclScope::Write], "sorted");
    assert_eq!((t.create_index, t.modify_index), (6, 7));
    assert_eq!((t.create_time, t.expiration_time), (100, Some(10_000)));
    assert_eq!(t.secret_hash, hash(3), "the secret stays");
    assert_eq!(store.snapshot().view().table_index(Table::AclTokens), 7);
    // The same again stores nothing (the applied index moves, nothing else).
    store
        .apply(
            8,
            &update("dash", "dashboards", &[AclScope::Read, AclScope::Write]),
        )
        .unwrap();
    let again = store.snapshot().view().acl_token("dash").unwrap();
    assert_eq!(again, t);
    assert_eq!(store.snapshot().view().table_index(Table::AclTokens), 7);
    // Unknown, empty, too many or badly named: refused, nothing changed.
    refused(
        &store,
        9,
        update("ghost", "g", &[AclScope::Read]),
        "AclTokenNotFound",
    );
    refused(&store, 9, update("dash", "d", &[]), "InvalidInput");
    refused(
        &store,
        9,
        update("dash", "bad\u{0}name", &[AclScope::Read]),
        "InvalidInput",
    );
    // The last lasting management token cannot stop being one; once another exists
    // it can.
    refused(
        &store,
        9,
        update("root", "root", &[AclScope::Read]),
        "LastManagementToken",
    );
    // An expiring management token is no way back: still refused with one.
    store
        .apply(9, &update("dash", "dash", &[AclScope::Management]))
        .unwrap();
    refused(
        &store,
        10,
        update("root", "root", &[AclScope::Read]),
        "LastManagementToken",
    );
    store
        .apply(
            10,
            &Command::CreateAclTokens {
                tokens: vec![token("ops", &[AclScope::Management], 4)],
                salt: None,
            },
        )
        .unwrap();
    store
        .apply(11, &update("root", "root", &[AclScope::Read]))
        .unwrap();
    let snap = store.snapshot();
    assert!(!snap.view().acl_token("root").unwrap().is_management());
}
