//! The scheduler's state on the engine: the CSI rules of SPEC.md as commands,
//! queries, denormalization and blocking queries.
//!
//! - [`Command`] is every write; [`StateStore::apply`] applies one at a log index, in
//!   one engine transaction (all or nothing). The typed methods (`upsert_node`, …)
//!   build a command and apply it.
//! - [`StateView`] holds every read; [`StateSnapshot`] is one O(1) version to read.
//! - Plugins are derived from node fingerprints and kept in step by allocation writes;
//!   a derived table of plugin instances ([`PluginInstance`]) makes "the plugins on
//!   node n" and "the instances of alloc a" index lookups.
//!
//! Decisions where SPEC.md is silent:
//! - A fingerprint equal to the stored instance (equality ignores `update_time`)
//!   rewrites nothing: the plugin keeps its `modify_index` and no watch fires, so
//!   client heartbeats do not churn blocking queries.
//! - A node's fingerprint must be filed under its own plugin id; otherwise the upsert
//!   is rejected ([`StateError::FingerprintMismatch`]).
//! - Which map a fingerprint is applied to follows its halves (`controller_info`,
//!   `node_info`), as in Nomad; the removal sweep follows the node's two maps.
//! - Writes that change nothing (status already set, volume registered with the same
//!   fields, a re-claim) leave rows and table indexes alone but still move the last
//!   applied index.
//! - Empty id lists are rejected for delete nodes, register, deregister and claim
//!   batches; an empty alloc upsert or delete is an accepted no-op.
//! - A newly registered volume starts unclaimed, whatever claims the request carried.
//! - A write claim whose own access mode cannot write (single-node-reader-only,
//!   multi-node-reader-only) is refused ([`StateError::ReadOnlyAccessMode`]): taken
//!   on an unclaimed volume it would set a read-only mode with a writer holding it.
//! - A claim taken on a volume in use whose access mode is still unknown (its claims
//!   asked for none) sets the mode only if the claims already held fit that mode, and
//!   free claims are counted in that mode; otherwise it is refused as "max claims
//!   reached" ([`StateError::MaxClaimsReached`]).
//! - A release step that changes nothing (repeated, or for an alloc without a claim)
//!   rewrites nothing; a gc claim always moves the volume's modify index.

mod allocs;
mod check;
mod claims;
mod command;
mod denormalize;
mod error;
mod nodes;
mod read;
mod restore;
mod store;
mod tables;
mod volumes;
mod writer;

pub use check::InvariantViolation;
pub use command::{Command, VolumeClaimRequest};
pub use error::{Result, StateError};
pub use read::StateView;
pub use restore::Restore;
pub use store::{StateSnapshot, StateStore};
pub use tables::{InstanceKind, PluginInstance, Tables, names, volume_key};
