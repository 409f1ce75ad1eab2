//! The client's operator calls: the leader and peers, the Raft configuration and a
//! change to it, a snapshot, the agent's self, regions, metrics and health.

use std::time::Duration;

use hyper::{Method, StatusCode};

use super::{Client, ClientError, Indexed, ReadOptions, request_timeout};
use crate::api::{
    AgentHealth, AgentSelf, AgentStats, PeerChange, PeerChangeDone, RaftConfiguration,
};

impl Client {
    /// `GET /v1/status/leader`: the leader's address, if the server knows one.
    pub async fn leader(&self) -> Result<Option<String>, ClientError> {
        let (s, _): (String, _) = self
            .call_ok(
                Method::GET,
                "/v1/status/leader",
                &[],
                None,
                request_timeout(None),
            )
            .await?;
        Ok((!s.is_empty()).then_some(s))
    }

    /// `GET /v1/status/peers`: the voters' addresses.
    pub async fn peers(&self) -> Result<Vec<String>, ClientError> {
        let r = self
            .get_list::<Vec<String>>("/v1/status/peers", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/operator/raft/configuration`.
    pub async fn raft_configuration(&self) -> Result<RaftConfiguration, ClientError> {
        let r = self
            .get_list::<RaftConfiguration>(
                "/v1/operator/raft/configuration",
                &[],
                ReadOptions::default(),
            )
            .await?;
        Ok(r.value)
    }

    /// `POST /v1/operator/raft/peer`: waits as long as the agent may take to answer
    /// ([`PeerChange::answer_within`]: an added server's catch-up wait and every
    /// step's deadline), so that the answer, not a timeout here, says what happened.
    pub async fn change_peer(&self, change: &PeerChange) -> Result<PeerChangeDone, ClientError> {
        let body = serde_json::to_vec(change).map_err(|e| ClientError::Decode {
            url: self.base.clone(),
            reason: e.to_string(),
        })?;
        self.post_json("/v1/operator/raft/peer", body, Some(change.answer_within()))
            .await
    }

    /// `POST /v1/operator/raft/transfer-leader`: the leader hands over to `to` (or the
    /// most caught-up voter); answers the new leader.
    pub async fn transfer_leader(
        &self,
        to: Option<u64>,
    ) -> Result<crate::api::LeaderTransferred, ClientError> {
        let body = serde_json::to_vec(&crate::api::TransferLeader { to }).map_err(|e| {
            ClientError::Decode {
                url: self.base.clone(),
                reason: e.to_string(),
            }
        })?;
        let within = schedstate_raft::TRANSFER_DEADLINE + Duration::from_secs(10);
        self.post_json("/v1/operator/raft/transfer-leader", body, Some(within))
            .await
    }

    /// `GET /v1/operator/snapshot`: the whole state as a snapshot file (the store's
    /// `SCHEDSNP` format), with the index it holds. Consistent unless `stale`.
    pub async fn snapshot(&self, stale: bool) -> Result<Indexed<Vec<u8>>, ClientError> {
        let query: &[(&str, &str)] = if stale { &[("stale", "")] } else { &[] };
        let (answer, url) = self
            .call(
                Method::GET,
                "/v1/operator/snapshot",
                query,
                None,
                request_timeout(None),
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        Ok(Indexed {
            index: Self::index_of(&answer.headers),
            value: answer.body.to_vec(),
        })
    }

    /// `PUT /v1/operator/snapshot`: restores `file` (a `SCHEDSNP` snapshot, as
    /// [`snapshot`](Self::snapshot) saved it) into every server of the cluster. The
    /// agent checks the whole file first: a bad one is refused (400
    /// `InvalidSnapshot`) and changes nothing. Needs a management token.
    pub async fn snapshot_restore(
        &self,
        file: Vec<u8>,
    ) -> Result<crate::api::SnapshotRestored, ClientError> {
        // Sending, checking and replicating a large file takes longer than a read.
        let within = request_timeout(None) + Duration::from_secs(120);
        let (answer, url) = self
            .call_typed(
                Method::PUT,
                "/v1/operator/snapshot",
                &[],
                Some(file),
                "application/octet-stream",
                within,
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        serde_json::from_slice(&answer.body).map_err(|e| ClientError::Decode {
            url,
            reason: e.to_string(),
        })
    }

    /// `GET /v1/agent/self`: the server's id, leader, term and last applied index.
    /// (Nomad's shape; schedstate's numbers are its `stats.schedstate`, as strings.)
    pub async fn agent_self(&self) -> Result<AgentSelf, ClientError> {
        #[derive(serde::Deserialize)]
        struct Nomad {
            stats: AgentStats,
        }
        let r = self
            .get_list::<Nomad>("/v1/agent/self", &[], ReadOptions::default())
            .await?;
        let section = r.value.stats.get("schedstate").cloned().unwrap_or_default();
        AgentSelf::from_stats(&section).map_err(|e| ClientError::Decode {
            url: format!("{}/v1/agent/self", self.base),
            reason: e.to_string(),
        })
    }

    /// `GET /v1/regions`.
    pub async fn regions(&self) -> Result<Vec<String>, ClientError> {
        let r = self
            .get_list::<Vec<String>>("/v1/regions", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }

    /// `GET /v1/metrics?format=prometheus`: Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let query = [("format", "prometheus")];
        let (answer, url) = self
            .call(
                Method::GET,
                "/v1/metrics",
                &query,
                None,
                request_timeout(None),
                None,
            )
            .await?;
        if answer.status != StatusCode::OK {
            return Err(Self::error(answer, url));
        }
        String::from_utf8(answer.body.to_vec()).map_err(|e| ClientError::Decode {
            url,
            reason: e.to_string(),
        })
    }

    /// `GET /v1/agent/health` (no token needed).
    pub async fn health(&self) -> Result<AgentHealth, ClientError> {
        let r = self
            .get_list::<AgentHealth>("/v1/agent/health", &[], ReadOptions::default())
            .await?;
        Ok(r.value)
    }
}
