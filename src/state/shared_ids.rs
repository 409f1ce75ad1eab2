//! One copy of each repeated id string among the rows a command writes.
//!
//! A row decoded from a command (a Raft entry, the write-ahead log, an HTTP body)
//! carries its own copy of every string in it. The allocations of one plan share a
//! namespace, a few jobs and task groups and one node id per node, yet a thousand of
//! them arrive as five thousand separate heap strings, and every replica keeps them
//! all: in the replicated benchmark's preload they were a fifth of the heap. An [`Id`]
//! is a shared string, so a row can point at a copy another row already holds.
//!
//! Sharing changes no value, only which heap copy a row points at: nothing a read,
//! an index or a snapshot sees depends on it, so replicas need not share alike.
//! Where a copy comes from, cheapest first:
//! - the row this write replaces (an update of an allocation names the same job,
//!   group and node as before);
//! - an earlier row of the same command ([`SharedIds`], only for commands with more
//!   than one row: a set per field and command, dropped at its end, so nothing is
//!   kept alive past the rows that use it);
//! - for a node id, the node's own row; for a new node's id, an allocation's placed
//!   on it; for a job id, an allocation's of the same job or the job's row; for a
//!   fingerprint's allocation id, the allocation's row.
//!
//! A node row written again (a client re-registering) likewise keeps its stored id
//! and every fingerprint identical to the stored one ([`reuse_node_parts`]), and a
//! fingerprint's vendor name and version point at its plugin's row's copies
//! ([`share_fingerprint_strings`]): every node reports the same few of them.

use std::collections::HashSet;
use std::sync::Arc;

use crate::model::{Allocation, CsiInfo, Fingerprints, Id, Node};

/// The distinct values of one field seen so far in one command.
#[derive(Default)]
pub(crate) struct SharedIds {
    /// The previous row's value: rows of one plan or one node mostly repeat it, and a
    /// comparison with it is cheaper than a hash.
    last: Option<Id>,
    /// Seeded per process (foldhash's `RandomState`): the ids come from commands, so a
    /// fixed hash would let a crafted command make every insert collide.
    seen: HashSet<Id, foldhash::fast::RandomState>,
}

impl SharedIds {
    /// Points `id` at the first equal id this set saw, or remembers it. Returns
    /// whether an earlier copy was found.
    pub(crate) fn share(&mut self, id: &mut Id) -> bool {
        self.share_or(id, |_| None)
    }

    /// As [`share`](Self::share), but an id this set has not seen is first offered
    /// to `elsewhere`, whose copy (if any) the set then remembers.
    pub(crate) fn share_or(
        &mut self,
        id: &mut Id,
        elsewhere: impl FnOnce(&Id) -> Option<Id>,
    ) -> bool {
        // Already the same copy: nothing to do, and no reference count touched (the
        // rows of one command often share their strings already, e.g. a plan built
        // in memory and applied without a decode).
        if let Some(last) = &self.last {
            if Id::ptr_eq(last, id) {
                return true;
            }
            if last == id {
                *id = last.clone();
                return true;
            }
        }
        let found = match self.seen.get(id) {
            Some(first) => {
                if !Id::ptr_eq(first, id) {
                    *id = first.clone();
                }
                true
            }
            None => {
                if let Some(copy) = elsewhere(id) {
                    *id = copy;
                }
                self.seen.insert(id.clone());
                false
            }
        };
        self.last = Some(id.clone());
        found
    }
}

/// The sets of one command (or one restore) for the ids allocations repeat.
#[derive(Default)]
pub(crate) struct AllocIds {
    namespaces: SharedIds,
    jobs: SharedIds,
    groups: SharedIds,
    nodes: SharedIds,
}

impl AllocIds {
    /// Points the allocation's namespace and task group at an earlier row's copy,
    /// its job id at an earlier row's or else at `job_row`'s (given the namespace and
    /// the job id), and its node id at an earlier row's or else at `node_row`'s.
    pub(crate) fn share(
        &mut self,
        alloc: &mut Allocation,
        job_row: impl FnOnce(&Id, &Id) -> Option<Id>,
        node_row: impl FnOnce(&Id) -> Option<Id>,
    ) {
        self.namespaces.share(&mut alloc.namespace);
        let namespace = &alloc.namespace;
        self.jobs
            .share_or(&mut alloc.job_id, |job| job_row(namespace, job));
        self.groups.share(&mut alloc.task_group);
        self.nodes.share_or(&mut alloc.node_id, node_row);
    }

    /// Remembers a node's id (or points it at an earlier copy), for the allocations
    /// placed on it.
    pub(crate) fn share_node_id(&mut self, id: &mut Id) {
        self.nodes.share(id);
    }
}

/// Points `id` at `old` when they are equal strings (and not the same copy already).
pub(crate) fn reuse(id: &mut Id, old: &Id) {
    if !Id::ptr_eq(id, old) && *id == *old {
        *id = old.clone();
    }
}

/// Points the allocation's id, namespace, job, task group and node id at the row it
/// replaces, where they are unchanged.
pub(crate) fn reuse_alloc_ids(alloc: &mut Allocation, old: &Allocation) {
    reuse(&mut alloc.id, &old.id);
    reuse(&mut alloc.namespace, &old.namespace);
    reuse(&mut alloc.job_id, &old.job_id);
    reuse(&mut alloc.task_group, &old.task_group);
    reuse(&mut alloc.node_id, &old.node_id);
}

/// Points the node's id, and each fingerprint identical to the one the row it
/// replaces holds (update time included), at the stored copies. A node re-registers
/// with mostly the same fingerprints; the plugin's instance keeps the stored one, so
/// without this a re-registered node and its plugins would hold two copies of each.
pub(crate) fn reuse_node_parts(node: &mut Node, old: &Node) {
    reuse(&mut node.id, &old.id);
    let maps = [
        (
            &mut node.csi_controller_plugins,
            &old.csi_controller_plugins,
        ),
        (&mut node.csi_node_plugins, &old.csi_node_plugins),
    ];
    for (new, old) in maps {
        for info in new.values_mut() {
            if let Some(stored) = old.get(&info.plugin_id)
                && !Arc::ptr_eq(stored, info)
                && stored.update_time == info.update_time
                && **stored == **info
            {
                *info = Arc::clone(stored);
            }
        }
    }
}

/// The allocation id of `stored`'s fingerprint of `info`'s plugin, when it names the
/// same allocation as `info`: its copy is already the allocation row's (unless the
/// allocation was placed after that report), so the row need not be looked up.
pub(crate) fn stored_alloc_id<'s>(
    stored: Option<&'s Fingerprints>,
    info: &CsiInfo,
) -> Option<&'s Id> {
    stored
        .and_then(|s| s.get(&info.plugin_id))
        .map(|s| &s.alloc_id)
        .filter(|id| **id == info.alloc_id)
}

/// Points the vendor name and version of each of the node's fingerprints at the
/// copies its plugin's row holds (`plugin_strings` gives them, as the command sees
/// the plugin so far), where they are equal, its health description at an earlier
/// fingerprint's of the same command (`descriptions`), and the provider's id for the
/// node (`node_info.id`) at the node's own id or an earlier fingerprint's of the same
/// node. Every node reports the same few vendor names, versions and health
/// descriptions, and its plugins mostly name the node alike (its id, or one cloud
/// instance id for every plugin of the node).
///
/// Its allocation id points at the allocation row's (`alloc_row` gives it): a
/// scheduler places the plugin's allocation before the node reports it. Where the
/// stored fingerprint of the same plugin names the same allocation, at that
/// fingerprint's copy instead (the row's, unless the allocation came after it):
/// the caller need not look the allocation up.
///
/// A fingerprint that changes is copied first if something else holds it too
/// (`Arc::make_mut`): applied from the Raft log, a node's fingerprints are shared
/// with the log's cached entry, which lets go of them soon; keeping that entry's
/// strings instead would keep one copy per node for as long as the row lives.
///
/// A fingerprint that is the stored row's (`old`, after [`reuse_node_parts`]) is left
/// as it is: it already shares with the plugin's instance.
pub(crate) fn share_fingerprint_strings<'p>(
    node: &mut Node,
    old: Option<&Node>,
    plugin_strings: impl Fn(&str) -> Option<(&'p Id, &'p Id)>,
    alloc_row: impl Fn(&str) -> Option<&'p Id>,
    descriptions: &mut SharedIds,
) {
    let maps = [
        (
            &mut node.csi_controller_plugins,
            old.map(|o| &o.csi_controller_plugins),
        ),
        (&mut node.csi_node_plugins, old.map(|o| &o.csi_node_plugins)),
    ];
    // An equal string in another copy: the one to point at (none if already there).
    let other_copy = |mine: &Id, theirs: &Id| {
        (!Id::ptr_eq(mine, theirs) && mine == theirs).then(|| theirs.clone())
    };
    // A monolith's fingerprint is one `Arc` in both maps: the copy made for the
    // controller map replaces it in the node map too.
    let mut copied: Vec<(Arc<CsiInfo>, Arc<CsiInfo>)> = Vec::new();
    let node_id = node.id.clone();
    let mut instance_ids = SharedIds::default();
    for (map, stored) in maps {
        for info in map.values_mut() {
            if let Some((_, copy)) = copied.iter().find(|(was, _)| Arc::ptr_eq(was, info)) {
                *info = Arc::clone(copy);
                continue;
            }
            if stored
                .and_then(|s| s.get(&info.plugin_id))
                .is_some_and(|s| Arc::ptr_eq(s, info))
            {
                continue;
            }
            // Compared by reference first: a node written again with the strings it
            // already shares touches no reference count here.
            let (provider, version) = match plugin_strings(&info.plugin_id) {
                Some((p, v)) => (
                    other_copy(&info.provider, p),
                    other_copy(&info.provider_version, v),
                ),
                None => (None, None),
            };
            let description = if info.health_description.is_empty() {
                None
            } else {
                let mut d = info.health_description.clone();
                descriptions.share(&mut d);
                (!Id::ptr_eq(&d, &info.health_description)).then_some(d)
            };
            let instance_id = info.node_info.as_ref().and_then(|n| {
                let mut id = n.id.clone();
                instance_ids.share_or(&mut id, |mine| other_copy(mine, &node_id));
                (!Id::ptr_eq(&id, &n.id)).then_some(id)
            });
            // The stored fingerprint's copy if it names the same allocation (it was
            // pointed at the row's when reported), else the row's.
            let alloc_id = if info.alloc_id.is_empty() {
                None
            } else {
                match stored_alloc_id(stored, info) {
                    Some(stored_id) => other_copy(&info.alloc_id, stored_id),
                    None => alloc_row(&info.alloc_id).and_then(|a| other_copy(&info.alloc_id, a)),
                }
            };
            if provider.is_none()
                && version.is_none()
                && description.is_none()
                && instance_id.is_none()
                && alloc_id.is_none()
            {
                continue;
            }
            let was = (info.is_controller() && info.is_node()).then(|| Arc::clone(info));
            let inner = Arc::make_mut(info);
            if let Some(p) = provider {
                inner.provider = p;
            }
            if let Some(v) = version {
                inner.provider_version = v;
            }
            if let Some(d) = description {
                inner.health_description = d;
            }
            if let (Some(id), Some(n)) = (instance_id, inner.node_info.as_mut()) {
                n.id = id;
            }
            if let Some(a) = alloc_id {
                inner.alloc_id = a;
            }
            if let Some(was) = was {
                copied.push((was, Arc::clone(info)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_held_alone_points_at_its_plugins_vendor_strings() {
        use crate::model::{CsiControllerInfo, CsiInfo, CsiNodeInfo};

        let stored = (Id::from("ebs.csi.aws.com"), Id::from("1.25.0"));
        let plugin_strings = |plugin: &str| (plugin == "ebs").then_some((&stored.0, &stored.1));
        let mut node = Node::new("n1", "n1");
        node.add_csi_plugin(
            CsiInfo::controller_instance("ebs", "a1", CsiControllerInfo::default())
                .with_provider("ebs.csi.aws.com", "1.25.0"),
        );
        // Another plugin, and one whose version differs: left alone.
        node.add_csi_plugin(
            CsiInfo::node_instance("nfs", "a2", CsiNodeInfo::default())
                .with_provider("ebs.csi.aws.com", "1.25.0"),
        );
        share_fingerprint_strings(
            &mut node,
            None,
            plugin_strings,
            |_| None,
            &mut SharedIds::default(),
        );
        let ebs = node.csi_controller_plugins.get("ebs").unwrap();
        assert!(Id::ptr_eq(&ebs.provider, &stored.0));
        assert!(Id::ptr_eq(&ebs.provider_version, &stored.1));
        let nfs = node.csi_node_plugins.get("nfs").unwrap();
        assert!(!Id::ptr_eq(&nfs.provider, &stored.0));

        let mut other = Node::new("n2", "n2");
        other.add_csi_plugin(
            CsiInfo::node_instance("ebs", "a3", CsiNodeInfo::default())
                .with_provider("ebs.csi.aws.com", "1.26.0"),
        );
        share_fingerprint_strings(
            &mut other,
            None,
            plugin_strings,
            |_| None,
            &mut SharedIds::default(),
        );
        let ebs = other.csi_node_plugins.get("ebs").unwrap();
        assert!(Id::ptr_eq(&ebs.provider, &stored.0));
        assert_eq!(&*ebs.provider_version, "1.26.0");
    }

    #[test]
    fn a_fingerprint_held_elsewhere_is_copied_only_when_it_changes() {
        use crate::model::{CsiControllerInfo, CsiInfo};

        let stored = (Id::from("ebs.csi.aws.com"), Id::from("1.25.0"));
        let mut node = Node::new("n1", "n1");
        node.add_csi_plugin(
            CsiInfo::controller_instance("ebs", "a1", CsiControllerInfo::default())
                .with_provider("ebs.csi.aws.com", "1.25.0")
                .with_health(true, "healthy"),
        );
        let entry = Arc::clone(node.csi_controller_plugins.get("ebs").unwrap());
        let mut descriptions = SharedIds::default();
        share_fingerprint_strings(
            &mut node,
            None,
            |_| Some((&stored.0, &stored.1)),
            |_| None,
            &mut descriptions,
        );
        let row = node.csi_controller_plugins.get("ebs").unwrap();
        assert!(!Arc::ptr_eq(row, &entry), "copied: the entry keeps its own");
        assert!(Id::ptr_eq(&row.provider, &stored.0));
        assert_eq!(**row, *entry);

        // Nothing to move: the same Arc stays, however many hold it.
        let before = Arc::clone(row);
        share_fingerprint_strings(
            &mut node,
            None,
            |_| Some((&stored.0, &stored.1)),
            |_| None,
            &mut descriptions,
        );
        assert!(Arc::ptr_eq(
            node.csi_controller_plugins.get("ebs").unwrap(),
            &before
        ));
    }

    #[test]
    fn a_fingerprint_that_is_the_stored_rows_is_left_alone() {
        use crate::model::{CsiControllerInfo, CsiInfo};

        let mut stored_node = Node::new("n1", "n1");
        stored_node.add_csi_plugin(
            CsiInfo::controller_instance("ebs", "a1", CsiControllerInfo::default())
                .with_provider("ebs.csi.aws.com", "1.25.0"),
        );
        let mut node = stored_node.clone();
        let plugin = (Id::from("ebs.csi.aws.com"), Id::from("1.25.0"));
        share_fingerprint_strings(
            &mut node,
            Some(&stored_node),
            |_| Some((&plugin.0, &plugin.1)),
            |_| None,
            &mut SharedIds::default(),
        );
        assert!(Arc::ptr_eq(
            node.csi_controller_plugins.get("ebs").unwrap(),
            stored_node.csi_controller_plugins.get("ebs").unwrap()
        ));
    }

    #[test]
    fn a_monoliths_fingerprint_stays_one_in_both_maps() {
        use crate::model::{CsiControllerInfo, CsiInfo, CsiNodeInfo};

        let plugin = (Id::from("hostpath.csi.k8s.io"), Id::from("1.0"));
        let mut node = Node::new("n1", "n1");
        node.add_csi_plugin(
            CsiInfo::monolith_instance(
                "hostpath",
                "a1",
                CsiControllerInfo::default(),
                CsiNodeInfo::default(),
            )
            .with_provider("hostpath.csi.k8s.io", "1.0"),
        );
        let entry = Arc::clone(node.csi_node_plugins.get("hostpath").unwrap());
        share_fingerprint_strings(
            &mut node,
            None,
            |_| Some((&plugin.0, &plugin.1)),
            |_| None,
            &mut SharedIds::default(),
        );
        let controller = node.csi_controller_plugins.get("hostpath").unwrap();
        let node_half = node.csi_node_plugins.get("hostpath").unwrap();
        assert!(Arc::ptr_eq(controller, node_half));
        assert!(!Arc::ptr_eq(controller, &entry));
        assert!(Id::ptr_eq(&controller.provider, &plugin.0));
    }

    /// Shares a node's fingerprint strings with nothing stored: no plugin or
    /// allocation rows, a fresh command.
    fn share_alone(node: &mut Node) {
        share_fingerprint_strings(node, None, |_| None, |_| None, &mut SharedIds::default());
    }

    #[test]
    fn a_fingerprints_node_id_points_at_the_nodes_id_or_an_earlier_fingerprints() {
        use crate::model::{CsiInfo, CsiNodeInfo};

        let info = |id: &str| CsiNodeInfo {
            id: Id::from(id),
            ..CsiNodeInfo::default()
        };
        // The plugins name the node by its own id.
        let mut node = Node::new("9f1c-node", "n1");
        node.add_csi_plugin(CsiInfo::node_instance("ebs", "a1", info("9f1c-node")));
        node.add_csi_plugin(CsiInfo::node_instance("efs", "a2", info("9f1c-node")));
        share_alone(&mut node);
        for plugin in ["ebs", "efs"] {
            let fp = node.csi_node_plugins.get(plugin).unwrap();
            let id = &fp.node_info.as_ref().unwrap().id;
            assert!(Id::ptr_eq(id, &node.id), "{plugin}");
        }

        // The plugins name it by a cloud instance id: one copy for the node, and
        // an id that differs keeps its own.
        let mut node = Node::new("9f1c-node", "n1");
        node.add_csi_plugin(CsiInfo::node_instance("ebs", "a1", info("i-0abc")));
        node.add_csi_plugin(CsiInfo::node_instance("efs", "a2", info("i-0abc")));
        node.add_csi_plugin(CsiInfo::node_instance("nfs", "a3", info("nfs-host-7")));
        share_alone(&mut node);
        let id = |plugin: &str| {
            let fp = node.csi_node_plugins.get(plugin).unwrap();
            fp.node_info.as_ref().unwrap().id.clone()
        };
        assert!(Id::ptr_eq(&id("ebs"), &id("efs")));
        assert_eq!(&*id("ebs"), "i-0abc");
        assert_eq!(&*id("nfs"), "nfs-host-7");
        assert!(!Id::ptr_eq(&id("nfs"), &node.id));
    }

    #[test]
    fn health_descriptions_of_one_command_share_one_copy() {
        use crate::model::{CsiInfo, CsiNodeInfo};

        let mut descriptions = SharedIds::default();
        let mut nodes: Vec<Node> = (0..3)
            .map(|i| {
                let mut n = Node::new(format!("n{i}"), "n");
                n.add_csi_plugin(
                    CsiInfo::node_instance("nfs", format!("a{i}"), CsiNodeInfo::default())
                        .with_health(true, "healthy"),
                );
                n
            })
            .collect();
        for n in &mut nodes {
            share_fingerprint_strings(n, None, |_| None, |_| None, &mut descriptions);
        }
        let first = &nodes[0]
            .csi_node_plugins
            .get("nfs")
            .unwrap()
            .health_description;
        for n in &nodes[1..] {
            let d = &n.csi_node_plugins.get("nfs").unwrap().health_description;
            assert!(Id::ptr_eq(d, first));
        }
    }

    #[test]
    fn a_later_equal_id_points_at_the_first_copy() {
        let mut ids = SharedIds::default();
        let mut a: Id = Id::from("job-1");
        let mut b: Id = Id::from("job-1");
        let mut c: Id = Id::from("job-2");
        assert!(!ids.share(&mut a));
        assert!(ids.share(&mut b));
        assert!(!ids.share(&mut c));
        assert!(Id::ptr_eq(&a, &b));
        assert!(!Id::ptr_eq(&a, &c));
        assert_eq!(&*c, "job-2");
        let node: Id = Id::from("n1");
        let mut ids = SharedIds::default();
        let (mut d, mut e) = (Id::from("n1"), Id::from("n1"));
        assert!(!ids.share_or(&mut d, |_| Some(node.clone())));
        assert!(ids.share_or(&mut e, |_| panic!("asked again")));
        assert!(Id::ptr_eq(&d, &node) && Id::ptr_eq(&e, &node));
    }

    #[test]
    fn reuse_takes_only_equal_strings() {
        let old = Allocation {
            id: Id::from("a1"),
            namespace: Id::from("default"),
            job_id: Id::from("web"),
            task_group: Id::from("tg"),
            node_id: Id::from("n1"),
            ..Default::default()
        };
        let mut new = Allocation {
            id: Id::from("a1"),
            namespace: Id::from("default"),
            job_id: Id::from("api"),
            task_group: Id::from("tg"),
            node_id: Id::from("n2"),
            ..Default::default()
        };
        reuse_alloc_ids(&mut new, &old);
        assert!(Id::ptr_eq(&new.id, &old.id));
        assert!(Id::ptr_eq(&new.namespace, &old.namespace));
        assert!(Id::ptr_eq(&new.task_group, &old.task_group));
        assert_eq!(&*new.job_id, "api");
        assert_eq!(&*new.node_id, "n2");
    }
}
