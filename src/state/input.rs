//! The input rules: what a command may carry at all, whatever the state (docs/rules.md,
//! "Input rules"). They need no state, so a replicated server checks them before it
//! proposes a command — a command that breaks one costs no log entry — and the store
//! checks them again when it applies one, so every path refuses the same way.
//!
//! - **Sizes**: an id (node, alloc, plugin, volume, namespace, job, task group, the
//!   keys of a node's fingerprint maps and of a volume's claim maps) at most
//!   [`MAX_ID_BYTES`]; any other string at most [`MAX_TEXT_BYTES`]; a list in a
//!   command (nodes, allocs, ids, volumes, claims) at most [`MAX_ITEMS`]; a list or map
//!   inside a row (fingerprints, volume requests, mount flags, topologies, capabilities,
//!   secrets, parameters, context, segments, claims) at most [`MAX_ENTRIES`].
//! - **Characters**: no control characters in any string; no whitespace in an id.
//! - **Shape**: the rules of the writes that need no state — a request that must name
//!   something names something (`EmptyRequest`), a row's own id and required fields are
//!   set (`MissingField`), a node's fingerprints are filed where their halves say
//!   (`FingerprintMismatch`, `FingerprintHalves`). Their errors are the ones they always
//!   were; only the place they are checked moved here.
//!
//! Generous for real data — Nomad's ids are 36-character UUIDs, CSI plugin ids and
//! attribute values tens of characters — and small enough that no single command can
//! make a server hold or log megabytes of one name.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    AclScope, AclToken, Allocation, CsiInfo, CsiTopology, CsiVolume, CsiVolumeClaim, Id, Job,
    MAX_DEFINITION_BYTES, Node,
};

use super::command::{Command, CsiVolumeClaimRequest};
use super::error::{Result, StateError};

/// The longest id, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// The longest other string, in bytes.
pub const MAX_TEXT_BYTES: usize = 4096;
/// The most items of one list of a command.
pub const MAX_ITEMS: usize = 100_000;
/// The most entries of one list or map inside a row.
pub const MAX_ENTRIES: usize = 1_024;

fn invalid(field: &str, reason: String) -> StateError {
    StateError::InvalidInput {
        field: field.to_string(),
        reason,
    }
}

/// A string cut for an error message (the whole of a 15 MiB id is not repeated).
fn shown(s: &str) -> String {
    let mut cut: String = s.chars().take(40).collect();
    if cut.len() < s.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// The first control character of `s` (or whitespace, with `no_whitespace`). Every
/// string of every command passes here, on the leader and on every server that applies
/// it, and nearly all are short printable ASCII (ids, names): those are cleared eight
/// bytes at a time (`plainly_printable`); only a string that fails that is looked at
/// byte by byte, or char by char if it is not ASCII. (Against `is_ascii` then a byte
/// search, a perf profile of criterion's `apply_batch` had the input checks at 11.7 %
/// of the batch's samples instead of 13.2 %; most of what is left is reading the
/// strings from memory.)
fn first_bad_char(s: &str, no_whitespace: bool) -> Option<char> {
    let bytes = s.as_bytes();
    if plainly_printable(bytes, no_whitespace) {
        return None;
    }
    if bytes.is_ascii() {
        // ASCII control characters are below 0x20 and 0x7F; ASCII whitespace is the
        // space and controls.
        return bytes
            .iter()
            .find(|&&b| b < 0x20 || b == 0x7f || (no_whitespace && b == b' '))
            .map(|&b| char::from(b));
    }
    s.chars()
        .find(|c| c.is_control() || (no_whitespace && c.is_whitespace()))
}

/// Whether every byte is printable ASCII (0x20–0x7E; without the space, with
/// `no_whitespace`). Tested a word at a time: in `x - 0x2020…`, the least significant
/// byte below 0x20 borrows and shows its high bit (the bytes under it borrow nothing),
/// so a word holding one is never passed; a word may be refused that a closer look
/// passes, which costs only that look.
fn plainly_printable(bytes: &[u8], no_whitespace: bool) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = ONES * 0x80;
    const SPACE: u64 = ONES * 0x20;
    const DEL: u64 = ONES * 0x7f;
    let below = |x: u64, n: u64| x.wrapping_sub(n) & !x & HIGH != 0;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        let x = u64::from_ne_bytes(w);
        if x & HIGH != 0
            || below(x, SPACE)
            || below(x ^ DEL, ONES)
            || (no_whitespace && below(x ^ SPACE, ONES))
        {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && !(no_whitespace && b == b' '))
}

fn id(field: &str, value: &str) -> Result<()> {
    if value.len() > MAX_ID_BYTES {
        return Err(invalid(
            field,
            format!(
                "{} bytes, over the limit of {MAX_ID_BYTES} for an id",
                value.len()
            ),
        ));
    }
    if let Some(c) = first_bad_char(value, true) {
        return Err(invalid(
            field,
            format!(
                "{} holds {c:?}: ids take no control characters or whitespace",
                shown(value)
            ),
        ));
    }
    Ok(())
}

fn text(field: &str, value: &str) -> Result<()> {
    if value.len() > MAX_TEXT_BYTES {
        return Err(invalid(
            field,
            format!("{} bytes, over the limit of {MAX_TEXT_BYTES}", value.len()),
        ));
    }
    if let Some(c) = first_bad_char(value, false) {
        return Err(invalid(
            field,
            format!("{} holds the control character {c:?}", shown(value)),
        ));
    }
    Ok(())
}

fn count(field: &str, n: usize, limit: usize) -> Result<()> {
    if n > limit {
        return Err(invalid(
            field,
            format!("{n} entries, over the limit of {limit}"),
        ));
    }
    Ok(())
}

fn text_map(field: &str, map: &BTreeMap<String, String>) -> Result<()> {
    count(field, map.len(), MAX_ENTRIES)?;
    for (k, v) in map {
        text(field, k)?;
        text(field, v)?;
    }
    Ok(())
}

fn topology(field: &str, t: &CsiTopology) -> Result<()> {
    text_map(field, &t.segments)
}

fn fingerprint(info: &CsiInfo) -> Result<()> {
    id("fingerprint plugin_id", &info.plugin_id)?;
    id("fingerprint alloc_id", &info.alloc_id)?;
    text("fingerprint health_description", &info.health_description)?;
    text("fingerprint provider", &info.provider)?;
    text("fingerprint provider_version", &info.provider_version)?;
    if let Some(n) = &info.node_info {
        text("fingerprint node_info.id", &n.id)?;
        if let Some(t) = &n.accessible_topology {
            topology("fingerprint node_info.accessible_topology", t)?;
        }
    }
    Ok(())
}

fn node(n: &Node) -> Result<()> {
    id("node id", &n.id)?;
    text("node name", &n.name)?;
    for (field, map) in [
        ("node csi_controller_plugins", &n.csi_controller_plugins),
        ("node csi_node_plugins", &n.csi_node_plugins),
    ] {
        count(field, map.len(), MAX_ENTRIES)?;
        for (key, info) in map.iter() {
            id(field, key)?;
            fingerprint(info)?;
        }
    }
    Ok(())
}

fn alloc(a: &Allocation) -> Result<()> {
    id("allocation id", &a.id)?;
    id("allocation namespace", &a.namespace)?;
    id("allocation job_id", &a.job_id)?;
    id("allocation task_group", &a.task_group)?;
    id("allocation node_id", &a.node_id)?;
    count(
        "allocation csi_volume_requests",
        a.csi_volume_requests.len(),
        MAX_ENTRIES,
    )?;
    for r in &a.csi_volume_requests {
        id("allocation csi_volume_requests volume_id", &r.volume_id)?;
    }
    Ok(())
}

fn claim(field: &str, c: &CsiVolumeClaim) -> Result<()> {
    id(field, &c.alloc_id)?;
    id(field, &c.node_id)?;
    text(field, &c.external_node_id)
}

fn claims(field: &str, map: &BTreeMap<Id, CsiVolumeClaim>) -> Result<()> {
    count(field, map.len(), MAX_ENTRIES)?;
    for (k, c) in map {
        id(field, k)?;
        claim(field, c)?;
    }
    Ok(())
}

fn ids(field: &str, set: &BTreeSet<Id>) -> Result<()> {
    count(field, set.len(), MAX_ENTRIES)?;
    set.iter().try_for_each(|i| id(field, i))
}

fn volume(v: &CsiVolume) -> Result<()> {
    id("volume id", &v.id)?;
    id("volume namespace", &v.namespace)?;
    id("volume plugin_id", &v.plugin_id)?;
    text("volume external_id", &v.external_id)?;
    text("volume provider", &v.provider)?;
    text("volume provider_version", &v.provider_version)?;
    text("volume name", &v.name)?;
    count("volume topologies", v.topologies.len(), MAX_ENTRIES)?;
    for t in &v.topologies {
        topology("volume topologies", t)?;
    }
    count(
        "volume requested_capabilities",
        v.requested_capabilities.len(),
        MAX_ENTRIES,
    )?;
    if let Some(m) = &v.mount_options {
        text("volume mount_options fs_type", &m.fs_type)?;
        count(
            "volume mount_options mount_flags",
            m.mount_flags.len(),
            MAX_ENTRIES,
        )?;
        for f in &m.mount_flags {
            text("volume mount_options mount_flags", f)?;
        }
    }
    text_map("volume secrets", &v.secrets)?;
    text_map("volume parameters", &v.parameters)?;
    text_map("volume context", &v.context)?;
    ids("volume read_allocs", &v.read_allocs)?;
    ids("volume write_allocs", &v.write_allocs)?;
    claims("volume read_claims", &v.read_claims)?;
    claims("volume write_claims", &v.write_claims)?;
    claims("volume past_claims", &v.past_claims)
}

fn list<T>(field: &str, items: &[T], each: impl Fn(&T) -> Result<()>) -> Result<()> {
    count(field, items.len(), MAX_ITEMS)?;
    items.iter().try_for_each(each)
}

/// A request that must name at least one thing.
fn some<T>(what: &'static str, items: &[T]) -> Result<()> {
    if items.is_empty() {
        return Err(StateError::EmptyRequest { what });
    }
    Ok(())
}

/// A field that must not be empty.
fn required(what: &'static str, field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(StateError::MissingField { what, field });
    }
    Ok(())
}

/// The rules of a whole node row that need no state: an id, fingerprints filed where
/// their halves say.
fn node_row(n: &Node) -> Result<()> {
    required("node", "id", &n.id)?;
    node(n)?;
    super::nodes::check_fingerprints(n)
}

fn alloc_row(a: &Allocation) -> Result<()> {
    required("allocation", "id", &a.id)?;
    alloc(a)
}

/// The namespace that names every namespace in a read (Nomad's `*`): a job or a
/// volume is never stored in it (docs/rules.md §4.0), or no read or write of one row
/// could name it.
pub const WILDCARD_NAMESPACE: &str = "*";

fn not_wildcard(what: &'static str, namespace: &str) -> Result<()> {
    if namespace == WILDCARD_NAMESPACE {
        return Err(StateError::WildcardNamespace { what });
    }
    Ok(())
}

fn volume_row(v: &CsiVolume) -> Result<()> {
    required("volume", "id", &v.id)?;
    required("volume", "namespace", &v.namespace)?;
    required("volume", "plugin id", &v.plugin_id)?;
    volume(v)
}

/// A job row: namespace and id set; group names unique and set; within a group,
/// task names unique and set; a plugin stanza names a plugin.
fn job_row(j: &Job) -> Result<()> {
    required("job", "namespace", &j.namespace)?;
    required("job", "id", &j.id)?;
    id("job namespace", &j.namespace)?;
    id("job id", &j.id)?;
    count("job task_groups", j.task_groups.len(), MAX_ENTRIES)?;
    if let Some(d) = &j.definition
        && d.len() > MAX_DEFINITION_BYTES
    {
        return Err(invalid(
            "job definition",
            format!(
                "{} bytes, more than the limit of {MAX_DEFINITION_BYTES}",
                d.len()
            ),
        ));
    }
    let mut groups = BTreeSet::new();
    for g in &j.task_groups {
        required("task group", "name", &g.name)?;
        id("job task_groups name", &g.name)?;
        if !groups.insert(&g.name) {
            return Err(invalid(
                "job task_groups name",
                format!("task group {} appears twice", shown(&g.name)),
            ));
        }
        count("job task_groups tasks", g.tasks.len(), MAX_ENTRIES)?;
        let mut tasks = BTreeSet::new();
        for t in &g.tasks {
            required("task", "name", &t.name)?;
            id("job task_groups tasks name", &t.name)?;
            if !tasks.insert(&t.name) {
                return Err(invalid(
                    "job task_groups tasks name",
                    format!(
                        "task {} appears twice in group {}",
                        shown(&t.name),
                        shown(&g.name)
                    ),
                ));
            }
            if let Some(p) = &t.csi_plugin {
                required("csi_plugin stanza", "id", &p.id)?;
                id("job task csi_plugin id", &p.id)?;
            }
        }
    }
    Ok(())
}

/// A token's scopes: one to four.
fn acl_scopes(scopes: &[AclScope]) -> Result<()> {
    if scopes.is_empty() {
        return Err(StateError::InvalidInput {
            field: "token scopes".into(),
            reason: "a token needs at least one scope".into(),
        });
    }
    count("token scopes", scopes.len(), AclScope::ALL.len())
}

/// A token row: an id, a label, one to four scopes, a SHA-256 in lowercase hex.
fn acl_token_row(t: &AclToken) -> Result<()> {
    id("token accessor_id", &t.accessor_id)?;
    text("token name", &t.name)?;
    let bad = |field: &str, reason: &str| {
        Err(StateError::InvalidInput {
            field: field.into(),
            reason: reason.into(),
        })
    };
    acl_scopes(&t.scopes)?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if t.secret_hash.len() != 64 || !t.secret_hash.bytes().all(hex) {
        return bad(
            "token secret_hash",
            "must be a SHA-256 in 64 lowercase hex digits",
        );
    }
    if t.expiration_time.is_some_and(|e| e <= t.create_time) {
        return bad("token expiration_time", "must be after its create_time");
    }
    Ok(())
}

impl Command {
    /// Checks the input rules (the module's doc): sizes and characters, nothing that
    /// needs the state.
    ///
    /// # Errors
    /// [`StateError::InvalidInput`] naming the field and what is wrong with it.
    ///
    /// ```
    /// use schedstate::model::Node;
    /// use schedstate::state::Command;
    ///
    /// let ok = Command::UpsertNode { node: Node::new("node-1", "host-1") };
    /// assert!(ok.check_input().is_ok());
    /// let bad = Command::UpsertNode { node: Node::new("node\n1", "host-1") };
    /// assert_eq!(bad.check_input().unwrap_err().kind(), "InvalidInput");
    /// ```
    pub fn check_input(&self) -> Result<()> {
        self.check_input_as(true)
    }

    /// The input rules; `wildcard` says whether a registration in namespace `*` is
    /// refused — always, but for a command replayed from a log segment of format 1 or
    /// 2, written before the rule existed (such a job or volume may be stored there,
    /// and replay must rebuild the state it made).
    pub(crate) fn check_input_as(&self, wildcard: bool) -> Result<()> {
        if wildcard {
            match self {
                Command::UpsertJobs { jobs } => jobs
                    .iter()
                    .try_for_each(|j| not_wildcard("job", &j.namespace))?,
                Command::RegisterCsiVolumes { volumes } => volumes
                    .iter()
                    .try_for_each(|v| not_wildcard("volume", &v.namespace))?,
                _ => {}
            }
        }
        match self {
            Command::UpsertNode { node: n } => node_row(n),
            Command::UpsertNodes { nodes } => {
                some("upsert nodes", nodes)?;
                list("nodes", nodes, node_row)
            }
            Command::DeleteNodes { ids } => {
                some("delete nodes", ids)?;
                list("ids", ids, |i| id("node id", i))
            }
            Command::UpdateNodeStatus { id: i, .. }
            | Command::UpdateNodeDrain { id: i, .. }
            | Command::UpdateNodeEligibility { id: i, .. } => id("node id", i),
            Command::UpsertAllocs { allocs } => list("allocs", allocs, alloc_row),
            Command::DeleteAllocs { ids } => list("ids", ids, |i| id("allocation id", i)),
            Command::RegisterCsiVolumes { volumes } => {
                some("register volumes", volumes)?;
                list("volumes", volumes, volume_row)
            }
            Command::DeregisterCsiVolumes { namespace, ids, .. } => {
                some("deregister volumes", ids)?;
                id("volume namespace", namespace)?;
                list("ids", ids, |i| id("volume id", i))
            }
            Command::ClaimCsiVolumes { claims } => {
                some("claim volumes", claims)?;
                list("claims", claims, |c: &CsiVolumeClaimRequest| {
                    id("claim namespace", &c.namespace)?;
                    id("claim volume_id", &c.volume_id)?;
                    claim("claim", &c.claim)
                })
            }
            Command::StopAllocs { ids } => {
                some("stop allocations", ids)?;
                list("ids", ids, |i| id("allocation id", i))
            }
            Command::AclBootstrap { token, .. } => acl_token_row(token),
            Command::SetAclSalt { .. } => Ok(()),
            // Never a client's write: only a server's restore proposes them, past
            // these rules (`Server::restore_snapshot`); its state machine checks them.
            Command::StageSnapshotChunk { .. } | Command::RestoreSnapshot { .. } => {
                Err(StateError::ReplicatedOnly {
                    command: self.kind(),
                })
            }
            Command::CreateAclTokens { tokens, .. } => {
                some("create ACL tokens", tokens)?;
                list("tokens", tokens, acl_token_row)
            }
            Command::DeleteAclTokens { accessor_ids } => {
                some("delete ACL tokens", accessor_ids)?;
                list("accessor_ids", accessor_ids, |i| id("accessor id", i))
            }
            Command::UpdateAclToken {
                accessor_id,
                name,
                scopes,
            } => {
                id("token accessor_id", accessor_id)?;
                text("token name", name)?;
                acl_scopes(scopes)
            }
            Command::UpsertJobs { jobs } => {
                some("upsert jobs", jobs)?;
                list("jobs", jobs, job_row)
            }
            Command::StopJobs { namespace, ids } | Command::PurgeJobs { namespace, ids } => {
                some(
                    if matches!(self, Command::StopJobs { .. }) {
                        "stop jobs"
                    } else {
                        "purge jobs"
                    },
                    ids,
                )?;
                required("job", "namespace", namespace)?;
                id("job namespace", namespace)?;
                list("ids", ids, |i| id("job id", i))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_bad_char;
    use proptest::prelude::*;

    proptest! {
        /// Mostly printable ASCII, long enough for several words, with a byte
        /// anywhere that the word test has to catch.
        #[test]
        fn the_word_test_misses_no_byte(s in "[ -~]{0,40}([\\x00-\\x20\\x7f]|[\\x00-\\x7f]|[\\u{80}-\\u{3000}])?[ -~]{0,40}", ws in any::<bool>()) {
            let expected = s.chars().find(|c| c.is_control() || (ws && c.is_whitespace()));
            prop_assert_eq!(first_bad_char(&s, ws), expected);
        }

        /// The same answer as the plain definition, char by char, on any string.
        #[test]
        fn the_one_pass_scan_is_the_char_definition(s in "\\PC{0,8}[\\x00-\\x7f\\u{80}-\\u{3000}]{0,24}", ws in any::<bool>()) {
            let expected = s.chars().find(|c| c.is_control() || (ws && c.is_whitespace()));
            prop_assert_eq!(first_bad_char(&s, ws), expected);
        }
    }

    #[test]
    fn ascii_bytes_and_chars_after_them_are_checked_alike() {
        for (s, in_id, in_text) in [
            ("plain-id_1.2", None, None),
            ("with space", Some(' '), None),
            ("tab\there", Some('\t'), Some('\t')),
            ("del\u{7f}", Some('\u{7f}'), Some('\u{7f}')),
            ("nœud-α", None, None),
            ("c1 control\u{85}", Some(' '), Some('\u{85}')),
            ("nœud\u{85}", Some('\u{85}'), Some('\u{85}')),
            ("line\u{2028}separator", Some('\u{2028}'), None),
            ("ascii then ünicode then\ttab", Some(' '), Some('\t')),
            ("ünicode-then-ascii\u{1}", Some('\u{1}'), Some('\u{1}')),
            ("", None, None),
        ] {
            assert_eq!(first_bad_char(s, true), in_id, "{s:?} as an id");
            assert_eq!(first_bad_char(s, false), in_text, "{s:?} as text");
        }
    }
}
