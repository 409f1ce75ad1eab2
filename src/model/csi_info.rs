//! CSI plugin fingerprints: what a client node reports about one plugin instance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Id;

/// One CSI plugin instance on one node, as fingerprinted by that node.
///
/// Equality ignores [`update_time`](CsiInfo::update_time): two reports that
/// differ only in when they were taken describe the same instance.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiInfo {
    /// The id of the plugin this is an instance of.
    pub plugin_id: Id,
    /// The allocation running the instance; empty if unknown.
    #[serde(default)]
    pub alloc_id: Id,
    /// Whether the instance reported itself healthy.
    pub healthy: bool,
    /// Human-readable detail on the instance's health.
    #[serde(default)]
    pub health_description: Id,
    /// When the report was made, in unix nanoseconds, as supplied by the write request.
    #[serde(default)]
    pub update_time: u64,
    /// The vendor name from the CSI identity call `GetPluginInfo`.
    #[serde(default)]
    pub provider: Id,
    /// The vendor version from the CSI identity call `GetPluginInfo`.
    #[serde(default)]
    pub provider_version: Id,
    /// Whether the plugin needs a controller instance to serve volumes.
    #[serde(default)]
    pub requires_controller_plugin: bool,
    /// Whether the plugin's volumes are constrained by topology.
    #[serde(default)]
    pub requires_topologies: bool,
    /// Controller capabilities; present exactly when this is a controller instance.
    #[serde(default)]
    pub controller_info: Option<CsiControllerInfo>,
    /// Node details; present exactly when this is a node instance.
    #[serde(default)]
    pub node_info: Option<CsiNodeInfo>,
}

impl CsiInfo {
    /// A healthy controller instance of `plugin_id` run by `alloc_id`; set the
    /// provider with [`with_provider`](Self::with_provider). File it in a node's
    /// `csi_controller_plugins` (or let [`Node::add_csi_plugin`](super::Node::add_csi_plugin)
    /// do it).
    ///
    /// ```
    /// use schedstate::model::{CsiControllerInfo, CsiInfo};
    ///
    /// let info = CsiInfo::controller_instance("ebs", "alloc-1", CsiControllerInfo::default())
    ///     .with_provider("ebs.csi.aws.com", "1.25.0")
    ///     .requiring_controller(true);
    /// assert!(info.is_controller() && !info.is_node() && info.healthy);
    /// ```
    pub fn controller_instance(
        plugin_id: impl Into<Id>,
        alloc_id: impl Into<Id>,
        controller: CsiControllerInfo,
    ) -> CsiInfo {
        CsiInfo {
            plugin_id: plugin_id.into(),
            alloc_id: alloc_id.into(),
            healthy: true,
            controller_info: Some(controller),
            ..CsiInfo::default()
        }
    }

    /// A healthy node instance of `plugin_id` run by `alloc_id`. File it in a node's
    /// `csi_node_plugins`.
    pub fn node_instance(
        plugin_id: impl Into<Id>,
        alloc_id: impl Into<Id>,
        node: CsiNodeInfo,
    ) -> CsiInfo {
        CsiInfo {
            plugin_id: plugin_id.into(),
            alloc_id: alloc_id.into(),
            healthy: true,
            node_info: Some(node),
            ..CsiInfo::default()
        }
    }

    /// A healthy instance that is both controller and node (a "monolith" plugin).
    /// File it in both of a node's maps.
    pub fn monolith_instance(
        plugin_id: impl Into<Id>,
        alloc_id: impl Into<Id>,
        controller: CsiControllerInfo,
        node: CsiNodeInfo,
    ) -> CsiInfo {
        CsiInfo {
            plugin_id: plugin_id.into(),
            alloc_id: alloc_id.into(),
            healthy: true,
            controller_info: Some(controller),
            node_info: Some(node),
            ..CsiInfo::default()
        }
    }

    /// The same fingerprint with the vendor name and version the plugin reported
    /// through the CSI identity call `GetPluginInfo`.
    #[must_use]
    pub fn with_provider(mut self, provider: impl Into<Id>, version: impl Into<Id>) -> Self {
        self.provider = provider.into();
        self.provider_version = version.into();
        self
    }

    /// The same fingerprint with this health and description.
    #[must_use]
    pub fn with_health(mut self, healthy: bool, description: impl Into<Id>) -> Self {
        self.healthy = healthy;
        self.health_description = description.into();
        self
    }

    /// The same fingerprint saying whether the plugin needs a controller instance.
    #[must_use]
    pub fn requiring_controller(mut self, required: bool) -> Self {
        self.requires_controller_plugin = required;
        self
    }

    /// Whether this fingerprint describes a controller instance.
    pub fn is_controller(&self) -> bool {
        self.controller_info.is_some()
    }

    /// Whether this fingerprint describes a node instance.
    pub fn is_node(&self) -> bool {
        self.node_info.is_some()
    }
}

impl PartialEq for CsiInfo {
    fn eq(&self, other: &Self) -> bool {
        // Destructured so that a new field cannot be left out of the comparison unnoticed.
        let CsiInfo {
            plugin_id,
            alloc_id,
            healthy,
            health_description,
            update_time: _,
            provider,
            provider_version,
            requires_controller_plugin,
            requires_topologies,
            controller_info,
            node_info,
        } = self;
        *plugin_id == other.plugin_id
            && *alloc_id == other.alloc_id
            && *healthy == other.healthy
            && *health_description == other.health_description
            && *provider == other.provider
            && *provider_version == other.provider_version
            && *requires_controller_plugin == other.requires_controller_plugin
            && *requires_topologies == other.requires_topologies
            && *controller_info == other.controller_info
            && *node_info == other.node_info
    }
}

impl Eq for CsiInfo {}

/// The capabilities a CSI controller instance reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiControllerInfo {
    /// The controller can attach volumes read-only.
    pub supports_read_only_attach: bool,
    /// The controller publishes (attaches) and unpublishes (detaches) volumes.
    pub supports_attach_detach: bool,
    /// The controller can list its volumes.
    pub supports_list_volumes: bool,
    /// The controller's volume listing includes the nodes each volume is attached to.
    pub supports_list_volumes_attached_nodes: bool,
}

/// The details a CSI node instance reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiNodeInfo {
    /// The provider's id for this node.
    pub id: Id,
    /// The most volumes the provider will attach to this node.
    pub max_volumes: u64,
    /// The topology segments from which this node can reach volumes.
    #[serde(default)]
    pub accessible_topology: Option<CsiTopology>,
    /// Whether volumes must be staged on the node before they are published.
    pub requires_node_stage_volume: bool,
}

/// A CSI topology: segment keys (such as a zone label) and their values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiTopology {
    /// The topology segments, by key.
    #[serde(default)]
    pub segments: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::super::id;
    use super::*;

    fn sample() -> CsiInfo {
        CsiInfo {
            plugin_id: id("ebs"),
            alloc_id: id("a1"),
            healthy: true,
            health_description: "ok".into(),
            update_time: 1,
            provider: "aws.ebs".into(),
            provider_version: "1.2".into(),
            requires_controller_plugin: true,
            requires_topologies: true,
            controller_info: Some(CsiControllerInfo {
                supports_attach_detach: true,
                ..Default::default()
            }),
            node_info: Some(CsiNodeInfo {
                id: "i-123".into(),
                max_volumes: 8,
                accessible_topology: Some(CsiTopology {
                    segments: [("zone".to_string(), "a".to_string())].into(),
                }),
                requires_node_stage_volume: true,
            }),
        }
    }

    #[test]
    fn equality_ignores_update_time() {
        let a = sample();
        let b = CsiInfo {
            update_time: 99,
            ..sample()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn equality_sees_every_other_field() {
        let base = sample();
        let variants: Vec<CsiInfo> = vec![
            CsiInfo {
                plugin_id: id("x"),
                ..sample()
            },
            CsiInfo {
                alloc_id: id(""),
                ..sample()
            },
            CsiInfo {
                healthy: false,
                ..sample()
            },
            CsiInfo {
                health_description: "bad".into(),
                ..sample()
            },
            CsiInfo {
                provider: "other".into(),
                ..sample()
            },
            CsiInfo {
                provider_version: "2".into(),
                ..sample()
            },
            CsiInfo {
                requires_controller_plugin: false,
                ..sample()
            },
            CsiInfo {
                requires_topologies: false,
                ..sample()
            },
            CsiInfo {
                controller_info: None,
                ..sample()
            },
            CsiInfo {
                node_info: None,
                ..sample()
            },
        ];
        for v in variants {
            assert_ne!(base, v, "{v:?}");
        }
    }

    #[test]
    fn kind_follows_the_halves_present() {
        let both = sample();
        assert!(both.is_controller() && both.is_node());
        let none = CsiInfo::default();
        assert!(!none.is_controller() && !none.is_node());
        let ctrl = CsiInfo {
            node_info: None,
            ..sample()
        };
        assert!(ctrl.is_controller() && !ctrl.is_node());
        let node = CsiInfo {
            controller_info: None,
            ..sample()
        };
        assert!(!node.is_controller() && node.is_node());
    }
}
