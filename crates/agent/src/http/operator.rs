//! Status and operations: the leader and peers, the Raft configuration, a snapshot of
//! the state (streamed), metrics, this agent's own status. (Changes to the
//! configuration are `peers.rs`.)

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::query::Checked;
use super::{AppState, json, with_index};
use std::collections::BTreeMap;

use crate::api::{AgentStats, NomadStats, RaftConfiguration, RaftServer, SnapshotRestored};
use schedstate_raft::RestoreError;

use super::body::{BodyRule, ClientBody, read_body};

pub(crate) async fn leader(State(st): State<AppState>) -> Response {
    let addr = st
        .server
        .leader_node()
        .await
        .map(|(_, a)| a)
        .unwrap_or_default();
    json(&st, StatusCode::OK, st.server.last_applied(), &addr, false)
}

pub(crate) async fn peers(State(st): State<AppState>) -> Response {
    let (nodes, voters) = st.server.members();
    let addrs: Vec<&String> = voters.iter().filter_map(|id| nodes.get(id)).collect();
    json(&st, StatusCode::OK, st.server.last_applied(), &addrs, false)
}

pub(crate) async fn raft_configuration(
    State(st): State<AppState>,
    Checked(p): Checked,
) -> Response {
    let (nodes, voters) = st.server.members();
    let leader = st.server.leader();
    let index = st
        .server
        .raft()
        .metrics()
        .borrow()
        .membership_config
        .log_id()
        .map_or(0, |l| l.index);
    let config = RaftConfiguration {
        index,
        servers: nodes
            .into_iter()
            .map(|(id, address)| RaftServer {
                id,
                address,
                leader: leader == Some(id),
                voter: voters.contains(&id),
            })
            .collect(),
    };
    json(&st, StatusCode::OK, index, &config, p.pretty)
}

/// The size of one piece of a streamed snapshot.
const SNAPSHOT_CHUNK: usize = 64 << 10;

/// Pieces of a snapshot written ahead of a slow reader: the memory one download
/// holds beyond the (shared, O(1)) version of the state it writes.
const SNAPSHOT_CHUNKS_AHEAD: usize = 4;

/// Hands what the snapshot writer writes to the response, a piece at a time.
struct ChannelWriter {
    piece: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
}

impl ChannelWriter {
    fn send_piece(&mut self) -> std::io::Result<()> {
        if self.piece.is_empty() {
            return Ok(());
        }
        let piece = std::mem::replace(&mut self.piece, Vec::with_capacity(SNAPSHOT_CHUNK));
        self.tx
            .blocking_send(Ok(Bytes::from(piece)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let room = SNAPSHOT_CHUNK - self.piece.len();
        let n = buf.len().min(room);
        self.piece.extend_from_slice(&buf[..n]);
        if self.piece.len() == SNAPSHOT_CHUNK {
            self.send_piece()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send_piece()
    }
}

/// `GET /v1/operator/snapshot`: the state as a SCHEDSNP file, streamed from one O(1)
/// version of the state while it is written (a slow reader holds a few pieces, never a
/// copy of the whole). At most `snapshot_downloads` run at once (429 beyond).
pub(crate) async fn snapshot(State(st): State<AppState>, _: Checked) -> Response {
    let permit = match st.gates.snapshot_download() {
        Ok(p) => p,
        Err(r) => return ApiError::too_many(r.message(&st.limits)).into_response(),
    };
    // The consistency layer made this consistent (or it is stale by request).
    let snap = st.server.read_stale();
    let index = snap.view().last_applied();
    let (tx, rx) = tokio::sync::mpsc::channel(SNAPSHOT_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut out = ChannelWriter {
            piece: Vec::with_capacity(SNAPSHOT_CHUNK),
            tx: tx.clone(),
        };
        let written = snap
            .write_to(&mut out)
            .map_err(std::io::Error::other)
            .and_then(|_| std::io::Write::flush(&mut out));
        if let Err(e) = written {
            // The body ends with an error: the client sees a cut answer, and the
            // file's checksums refuse it.
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                tracing::warn!(error = %e, "writing a snapshot download failed");
                let _ = tx.blocking_send(Err(e));
            }
        }
    });
    let pieces = futures_util::stream::unfold((rx, permit), |(mut rx, permit)| async move {
        rx.recv().await.map(|piece| (piece, (rx, permit)))
    });
    let mut resp = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(pieces),
    )
        .into_response();
    with_index(&st, &mut resp, index);
    resp
}

/// The content type of a snapshot file sent to `PUT /v1/operator/snapshot`.
pub(super) const SNAPSHOT_TYPE: &str = "application/octet-stream";

/// `PUT` (or `POST`) `/v1/operator/snapshot`: restores the snapshot file in the body
/// into the whole cluster (`schedstate_raft::Server::restore_snapshot`), on the leader
/// (a follower's consistency layer proxies it there). The body is read under
/// [`Limits::snapshot_restore_bytes`](crate::Limits::snapshot_restore_bytes) and the
/// clients' body budgets (413, 429); the file is checked entirely before anything
/// is proposed: a bad one is 400 `InvalidSnapshot` and changes nothing.
pub(crate) async fn restore(
    State(st): State<AppState>,
    Checked(p): Checked,
    headers: HeaderMap,
    body: ClientBody,
) -> Response {
    let rule = BodyRule {
        limit: st.limits.snapshot_restore_bytes,
        content_type: SNAPSHOT_TYPE,
    };
    let read = match read_body(&st, &headers, body, &rule).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let file: std::sync::Arc<[u8]> = std::sync::Arc::from(&read.bytes[..]);
    drop(read);
    match st.server.restore_snapshot(file).await {
        Ok(done) => {
            let body = SnapshotRestored {
                index: done.index,
                bytes: done.bytes,
                pieces: done.pieces,
            };
            json(&st, StatusCode::OK, done.index, &body, p.pretty)
        }
        Err(e @ RestoreError::Invalid(_)) => {
            ApiError::new(StatusCode::BAD_REQUEST, "InvalidSnapshot", e.to_string()).into_response()
        }
        Err(e @ RestoreError::TooLarge { .. }) => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "TooLarge", e.to_string()).into_response()
        }
        Err(e @ RestoreError::Busy) => {
            ApiError::new(StatusCode::CONFLICT, "RestoreInProgress", e.to_string()).into_response()
        }
        Err(RestoreError::Propose(e)) => ApiError::from(e).into_response(),
    }
}

/// `GET /v1/metrics`: JSON as Nomad answers it (`Gauges`, `Counters`, `Samples`),
/// Prometheus text with `?format=prometheus`.
pub(crate) async fn metrics(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let text = st.metrics.render(&st.server);
    if p.format.as_deref() == Some("prometheus") {
        return (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response();
    }
    let summary = crate::metrics::as_nomad_json(&text);
    json(
        &st,
        StatusCode::OK,
        st.server.last_applied(),
        &summary,
        p.pretty,
    )
}

/// `GET /v1/agent/self` in Nomad's shape (`config`, `member`, `stats`). `stats` is
/// Go's `map[string]map[string]string`: Nomad's `nomad` and `raft` sections, and this
/// server's own numbers under `schedstate` — every value a string.
pub(crate) async fn agent_self(State(st): State<AppState>, Checked(p): Checked) -> Response {
    let me = st.agent_self();
    let members = st.server.members().0;
    let addr = members.get(&me.id).cloned().unwrap_or_default();
    let (host, port) = addr
        .rsplit_once(':')
        .map_or((addr.as_str(), 0), |(h, p)| (h, p.parse().unwrap_or(0)));
    let name = format!("server-{}.{}", me.id, st.region);
    let state = if me.leader == Some(me.id) {
        "Leader"
    } else if me.leader.is_some() {
        "Follower"
    } else {
        "Candidate"
    };
    let nomad = NomadStats {
        leader: me.leader == Some(me.id),
        leader_addr: me
            .leader
            .and_then(|l| members.get(&l).cloned())
            .unwrap_or_default(),
        bootstrap: false,
        known_regions: 1,
    };
    let raft = BTreeMap::from([
        ("state".to_string(), state.to_string()),
        ("term".to_string(), me.term.to_string()),
        ("applied_index".to_string(), me.last_applied.to_string()),
    ]);
    let stats: AgentStats = BTreeMap::from([
        ("nomad".to_string(), nomad.to_stats()),
        ("raft".to_string(), raft),
        ("schedstate".to_string(), {
            // Rolling upgrades: the newest store format this server reads and the
            // cluster's (raised once every server reads it).
            let mut own = me.to_stats();
            own.insert("store_format".into(), st.server.max_format().to_string());
            own.insert(
                "cluster_format".into(),
                st.server.cluster_format().to_string(),
            );
            own
        }),
    ]);
    let body = serde_json::json!({
        "config": {
            "Region": st.region,
            "NodeName": format!("server-{}", me.id),
            "Server": {"Enabled": true},
            "Client": {"Enabled": false},
            "ACL": {"Enabled": st.acl},
            "TLSConfig": {"EnableHTTP": st.tls.is_some(), "EnableRPC": st.tls.is_some()},
            "Version": {"Version": env!("CARGO_PKG_VERSION"), "VersionMetadata": "schedstate"},
        },
        "member": {
            "Name": name,
            "Addr": host.trim_start_matches('[').trim_end_matches(']'),
            "Port": port,
            "Status": "alive",
            "Tags": {
                "region": st.region,
                "role": "nomad",
                "id": me.id.to_string(),
                "build": env!("CARGO_PKG_VERSION"),
            },
        },
        "stats": stats,
    });
    json(&st, StatusCode::OK, me.last_applied, &body, p.pretty)
}

/// `GET /v1/regions`: the one region this cluster serves.
pub(crate) async fn regions(State(st): State<AppState>) -> Response {
    json(
        &st,
        StatusCode::OK,
        st.server.last_applied(),
        &[&st.region],
        false,
    )
}

/// `GET /v1/agent/health` (no token): the server answers; whether it is fresh, for
/// the peers forming a new cluster.
pub(crate) async fn health(State(st): State<AppState>) -> Response {
    let health = crate::api::AgentHealth {
        server: crate::api::HealthStatus {
            ok: true,
            message: "ok".into(),
            fresh: st.is_fresh(),
        },
    };
    json(
        &st,
        StatusCode::OK,
        st.server.last_applied(),
        &health,
        false,
    )
}
