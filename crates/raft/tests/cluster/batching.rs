//! The leader's proposer under clients that write again as soon as they are
//! answered (a scheduler's workers, a benchmark's clients): their next writes share
//! one log entry, rather than splitting into groups that take turns.

use schedstate::state::Command;
use schedstate_raft::ServerOptions;

use super::support::*;

const CLIENTS: usize = 8;
const WRITES: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_write_again_at_once_share_one_entry() {
    let cluster = Cluster::start(3, ServerOptions::default()).await;
    let leader = cluster.wait_leader(&[]).await;
    let before = leader.log_stats().entries;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let leader = leader.clone();
            tokio::spawn(async move {
                for seq in 0..WRITES {
                    let nodes = vec![marker_node(&format!("batching-{c}"), seq)];
                    leader
                        .propose(Command::UpsertNodes { nodes })
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    let entries = leader.log_stats().entries - before;
    let commands = CLIENTS as u64 * WRITES;
    // One group: CLIENTS commands per entry, the first few entries aside (the
    // clients start one after the other). Two groups taking turns (the slot freed
    // before the answers) average about half of it; the bound sits between, with room
    // for a busy machine delaying a client past the next entry now and then.
    let per_entry = commands as f64 / entries as f64;
    assert!(
        per_entry >= CLIENTS as f64 * 0.7,
        "{commands} commands in {entries} entries: {per_entry:.2} per entry"
    );
    cluster.shutdown().await;
}
