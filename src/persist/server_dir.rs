//! The names of the files a replicated server (`schedstate-raft`) keeps in its data
//! directory. They live here, under the store, so that tools built on the store alone
//! (the `schedstate` binary without the server half) recognize such a directory and
//! refuse to read it as an empty store or to write a second log into it; the raft
//! crate names its files with these functions.

use std::path::{Path, PathBuf};

/// The name of a replicated server's metadata file (its vote and membership).
pub const SERVER_META_FILE: &str = "raft-meta";

/// The file name of a replicated server's log segment `seq`.
pub fn server_segment_name(seq: u64) -> String {
    format!("raft-{seq:020}.log")
}

/// The sequence number of a replicated server's log segment, from its file name.
pub fn parse_server_segment_name(name: &str) -> Option<u64> {
    name.strip_prefix("raft-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// The path of the metadata file in a replicated server's directory `dir`.
pub fn server_meta_path(dir: &Path) -> PathBuf {
    dir.join(SERVER_META_FILE)
}

/// Whether `dir` is (or was) a replicated server's data directory: it holds a Raft
/// metadata file or log segment. Tools that read a single store's directory use it to
/// refuse one of these instead of reading it as an empty store (or writing a second
/// log into it).
///
/// ```
/// use schedstate::persist::is_server_dir;
///
/// let dir = tempfile::tempdir().unwrap();
/// assert!(!is_server_dir(dir.path()));
/// std::fs::write(dir.path().join("raft-meta"), b"").unwrap();
/// assert!(is_server_dir(dir.path()));
/// ```
pub fn is_server_dir(dir: &Path) -> bool {
    if server_meta_path(dir).exists() {
        return true;
    }
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| parse_server_segment_name(n).is_some())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip_and_others_are_not_segments() {
        assert_eq!(server_segment_name(7), "raft-00000000000000000007.log");
        assert_eq!(parse_server_segment_name(&server_segment_name(7)), Some(7));
        for other in [
            "raft-meta",
            "raft-x.log",
            "wal-00000000000000000001.log",
            "raft-1.snap",
        ] {
            assert_eq!(parse_server_segment_name(other), None, "{other}");
        }
    }

    #[test]
    fn a_segment_alone_marks_a_server_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("snapshot-00000000000000000001.snap"), b"").unwrap();
        assert!(!is_server_dir(dir.path()));
        std::fs::write(dir.path().join(server_segment_name(1)), b"").unwrap();
        assert!(is_server_dir(dir.path()));
        assert!(!is_server_dir(&dir.path().join("missing")));
    }
}
