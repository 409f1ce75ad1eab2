//! The status commands' reads from a running agent (`--address`): each call one
//! request on a current-thread runtime, its errors one line naming the agent.

use std::future::Future;

use schedstate::model::{
    AllocListStub, Allocation, CsiPlugin, CsiVolume, Job, Node, PluginListStub,
};
use schedstate_agent::{Client, ClientError, ReadOptions};
use schedstate_cli::RemoteReads;
use schedstate_cli::output::{CliError, err};

/// An agent's client with the runtime that runs its calls.
pub struct AgentReads {
    client: Client,
    runtime: tokio::runtime::Runtime,
}

fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// An error of the HTTP client as one line naming the agent.
pub fn agent_error(address: &str, e: &ClientError) -> CliError {
    let what = match e {
        ClientError::Transport { url, cause, .. } => format!("no answer: {cause} ({url})"),
        ClientError::BadAddress { reason, .. } => format!("not a usable address: {reason}"),
        other => other.to_string(),
    };
    err(one_line(&format!("agent {address}: {what}")))
}

/// The current-thread runtime a remote command's calls run on.
pub fn command_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| err(format!("no runtime: {e}")))
}

impl AgentReads {
    /// Reads from the agent `client` talks to (no request is made yet).
    pub fn new(client: Client) -> Result<AgentReads, CliError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(format!("agent {}: no runtime: {e}", client.address())))?;
        Ok(AgentReads { client, runtime })
    }

    /// Runs one client call to its end.
    fn call<T, F>(&self, f: impl FnOnce(Client) -> F) -> Result<T, CliError>
    where
        F: Future<Output = Result<T, ClientError>>,
    {
        self.runtime
            .block_on(f(self.client.clone()))
            .map_err(|e| agent_error(self.client.address(), &e))
    }
}

impl RemoteReads for AgentReads {
    fn plugin_rows(&self) -> Result<Vec<PluginListStub>, CliError> {
        self.call(|c| async move { c.plugins(ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn plugin(&self, id: &str) -> Result<Option<CsiPlugin>, CliError> {
        self.call(|c| async move { c.plugin(id, ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn nodes(&self) -> Result<Vec<Node>, CliError> {
        self.call(|c| async move { c.nodes(ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn node(&self, id: &str) -> Result<Option<Node>, CliError> {
        self.call(|c| async move { c.node(id, ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn allocs_by_node(&self, id: &str) -> Result<Vec<Allocation>, CliError> {
        self.call(|c| async move { c.node_allocations(id, ReadOptions::default()).await })
            .map(|r| r.value.unwrap_or_default())
    }

    fn alloc(&self, id: &str) -> Result<Option<Allocation>, CliError> {
        self.call(|c| async move { c.allocation(id, ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn jobs(&self, namespace: Option<&str>) -> Result<Vec<Job>, CliError> {
        self.call(|c| async move { c.jobs(namespace, ReadOptions::default()).await })
            .map(|r| r.value)
    }

    fn allocs_by_job(&self, namespace: &str, id: &str) -> Result<Vec<AllocListStub>, CliError> {
        self.call(|c| async move {
            c.job_allocations(namespace, id, ReadOptions::default())
                .await
        })
        .map(|r| r.value.unwrap_or_default())
    }

    fn volumes(&self, namespace: Option<&str>) -> Result<Vec<CsiVolume>, CliError> {
        self.call(|c| async move { c.volumes(namespace, None, ReadOptions::default()).await })
            .map(|r| r.value)
    }
}
