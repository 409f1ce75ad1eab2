//! A data directory is its owner's only: the state in it (CSI volume secrets among it)
//! is not for the machine's other users. Everything the store creates is 0700 / 0600
//! whatever the umask; a directory an older version or a person left readable is made
//! owner-only on open and reported.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::TempDir;
use crate::support::persist::fast;
use schedstate::model::Node;
use schedstate::persist::{DurableStore, save_snapshot};
use schedstate::state::Command;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every file and directory under `dir`, with its mode.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut out = vec![(dir.display().to_string(), mode(dir))];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(modes(&path));
        } else {
            out.push((path.display().to_string(), mode(&path)));
        }
    }
    out
}

fn write_some(db: &DurableStore, from: u64) {
    for i in from..from + 20 {
        db.apply(
            i,
            &Command::UpsertNode {
                node: Node::new(format!("n{i}"), "dc1"),
            },
        )
        .unwrap();
    }
}

#[test]
fn everything_the_store_creates_is_owner_only_whatever_the_umask() {
    let tmp = TempDir::new("modes");
    let dir = tmp.path().join("nested").join("data");
    // SAFETY: umask only changes this process's file-creation mask; it is set back
    // below. A permissive mask must not make the store's files readable by others.
    let old = unsafe { libc_umask(0o000) };
    let (db, report) = DurableStore::open(&dir, fast()).unwrap();
    write_some(&db, 1);
    db.compact().unwrap();
    db.wait_for_compaction().unwrap();
    write_some(&db, 21);
    let snap = tmp.path().join("saved.snap");
    save_snapshot(&db.snapshot(), &snap).unwrap();
    // SAFETY: as above, the mask is set back.
    unsafe { libc_umask(old) };
    assert!(report.permissions_fixed.is_empty());
    let all = modes(&dir);
    assert!(all.len() >= 4, "{all:?}");
    for (path, m) in &all {
        let want = if Path::new(path).is_dir() {
            0o700
        } else {
            0o600
        };
        assert_eq!(*m, want, "{path} is {m:o}");
    }
    assert_eq!(mode(dir.parent().unwrap()), 0o700);
    assert_eq!(mode(&snap), 0o600);
    drop(db);
}

#[test]
fn a_directory_others_can_read_is_made_owner_only_on_open_and_reported() {
    let tmp = TempDir::new("modes");
    let dir = tmp.path().join("data");
    let (db, _) = DurableStore::open(&dir, fast()).unwrap();
    write_some(&db, 1);
    drop(db);
    let readable = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    readable(&dir, 0o755);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for f in &files {
        readable(f, 0o644);
    }
    let (db, report) = DurableStore::open(&dir, fast()).unwrap();
    assert!(
        report.permissions_fixed.contains(&dir),
        "{:?}",
        report.permissions_fixed
    );
    assert_eq!(report.permissions_fixed.len(), files.len() + 1);
    for (path, m) in modes(&dir) {
        assert_eq!(m & 0o077, 0, "{path} is {m:o}");
    }
    // The state is all there.
    assert!(db.snapshot().view().node("n20").is_some());
}

unsafe fn libc_umask(mask: u32) -> u32 {
    unsafe extern "C" {
        fn umask(mask: u32) -> u32;
    }
    // SAFETY: the caller's; umask has no preconditions.
    unsafe { umask(mask) }
}

#[test]
fn a_data_directory_behind_a_symlink_is_judged_by_its_target() {
    let tmp = TempDir::new("modes");
    let real = tmp.path().join("real");
    let (db, _) = DurableStore::open(&real, fast()).unwrap();
    write_some(&db, 1);
    drop(db);
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let (db, report) = DurableStore::open(&link, fast()).unwrap();
    assert!(
        report.permissions_fixed.is_empty(),
        "{:?}",
        report.permissions_fixed
    );
    assert!(db.snapshot().view().node("n1").is_some());
}
