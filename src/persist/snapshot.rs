//! The snapshot format, version 3: the whole state in one checksummed stream.
//!
//! ```text
//! file   := MAGIC "SCHEDSNP" | VERSION u32 | HEADER_LEN u32 | HEADER | HEADER_CRC u32
//!           | BODY | BODY_CRC u32
//! HEADER := postcard(SnapshotHeader)        (last applied index; per table: name,
//!                                            table index, row count)
//! BODY   := for each table of the header, in order, for each row:
//!           LEN u32 | postcard(row)
//! ```
//! The tables are those the header lists, each at most once, in any order; one not
//! listed is empty (the `acl_tokens` and `jobs` tables are listed only once written;
//! `acl_salt`, the cluster's ACL salt — one row, version 3 — only once set).
//! Version 2 added jobs: the `jobs` table, an allocation's job version and a plugin's
//! job expectations. Version 3 added a job's registered definition to its row and the
//! `acl_salt` section.
//! Version 1 and 2 files still load: version 1's allocation and plugin rows decode
//! through their version-1 shapes ([`crate::state::v1`]), with no jobs; version 2's job
//! rows through their version-2 shape ([`crate::state::v2`]), with no definitions.
//! Integers are little-endian; checksums are CRC-32 (IEEE) — the header's covers
//! everything before it, the body's the body. Rows are streamed: writing never holds a
//! second copy of the state, and reading checks every length against a cap before
//! allocating, so a forged length cannot make it allocate without bound. The derived
//! plugin-instance table is not stored; restore rebuilds it from the plugins.

use std::io::{self, Read, Write};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::{AclToken, Allocation, CsiPlugin, CsiVolume, Job, Node};
use crate::state::AclSaltRow;
use crate::state::v1::{AllocationV1, CsiPluginV1};
use crate::state::v2::JobV2;
use crate::state::{Restore, StateError, StateSnapshot, StateStore, Table};

use super::error::{PersistError, Result};

/// The first bytes of every snapshot file.
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"SCHEDSNP";
/// The snapshot format version this build writes (it reads this one and every one
/// from [`OLDEST_SNAPSHOT_VERSION`]).
pub const SNAPSHOT_VERSION: u32 = 3;
/// The oldest snapshot format version this build reads.
pub const OLDEST_SNAPSHOT_VERSION: u32 = 1;
/// The name of the ACL salt's section in the header (not a [`Table`]).
const ACL_SALT: &str = "acl_salt";
/// The largest header accepted.
const MAX_HEADER: u32 = 1 << 20;
/// The largest single row accepted.
pub(crate) const MAX_ROW: u32 = 64 << 20;

/// What a snapshot's header says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// The last applied index of the state it holds.
    pub last_applied: u64,
    /// Per table: name, table index, number of rows.
    pub tables: Vec<TableHeader>,
}

/// One table's entry in a snapshot header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableHeader {
    /// The table's name ([`Table::name`]).
    pub name: String,
    /// Its table index.
    pub index: u64,
    /// How many rows follow in the body.
    pub rows: u64,
}

/// A writer that counts bytes and checksums them.
struct Output<'w, W: Write> {
    w: &'w mut W,
    bytes: u64,
    crc: crc32fast::Hasher,
}

impl<W: Write> Output<'_, W> {
    fn put(&mut self, buf: &[u8]) -> io::Result<()> {
        self.w.write_all(buf)?;
        self.crc.update(buf);
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// Writes the checksum of everything since the last one (not itself checksummed).
    fn put_crc(&mut self) -> io::Result<()> {
        let crc = std::mem::take(&mut self.crc).finalize();
        self.w.write_all(&crc.to_le_bytes())?;
        self.bytes += 4;
        Ok(())
    }
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> PersistError + '_ {
    move |source| PersistError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `snap` in snapshot format to `out`; returns the number of bytes written.
pub(crate) fn write_snapshot<W: Write>(
    snap: &StateSnapshot,
    out: &mut W,
    path: &Path,
) -> Result<u64> {
    write_snapshot_as(snap, out, path, SNAPSHOT_VERSION)
}

/// Whether the state fits format version 2: no job definition, no ACL salt.
fn fits_version_2(snap: &StateSnapshot) -> bool {
    let v = snap.view();
    v.acl_salt_row().is_none() && v.jobs().all(|j| j.definition.is_none())
}

/// Writes `snap` in the oldest snapshot version from `oldest` on that holds it (2 or
/// this build's); returns the number of bytes written.
fn write_snapshot_as<W: Write>(
    snap: &StateSnapshot,
    out: &mut W,
    path: &Path,
    oldest: u32,
) -> Result<u64> {
    let version = if oldest <= 2 && fits_version_2(snap) {
        2
    } else {
        SNAPSHOT_VERSION
    };
    let v = snap.view();
    // The tokens table is listed once written: the snapshot of a state that never had
    // one is byte for byte what a build before the table wrote (and still reads).
    let acl = v.acl_bootstrapped();
    let jobs = v.table_index(Table::Jobs) > 0;
    let salt = v.acl_salt_row();
    let mut tables: Vec<TableHeader> = Table::ALL
        .iter()
        .filter(|t| (acl || **t != Table::AclTokens) && (jobs || **t != Table::Jobs))
        .map(|&table| TableHeader {
            name: table.name().to_string(),
            index: v.table_index(table),
            rows: v.row_count(table) as u64,
        })
        .collect();
    if let Some(salt) = &salt {
        tables.push(TableHeader {
            name: ACL_SALT.to_string(),
            index: salt.create_index,
            rows: 1,
        });
    }
    let header = SnapshotHeader {
        last_applied: v.last_applied(),
        tables,
    };
    let header_bytes = postcard::to_allocvec(&header)?;
    let header_len = u32::try_from(header_bytes.len())
        .ok()
        .filter(|n| *n <= MAX_HEADER)
        .ok_or(PersistError::TooLarge {
            what: "a snapshot header",
            bytes: header_bytes.len() as u64,
            limit: u64::from(MAX_HEADER),
        })?;
    let mut o = Output {
        w: out,
        bytes: 0,
        crc: crc32fast::Hasher::new(),
    };
    let e = io_err(path);
    o.put(SNAPSHOT_MAGIC).map_err(&e)?;
    o.put(&version.to_le_bytes()).map_err(&e)?;
    o.put(&header_len.to_le_bytes()).map_err(&e)?;
    o.put(&header_bytes).map_err(&e)?;
    o.put_crc().map_err(&e)?;

    let mut buf = Vec::with_capacity(4096);
    let mut row = |o: &mut Output<'_, W>, value: &dyn erased::Row| -> Result<()> {
        buf.clear();
        value.encode(&mut buf)?;
        let len = u32::try_from(buf.len())
            .ok()
            .filter(|n| *n <= MAX_ROW)
            .ok_or(PersistError::TooLarge {
                what: "a snapshot row",
                bytes: buf.len() as u64,
                limit: u64::from(MAX_ROW),
            })?;
        o.put(&len.to_le_bytes()).map_err(&e)?;
        o.put(&buf).map_err(&e)
    };
    for n in v.nodes() {
        row(&mut o, &*n)?;
    }
    for a in v.allocs() {
        row(&mut o, &*a)?;
    }
    for p in v.csi_plugins() {
        row(&mut o, &*p)?;
    }
    for vol in v.csi_volumes() {
        row(&mut o, &*vol)?;
    }
    for token in v.acl_tokens() {
        row(&mut o, &*token)?;
    }
    for job in v.jobs() {
        if version == 2 {
            row(&mut o, &JobV2::from(&*job))?;
        } else {
            row(&mut o, &*job)?;
        }
    }
    if let Some(salt) = &salt {
        row(&mut o, &**salt)?;
    }
    o.put_crc().map_err(&e)?;
    o.w.flush().map_err(&e)?;
    Ok(o.bytes)
}

mod erased {
    //! Encoding rows of different types through one closure.
    pub(super) trait Row {
        fn encode(&self, buf: &mut Vec<u8>) -> Result<(), postcard::Error>;
    }

    impl<T: serde::Serialize> Row for T {
        fn encode(&self, buf: &mut Vec<u8>) -> Result<(), postcard::Error> {
            let bytes = postcard::to_extend(self, std::mem::take(buf))?;
            *buf = bytes;
            Ok(())
        }
    }
}

/// A reader that counts bytes and checksums them.
struct Input<'r, R: Read> {
    r: &'r mut R,
    offset: u64,
    crc: crc32fast::Hasher,
    path: &'r Path,
}

impl<R: Read> Input<'_, R> {
    fn take(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        self.r.read_exact(buf).map_err(|err| {
            if err.kind() == io::ErrorKind::UnexpectedEof {
                self.corrupt(format!("file ends inside {what}"))
            } else {
                PersistError::Io {
                    path: self.path.to_path_buf(),
                    source: err,
                }
            }
        })?;
        self.crc.update(buf);
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0u8; 4];
        self.take(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn corrupt(&self, reason: String) -> PersistError {
        PersistError::Corrupt {
            path: self.path.to_path_buf(),
            offset: self.offset,
            reason,
        }
    }

    /// Reads a stored checksum and compares it with everything read since the last.
    fn check_crc(&mut self, what: &'static str, start: u64) -> Result<()> {
        let computed = std::mem::take(&mut self.crc).finalize();
        let mut b = [0u8; 4];
        self.r.read_exact(&mut b).map_err(|err| {
            if err.kind() == io::ErrorKind::UnexpectedEof {
                self.corrupt(format!("file ends inside the {what} checksum"))
            } else {
                PersistError::Io {
                    path: self.path.to_path_buf(),
                    source: err,
                }
            }
        })?;
        self.offset += 4;
        if u32::from_le_bytes(b) != computed {
            return Err(PersistError::Checksum {
                path: self.path.to_path_buf(),
                offset: start,
                what,
            });
        }
        Ok(())
    }

    fn row<T: DeserializeOwned>(&mut self, buf: &mut Vec<u8>) -> Result<T> {
        let at = self.offset;
        let len = self.u32("a row length")?;
        if len > MAX_ROW {
            return Err(self.corrupt(format!("row length {len} exceeds the row limit")));
        }
        // Read through `take`, not into a buffer of the stated size: a forged length
        // then costs no more memory than the bytes that are really there.
        buf.clear();
        let got = Read::take(&mut *self.r, u64::from(len))
            .read_to_end(buf)
            .map_err(|source| PersistError::Io {
                path: self.path.to_path_buf(),
                source,
            })?;
        if got < len as usize {
            return Err(self.corrupt("file ends inside a row".into()));
        }
        self.crc.update(buf);
        self.offset += u64::from(len);
        postcard::from_bytes(buf).map_err(|err| PersistError::Corrupt {
            path: self.path.to_path_buf(),
            offset: at,
            reason: format!("row does not decode: {err}"),
        })
    }
}

/// Reads a snapshot from `input` into a restore of `store`, committing it only after
/// every check passed. Returns the snapshot's header.
pub(crate) fn read_snapshot<R: Read>(
    input: &mut R,
    path: &Path,
    store: &StateStore,
) -> Result<SnapshotHeader> {
    read_snapshot_at(input, path, store, None)
}

/// As [`read_snapshot`]; with `at`, the restored state is given the indexes of a
/// write at `at` ([`StateStore::restore_from_at`]).
pub(crate) fn read_snapshot_at<R: Read>(
    input: &mut R,
    path: &Path,
    store: &StateStore,
    at: Option<u64>,
) -> Result<SnapshotHeader> {
    let mut i = Input {
        r: input,
        offset: 0,
        crc: crc32fast::Hasher::new(),
        path,
    };
    let mut magic = [0u8; 8];
    i.take(&mut magic, "the magic bytes")
        .map_err(|_| PersistError::BadMagic {
            path: path.to_path_buf(),
            kind: "snapshot",
        })?;
    if &magic != SNAPSHOT_MAGIC {
        return Err(PersistError::BadMagic {
            path: path.to_path_buf(),
            kind: "snapshot",
        });
    }
    let version = i.u32("the format version")?;
    if !(OLDEST_SNAPSHOT_VERSION..=SNAPSHOT_VERSION).contains(&version) {
        return Err(PersistError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
            supported: SNAPSHOT_VERSION,
        });
    }
    let header_len = i.u32("the header length")?;
    if header_len > MAX_HEADER {
        return Err(i.corrupt(format!("header length {header_len} exceeds the limit")));
    }
    let mut header_bytes = vec![0u8; header_len as usize];
    i.take(&mut header_bytes, "the header")?;
    i.check_crc("header", 0)?;
    let header: SnapshotHeader =
        postcard::from_bytes(&header_bytes).map_err(|err| PersistError::Corrupt {
            path: path.to_path_buf(),
            offset: 16,
            reason: format!("header does not decode: {err}"),
        })?;

    // `None`: the ACL salt's section (version 3).
    let mut tables: Vec<(Option<Table>, &TableHeader)> = Vec::new();
    for table in &header.tables {
        let section = match Table::from_name(&table.name) {
            Some(t) => Some(Some(t)),
            None if table.name == ACL_SALT && version >= 3 && table.rows == 1 => Some(None),
            None => None,
        };
        match section {
            Some(s) if !tables.iter().any(|(seen, _)| *seen == s) => tables.push((s, table)),
            _ => {
                return Err(PersistError::Corrupt {
                    path: path.to_path_buf(),
                    offset: 16,
                    reason: format!("unexpected table {:?} in the header", table.name),
                });
            }
        }
    }

    let body_start = i.offset;
    let mut restore = store.begin_restore_at(header.last_applied, at);
    let mut buf = Vec::new();
    for (table, th) in &tables {
        let Some(table) = table else {
            restore.acl_salt(i.row::<AclSaltRow>(&mut buf)?)?;
            continue;
        };
        restore.table_index(*table, th.index);
        for _ in 0..th.rows {
            read_row(&mut i, &mut restore, *table, version, &mut buf)?;
        }
    }
    i.check_crc("body", body_start)?;
    let mut extra = [0u8; 1];
    match i.r.read(&mut extra) {
        Ok(0) => {}
        Ok(_) => return Err(i.corrupt("trailing bytes after the body checksum".into())),
        Err(source) => {
            return Err(PersistError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    restore.commit().map_err(|e| match e {
        StateError::BrokenInvariant(violation) => PersistError::BrokenInvariant {
            path: path.to_path_buf(),
            violation,
        },
        other => PersistError::State(other),
    })?;
    Ok(header)
}

fn read_row<R: Read>(
    i: &mut Input<'_, R>,
    restore: &mut Restore,
    table: Table,
    version: u32,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let v1 = version == 1;
    match table {
        Table::Nodes => restore.node(i.row::<Node>(buf)?)?,
        Table::Allocs if v1 => restore.alloc(i.row::<AllocationV1>(buf)?.into())?,
        Table::Allocs => restore.alloc(i.row::<Allocation>(buf)?)?,
        Table::CsiPlugins if v1 => restore.plugin(i.row::<CsiPluginV1>(buf)?.into())?,
        Table::CsiPlugins => restore.plugin(i.row::<CsiPlugin>(buf)?)?,
        Table::CsiVolumes => restore.volume(i.row::<CsiVolume>(buf)?)?,
        Table::AclTokens => restore.acl_token(i.row::<AclToken>(buf)?)?,
        Table::Jobs if version <= 2 => restore.job(i.row::<JobV2>(buf)?.into())?,
        Table::Jobs => restore.job(i.row::<Job>(buf)?)?,
    }
    Ok(())
}

impl StateStore {
    /// Writes the current state in snapshot format to `out` (a file, a socket, a
    /// replication stream). Returns the number of bytes written.
    ///
    /// # Errors
    /// I/O errors of `out`.
    ///
    /// ```
    /// use schedstate::state::StateStore;
    /// let a = StateStore::new();
    /// let mut bytes = Vec::new();
    /// a.snapshot_to(&mut bytes).unwrap();
    /// let b = StateStore::new();
    /// b.restore_from(&mut bytes.as_slice()).unwrap();
    /// assert_eq!(
    ///     a.snapshot().canonical_bytes().unwrap(),
    ///     b.snapshot().canonical_bytes().unwrap()
    /// );
    /// ```
    pub fn snapshot_to<W: Write>(&self, out: &mut W) -> Result<u64> {
        write_snapshot(&self.snapshot(), out, Path::new("<stream>"))
    }

    /// Replaces the whole state with the snapshot read from `input`, after checking
    /// it entirely — format, checksums, and every invariant of the state it holds;
    /// every watch fires (the old state is abandoned). On error the store is unchanged.
    ///
    /// This is how a replica installs a snapshot sent by its leader. A
    /// [`DurableStore`](super::DurableStore) has no such method: its state changes only
    /// through its log (`schedstate snapshot restore` replaces a data directory's files
    /// offline).
    ///
    /// # Errors
    /// A [`PersistError`] naming what is wrong and where.
    pub fn restore_from<R: Read>(&self, input: &mut R) -> Result<SnapshotHeader> {
        read_snapshot(input, Path::new("<stream>"), self)
    }

    /// As [`restore_from`](Self::restore_from) — the same checks, the store unchanged
    /// on error — but the restored state is given the indexes of one write at `index`:
    /// its last applied index, every table's index and delete index (except the ACL
    /// tokens table of a state never bootstrapped, whose 0 says so), and every row's
    /// create and modify indexes (a job's `job_modify_index`, the ACL salt's index)
    /// become `index`. How a replicated cluster restores a snapshot at the Raft index
    /// of its restore entry: no index a client saw goes backwards, and no row keeps an
    /// index a client could take for one it saw of another version.
    ///
    /// # Errors
    /// A [`PersistError`] naming what is wrong and where.
    pub fn restore_from_at<R: Read>(&self, input: &mut R, index: u64) -> Result<SnapshotHeader> {
        read_snapshot_at(input, Path::new("<stream>"), self, Some(index))
    }
}

impl StateSnapshot {
    /// Writes this version in snapshot format to `out`.
    ///
    /// # Errors
    /// I/O errors of `out`.
    pub fn write_to<W: Write>(&self, out: &mut W) -> Result<u64> {
        write_snapshot(self, out, Path::new("<stream>"))
    }

    /// Writes this version in the oldest snapshot format, from version `oldest` on,
    /// that holds it: version 2 when `oldest` is 2 and the state has none of version
    /// 3's additions (a job's definition, the ACL salt), else this build's. What a
    /// replicated cluster not yet at format 3 sends, so that a server of the previous
    /// release can install it.
    ///
    /// # Errors
    /// I/O errors of `out`.
    ///
    /// ```
    /// use schedstate::state::StateStore;
    /// let store = StateStore::new();
    /// let mut bytes = Vec::new();
    /// store.snapshot().write_as(&mut bytes, 2).unwrap();
    /// assert_eq!(&bytes[8..12], &2u32.to_le_bytes());
    /// StateStore::new().restore_from(&mut bytes.as_slice()).unwrap();
    /// ```
    pub fn write_as<W: Write>(&self, out: &mut W, oldest: u32) -> Result<u64> {
        write_snapshot_as(self, out, Path::new("<stream>"), oldest)
    }
}
