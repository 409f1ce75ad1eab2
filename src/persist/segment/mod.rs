//! The segment framing shared by every log this project writes: the write-ahead log of
//! a [`DurableStore`](super::DurableStore) and the Raft log of the replication crate.
//!
//! ```text
//! segment := MAGIC [u8; 8] | VERSION u32 | SEQ u64 | PREV_INDEX u64 | CRC u32
//!            | record*
//! record  := LEN u32 | CRC u32 | payload (LEN bytes, starting with the record's index)
//! ```
//! Little-endian integers, CRC-32 (IEEE). The header's CRC covers the 28 bytes before
//! it; a record's CRC covers its LEN bytes and its payload, so a damaged length is
//! caught too. `PREV_INDEX` is the index of the last record written before this
//! segment: with the sequence number it proves that no segment is missing.
//!
//! What a payload holds is the log's business ([`SegmentFormat`]: its magic, version
//! and a probe that tells whether bytes decode as one of its payloads). The rules of
//! the framing are the same for every log:
//!
//! - A record cut short by a crash can only be the last one of the last segment: there
//!   it is truncated and reported. A bad record anywhere else is corruption, refused
//!   with the file and the offset — including a bad record in the last segment followed
//!   by a valid one (a damaged length can make a record look cut short; the valid
//!   record after it shows it is not).
//! - A failed append cuts the file back to its last whole record before anything else
//!   is written; if that fails too, the writer says the segment is poisoned.
//! - Every change to the disk goes through the persistence layer's file seam, so the
//!   fault tests reach these files as well.
//! - The segment being appended to is extended with zeros [`PREALLOCATE`] bytes at a
//!   time, ahead of its records, and records overwrite them. An `fdatasync` after an
//!   append that grows the file must also commit the new size and blocks to the file
//!   system's journal; after an overwrite it flushes only data: on this project's
//!   ext4 test host 130–160 µs against ~100 µs per fsync, and a replicated write waits
//!   for two of them. A length of zero is never a record (a payload holds at least
//!   its index), so zeros up to the end of a file are its clean end, in any segment.
//!   In the last segment, a record that fails its checksum with only zeros after it
//!   is a torn tail, as one at the very end of the file is, and so is a length of zero
//!   followed by other bytes but no valid record (an append whose start was lost).
//!   The zeros stay when the log closes (the next open appends over them); a segment
//!   the log rolls over from is cut to its records ([`SegmentWriter::seal`]).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::{IoContext, PersistError, Result};
use super::fs;

mod read;

pub use read::{Record, Scan, decodable_records, read_span, record_in, scan_segment};

/// Bytes in a segment header.
pub const SEGMENT_HEADER_LEN: u64 = 32;
/// Bytes in a record header (length and checksum).
const RECORD_HEADER_LEN: u64 = 8;
/// The largest record payload accepted.
pub const MAX_RECORD: u32 = 64 << 20;
/// Bytes of zeros a segment is extended by ahead of its records. One fsync per extent
/// pays for the new blocks (~0.5 ms here for 256 KiB, against ~0.1 ms for an
/// overwrite): a larger extent is a rarer but longer stall for the write that meets
/// it, a smaller one more of them; both cost about the same per byte.
pub const PREALLOCATE: u64 = 256 << 10;

/// What distinguishes one log's segments from another's.
#[derive(Clone, Copy, Debug)]
pub struct SegmentFormat {
    /// The first 8 bytes of each segment.
    pub magic: &'static [u8; 8],
    /// The format version written (and the newest read).
    pub version: u32,
    /// The oldest format version read. A segment of an older version than `version`
    /// is read, never appended to: a writer that finds one at the tail starts a new
    /// segment.
    pub oldest_version: u32,
    /// What the files are called in errors ("log segment", "raft log segment").
    pub kind: &'static str,
    /// Whether `payload`, of a segment of format `version`, decodes as one of this
    /// log's records, and if so its index. Used to tell a torn tail from damage
    /// followed by valid records, and to count what a repair drops.
    pub probe: fn(version: u32, payload: &[u8]) -> Option<u64>,
}

impl SegmentFormat {
    /// Whether this build reads segments of format `version`.
    pub fn reads(&self, version: u32) -> bool {
        (self.oldest_version..=self.version).contains(&version)
    }
}

fn record_crc(len: [u8; 4], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len);
    h.update(payload);
    h.finalize()
}

fn segment_header(format: &SegmentFormat, seq: u64, prev_index: u64) -> [u8; 32] {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    h[0..8].copy_from_slice(format.magic);
    h[8..12].copy_from_slice(&format.version.to_le_bytes());
    h[12..20].copy_from_slice(&seq.to_le_bytes());
    h[20..28].copy_from_slice(&prev_index.to_le_bytes());
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The segment being appended to.
pub struct SegmentWriter {
    path: PathBuf,
    file: File,
    seq: u64,
    /// Bytes of records (the offset of the next record).
    len: u64,
    /// Bytes in the file: `len`, then zeros up to here (see the module docs).
    allocated: u64,
    /// Index of the last record written (or the segment's previous index).
    last_index: u64,
    /// The encoding buffer, reused from record to record; see [`KEPT_BUFFER`].
    buf: Vec<u8>,
}

/// The most capacity the encoding buffer keeps between records. Small records (a
/// node's update, a claim) then reuse one buffer; a large one (a plan of a thousand
/// allocations, a bulk load) gets its own, freed once written: kept, it would hold
/// the largest record's size for the writer's life, once per segment writer (a
/// replicated server has one per log; three replicas in one process kept 0.38 MiB of
/// a preload's biggest batch).
const KEPT_BUFFER: usize = 64 * 1024;

/// Why an append failed, and whether the segment is still good.
#[derive(Debug)]
pub struct AppendError {
    /// What failed.
    pub error: PersistError,
    /// The file could not be cut back to its last whole record: the segment must not
    /// be appended to again.
    pub poisoned: bool,
}

impl SegmentWriter {
    /// Creates the segment `path` with sequence number `seq`, durable (file and
    /// directory fsynced). If a step fails, the file is removed again (best effort:
    /// the caller can check whether it is gone).
    ///
    /// # Errors
    /// The I/O error of the step that failed.
    pub fn create(
        format: &SegmentFormat,
        path: PathBuf,
        seq: u64,
        prev_index: u64,
    ) -> Result<SegmentWriter> {
        let file = fs::create(&path)?;
        let made = (|| {
            fs::write_all(&file, &path, &segment_header(format, seq, prev_index))?;
            fs::sync_all(&file, &path)?;
            fs::sync_dir(fs::parent_dir(&path))
        })();
        if let Err(e) = made {
            drop(file);
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(SegmentWriter {
            path,
            file,
            seq,
            len: SEGMENT_HEADER_LEN,
            allocated: SEGMENT_HEADER_LEN,
            last_index: prev_index,
            buf: Vec::new(),
        })
    }

    /// Reopens an existing segment, already validated by [`scan_segment`] up to `len`
    /// bytes, for appending at `len`. Zeros after `len` (a scan's clean end) are kept
    /// for the records to come. Anything else after it (a torn tail, records a
    /// truncation drops) the caller cuts with [`cut_back`](Self::cut_back) before the
    /// next append, when its order of steps allows: it is not cut here.
    ///
    /// # Errors
    /// The I/O error of opening, reading or positioning it.
    pub fn reopen(path: PathBuf, seq: u64, len: u64, last_index: u64) -> Result<SegmentWriter> {
        let file = fs::open_write(&path)?;
        let size = file.metadata().at(&path)?.len();
        let allocated = if size > len && zeros_from(&file, &path, len)? {
            size
        } else {
            len
        };
        (&file).seek(SeekFrom::Start(len)).at(&path)?;
        Ok(SegmentWriter {
            path,
            file,
            seq,
            len,
            allocated,
            last_index,
            buf: Vec::new(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's sequence number.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Bytes of records (and the header): the offset the next record will have.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the segment holds no record yet.
    pub fn is_empty(&self) -> bool {
        self.len <= SEGMENT_HEADER_LEN
    }

    /// The index of the last record written (the segment's previous index if none).
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// Appends the record at `index` whose payload `payload` writes into the buffer it
    /// is given (which must start with the index, as the log's probe reads it). Returns
    /// the file's new length. On a failed write the file is cut back to its last whole
    /// record (and the write position with it), so nothing of the failed record is left
    /// before the next one; if even that fails, the error says the segment is poisoned.
    ///
    /// # Errors
    /// [`PersistError::TooLarge`] for a payload over [`MAX_RECORD`] (nothing written),
    /// the payload's own error, or the I/O error.
    pub fn append(
        &mut self,
        index: u64,
        payload: impl FnOnce(&mut Vec<u8>) -> Result<()>,
    ) -> std::result::Result<u64, AppendError> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.extend_from_slice(&[0u8; RECORD_HEADER_LEN as usize]);
        let result = payload(&mut buf)
            .map_err(|error| AppendError {
                error,
                poisoned: false,
            })
            .and_then(|()| self.write_record(index, &mut buf));
        if buf.capacity() <= KEPT_BUFFER {
            self.buf = buf;
        }
        result
    }

    /// Fills in the record header, checks the size, writes, and cuts back on failure.
    fn write_record(
        &mut self,
        index: u64,
        record: &mut [u8],
    ) -> std::result::Result<u64, AppendError> {
        let payload_len = record.len() - RECORD_HEADER_LEN as usize;
        let len = match u32::try_from(payload_len) {
            Ok(n) if n <= MAX_RECORD => n,
            _ => {
                return Err(AppendError {
                    error: PersistError::TooLarge {
                        what: "a log record",
                        bytes: payload_len as u64,
                        limit: u64::from(MAX_RECORD),
                    },
                    poisoned: false,
                });
            }
        };
        let len_bytes = len.to_le_bytes();
        let crc = record_crc(len_bytes, &record[RECORD_HEADER_LEN as usize..]);
        record[0..4].copy_from_slice(&len_bytes);
        record[4..8].copy_from_slice(&crc.to_le_bytes());
        let written = self
            .preallocate(self.len + record.len() as u64)
            .and_then(|()| fs::write_all(&self.file, &self.path, record));
        match written {
            Ok(()) => {
                self.len += record.len() as u64;
                self.last_index = index;
                Ok(self.len)
            }
            Err(error) => {
                let poisoned = self.cut_back(self.len, self.last_index).is_err();
                Err(AppendError { error, poisoned })
            }
        }
    }

    /// Cuts the file back to `len` bytes (a record boundary whose last record has
    /// index `last_index`) and moves the write position there: a file not opened to
    /// append would otherwise write its next record after a hole. Not synced: call
    /// [`sync`](Self::sync) for that.
    ///
    /// # Errors
    /// The I/O error of the cut.
    pub fn cut_back(&mut self, len: u64, last_index: u64) -> Result<()> {
        fs::set_len(&self.file, &self.path, len)?;
        self.allocated = len;
        self.file.seek(SeekFrom::Start(len)).at(&self.path)?;
        self.len = len;
        self.last_index = last_index;
        Ok(())
    }

    /// Extends the file with zeros, in whole [`PREALLOCATE`] extents, so that it holds
    /// at least `end` bytes. Leaves the write position at `len`.
    fn preallocate(&mut self, end: u64) -> Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        let target = end.div_ceil(PREALLOCATE) * PREALLOCATE;
        self.file
            .seek(SeekFrom::Start(self.allocated))
            .at(&self.path)?;
        // Whatever happens next, the file may be longer than `allocated` says, and
        // only with zeros: the next append or cut deals with it.
        let zeroed = fs::write_zeros(&self.file, &self.path, target - self.allocated);
        self.file.seek(SeekFrom::Start(self.len)).at(&self.path)?;
        zeroed?;
        self.allocated = target;
        Ok(())
    }

    /// Cuts the zeros preallocated after the last record and makes the segment durable,
    /// size included: for a segment no more records will be appended to.
    ///
    /// # Errors
    /// The I/O error of the cut or the fsync.
    pub fn seal(&mut self) -> Result<()> {
        if self.allocated > self.len {
            fs::set_len(&self.file, &self.path, self.len)?;
            self.allocated = self.len;
            fs::sync_all(&self.file, &self.path)
        } else {
            self.sync()
        }
    }

    /// Makes everything appended (and cut) so far durable.
    ///
    /// # Errors
    /// The I/O error of the fsync.
    pub fn sync(&self) -> Result<()> {
        fs::sync_data(&self.file, &self.path)
    }

    /// Another handle on the file, to fsync without holding the writer.
    ///
    /// # Errors
    /// The I/O error of duplicating the handle.
    pub fn sync_handle(&self) -> Result<(File, PathBuf)> {
        Ok((self.file.try_clone().at(&self.path)?, self.path.clone()))
    }
}

/// Whether `file` (at `path`) holds only zeros from `from` to its end. Stops at the
/// first byte that is not.
fn zeros_from(file: &File, path: &Path, from: u64) -> Result<bool> {
    use std::io::Read;
    let mut reader = file.try_clone().at(path)?;
    reader.seek(SeekFrom::Start(from)).at(path)?;
    let mut chunk = [0u8; 8 << 10];
    loop {
        let n = reader.read(&mut chunk).at(path)?;
        if n == 0 {
            return Ok(true);
        }
        if chunk[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
    }
}

/// Makes `file` (at `path`, for errors) durable through the file seam.
///
/// # Errors
/// The I/O error of the fsync.
pub fn sync_file(file: &File, path: &Path) -> Result<()> {
    fs::sync_data(file, path)
}

/// Writes `bytes` to `path` atomically (a temporary file, fsynced, renamed into place,
/// the directory fsynced): a crash leaves the old file or the new one.
///
/// # Errors
/// The I/O error of the step that failed; the old file is then still in place.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write_atomically(path, |out| out.write_all(bytes).at(path))
}

/// Removes `path` and fsyncs its directory, so the removal survives a crash.
///
/// # Errors
/// The I/O error of the removal or the fsync.
pub fn remove_file_durably(path: &Path) -> Result<()> {
    fs::remove_file(path)?;
    fs::sync_dir(fs::parent_dir(path))
}

/// Creates the directory `path` (and its parents) if missing.
///
/// # Errors
/// The I/O error of the creation.
pub fn create_dir_all(path: &Path) -> Result<()> {
    fs::create_dir_all(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoding_buffer_is_kept_for_small_records_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000001.log");
        let mut w = SegmentWriter::create(&crate::persist::wal::WAL_FORMAT, path, 1, 0).unwrap();
        let record = |index: u64, len: usize| {
            move |buf: &mut Vec<u8>| {
                let taken = std::mem::take(buf);
                *buf = postcard::to_extend(&index, taken)?;
                buf.resize(buf.len() + len, 0xAB);
                Ok(())
            }
        };
        w.append(1, record(1, 1_000)).unwrap();
        let small = w.buf.capacity();
        assert!(small >= 1_000, "kept after a small record: {small}");
        w.append(2, record(2, 1_000)).unwrap();
        assert_eq!(w.buf.capacity(), small, "reused, not grown");
        w.append(3, record(3, 2 * KEPT_BUFFER)).unwrap();
        assert!(
            w.buf.capacity() <= KEPT_BUFFER,
            "a large record's buffer is let go"
        );
        w.append(4, record(4, 10)).unwrap();
        assert_eq!(w.last_index(), 4);
        let end = w.len();
        w.sync().unwrap();
        drop(w);
        // Every record is whole on disk, whichever buffer wrote it.
        let mut lens = Vec::new();
        let scan = scan_segment(
            &crate::persist::wal::WAL_FORMAT,
            &dir.path().join("00000001.log"),
            true,
            |_, _| Ok(()),
            |_, payload| Ok(payload.len()),
            |r| {
                lens.push(r.value);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(scan.valid_len, end);
        assert_eq!(scan.torn_bytes, 0);
        // Each payload: the index (one byte in postcard) and its filler.
        assert_eq!(lens, [1_001, 1_001, 2 * KEPT_BUFFER + 1, 11]);
    }
}
