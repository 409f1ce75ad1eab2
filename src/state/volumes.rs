//! Volume registration and deregistration.

use std::sync::Arc;

use crate::model::{CsiVolume, Id};

use super::error::{Result, StateError};
use super::tables::volume_key;
use super::writer::Writer;

/// Registers volumes, or updates the user fields of registered ones (docs/rules.md
/// §4.6). Claims, modes and the create index of an existing volume are kept; a new
/// volume starts unclaimed whatever the request carried.
pub(crate) fn register_volumes(w: &mut Writer, volumes: &[CsiVolume]) -> Result<()> {
    // An empty request and empty ids are input rules (`input.rs`).
    for req in volumes {
        let plugin = w
            .plugin(&req.plugin_id)
            .ok_or_else(|| StateError::PluginNotFound(req.plugin_id.clone()))?;
        let stored = w.view().csi_volume(&req.namespace, &req.id);
        let mut vol = match &stored {
            Some(old) => {
                // An empty provider is "not known yet" (a plugin that exists only
                // through a job has no fingerprint), never an identity: it matches
                // any provider, and a known one replaces it.
                let provider = known_provider(&old.provider, &plugin.provider);
                let identity: [(&str, &str, &str); 3] = [
                    ("external id", &old.external_id, &req.external_id),
                    ("plugin id", &old.plugin_id, &req.plugin_id),
                    ("provider", &old.provider, provider),
                ];
                for (field, old_value, new_value) in identity {
                    if old_value != new_value {
                        return Err(StateError::VolumeIdentityChanged {
                            namespace: req.namespace.clone(),
                            id: req.id.clone(),
                            field,
                            old: old_value.to_string(),
                            new: new_value.to_string(),
                        });
                    }
                }
                let mut v = (**old).clone();
                v.provider.clone_from(&plugin.provider);
                if v.provider.is_empty() {
                    v.provider.clone_from(&old.provider);
                }
                v
            }
            None => {
                let mut v =
                    CsiVolume::new(req.namespace.clone(), req.id.clone(), req.plugin_id.clone());
                v.external_id.clone_from(&req.external_id);
                v.provider.clone_from(&plugin.provider);
                v.create_index = w.index;
                v
            }
        };
        vol.name.clone_from(&req.name);
        vol.topologies.clone_from(&req.topologies);
        vol.requested_capabilities
            .clone_from(&req.requested_capabilities);
        vol.mount_options.clone_from(&req.mount_options);
        vol.secrets.clone_from(&req.secrets);
        vol.parameters.clone_from(&req.parameters);
        vol.context.clone_from(&req.context);
        vol.controller_required = plugin.controller_required;
        if stored.as_deref() == Some(&vol) {
            continue;
        }
        vol.modify_index = w.index;
        w.txn.insert(w.t.volumes, Arc::new(vol))?;
    }
    Ok(())
}

/// The provider a registration compares the stored one with (docs/rules.md §4.6):
/// the plugin's, unless either is empty — not known yet — in which case the stored
/// one (nothing to compare).
fn known_provider<'a>(stored: &'a str, plugin: &'a str) -> &'a str {
    if stored.is_empty() || plugin.is_empty() {
        stored
    } else {
        plugin
    }
}

/// Deregisters volumes of one namespace (docs/rules.md §4.7).
pub(crate) fn deregister_volumes(
    w: &mut Writer,
    namespace: &Id,
    ids: &[Id],
    force: bool,
) -> Result<()> {
    for id in ids {
        let vol = w
            .view()
            .csi_volume(namespace, id)
            .ok_or_else(|| StateError::VolumeNotFound {
                namespace: namespace.clone(),
                id: id.clone(),
            })?;
        for alloc_id in vol.read_allocs.iter().chain(&vol.write_allocs) {
            // Allocs already gone count as safe; the others must be terminal, and only
            // a forced deregistration accepts even that.
            let blocking = match w.view().alloc(alloc_id) {
                _ if !force => true,
                Some(alloc) => !alloc.terminal(),
                None => false,
            };
            if blocking {
                return Err(StateError::VolumeInUse {
                    namespace: namespace.clone(),
                    id: id.clone(),
                    alloc_id: alloc_id.clone(),
                });
            }
        }
        w.txn.delete(w.t.volumes, &volume_key(namespace, id))?;
    }
    Ok(())
}
