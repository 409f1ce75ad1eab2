//! Where `plugin status`, `volume status`, `node status` and `job status` read from: a data
//! directory (`--data`, loaded read-only as one snapshot) or a running agent over its
//! HTTP API (`--address`, with `--token-file` or `SCHEDSTATE_TOKEN`). Both answer in the API's shapes, so the
//! commands render the same output from either.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args};
use schedstate::model::{
    AllocListStub, Allocation, CsiPlugin, CsiVolume, Job, Node, PluginListStub,
};
use schedstate::state::{StateSnapshot, StateView};

use crate::connect::Credentials;
use crate::output::{CliError, open_read};
use crate::server_half::{RemoteReads, ServerHalf};

/// The data directory read when neither `--data` nor `--address` is given.
pub const DEFAULT_DATA_DIR: &str = "./schedstate-data";

/// Where a status command reads from: `--data DIR` or `--address URL` (with
/// its credentials).
///
/// The two conflict, but not through clap's `conflicts_with`: clap counts a value
/// from the environment as given, so `SCHEDSTATE_ADDR` would make every `--data` a
/// usage error. [`reject_two_sources`] refuses both on the command line;
/// `SourceArgs::target` lets `--data` win over the environment.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// The data directory (snapshot, log segments, lock file) [default:
    /// ./schedstate-data]. Wins over SCHEDSTATE_ADDR from the environment.
    #[arg(id = SOURCE_DATA, long = "data", value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Read from the agent at this address (http://host:port) instead of a data
    /// directory; conflicts with --data.
    #[arg(
        id = SOURCE_ADDRESS,
        long = "address",
        value_name = "URL",
        env = "SCHEDSTATE_ADDR"
    )]
    pub address: Option<String>,
    /// The token and TLS files for the agent (with --address).
    #[command(flatten)]
    pub creds: Credentials,
}

/// The clap id of `--data` in [`SourceArgs`].
const SOURCE_DATA: &str = "source_data";
/// The clap id of `--address` in [`SourceArgs`].
const SOURCE_ADDRESS: &str = "source_address";

/// Exits with clap's usage error (code 2) when the command `matches` describes got
/// both `--data` and `--address` on its command line.
pub fn reject_two_sources(root: &mut clap::Command, matches: &ArgMatches) {
    let mut path = Vec::new();
    let mut m = matches;
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_string());
        m = sub;
    }
    let given = |id: &str| {
        m.ids().any(|i| i.as_str() == id) && m.value_source(id) == Some(ValueSource::CommandLine)
    };
    if !(given(SOURCE_DATA) && given(SOURCE_ADDRESS)) {
        return;
    }
    root.build();
    let mut leaf = root;
    for name in &path {
        leaf = leaf
            .find_subcommand_mut(name)
            .expect("a subcommand just parsed exists");
    }
    leaf.error(
        ErrorKind::ArgumentConflict,
        "the argument '--data <DIR>' cannot be used with '--address <URL>'",
    )
    .exit()
}

/// What `SourceArgs` select, after precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Dir(PathBuf),
    Agent(String),
}

impl SourceArgs {
    /// An explicit `--data` wins (also over an address from `SCHEDSTATE_ADDR`: both on
    /// the command line is a usage error, caught by clap); then an address; then the
    /// default directory. An empty address counts as none.
    fn target(&self) -> Target {
        if let Some(dir) = &self.data {
            return Target::Dir(dir.clone());
        }
        match self.address.as_deref().map(str::trim) {
            Some(a) if !a.is_empty() => Target::Agent(a.to_string()),
            _ => Target::Dir(PathBuf::from(DEFAULT_DATA_DIR)),
        }
    }
}

/// The state the status commands read: one snapshot of a data directory, or an
/// agent (each call one consistent read).
pub enum Source {
    /// A data directory, loaded read-only.
    Local(Box<StateSnapshot>),
    /// An agent, read through the server half.
    Remote(Box<dyn RemoteReads>),
}

/// The plugin list of one state version, in id order.
pub fn plugin_stubs(v: &StateView<'_>) -> Vec<PluginListStub> {
    v.csi_plugins().map(|p| PluginListStub::of(&p)).collect()
}

/// Secrets and mount flags are never printed (the agent redacts them the same way;
/// doing it again is harmless).
fn redacted(mut v: CsiVolume) -> CsiVolume {
    v.redact();
    v
}

impl Source {
    /// Opens what `args` select: the directory with [`open_read`] (taking one
    /// snapshot), or the agent through `server` (no request is made yet).
    pub fn open(args: &SourceArgs, server: &dyn ServerHalf) -> Result<Source, CliError> {
        match args.target() {
            Target::Dir(dir) => {
                let (store, _) = open_read(&dir)?;
                Ok(Source::Local(Box::new(store.snapshot())))
            }
            Target::Agent(address) => Ok(Source::Remote(server.remote(&address, &args.creds)?)),
        }
    }

    /// Every plugin's identity and health counts, in id order.
    pub fn plugin_rows(&self) -> Result<Vec<PluginListStub>, CliError> {
        match self {
            Source::Local(snap) => Ok(plugin_stubs(&snap.view())),
            Source::Remote(agent) => agent.plugin_rows(),
        }
    }

    /// The plugin with exactly this id, its allocations filled in.
    pub fn plugin(&self, id: &str) -> Result<Option<CsiPlugin>, CliError> {
        match self {
            Source::Local(snap) => {
                let v = snap.view();
                Ok(v.csi_plugin(id).map(|p| v.denormalize_csi_plugin(&p)))
            }
            Source::Remote(agent) => agent.plugin(id),
        }
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> Result<Vec<Node>, CliError> {
        match self {
            Source::Local(snap) => Ok(snap.view().nodes().map(|n| (*n).clone()).collect()),
            Source::Remote(agent) => agent.nodes(),
        }
    }

    /// The node with exactly this id.
    pub fn node(&self, id: &str) -> Result<Option<Node>, CliError> {
        match self {
            Source::Local(snap) => Ok(snap.view().node(id).map(|n| (*n).clone())),
            Source::Remote(agent) => agent.node(id),
        }
    }

    /// The allocations placed on a node, in alloc id order (none for an unknown node).
    pub fn allocs_by_node(&self, id: &str) -> Result<Vec<Allocation>, CliError> {
        match self {
            Source::Local(snap) => Ok(snap
                .view()
                .allocs_by_node(id)
                .map(|a| (*a).clone())
                .collect()),
            Source::Remote(agent) => agent.allocs_by_node(id),
        }
    }

    /// The allocation with exactly this id (none for an empty id, as a
    /// garbage-collection claim has).
    pub fn alloc(&self, id: &str) -> Result<Option<Allocation>, CliError> {
        if id.is_empty() {
            return Ok(None);
        }
        match self {
            Source::Local(snap) => Ok(snap.view().alloc(id).map(|a| (*a).clone())),
            Source::Remote(agent) => agent.alloc(id),
        }
    }

    /// The jobs of one namespace (of every namespace when `None`), in (namespace, id)
    /// order.
    pub fn jobs(&self, namespace: Option<&str>) -> Result<Vec<Job>, CliError> {
        match self {
            Source::Local(snap) => {
                let v = snap.view();
                let jobs: Vec<_> = match namespace {
                    Some(ns) => v.jobs_in_namespace(ns).collect(),
                    None => v.jobs().collect(),
                };
                Ok(jobs.into_iter().map(|j| (*j).clone()).collect())
            }
            Source::Remote(agent) => agent.jobs(namespace),
        }
    }

    /// The allocations of a job, in alloc id order, as stubs (none for an unknown
    /// job).
    pub fn allocs_by_job(&self, namespace: &str, id: &str) -> Result<Vec<AllocListStub>, CliError> {
        match self {
            Source::Local(snap) => Ok(snap
                .view()
                .allocs_by_job(namespace, id)
                .map(AllocListStub::new)
                .collect()),
            Source::Remote(agent) => agent.allocs_by_job(namespace, id),
        }
    }

    /// The volumes of one namespace (of every namespace when `None`), in (namespace,
    /// id) order, denormalized, with secrets redacted.
    pub fn volumes(&self, namespace: Option<&str>) -> Result<Vec<CsiVolume>, CliError> {
        let all = match self {
            Source::Local(snap) => {
                let v = snap.view();
                let stored: Vec<_> = match namespace {
                    Some(ns) => v.csi_volumes_by_prefix(ns, "").collect(),
                    None => v.csi_volumes().collect(),
                };
                stored
                    .iter()
                    .map(|vol| v.denormalize_csi_volume(vol))
                    .collect()
            }
            Source::Remote(agent) => agent.volumes(namespace)?,
        };
        Ok(all.into_iter().map(redacted).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(data: Option<&str>, address: Option<&str>) -> SourceArgs {
        SourceArgs {
            data: data.map(PathBuf::from),
            address: address.map(str::to_string),
            creds: Credentials::default(),
        }
    }

    #[test]
    fn data_wins_then_address_then_the_default() {
        assert_eq!(
            args(Some("d"), Some("http://a:1")).target(),
            Target::Dir("d".into())
        );
        assert_eq!(
            args(None, Some(" http://a:1 ")).target(),
            Target::Agent("http://a:1".into())
        );
        assert_eq!(
            args(None, Some("")).target(),
            Target::Dir(DEFAULT_DATA_DIR.into())
        );
        assert_eq!(
            args(None, None).target(),
            Target::Dir(DEFAULT_DATA_DIR.into())
        );
    }
}
