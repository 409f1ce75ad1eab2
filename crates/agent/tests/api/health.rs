//! A server whose Raft stops for good (here: its log's fsync fails, as on a dying
//! disk) must not look alive: it refuses every request and says why, and
//! [`Agent::failed`](schedstate_agent::Agent::failed) tells its process to exit.

use std::time::Duration;

use schedstate::persist::faults::{FaultKind, Faults, Op};

use super::{error_of, upsert};
use crate::support::Agents;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_raft_stopped_refuses_everything_and_says_so() {
    let agents = Agents::start(1, None).await;
    let client = agents.client(0);
    client.apply(&upsert("n1", "ebs")).await.unwrap();
    let dir = agents.agents[0]
        .as_ref()
        .unwrap()
        .server()
        .dir()
        .to_path_buf();
    let faults = Faults::scope(&dir);
    faults.fail_from(Op::Sync, 1, FaultKind::Io);
    // This write's fsync fails: Raft's core stops with a storage error.
    let write =
        tokio::time::timeout(Duration::from_secs(40), client.apply(&upsert("n2", "ebs"))).await;
    assert!(
        !matches!(write, Ok(Ok(_))),
        "a write acknowledged without its fsync"
    );
    let agent = agents.agents[0].as_ref().unwrap();
    let why = tokio::time::timeout(Duration::from_secs(30), agent.failed())
        .await
        .expect("the agent reports Raft's stop");
    assert!(!why.is_empty());
    let http = crate::support::http();
    for path in ["/v1/status/leader", "/v1/nodes?stale", "/v1/agent/self"] {
        let (status, e) = error_of(http.get(agents.url(0, path)).send().await.unwrap()).await;
        assert_eq!((status, e.kind.as_str()), (503, "Stopped"), "{path}");
    }
    faults.clear();
    agents.shutdown().await;
}
