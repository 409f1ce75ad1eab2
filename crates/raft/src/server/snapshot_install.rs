//! A snapshot received from a leader, chunk by chunk (`SnapshotReceiver`), checked
//! in a scratch store off the runtime, then installed through openraft with this
//! server's elections held off until the leader has reached it again.

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::{Snapshot, Vote};

use super::Server;
use crate::inbound::RpcRefused;
use crate::snapshot_receiver::{CheckedSnapshot, Received, check_snapshot};
use crate::{NodeId, TypeConfig};

impl Server {
    /// Takes one chunk of a snapshot from a leader whose vote is at least `my_vote`
    /// (older ones are answered with this server's vote, as openraft answers them);
    /// on the last one, checks the whole snapshot and installs it.
    pub(crate) async fn receive_snapshot_chunk(
        &self,
        my_vote: Vote<NodeId>,
        rpc: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
        RpcRefused,
    > {
        let current = InstallSnapshotResponse { vote: my_vote };
        if rpc.vote < my_vote {
            return Ok(Ok(current));
        }
        let received = self
            .inner
            .receiver
            .lock()
            .accept(rpc, self.inner.max_snapshot_bytes)?;
        let (vote, meta, bytes) = match received {
            Received::More => return Ok(Ok(current)),
            Received::Mismatch(e) => return Ok(Err(RaftError::APIError(e))),
            Received::Done { vote, meta, bytes } => (vote, meta, bytes),
        };
        // A server limited to an older format refuses a snapshot it could not read,
        // as a server of that release would.
        let format = if self.max_format() < crate::NEWEST_FORMAT {
            crate::snapshot_file::decode(std::path::Path::new("<received snapshot>"), &bytes)
                .map_or(0, |d| crate::snapshot_file::stream_format(d.body))
        } else {
            0
        };
        if format > self.max_format() {
            return Err(RpcRefused::Snapshot(format!(
                "the snapshot's store stream is version {format}; this server reads at most {}",
                self.max_format()
            )));
        }
        // Decoding and restoring a large snapshot takes a while: off the runtime.
        let checked = tokio::task::spawn_blocking(move || {
            check_snapshot(&meta, &bytes).map(|state| (meta, bytes, state))
        })
        .await
        .map_err(|e| RpcRefused::Snapshot(format!("checking the snapshot: {e}")))?;
        let (meta, bytes, state) = checked?;
        // The state machine installs the checked state itself (same metadata), not
        // a second decode of the bytes.
        *self.inner.checked.lock() = Some(CheckedSnapshot {
            meta: meta.clone(),
            state,
        });
        let snapshot = Snapshot {
            meta,
            snapshot: Box::new(std::io::Cursor::new(bytes)),
        };
        // The leader's replication to this server waits for this answer, so no
        // heartbeat arrives while the snapshot is installed (its file written
        // durably); and the snapshot's membership may name this server a voter (it
        // was, when the snapshot was built). Left alone, the election timer runs out
        // meanwhile and the server stands as soon as it is a voter, with terms that
        // depose a healthy leader. It does not stand until an election timeout after
        // the install, by when the leader's next append has reached it.
        // A guard: released however this ends, the answer sent or this future
        // dropped (the caller gone).
        let hold = ElectionHold::take(self);
        let installed = self.inner.raft.install_full_snapshot(vote, snapshot).await;
        drop(hold);
        match installed {
            Ok(r) => Ok(Ok(InstallSnapshotResponse { vote: r.vote })),
            Err(fatal) => Ok(Err(RaftError::Fatal(fatal))),
        }
    }
}

/// Keeps a server from standing for election while a received snapshot installs;
/// dropped, lets its election timer start again from then (a full lease plus an
/// election timeout before it may ask to stand, by when the leader has reached it).
struct ElectionHold {
    server: Server,
}

impl ElectionHold {
    fn take(server: &Server) -> ElectionHold {
        server.inner.elections.hold();
        ElectionHold {
            server: server.clone(),
        }
    }
}

impl Drop for ElectionHold {
    fn drop(&mut self) {
        self.server.inner.elections.release();
    }
}
