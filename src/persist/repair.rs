//! Salvage: a data directory that refuses to open because of damage in the middle of
//! its log or in its snapshot is cut back to the last state it can prove — every
//! record before the first damaged one, on the newest snapshot that loads — and the
//! damaged files are moved aside into `DIR/damaged-N`, never deleted. Run by hand
//! (`schedstate repair`), never by `open`: losing acknowledged writes is a decision
//! for an operator, who gets told exactly what was dropped.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::data_dir::{FileKind, list_files};
use super::error::{IoContext, PersistError, Result};
use super::fs;
use super::lock::DirLock;
use super::recover::recover;
use super::wal::{SEGMENT_HEADER_LEN, decodable_records};

/// Prefix of the folders repairs move damaged files into (`damaged-1`, …).
pub(crate) const DAMAGED_PREFIX: &str = "damaged-";

/// What [`repair_data_dir`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// The directory opened as it was: nothing was changed.
    pub healthy: bool,
    /// Every file cut back or moved aside, in the order the damage was found.
    pub dropped: Vec<Dropped>,
    /// Where the damaged files (whole, as found) were moved.
    pub damaged_dir: Option<PathBuf>,
    /// The last applied index of the repaired directory.
    pub last_applied: u64,
}

/// One file the repair cut back or moved aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The file, where it was.
    pub path: PathBuf,
    /// The bytes kept in place (the records before the damage); 0 if the whole file
    /// was moved aside.
    pub kept_bytes: u64,
    /// The bytes dropped from it.
    pub dropped_bytes: u64,
    /// Whole, checksummed log records found in the dropped bytes (their writes are
    /// lost), and the first and last of their indexes.
    pub lost_records: u64,
    /// The index range of those records, if any.
    pub lost_indexes: Option<(u64, u64)>,
    /// Why it was dropped: the error that kept the directory from opening.
    pub reason: String,
}

/// Repairs the data directory `dir` (see the module docs). A directory that opens is
/// left alone (`healthy`); a torn tail is not damage (`open` cuts it itself).
///
/// # Errors
/// [`PersistError::Locked`] while a writer holds the directory; damage the repair
/// cannot cut away (a file of another format version, a directory that cannot be
/// read); I/O errors while moving files.
pub fn repair_data_dir(dir: &Path) -> Result<RepairReport> {
    if !dir.is_dir() {
        return Err(PersistError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let _lock = DirLock::acquire(dir)?;
    let mut report = RepairReport {
        healthy: true,
        dropped: Vec::new(),
        damaged_dir: None,
        last_applied: 0,
    };
    // Each round cuts away the first damage recovery stops at; a file is cut at most
    // once, so the number of files bounds the rounds.
    let rounds = list_files(dir)?.len() + 2;
    for _ in 0..rounds {
        let error = match recover(dir) {
            Ok(recovered) => {
                report.last_applied = recovered.report.last_applied;
                return Ok(report);
            }
            Err(e) => e,
        };
        report.healthy = false;
        let reason = error.to_string();
        let (path, offset) = damage_at(&error).ok_or(error)?;
        let folder = match &report.damaged_dir {
            Some(f) => f.clone(),
            None => {
                let f = new_damaged_dir(dir)?;
                report.damaged_dir = Some(f.clone());
                f
            }
        };
        cut(dir, &folder, &path, offset, &reason, &mut report)?;
    }
    Err(PersistError::Corrupt {
        path: dir.to_path_buf(),
        offset: 0,
        reason: "the repair did not converge".into(),
    })
}

/// The file and offset an error of recovery points at, if it is damage a repair may
/// cut away (a snapshot is always dropped whole: offset 0).
fn damage_at(error: &PersistError) -> Option<(PathBuf, u64)> {
    match error {
        PersistError::Checksum { path, offset, .. }
        | PersistError::Corrupt { path, offset, .. }
        | PersistError::Replay { path, offset, .. } => Some((path.clone(), *offset)),
        PersistError::MissingSegment { path, .. }
        | PersistError::BadMagic { path, .. }
        | PersistError::BrokenInvariant { path, .. } => Some((path.clone(), 0)),
        _ => None,
    }
}

fn new_damaged_dir(dir: &Path) -> Result<PathBuf> {
    let folder = (1..)
        .map(|n| dir.join(format!("{DAMAGED_PREFIX}{n}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| dir.join(DAMAGED_PREFIX));
    fs::create_dir(&folder)?;
    Ok(folder)
}

/// Cuts the damage at (`path`, `offset`) away: a snapshot, or a segment damaged in its
/// header, is moved aside whole; a segment damaged further in is copied aside whole,
/// then cut back to its last whole record before `offset`; every later segment is
/// moved aside (its records would follow a hole).
fn cut(
    dir: &Path,
    folder: &Path,
    path: &Path,
    offset: u64,
    reason: &str,
    report: &mut RepairReport,
) -> Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let kind = name.as_deref().map_or(FileKind::Other, FileKind::of);
    let FileKind::LogSegment { seq } = kind else {
        return move_aside(folder, path, reason, report);
    };
    if offset < SEGMENT_HEADER_LEN {
        move_aside(folder, path, reason, report)?;
    } else {
        let bytes = std::fs::read(path).at(path)?;
        let aside = folder.join(name.unwrap_or_default());
        fs::write_atomically(&aside, |out| {
            std::io::Write::write_all(out, &bytes).at(&aside)
        })?;
        let file = fs::open_append(path)?;
        fs::set_len(&file, path, offset)?;
        fs::sync_all(&file, path)?;
        let (lost_records, lost_indexes) = decodable_records(&bytes, offset);
        report.dropped.push(Dropped {
            path: path.to_path_buf(),
            kept_bytes: offset,
            dropped_bytes: bytes.len() as u64 - offset,
            lost_records,
            lost_indexes,
            reason: reason.to_string(),
        });
    }
    for f in list_files(dir)? {
        if let FileKind::LogSegment { seq: later } = f.kind
            && later > seq
        {
            move_aside(folder, &f.path, "follows the damaged segment", report)?;
        }
    }
    fs::sync_dir(dir)
}

/// Moves a whole file into `folder`, recording what it held.
fn move_aside(folder: &Path, path: &Path, reason: &str, report: &mut RepairReport) -> Result<()> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .at(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let is_segment = matches!(
        name.as_deref().map(FileKind::of),
        Some(FileKind::LogSegment { .. })
    );
    let (lost_records, lost_indexes) = if is_segment {
        decodable_records(&bytes, SEGMENT_HEADER_LEN.min(bytes.len() as u64))
    } else {
        (0, None)
    };
    fs::rename(path, &folder.join(name.unwrap_or_default()))?;
    fs::sync_dir(folder)?;
    report.dropped.push(Dropped {
        path: path.to_path_buf(),
        kept_bytes: 0,
        dropped_bytes: bytes.len() as u64,
        lost_records,
        lost_indexes,
        reason: reason.to_string(),
    });
    Ok(())
}
