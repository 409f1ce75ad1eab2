//! `inspect [--verify] [--json]` of a replicated server's data directory (a Raft log and
//! snapshots): what `schedstate_raft::inspect_dir` reads — read-only, safe while the
//! agent runs — formatted as `inspect` formats an embedded store's.

use schedstate::persist::SNAPSHOT_VERSION;
use schedstate_cli::inspect::{InspectArgs, VerifyJson, verify, verify_json};
use schedstate_cli::output::{
    CliError, align_right, bytes, emit, emit_json, files_section, key_values, render, table,
    thousands,
};
use schedstate_raft::inspect::{
    CommittedInfo, LogIdInfo, MembershipInfo, ServerDirReport, TableInfo,
};
use schedstate_raft::{RAFT_LOG_VERSION, RAFT_META_VERSION, RAFT_SNAPSHOT_VERSION, inspect_dir};
use serde::Serialize;

/// `inspect --json` of a server's directory: the fields every `inspect --json` has,
/// then the server's own.
#[derive(Serialize)]
struct ServerJson<'a> {
    kind: &'static str,
    /// The last applied log index (the snapshot's, or the last committed entry
    /// replayed).
    last_applied: u64,
    /// The store's write index.
    latest_index: u64,
    /// The tables of that state.
    tables: &'a [TableInfo],
    #[serde(flatten)]
    report: &'a ServerDirReport,
    verify: Option<VerifyJson>,
}

/// `index 15 (term 1)`.
fn log_id(l: LogIdInfo) -> String {
    format!("index {} (term {})", thousands(l.index), l.term)
}

/// `voters 1, 2, 3 (index 0); 1 at 127.0.0.1:4646, …`, learners marked.
fn membership(m: &MembershipInfo) -> String {
    if m.members.is_empty() {
        return "none (not initialized)".into();
    }
    let sets: Vec<String> = m
        .voters
        .iter()
        .map(|set| {
            let ids: Vec<String> = set.iter().map(u64::to_string).collect();
            ids.join(", ")
        })
        .collect();
    let voters = match sets.as_slice() {
        [one] => format!("voters {one}"),
        _ => format!("joint: voters {}", sets.join(" and ")),
    };
    let since = m
        .log_id
        .map(|l| format!(" (since index {})", thousands(l.index)))
        .unwrap_or_default();
    let members: Vec<String> = m
        .members
        .iter()
        .map(|n| {
            let learner = if n.voter { "" } else { " (learner)" };
            format!("{} at {}{learner}", n.id, n.address)
        })
        .collect();
    format!("{voters}{since}; {}", members.join(", "))
}

/// `v1,v2`, or `none`.
fn versions(found: impl IntoIterator<Item = u32>) -> String {
    let mut found: Vec<u32> = found.into_iter().collect();
    found.sort_unstable();
    found.dedup();
    if found.is_empty() {
        return "none".into();
    }
    let found: Vec<String> = found.iter().map(|v| format!("v{v}")).collect();
    found.join(",")
}

fn tables_table(tables: &[TableInfo]) -> String {
    let mut t = table(["Table", "Index", "Rows"]);
    for info in tables {
        t.add_row(vec![
            info.name.to_string(),
            thousands(info.index),
            thousands(info.rows),
        ]);
    }
    align_right(&mut t, &[1, 2]);
    render(&t)
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The text output.
fn text(r: &ServerDirReport) -> String {
    let log = &r.log;
    let kind_versions = |kind: &str| {
        versions(
            r.files
                .iter()
                .filter(|f| f.kind == kind)
                .filter_map(|f| f.version),
        )
    };
    let store = r.snapshot.as_ref().map_or_else(String::new, |s| {
        format!(" around store snapshot v{}", s.store_version)
    });
    let format = format!(
        "log {}, metadata {}, snapshot {}{store} (this build writes log v{RAFT_LOG_VERSION}, \
         metadata v{RAFT_META_VERSION}, snapshot v{RAFT_SNAPSHOT_VERSION} with store snapshot \
         v{SNAPSHOT_VERSION})",
        kind_versions("raft log segment"),
        kind_versions("raft metadata"),
        kind_versions("raft snapshot"),
    );
    let vote = r.vote.map_or_else(
        || "none".into(),
        |v| {
            let granted = if v.committed {
                "granted by a quorum: it led the term"
            } else {
                "not known to be granted"
            };
            format!(
                "term {} for server {} ({granted})",
                thousands(v.term),
                v.node
            )
        },
    );
    let segments = format!(
        "{} segment{}, {}",
        log.segments.len(),
        if log.segments.len() == 1 { "" } else { "s" },
        bytes(log.bytes)
    );
    let range = match (log.first, log.last) {
        (Some(first), Some(last)) => format!(
            "index {} to {} (terms {} to {}), {} entries in {segments}",
            thousands(first.index),
            thousands(last.index),
            thousands(first.term),
            thousands(last.term),
            thousands(log.entries)
        ),
        _ => format!(
            "empty (the next entry is index {}), {segments}",
            thousands(log.next_index)
        ),
    };
    let purged = match log.purged {
        None => "none".into(),
        Some(p) if log.purged_records > 0 => format!(
            "through {} ({} records up to it still on disk, skipped)",
            log_id(p),
            thousands(log.purged_records)
        ),
        Some(p) => format!("through {}", log_id(p)),
    };
    let torn = match &log.torn_tail {
        None => "none".into(),
        Some(t) if t.header => format!(
            "{}: {} bytes, a header cut short (a segment being created, or cut short by a \
             crash: no record in it; the server removes it when it next opens the log)",
            t.file.display(),
            t.bytes
        ),
        Some(t) => format!(
            "{}: {} bytes at offset {} (a record being appended, or cut short by a crash; \
             the server cuts it when it next opens the log)",
            t.file.display(),
            t.bytes,
            thousands(t.offset)
        ),
    };
    let committed = match &r.committed {
        CommittedInfo::Absent => {
            "none recorded (nothing after the snapshot is known to be committed here)".into()
        }
        CommittedInfo::InLog { log_id: l } => log_id(*l),
        CommittedInfo::BeforeLog { log_id: l } => {
            format!(
                "{}, before the log's first entry (the snapshot holds it)",
                log_id(*l)
            )
        }
        CommittedInfo::Ignored { reason } => {
            format!("ignored, as a server ignores it: {reason}")
        }
    };
    let snapshot = r.snapshot.as_ref().map_or_else(
        || "none".into(),
        |s| {
            let at = s.last_log_id.map_or_else(|| "no entry".into(), log_id);
            format!(
                "{at}, {}, {} (store index {}, id {})",
                file_name(&s.file),
                bytes(s.bytes),
                thousands(s.last_applied),
                s.snapshot_id
            )
        },
    );
    let st = &r.state;
    let replayed = format!(
        "{} committed entries after the snapshot{}",
        thousands(st.replayed),
        match st.refused {
            0 => String::new(),
            1 => " (1 command in them refused: a committed no-op)".into(),
            n => format!(
                " ({} commands in them refused: committed no-ops)",
                thousands(n)
            ),
        }
    );
    let mut out = key_values(&[
        ("Data Directory", r.dir.display().to_string()),
        ("Kind", "replicated server (Raft log and snapshots)".into()),
        ("Format", format),
        ("Vote", vote),
        ("Log", range),
        ("Purged", purged),
        ("Torn Tail", torn),
        ("Committed", committed),
        ("Snapshot", snapshot),
        (
            "Last Applied",
            thousands(st.last_applied.map_or(0, |l| l.index)),
        ),
        ("Latest Index", thousands(st.latest_index)),
        (
            "Cluster Format",
            if st.cluster_format > schedstate_raft::OLDEST_CLUSTER_FORMAT {
                format!(
                    "{} (raised: the previous release cannot run on this directory)",
                    st.cluster_format
                )
            } else {
                format!(
                    "{} (a server of the previous release reads it)",
                    st.cluster_format
                )
            },
        ),
        ("Replayed", replayed),
        (
            "Not Committed",
            format!(
                "{} entries after the last applied one (not known to be committed here)",
                thousands(st.not_known_committed)
            ),
        ),
        ("Membership", membership(&st.membership)),
        (
            "Write Keys",
            format!(
                "{} kept (exactly-once writes){}",
                thousands(st.write_keys),
                match st.replays {
                    0 => String::new(),
                    n => format!(
                        "; {} replayed command(s) answered from their key, not applied again",
                        thousands(n)
                    ),
                }
            ),
        ),
    ]);

    if let Some(s) = &r.snapshot {
        out.push_str("\nSnapshot Tables\n");
        out.push_str(&tables_table(&s.tables));
    }
    out.push_str("\nTables\n");
    out.push_str(&tables_table(&st.tables));

    let mut t = table(["Segment", "Format", "First", "Last", "Records", "Size"]);
    for s in &log.segments {
        let index = |i: Option<u64>| i.map_or_else(|| "-".into(), thousands);
        t.add_row(vec![
            file_name(&s.file),
            format!("v{}", s.version),
            index(s.first_index),
            index(s.last_index),
            thousands(s.records),
            bytes(s.bytes),
        ]);
    }
    align_right(&mut t, &[2, 3, 4, 5]);
    out.push_str("\nLog Segments\n");
    out.push_str(&render(&t));

    let kinds: Vec<String> = r.files.iter().map(|f| f.kind.to_string()).collect();
    out.push_str(&files_section(r.files.iter().zip(&kinds).map(
        |(f, kind)| (f.name.as_str(), kind.as_str(), f.bytes, f.version),
    )));
    out
}

/// `inspect` of a server's directory.
pub fn run(args: &InspectArgs) -> Result<(), CliError> {
    let report = inspect_dir(&args.data.dir)?;
    let st = &report.state;
    if args.json {
        let (verify, result) = verify_json(args.verify, &st.snapshot);
        emit_json(&ServerJson {
            kind: "server",
            last_applied: st.last_applied.map_or(0, |l| l.index),
            latest_index: st.latest_index,
            tables: &st.tables,
            report: &report,
            verify,
        })?;
        return result;
    }
    let out = text(&report);
    if args.verify {
        // Print what was found first, so a failure comes with the context.
        emit(&out)?;
        verify(&st.snapshot)?;
        let checked = report.log.segments.len()
            + usize::from(report.snapshot.is_some())
            + usize::from(report.files.iter().any(|f| f.kind == "raft metadata"));
        return emit(&format!(
            "\nVerify: ok (checksums of {checked} file(s) checked while reading; the \
             snapshot's state and the {} entries replayed on it hold every invariant; the \
             state survives a snapshot round trip)\n",
            thousands(st.replayed)
        ));
    }
    emit(&out)
}
