//! A volume registered before its plugin's provider is known (docs/rules.md §4.6): the
//! plugin exists only through a job, so the stored provider is `""` — not known yet,
//! never an identity. A later registration once the plugin is fingerprinted stores the
//! provider instead of refusing `"" -> "vendor"`; two known providers that differ are
//! still a change.

use schedstate::model::{CsiPluginType, Job, JobType, Task, TaskCsiPlugin, TaskGroup, id};
use schedstate::state::{Command, StateError};

use crate::support::volumes::*;

const LATE: &str = "late";

/// A service job expecting one node instance of plugin [`LATE`]: the plugin exists
/// from the job's registration, with no fingerprint and so no provider.
fn late_plugin_job() -> Command {
    Command::UpsertJobs {
        jobs: vec![Job {
            job_type: JobType::Service,
            task_groups: vec![TaskGroup {
                name: id("nodes"),
                count: 1,
                tasks: vec![Task {
                    name: id("plugin"),
                    csi_plugin: Some(TaskCsiPlugin {
                        id: id(LATE),
                        plugin_type: CsiPluginType::Node,
                    }),
                }],
            }],
            ..Job::new(NS, "plugin-late")
        }],
    }
}

fn fingerprinted(provider: &str) -> schedstate::model::Node {
    client(
        "n-late",
        &[with_provider(
            &node_fp(LATE, "plug-late", true),
            provider,
            "1.0",
        )],
        &[],
    )
}

#[test]
fn a_provider_unknown_at_registration_is_learned_not_an_identity() {
    let mut h = cluster();
    h.apply(&late_plugin_job());
    h.register(vec![volume_in(NS, "vol-late", LATE)]);
    let first = h.stored("vol-late");
    assert_eq!(&*first.provider, "");

    // The plugin starts: its first fingerprint sets its provider. Registering the
    // volume again is taken, and stores the provider.
    h.upsert_node(fingerprinted("vendor"));
    let index = h.register(vec![volume_in(NS, "vol-late", LATE)]);
    let learned = h.stored("vol-late");
    assert_eq!(&*learned.provider, "vendor");
    assert_eq!(learned.modify_index, index);
    assert_eq!(learned.create_index, first.create_index);
    // Again: nothing changes, nothing is written.
    h.register(vec![volume_in(NS, "vol-late", LATE)]);
    assert_eq!(h.stored("vol-late"), learned);

    // Two known providers that differ are still a change of identity.
    h.upsert_node(fingerprinted("other-vendor"));
    let err = h.reject(&H::register_cmd(vec![volume_in(NS, "vol-late", LATE)]));
    assert!(
        matches!(&err, StateError::VolumeIdentityChanged { field: "provider", old, new, .. }
            if old == "vendor" && new == "other-vendor"),
        "{err:?}"
    );
    assert_eq!(h.stored("vol-late"), learned);
}

#[test]
fn a_known_provider_is_not_replaced_by_an_unknown_one() {
    let mut h = cluster();
    h.apply(&late_plugin_job());
    h.upsert_node(fingerprinted("vendor"));
    h.register(vec![volume_in(NS, "vol-late", LATE)]);
    assert_eq!(&*h.stored("vol-late").provider, "vendor");
    // The plugin's instances go and the plugin is collected; its job brings it back
    // with no provider. A registration then is taken and keeps "vendor".
    h.delete_nodes(&["n-late"]);
    h.apply(&Command::PurgeJobs {
        namespace: id(NS),
        ids: vec![id("plugin-late")],
    });
    h.apply(&late_plugin_job());
    let plugin = h.store.snapshot().view().csi_plugin(LATE).expect("plugin");
    assert_eq!(&*plugin.provider, "");
    let mut renamed = volume_in(NS, "vol-late", LATE);
    renamed.name = "renamed".into();
    h.register(vec![renamed]);
    let stored = h.stored("vol-late");
    assert_eq!(
        (&*stored.provider, stored.name.as_str()),
        ("vendor", "renamed")
    );
}
