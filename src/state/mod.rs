//! The scheduler's state on the engine: the CSI rules (`docs/rules.md`) as commands,
//! queries, denormalization and blocking queries.
//!
//! - [`Command`] is every write; [`StateStore::apply`] applies one at a log index, in
//!   one engine transaction (all or nothing), and returns a [`Commit`]. The typed
//!   methods (`upsert_node`, …) build a command and apply it.
//! - [`StateView`] holds every read; [`StateSnapshot`] is one O(1) version to read;
//!   [`StateReader`] takes snapshots and runs blocking queries.
//! - Plugins are derived from node fingerprints and kept in step by allocation writes;
//!   a derived table of plugin instances makes "the plugins on node n" and "the
//!   instances of alloc a" index lookups.
//!
//! Decisions where the rules are silent (all of them are in `docs/rules.md`):
//! - A fingerprint equal to the stored instance (equality ignores `update_time`)
//!   rewrites nothing: the plugin keeps its `modify_index` and no watch fires, so
//!   client heartbeats do not churn blocking queries.
//! - A node's fingerprint must be filed under its own plugin id; otherwise the upsert
//!   is rejected ([`StateError::FingerprintMismatch`]).
//! - A fingerprint's halves must match the maps it is filed in: an entry of the
//!   controller map has a controller half, an entry of the node map a node half, and a
//!   fingerprint carrying both halves is filed in both maps; otherwise the upsert is
//!   rejected ([`StateError::FingerprintHalves`]). Each map's entry is applied as the
//!   instance of that map's kind ([`Node::add_csi_plugin`](crate::model::Node::add_csi_plugin)
//!   files a fingerprint where its halves say).
//! - Writes that change nothing (status already set, volume registered with the same
//!   fields, a re-claim) leave rows and table indexes alone but still move the last
//!   applied index.
//! - Empty id lists are rejected for delete nodes, register, deregister and claim
//!   batches; an empty alloc upsert or delete is an accepted no-op.
//! - A newly registered volume starts unclaimed, whatever claims the request carried.
//! - A write claim whose own access mode cannot write (single-node-reader-only,
//!   multi-node-reader-only) on a volume whose mode is still unknown is refused
//!   ([`StateError::ReadOnlyAccessMode`]): taken, it would set a read-only mode with a
//!   writer holding it. Once the volume's mode is known, it alone limits claims; a
//!   claim's own mode is stored as it came (docs/rules.md §8, decision 9).
//! - A claim taken on a volume in use whose access mode is still unknown (its claims
//!   asked for none) sets the mode only if the claims already held fit that mode, and
//!   free claims are counted in that mode; otherwise it is refused as "max claims
//!   reached" ([`StateError::MaxClaimsReached`]).
//! - A release step that changes nothing (a repeat, or `ready-to-free` for an alloc
//!   with nothing to remove) rewrites nothing; any other step for an alloc without a
//!   claim stores a past claim for it, as Nomad does; a gc claim always moves the
//!   volume's modify index (docs/rules.md §8, decisions 13 and 24).

mod acl;
mod allocs;
mod batch;
mod check;
mod claims;
mod command;
mod commit;
mod denormalize;
mod error;
mod expectations;
mod input;
mod jobs;
mod nodes;
mod read;
mod reader;
mod restore;
mod shared_ids;
mod snapshot;
mod store;
mod table;
mod tables;
pub mod v1;
pub mod v2;
mod volumes;
mod writer;
pub(crate) mod writes;

pub use batch::BatchOutcome;
pub use check::InvariantViolation;
pub use command::{Command, CsiVolumeClaimRequest};
pub use commit::{Commit, Row, RowChange};
pub use error::{Result, StateError};
pub use input::{MAX_ENTRIES, MAX_ID_BYTES, MAX_ITEMS, MAX_TEXT_BYTES, WILDCARD_NAMESPACE};
pub use read::StateView;
pub use reader::StateReader;
pub(crate) use restore::Restore;
pub use snapshot::StateSnapshot;
pub use store::StateStore;
pub use table::{Table, UnknownTable};
pub use tables::{AclSaltRow, InstanceKind};
#[cfg(feature = "unstable-internals")]
pub use tables::{PluginInstance, Tables};
