//! `plugin status` and `node status`: tables of all, or one row's details.
//! (`volume status` is in `volume_status.rs`.)

use std::sync::Arc;

use clap::Args;
use schedstate::model::PluginListStub;
use schedstate::model::{AllocListStub, Allocation, CsiInfo, CsiPlugin, Id, Node};
use serde::Serialize;

use crate::output::{
    CliError, align_right, emit, emit_json, key_values, ratio, render, resolve_id, serde_name,
    table,
};
use crate::server_half::ServerHalf;
use crate::source::{Source, SourceArgs};

/// Arguments of `plugin status`.
#[derive(Debug, Args)]
pub struct PluginArgs {
    /// A plugin id (or a unique prefix of one); without it, every plugin.
    pub id: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `node status`.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// A node id (or a unique prefix of one); without it, every node.
    pub id: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One plugin with its instances and allocations (`--json` with an id).
#[derive(Debug, Serialize)]
struct PluginDetail<'a> {
    #[serde(flatten)]
    plugin: &'a CsiPlugin,
    controllers_healthy: usize,
    controllers_expected: usize,
    nodes_healthy: usize,
    nodes_expected: usize,
}

/// The plugin table: ID, Provider, Controllers and Nodes healthy/expected.
pub fn plugin_table(rows: &[PluginListStub]) -> String {
    if rows.is_empty() {
        return "No CSI plugins\n".to_string();
    }
    let mut t = table([
        "ID",
        "Provider",
        "Controllers Healthy/Expected",
        "Nodes Healthy/Expected",
    ]);
    for p in rows {
        t.add_row(vec![
            p.id.clone(),
            p.provider.to_string(),
            ratio(p.controllers_healthy, p.controllers_expected),
            ratio(p.nodes_healthy, p.nodes_expected),
        ]);
    }
    render(&t)
}

/// `plugin status [ID]`.
pub fn plugin(args: &PluginArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    let source = Source::open(&args.source, server)?;
    let rows = source.plugin_rows()?;
    let Some(wanted) = &args.id else {
        if args.json {
            return emit_json(&rows);
        }
        return emit(&plugin_table(&rows));
    };
    let id = resolve_id("plugin", wanted, rows.iter().map(|p| p.id.as_str()))?;
    let p = source
        .plugin(&id)?
        .ok_or_else(|| crate::output::err(format!("plugin {id:?} not found")))?;
    if args.json {
        return emit_json(&PluginDetail {
            plugin: &p,
            controllers_healthy: p.controllers_healthy(),
            controllers_expected: p.controllers_expected(),
            nodes_healthy: p.nodes_healthy(),
            nodes_expected: p.nodes_expected(),
        });
    }
    let mut out = key_values(&[
        ("ID", p.id.to_string()),
        ("Provider", p.provider.to_string()),
        ("Version", p.version.to_string()),
        ("Controller Required", p.controller_required.to_string()),
        ("Controllers Healthy", p.controllers_healthy().to_string()),
        ("Controllers Expected", p.controllers_expected().to_string()),
        ("Nodes Healthy", p.nodes_healthy().to_string()),
        ("Nodes Expected", p.nodes_expected().to_string()),
        ("Create Index", p.create_index.to_string()),
        ("Modify Index", p.modify_index.to_string()),
    ]);
    let unhealthy: Vec<(&str, &Id, &Arc<CsiInfo>)> = p
        .controllers
        .iter()
        .map(|(n, i)| ("controller", n, i))
        .chain(p.nodes.iter().map(|(n, i)| ("node", n, i)))
        .filter(|(_, _, i)| !i.healthy)
        .collect();
    if !unhealthy.is_empty() {
        let mut t = table(["Node ID", "Kind", "Alloc ID", "Description"]);
        for (kind, node, info) in unhealthy {
            t.add_row(vec![
                node.to_string(),
                kind.to_string(),
                info.alloc_id.to_string(),
                info.health_description.to_string(),
            ]);
        }
        out.push_str("\nUnhealthy Instances\n");
        out.push_str(&render(&t));
    }
    out.push_str("\nJobs\n");
    out.push_str(&plugin_jobs_table(&p));
    out.push_str("\nAllocations\n");
    out.push_str(&alloc_stub_table(&p.allocations));
    emit(&out)
}

/// The live jobs that expect instances of the plugin, and how many each expects:
/// the plugin's expected counts are these sums.
fn plugin_jobs_table(p: &CsiPlugin) -> String {
    if p.jobs.is_empty() {
        return "No jobs expect instances\n".to_string();
    }
    let mut t = table([
        "Job ID",
        "Namespace",
        "Controllers Expected",
        "Nodes Expected",
    ]);
    for j in &p.jobs {
        t.add_row(vec![
            j.job_id.to_string(),
            j.namespace.to_string(),
            j.expected.controllers.to_string(),
            j.expected.nodes.to_string(),
        ]);
    }
    align_right(&mut t, &[2, 3]);
    render(&t)
}

fn alloc_stub_table(allocs: &[AllocListStub]) -> String {
    if allocs.is_empty() {
        return "No allocations\n".to_string();
    }
    let mut t = table([
        "ID",
        "Node ID",
        "Job ID",
        "Task Group",
        "Desired",
        "Status",
        "Created",
        "Modified",
    ]);
    for a in allocs {
        t.add_row(vec![
            a.id.to_string(),
            a.node_id.to_string(),
            a.job_id.to_string(),
            a.task_group.to_string(),
            serde_name(&a.desired_status),
            serde_name(&a.client_status),
            a.create_index.to_string(),
            a.modify_index.to_string(),
        ]);
    }
    align_right(&mut t, &[6, 7]);
    render(&t)
}

fn eligibility(n: &Node) -> &'static str {
    if n.eligible { "eligible" } else { "ineligible" }
}

/// `id,id(unhealthy),…` of one fingerprint map.
fn fingerprint_list<'a>(map: impl Iterator<Item = (&'a Id, &'a Arc<CsiInfo>)>) -> String {
    let items: Vec<String> = map
        .map(|(id, info)| {
            if info.healthy {
                id.to_string()
            } else {
                format!("{id}(unhealthy)")
            }
        })
        .collect();
    if items.is_empty() {
        "-".to_string()
    } else {
        items.join(",")
    }
}

/// `node status [ID]`.
pub fn node(args: &NodeArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    let source = Source::open(&args.source, server)?;
    let nodes = source.nodes()?;
    let Some(wanted) = &args.id else {
        if args.json {
            return emit_json(&nodes);
        }
        if nodes.is_empty() {
            return emit("No nodes\n");
        }
        let mut t = table([
            "ID",
            "Name",
            "Status",
            "Drain",
            "Eligibility",
            "CSI Controllers",
            "CSI Nodes",
        ]);
        for n in &nodes {
            t.add_row(vec![
                n.id.to_string(),
                n.name.clone(),
                serde_name(&n.status),
                n.drain.to_string(),
                eligibility(n).to_string(),
                fingerprint_list(n.csi_controller_plugins.iter()),
                fingerprint_list(n.csi_node_plugins.iter()),
            ]);
        }
        return emit(&render(&t));
    };
    let id = resolve_id("node", wanted, nodes.iter().map(|n| &*n.id))?;
    let n = source
        .node(&id)?
        .ok_or_else(|| crate::output::err(format!("node {id:?} not found")))?;
    if args.json {
        return emit_json(&n);
    }
    let mut out = key_values(&[
        ("ID", n.id.to_string()),
        ("Name", n.name.clone()),
        ("Status", serde_name(&n.status)),
        ("Drain", n.drain.to_string()),
        ("Eligibility", eligibility(&n).to_string()),
        ("Create Index", n.create_index.to_string()),
        ("Modify Index", n.modify_index.to_string()),
    ]);
    out.push_str("\nCSI Plugins\n");
    let fps: Vec<(&str, &Arc<CsiInfo>)> = n
        .csi_controller_plugins
        .values()
        .map(|i| ("controller", i))
        .chain(n.csi_node_plugins.values().map(|i| ("node", i)))
        .collect();
    if fps.is_empty() {
        out.push_str("No CSI plugins\n");
    } else {
        let mut t = table([
            "Plugin ID",
            "Kind",
            "Healthy",
            "Provider",
            "Version",
            "Alloc ID",
            "Description",
        ]);
        for (kind, i) in fps {
            t.add_row(vec![
                i.plugin_id.to_string(),
                kind.to_string(),
                i.healthy.to_string(),
                i.provider.to_string(),
                i.provider_version.to_string(),
                i.alloc_id.to_string(),
                i.health_description.to_string(),
            ]);
        }
        out.push_str(&render(&t));
    }
    out.push_str("\nAllocations\n");
    let allocs: Vec<Allocation> = source.allocs_by_node(&n.id)?;
    if allocs.is_empty() {
        out.push_str("No allocations\n");
    } else {
        let mut t = table(["ID", "Job ID", "Task Group", "Desired", "Status", "Volumes"]);
        for a in &allocs {
            let vols: Vec<String> = a
                .csi_volume_requests
                .iter()
                .map(|r| r.volume_id.to_string())
                .collect();
            t.add_row(vec![
                a.id.to_string(),
                a.job_id.to_string(),
                a.task_group.to_string(),
                serde_name(&a.desired_status),
                serde_name(&a.client_status),
                if vols.is_empty() {
                    "-".into()
                } else {
                    vols.join(",")
                },
            ]);
        }
        out.push_str(&render(&t));
    }
    emit(&out)
}
