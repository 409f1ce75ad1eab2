//! `job status`: every job with the CSI plugins it runs, or one job with its task
//! groups, what it expects of each plugin now (its share of the plugin's expected
//! counts), a summary of its allocations by client status, and the allocations.

use std::collections::{BTreeMap, BTreeSet};

use clap::Args;
use schedstate::model::{AllocListStub, ClientStatus, CsiPluginType, Expected, Id, Job};
use serde::Serialize;

use crate::output::{
    CliError, align_right, emit, emit_json, find_one, key_values, ratio, render, serde_name, table,
};
use crate::server_half::ServerHalf;
use crate::source::{Source, SourceArgs};

/// Arguments of `job status`.
#[derive(Debug, Args)]
pub struct JobArgs {
    /// A job id (or a unique prefix of one); without it, every job.
    pub id: Option<String>,
    /// Only this namespace (default: every namespace).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The plugin stanzas of a job: each plugin with the instance types its tasks run.
fn stanzas<'a>(
    groups: impl Iterator<Item = &'a schedstate::model::TaskGroup>,
) -> BTreeMap<Id, BTreeSet<CsiPluginType>> {
    let mut out: BTreeMap<Id, BTreeSet<CsiPluginType>> = BTreeMap::new();
    for g in groups {
        for p in g.tasks.iter().filter_map(|t| t.csi_plugin.as_ref()) {
            out.entry(p.id.clone()).or_default().insert(p.plugin_type);
        }
    }
    out
}

fn types(set: &BTreeSet<CsiPluginType>) -> String {
    set.iter().map(serde_name).collect::<Vec<_>>().join("+")
}

/// `aws-ebs0:controller,nfs:node` (`-` for none).
fn plugin_list(stanzas: &BTreeMap<Id, BTreeSet<CsiPluginType>>) -> String {
    if stanzas.is_empty() {
        return "-".to_string();
    }
    stanzas
        .iter()
        .map(|(id, t)| format!("{id}:{}", types(t)))
        .collect::<Vec<_>>()
        .join(",")
}

/// What the job expects of one plugin now, and the plugin's totals (`--json`).
#[derive(Debug, Serialize)]
struct JobPlugin {
    plugin_id: Id,
    types: Vec<CsiPluginType>,
    /// This job's share of the plugin's expected counts.
    expected: Expected,
    /// The plugin's counts over every job and instance (`None`: no such plugin now).
    plugin: Option<PluginCounts>,
}

#[derive(Debug, Serialize)]
struct PluginCounts {
    controllers_healthy: usize,
    controllers_expected: usize,
    nodes_healthy: usize,
    nodes_expected: usize,
}

/// One allocation of the job (`--json` and the table): a stub with the job version
/// it runs.
#[derive(Debug, Serialize)]
struct JobAlloc {
    id: Id,
    node_id: Id,
    task_group: Id,
    job_version: u64,
    desired_status: schedstate::model::DesiredStatus,
    client_status: ClientStatus,
    create_index: u64,
    modify_index: u64,
}

impl From<&AllocListStub> for JobAlloc {
    fn from(a: &AllocListStub) -> Self {
        JobAlloc {
            id: a.id.clone(),
            node_id: a.node_id.clone(),
            task_group: a.task_group.clone(),
            job_version: a.job_version,
            desired_status: a.desired_status,
            client_status: a.client_status,
            create_index: a.create_index,
            modify_index: a.modify_index,
        }
    }
}

/// One job with what it expects and its allocations (`--json` with an id).
#[derive(Debug, Serialize)]
struct JobDetail<'a> {
    #[serde(flatten)]
    job: &'a Job,
    plugins: Vec<JobPlugin>,
    allocations: Vec<JobAlloc>,
}

/// The client statuses the summary counts, in its column order.
const STATUSES: [ClientStatus; 5] = [
    ClientStatus::Pending,
    ClientStatus::Running,
    ClientStatus::Complete,
    ClientStatus::Failed,
    ClientStatus::Lost,
];

/// `job status [ID] [--namespace NS]`.
pub fn job(args: &JobArgs, server: &dyn ServerHalf) -> Result<(), CliError> {
    let source = Source::open(&args.source, server)?;
    let all = source.jobs(args.namespace.as_deref())?;
    let Some(wanted) = &args.id else {
        if args.json {
            return emit_json(&all);
        }
        return emit(&job_table(&all));
    };
    let job = find_one(&all, wanted, "job", |j: &Job| (&*j.namespace, &*j.id))?;
    let mut plugins = Vec::new();
    for (id, t) in stanzas(job.task_groups.iter()) {
        let found = source.plugin(&id)?;
        plugins.push(JobPlugin {
            expected: found
                .as_ref()
                .map(|p| p.job_expectation(&job.namespace, &job.id))
                .unwrap_or_default(),
            plugin: found.map(|p| PluginCounts {
                controllers_healthy: p.controllers_healthy(),
                controllers_expected: p.controllers_expected(),
                nodes_healthy: p.nodes_healthy(),
                nodes_expected: p.nodes_expected(),
            }),
            plugin_id: id,
            types: t.into_iter().collect(),
        });
    }
    let allocs: Vec<JobAlloc> = source
        .allocs_by_job(&job.namespace, &job.id)?
        .iter()
        .map(JobAlloc::from)
        .collect();
    let detail = JobDetail {
        job,
        plugins,
        allocations: allocs,
    };
    if args.json {
        return emit_json(&detail);
    }
    emit(&job_details(&detail))
}

/// The job table: ID, Namespace, Type, Status, Version and the plugins each runs.
pub fn job_table(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return "No jobs\n".to_string();
    }
    let mut t = table([
        "ID",
        "Namespace",
        "Type",
        "Status",
        "Version",
        "CSI Plugins",
    ]);
    for j in jobs {
        t.add_row(vec![
            j.id.to_string(),
            j.namespace.to_string(),
            j.job_type.as_str().to_string(),
            j.status.as_str().to_string(),
            j.version.to_string(),
            plugin_list(&stanzas(j.task_groups.iter())),
        ]);
    }
    align_right(&mut t, &[4]);
    render(&t)
}

fn job_details(d: &JobDetail<'_>) -> String {
    let j = d.job;
    let mut out = key_values(&[
        ("ID", j.id.to_string()),
        ("Namespace", j.namespace.to_string()),
        ("Type", j.job_type.as_str().to_string()),
        ("Status", j.status.as_str().to_string()),
        ("Version", j.version.to_string()),
        ("Create Index", j.create_index.to_string()),
        ("Modify Index", j.modify_index.to_string()),
        ("Job Modify Index", j.job_modify_index.to_string()),
    ]);

    out.push_str("\nTask Groups\n");
    if j.task_groups.is_empty() {
        out.push_str("No task groups\n");
    } else {
        let mut t = table(["Name", "Count", "Tasks", "CSI Plugins"]);
        for g in &j.task_groups {
            let tasks: Vec<&str> = g.tasks.iter().map(|t| &*t.name).collect();
            t.add_row(vec![
                g.name.to_string(),
                // System and sysbatch jobs place one per eligible node.
                if j.job_type.per_node() {
                    "per-node".to_string()
                } else {
                    g.count.to_string()
                },
                if tasks.is_empty() {
                    "-".to_string()
                } else {
                    tasks.join(",")
                },
                plugin_list(&stanzas(std::iter::once(g))),
            ]);
        }
        out.push_str(&render(&t));
    }

    out.push_str("\nCSI Plugins\n");
    if d.plugins.is_empty() {
        out.push_str("No CSI plugins\n");
    } else {
        // What this job expects of each plugin, beside the plugin's totals over every
        // job that runs it.
        let mut t = table([
            "Plugin ID",
            "Type",
            "Expects Controllers",
            "Expects Nodes",
            "Controllers Healthy/Expected",
            "Nodes Healthy/Expected",
        ]);
        for p in &d.plugins {
            let (controllers, nodes) = match &p.plugin {
                Some(c) => (
                    ratio(c.controllers_healthy, c.controllers_expected),
                    ratio(c.nodes_healthy, c.nodes_expected),
                ),
                None => ("-".to_string(), "-".to_string()),
            };
            t.add_row(vec![
                p.plugin_id.to_string(),
                p.types.iter().map(serde_name).collect::<Vec<_>>().join("+"),
                p.expected.controllers.to_string(),
                p.expected.nodes.to_string(),
                controllers,
                nodes,
            ]);
        }
        align_right(&mut t, &[2, 3]);
        out.push_str(&render(&t));
    }

    out.push_str("\nSummary\n");
    let mut groups: BTreeMap<&str, [usize; STATUSES.len()]> = j
        .task_groups
        .iter()
        .map(|g| (&*g.name, [0; STATUSES.len()]))
        .collect();
    for a in &d.allocations {
        let counts = groups.entry(&a.task_group).or_default();
        if let Some(at) = STATUSES.iter().position(|s| *s == a.client_status) {
            counts[at] += 1;
        }
    }
    if groups.is_empty() {
        out.push_str("No task groups\n");
    } else {
        let mut t = table([
            "Task Group",
            "Pending",
            "Running",
            "Complete",
            "Failed",
            "Lost",
        ]);
        for (name, counts) in &groups {
            let mut row = vec![name.to_string()];
            row.extend(counts.iter().map(usize::to_string));
            t.add_row(row);
        }
        align_right(&mut t, &[1, 2, 3, 4, 5]);
        out.push_str(&render(&t));
    }

    out.push_str("\nAllocations\n");
    if d.allocations.is_empty() {
        out.push_str("No allocations\n");
    } else {
        let mut t = table([
            "ID",
            "Node ID",
            "Task Group",
            "Version",
            "Desired",
            "Status",
            "Created",
            "Modified",
        ]);
        for a in &d.allocations {
            t.add_row(vec![
                a.id.to_string(),
                a.node_id.to_string(),
                a.task_group.to_string(),
                a.job_version.to_string(),
                serde_name(&a.desired_status),
                serde_name(&a.client_status),
                a.create_index.to_string(),
                a.modify_index.to_string(),
            ]);
        }
        align_right(&mut t, &[3, 6, 7]);
        out.push_str(&render(&t));
    }
    out
}
