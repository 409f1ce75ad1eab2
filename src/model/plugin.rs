//! CSI plugins: the cluster-wide view of one plugin's controller and node instances.

use std::fmt;
use std::sync::Arc;

use imbl::OrdMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{AllocListStub, CsiInfo, Expected, Id};

/// The instances of one kind (controllers or nodes) of one plugin, by node id.
///
/// A persistent map: cloning is O(1) and clones share structure. The number
/// of healthy entries is cached and kept in step by this type's own mutators,
/// so it always agrees with the map. Serializes as a map from node id to
/// fingerprint; the healthy count is recomputed when deserializing.
#[derive(Clone, Default)]
pub struct PluginInstances {
    map: OrdMap<Id, Arc<CsiInfo>>,
    healthy: usize,
}

impl PluginInstances {
    /// An empty set of instances.
    pub fn new() -> Self {
        Self::default()
    }

    /// The instance on the given node, if any.
    pub fn get(&self, node_id: &str) -> Option<&Arc<CsiInfo>> {
        self.map.get(node_id)
    }

    /// Whether there is an instance on the given node.
    pub fn contains(&self, node_id: &str) -> bool {
        self.map.contains_key(node_id)
    }

    /// Records the instance on a node, returning the one it replaced.
    pub fn insert(&mut self, node_id: Id, info: Arc<CsiInfo>) -> Option<Arc<CsiInfo>> {
        if info.healthy {
            self.healthy += 1;
        }
        let old = self.map.insert(node_id, info);
        if old.as_ref().is_some_and(|o| o.healthy) {
            self.healthy -= 1;
        }
        old
    }

    /// Removes the instance on a node, returning it.
    pub fn remove(&mut self, node_id: &str) -> Option<Arc<CsiInfo>> {
        let old = self.map.remove(node_id);
        if old.as_ref().is_some_and(|o| o.healthy) {
            self.healthy -= 1;
        }
        old
    }

    /// The number of instances.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no instances.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The number of healthy instances.
    pub fn healthy(&self) -> usize {
        self.healthy
    }

    /// The instances in node-id order.
    pub fn iter(
        &self,
    ) -> impl DoubleEndedIterator<Item = (&Id, &Arc<CsiInfo>)> + ExactSizeIterator {
        self.map.iter()
    }
}

impl FromIterator<(Id, Arc<CsiInfo>)> for PluginInstances {
    fn from_iter<I: IntoIterator<Item = (Id, Arc<CsiInfo>)>>(iter: I) -> Self {
        let mut out = Self::new();
        for (node_id, info) in iter {
            out.insert(node_id, info);
        }
        out
    }
}

impl PartialEq for PluginInstances {
    fn eq(&self, other: &Self) -> bool {
        self.map.ptr_eq(&other.map) || self.map == other.map
    }
}

impl Eq for PluginInstances {}

impl fmt::Debug for PluginInstances {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.map.iter()).finish()
    }
}

impl Serialize for PluginInstances {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PluginInstances {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Inserts entry by entry. `OrdMap`'s own visitor first allocates a vector of
        /// the length the input announces: a forged length in a snapshot row would make
        /// it allocate without bound (and abort the process) before failing.
        struct Entries;

        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = PluginInstances;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from node id to fingerprint")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<PluginInstances, A::Error> {
                let mut out = PluginInstances::new();
                while let Some((node_id, info)) = access.next_entry::<Id, Arc<CsiInfo>>()? {
                    out.insert(node_id, info);
                }
                Ok(out)
            }
        }

        deserializer.deserialize_map(Entries)
    }
}

/// One live job's expectation of a plugin's instances (docs/rules.md §4.10).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginJob {
    /// The job's namespace.
    pub namespace: Id,
    /// The job's id.
    pub job_id: Id,
    /// How many instances the job expects (never both zero in a stored plugin).
    pub expected: Expected,
}

/// A CSI plugin: every controller and node instance of one plugin id in the cluster,
/// and what the live jobs that run it expect.
///
/// Health counts are derived from the instance maps, expected counts from the job
/// expectations; neither is stored separately.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsiPlugin {
    /// The plugin's id (global; the key of the plugins table).
    pub id: Id,
    /// The vendor name last reported by an instance.
    pub provider: Id,
    /// The vendor version last reported by an instance.
    pub version: Id,
    /// Whether the plugin needs a controller, as last reported by a controller instance.
    pub controller_required: bool,
    /// The controller instances, by node id.
    #[serde(default)]
    pub controllers: PluginInstances,
    /// The node instances, by node id.
    #[serde(default)]
    pub nodes: PluginInstances,
    /// The live jobs that expect instances of the plugin, in (namespace, job id)
    /// order, each once, none expecting nothing.
    #[serde(default)]
    pub jobs: Vec<PluginJob>,
    /// Stubs of the allocations running the instances; filled only on a denormalized copy.
    #[serde(default)]
    pub allocations: Vec<AllocListStub>,
    /// The index of the write that created the row.
    pub create_index: u64,
    /// The index of the last write that changed the row.
    pub modify_index: u64,
}

impl CsiPlugin {
    /// A plugin with no instances, created and last modified at `index`.
    pub fn new(id: impl Into<Id>, index: u64) -> Self {
        CsiPlugin {
            id: id.into(),
            provider: Id::new(),
            version: Id::new(),
            controller_required: false,
            controllers: PluginInstances::new(),
            nodes: PluginInstances::new(),
            jobs: Vec::new(),
            allocations: Vec::new(),
            create_index: index,
            modify_index: index,
        }
    }

    /// The number of healthy controller instances.
    pub fn controllers_healthy(&self) -> usize {
        self.controllers.healthy()
    }

    /// The number of controller instances the live jobs that run the plugin expect.
    pub fn controllers_expected(&self) -> usize {
        let sum: u64 = self.jobs.iter().map(|j| j.expected.controllers).sum();
        usize::try_from(sum).unwrap_or(usize::MAX)
    }

    /// The number of healthy node instances.
    pub fn nodes_healthy(&self) -> usize {
        self.nodes.healthy()
    }

    /// The number of node instances the live jobs that run the plugin expect.
    pub fn nodes_expected(&self) -> usize {
        let sum: u64 = self.jobs.iter().map(|j| j.expected.nodes).sum();
        usize::try_from(sum).unwrap_or(usize::MAX)
    }

    /// What job (`namespace`, `job_id`) expects of the plugin (zero if it expects
    /// nothing).
    pub fn job_expectation(&self, namespace: &str, job_id: &str) -> Expected {
        self.jobs
            .binary_search_by(|j| (&*j.namespace, &*j.job_id).cmp(&(namespace, job_id)))
            .map_or(Expected::default(), |at| self.jobs[at].expected)
    }

    /// Sets what a job expects of the plugin (zero removes the job); returns whether
    /// that changed anything.
    pub fn set_job_expectation(&mut self, namespace: &Id, job_id: &Id, expected: Expected) -> bool {
        let found = self
            .jobs
            .binary_search_by(|j| (&*j.namespace, &*j.job_id).cmp(&(&**namespace, &**job_id)));
        match (found, expected.is_zero()) {
            (Ok(at), true) => {
                self.jobs.remove(at);
                true
            }
            (Ok(at), false) => {
                let changed = self.jobs[at].expected != expected;
                self.jobs[at].expected = expected;
                changed
            }
            (Err(_), true) => false,
            (Err(at), false) => {
                self.jobs.insert(
                    at,
                    PluginJob {
                        namespace: namespace.clone(),
                        job_id: job_id.clone(),
                        expected,
                    },
                );
                true
            }
        }
    }

    /// Whether the plugin has no instances of either kind and no live job expects any
    /// (and so must not be stored).
    pub fn is_empty(&self) -> bool {
        self.controllers.is_empty() && self.nodes.is_empty() && self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::*;

    fn info(healthy: bool) -> Arc<CsiInfo> {
        Arc::new(CsiInfo {
            plugin_id: id("p"),
            healthy,
            ..Default::default()
        })
    }

    fn recount(p: &PluginInstances) -> usize {
        p.iter().filter(|(_, i)| i.healthy).count()
    }

    #[test]
    fn healthy_count_follows_every_mutation() {
        let mut p = PluginInstances::new();
        assert_eq!((p.len(), p.healthy()), (0, 0));
        assert!(p.insert(id("n1"), info(true)).is_none());
        assert!(p.insert(id("n2"), info(false)).is_none());
        assert_eq!((p.len(), p.healthy()), (2, 1));
        // healthy -> unhealthy, unhealthy -> healthy, healthy -> healthy
        assert!(p.insert(id("n1"), info(false)).is_some_and(|o| o.healthy));
        assert_eq!(p.healthy(), 0);
        p.insert(id("n2"), info(true));
        assert_eq!(p.healthy(), 1);
        p.insert(id("n2"), info(true));
        assert_eq!((p.len(), p.healthy()), (2, 1));
        // removals
        assert!(p.remove("absent").is_none());
        assert!(p.remove("n2").is_some_and(|o| o.healthy));
        assert_eq!((p.len(), p.healthy()), (1, 0));
        assert!(p.remove("n1").is_some());
        assert!(p.is_empty());
        assert_eq!(p.healthy(), recount(&p));
    }

    #[test]
    fn lookups_and_order() {
        let p: PluginInstances = [
            (id("n3"), info(true)),
            (id("n1"), info(false)),
            (id("n2"), info(true)),
        ]
        .into_iter()
        .collect();
        assert_eq!(p.healthy(), 2);
        assert!(p.contains("n1") && !p.contains("n"));
        assert!(p.get("n3").is_some_and(|i| i.healthy));
        assert!(p.get("n").is_none());
        let keys: Vec<&str> = p.iter().map(|(k, _)| &**k).collect();
        assert_eq!(keys, ["n1", "n2", "n3"]);
    }

    #[test]
    fn clones_are_independent_and_equal_until_changed() {
        let mut a = PluginInstances::new();
        a.insert(id("n1"), info(true));
        let mut b = a.clone();
        assert_eq!(a, b);
        b.remove("n1");
        assert_ne!(a, b);
        assert_eq!((a.len(), a.healthy()), (1, 1));
        // Equal contents built separately are equal, ignoring update time.
        let mut c = PluginInstances::new();
        let mut later = (*info(true)).clone();
        later.update_time = 42;
        c.insert(id("n1"), Arc::new(later));
        assert_eq!(a, c);
    }

    #[test]
    fn debug_shows_the_map() {
        let mut p = PluginInstances::new();
        p.insert(id("n1"), info(true));
        let s = format!("{p:?}");
        assert!(s.starts_with("{\"n1\": CsiInfo"), "{s}");
    }

    /// A scalar for building test input with serde's value deserializers.
    #[derive(Clone, Copy)]
    enum Val {
        S(&'static str),
        B(bool),
    }

    impl<'de> serde::de::IntoDeserializer<'de, serde::de::value::Error> for Val {
        type Deserializer = Self;
        fn into_deserializer(self) -> Self {
            self
        }
    }

    impl<'de> Deserializer<'de> for Val {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: serde::de::Visitor<'de>>(
            self,
            v: V,
        ) -> Result<V::Value, Self::Error> {
            match self {
                Val::S(s) => v.visit_str(s),
                Val::B(b) => v.visit_bool(b),
            }
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            struct enum identifier ignored_any
        }
    }

    #[test]
    fn deserializing_recounts_healthy_entries() {
        use serde::de::value::MapDeserializer;
        let entry = |healthy| {
            MapDeserializer::new(
                [("plugin_id", Val::S("p")), ("healthy", Val::B(healthy))].into_iter(),
            )
        };
        let input = MapDeserializer::<_, serde::de::value::Error>::new(
            [
                ("n2", entry(true)),
                ("n1", entry(false)),
                ("n3", entry(true)),
            ]
            .into_iter(),
        );
        let p = PluginInstances::deserialize(input).expect("valid input");
        assert_eq!((p.len(), p.healthy()), (3, 2));
        assert!(
            p.get("n1")
                .is_some_and(|i| !i.healthy && &*i.plugin_id == "p")
        );
    }

    #[test]
    fn plugin_counts_are_derived() {
        let mut plug = CsiPlugin::new("ebs", 5);
        assert_eq!((plug.create_index, plug.modify_index), (5, 5));
        assert!(plug.is_empty());
        plug.controllers.insert(id("n1"), info(true));
        plug.nodes.insert(id("n1"), info(true));
        plug.nodes.insert(id("n2"), info(false));
        assert!(!plug.is_empty());
        assert_eq!(plug.controllers_healthy(), 1);
        assert_eq!(plug.nodes_healthy(), 1);
        // Expected counts come from jobs, not from instances.
        assert_eq!((plug.controllers_expected(), plug.nodes_expected()), (0, 0));
        let e = |controllers, nodes| Expected { controllers, nodes };
        assert!(plug.set_job_expectation(&id("default"), &id("b"), e(1, 2)));
        assert!(plug.set_job_expectation(&id("default"), &id("a"), e(0, 3)));
        assert!(!plug.set_job_expectation(&id("default"), &id("a"), e(0, 3)));
        assert!(!plug.set_job_expectation(&id("default"), &id("c"), e(0, 0)));
        assert_eq!((plug.controllers_expected(), plug.nodes_expected()), (1, 5));
        assert_eq!(plug.job_expectation("default", "a"), e(0, 3));
        assert_eq!(plug.job_expectation("default", "zz"), e(0, 0));
        let order: Vec<&str> = plug.jobs.iter().map(|j| &*j.job_id).collect();
        assert_eq!(order, ["a", "b"]);
        plug.controllers.remove("n1");
        plug.nodes.remove("n1");
        plug.nodes.remove("n2");
        // No instance, but live jobs expect some: not empty.
        assert!(!plug.is_empty());
        assert!(plug.set_job_expectation(&id("default"), &id("a"), e(0, 0)));
        assert!(plug.set_job_expectation(&id("default"), &id("b"), e(0, 0)));
        assert!(plug.is_empty());
    }
}
