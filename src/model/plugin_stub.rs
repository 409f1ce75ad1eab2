//! A plugin's list stub: its identity and health counts, one row of a plugin listing
//! (`GET /v1/plugins`, `schedstate plugin status`).

use serde::{Deserialize, Serialize};

use super::{CsiPlugin, Id};

/// A plugin's identity and health counts: one row of `GET /v1/plugins` and of
/// `schedstate plugin status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginListStub {
    /// The plugin id.
    pub id: String,
    /// The provider name from the CSI GetPluginInfo call (`ebs.csi.aws.com`).
    pub provider: Id,
    /// The provider's version.
    pub version: Id,
    /// Whether the plugin needs a controller.
    pub controller_required: bool,
    /// Healthy controller instances.
    pub controllers_healthy: usize,
    /// Controller instances the live jobs that run the plugin expect (their sum).
    pub controllers_expected: usize,
    /// Healthy node instances.
    pub nodes_healthy: usize,
    /// Node instances the live jobs that run the plugin expect (their sum).
    pub nodes_expected: usize,
}

impl PluginListStub {
    /// The stub of `plugin`.
    pub fn of(plugin: &CsiPlugin) -> Self {
        PluginListStub {
            id: plugin.id.to_string(),
            provider: plugin.provider.clone(),
            version: plugin.version.clone(),
            controller_required: plugin.controller_required,
            controllers_healthy: plugin.controllers_healthy(),
            controllers_expected: plugin.controllers_expected(),
            nodes_healthy: plugin.nodes_healthy(),
            nodes_expected: plugin.nodes_expected(),
        }
    }
}
