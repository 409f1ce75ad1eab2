//! What the store's commands need of the server half of the command line: the
//! cluster demo, `inspect` of a replicated server's directory, and reads from a
//! running agent for the status commands. `schedstate-server` implements it with the
//! agent and raft crates; `schedstate` with [`Handoff`](crate::Handoff), which hands
//! the whole command line to `schedstate-server`.

use schedstate::model::{
    AllocListStub, Allocation, CsiPlugin, CsiVolume, Job, Node, PluginListStub,
};

use crate::connect::Credentials;
use crate::demo::DemoArgs;
use crate::inspect::InspectArgs;
use crate::output::CliError;

/// The server cases of the store's commands.
pub trait ServerHalf {
    /// `demo --cluster N`: the demo against `servers` agents started here.
    fn cluster_demo(&self, args: &DemoArgs, servers: usize) -> Result<(), CliError>;

    /// `inspect` of a replicated server's data directory (its Raft log and snapshots).
    fn inspect_server(&self, args: &InspectArgs) -> Result<(), CliError>;

    /// Reads from the agent at `address` with `creds`, for the status commands.
    fn remote(&self, address: &str, creds: &Credentials) -> Result<Box<dyn RemoteReads>, CliError>;
}

/// A running agent's state as the status commands read it: each call one read in the
/// API's shapes, its errors one line naming the agent.
pub trait RemoteReads {
    /// Every plugin's identity and health counts, in id order.
    fn plugin_rows(&self) -> Result<Vec<PluginListStub>, CliError>;
    /// The plugin with exactly this id, its allocations filled in.
    fn plugin(&self, id: &str) -> Result<Option<CsiPlugin>, CliError>;
    /// Every node, in id order.
    fn nodes(&self) -> Result<Vec<Node>, CliError>;
    /// The node with exactly this id.
    fn node(&self, id: &str) -> Result<Option<Node>, CliError>;
    /// The allocations placed on a node, in alloc id order (none for an unknown node).
    fn allocs_by_node(&self, id: &str) -> Result<Vec<Allocation>, CliError>;
    /// The allocation with exactly this (non-empty) id.
    fn alloc(&self, id: &str) -> Result<Option<Allocation>, CliError>;
    /// The jobs of one namespace (of every namespace when `None`), in (namespace, id)
    /// order.
    fn jobs(&self, namespace: Option<&str>) -> Result<Vec<Job>, CliError>;
    /// The allocations of a job, in alloc id order, as stubs (none for an unknown job).
    fn allocs_by_job(&self, namespace: &str, id: &str) -> Result<Vec<AllocListStub>, CliError>;
    /// The volumes of one namespace (of every namespace when `None`), in (namespace,
    /// id) order, denormalized (the agent redacts their secrets).
    fn volumes(&self, namespace: Option<&str>) -> Result<Vec<CsiVolume>, CliError>;
}
