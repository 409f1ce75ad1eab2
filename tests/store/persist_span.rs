//! Reading records back in one span (`segment::read_span` + `record_in`): what the
//! Raft log does for a run of entries no longer cached. Each record comes back
//! exactly as written; a damaged one, or one the span does not hold whole, is a
//! typed error naming its offset in the file.

use schedstate::persist::PersistError;
use schedstate::persist::segment::{SegmentFormat, SegmentWriter, read_span, record_in};

use crate::support::TempDir;

const FORMAT: SegmentFormat = SegmentFormat {
    magic: b"SPANTEST",
    version: 1,
    oldest_version: 1,
    kind: "test segment",
    probe: |_, payload| payload.first().map(|&b| u64::from(b)),
};

/// Writes records of the given payloads; returns the segment's path and each
/// record's offset, with the end of the last one.
fn segment(dir: &TempDir, payloads: &[Vec<u8>]) -> (std::path::PathBuf, Vec<u64>, u64) {
    let path = dir.path().join("seg");
    let mut w = SegmentWriter::create(&FORMAT, path.clone(), 1, 0).unwrap();
    let mut offsets = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        offsets.push(w.len());
        w.append(i as u64 + 1, |buf| {
            buf.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
    }
    w.sync().unwrap();
    (path, offsets, w.len())
}

fn payloads() -> Vec<Vec<u8>> {
    vec![vec![1; 10], (0..=255).collect(), vec![3; 3_000]]
}

#[test]
fn every_record_of_a_span_comes_back_as_written() {
    let dir = TempDir::new("span-read");
    let payloads = payloads();
    let (path, offsets, end) = segment(&dir, &payloads);
    // All three, and the last two alone (a span starting mid-segment).
    for from in [0, 1] {
        let base = offsets[from];
        let span = read_span(&path, base, end - base).unwrap();
        for (i, &offset) in offsets.iter().enumerate().skip(from) {
            let got = record_in(&span, (offset - base) as usize, &path, base).unwrap();
            assert_eq!(got, payloads[i].as_slice(), "record {i}");
        }
    }
}

#[test]
fn a_damaged_record_in_a_span_is_a_checksum_error_at_its_offset() {
    let dir = TempDir::new("span-damaged");
    let (path, offsets, end) = segment(&dir, &payloads());
    let mut span = read_span(&path, 0, end).unwrap();
    span[offsets[1] as usize + 8 + 100] ^= 0x40;
    assert!(record_in(&span, offsets[0] as usize, &path, 0).is_ok());
    match record_in(&span, offsets[1] as usize, &path, 0) {
        Err(PersistError::Checksum { offset, .. }) => assert_eq!(offset, offsets[1]),
        other => panic!("expected a checksum error, got {other:?}"),
    }
    assert!(record_in(&span, offsets[2] as usize, &path, 0).is_ok());
}

#[test]
fn a_record_the_span_does_not_hold_whole_is_corrupt_not_a_panic() {
    let dir = TempDir::new("span-short");
    let (path, offsets, end) = segment(&dir, &payloads());
    // Cut inside the last record's payload, then inside its header.
    for cut in [end - 1, offsets[2] + 4] {
        let span = read_span(&path, 0, cut).unwrap();
        match record_in(&span, offsets[2] as usize, &path, 0) {
            Err(PersistError::Corrupt { offset, .. }) => assert_eq!(offset, offsets[2]),
            other => panic!("expected corruption, got {other:?}"),
        }
    }
    // An offset past the span altogether.
    let span = read_span(&path, 0, offsets[1]).unwrap();
    assert!(matches!(
        record_in(&span, offsets[2] as usize, &path, 0),
        Err(PersistError::Corrupt { .. })
    ));
}
