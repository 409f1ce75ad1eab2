//! The typed write methods, one per [`Command`](super::Command), shared by every
//! store kind so that each has the same door: the methods build the command and hand
//! it to the store's own `apply_owned`.

/// Expands to the typed write methods on a type with
/// `fn apply_owned(&self, u64, Command) -> Result<Commit, $err>`.
macro_rules! typed_writes {
    ($err:ty) => {
        /// Upserts a node and derives its plugin instances from its fingerprints
        /// ([`Command::UpsertNode`](crate::Command::UpsertNode)).
        ///
        /// # Errors
        /// The rule the node breaks; see [`apply`](Self::apply).
        pub fn upsert_node(
            &self,
            index: u64,
            node: $crate::model::Node,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::UpsertNode { node })
        }

        /// Upserts many nodes in one write
        /// ([`Command::UpsertNodes`](crate::Command::UpsertNodes)); nothing is written
        /// if any node is refused.
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn upsert_nodes(
            &self,
            index: u64,
            nodes: Vec<$crate::model::Node>,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::UpsertNodes { nodes })
        }

        /// Deletes nodes and every plugin instance on them
        /// ([`Command::DeleteNodes`](crate::Command::DeleteNodes)); an unknown id fails
        /// the whole write.
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn delete_nodes(
            &self,
            index: u64,
            ids: &[impl AsRef<str>],
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let ids = $crate::state::writes::to_ids(ids);
            self.apply_owned(index, $crate::Command::DeleteNodes { ids })
        }

        /// Sets a node's status
        /// ([`Command::UpdateNodeStatus`](crate::Command::UpdateNodeStatus)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn update_node_status(
            &self,
            index: u64,
            id: &str,
            status: $crate::model::NodeStatus,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let id = id.into();
            self.apply_owned(index, $crate::Command::UpdateNodeStatus { id, status })
        }

        /// Sets a node's drain flag
        /// ([`Command::UpdateNodeDrain`](crate::Command::UpdateNodeDrain)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn update_node_drain(
            &self,
            index: u64,
            id: &str,
            drain: bool,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let id = id.into();
            self.apply_owned(index, $crate::Command::UpdateNodeDrain { id, drain })
        }

        /// Sets a node's scheduling eligibility
        /// ([`Command::UpdateNodeEligibility`](crate::Command::UpdateNodeEligibility)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn update_node_eligibility(
            &self,
            index: u64,
            id: &str,
            eligible: bool,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let id = id.into();
            self.apply_owned(
                index,
                $crate::Command::UpdateNodeEligibility { id, eligible },
            )
        }

        /// Upserts allocations; server-terminal ones remove the plugin instances they
        /// ran ([`Command::UpsertAllocs`](crate::Command::UpsertAllocs)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn upsert_allocs(
            &self,
            index: u64,
            allocs: Vec<$crate::model::Allocation>,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::UpsertAllocs { allocs })
        }

        /// Deletes allocations; missing ids are skipped
        /// ([`Command::DeleteAllocs`](crate::Command::DeleteAllocs)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn delete_allocs(
            &self,
            index: u64,
            ids: &[impl AsRef<str>],
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let ids = $crate::state::writes::to_ids(ids);
            self.apply_owned(index, $crate::Command::DeleteAllocs { ids })
        }

        /// Registers volumes, or updates their user fields; atomic
        /// ([`Command::RegisterCsiVolumes`](crate::Command::RegisterCsiVolumes)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn register_csi_volumes(
            &self,
            index: u64,
            volumes: Vec<$crate::model::CsiVolume>,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::RegisterCsiVolumes { volumes })
        }

        /// Deregisters volumes of one namespace; atomic
        /// ([`Command::DeregisterCsiVolumes`](crate::Command::DeregisterCsiVolumes)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn deregister_csi_volumes(
            &self,
            index: u64,
            namespace: &str,
            ids: &[impl AsRef<str>],
            force: bool,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let command = $crate::Command::DeregisterCsiVolumes {
                namespace: namespace.into(),
                ids: $crate::state::writes::to_ids(ids),
                force,
            };
            self.apply_owned(index, command)
        }

        /// Applies one claim, or one release step, to a volume
        /// ([`Command::ClaimCsiVolumes`](crate::Command::ClaimCsiVolumes) with one
        /// claim).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn claim_csi_volume(
            &self,
            index: u64,
            namespace: &str,
            volume_id: &str,
            claim: $crate::model::CsiVolumeClaim,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let claims = vec![$crate::CsiVolumeClaimRequest {
                namespace: namespace.into(),
                volume_id: volume_id.into(),
                claim,
            }];
            self.apply_owned(index, $crate::Command::ClaimCsiVolumes { claims })
        }

        /// Applies a batch of claims and release steps in order; atomic
        /// ([`Command::ClaimCsiVolumes`](crate::Command::ClaimCsiVolumes)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn claim_csi_volumes(
            &self,
            index: u64,
            claims: Vec<$crate::CsiVolumeClaimRequest>,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::ClaimCsiVolumes { claims })
        }

        /// Registers jobs or updates their definitions; atomic
        /// ([`Command::UpsertJobs`](crate::Command::UpsertJobs)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn upsert_jobs(
            &self,
            index: u64,
            jobs: Vec<$crate::model::Job>,
        ) -> ::std::result::Result<$crate::Commit, $err> {
            self.apply_owned(index, $crate::Command::UpsertJobs { jobs })
        }

        /// Stops jobs of one namespace; atomic
        /// ([`Command::StopJobs`](crate::Command::StopJobs)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn stop_jobs(
            &self,
            index: u64,
            namespace: &str,
            ids: &[impl AsRef<str>],
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let command = $crate::Command::StopJobs {
                namespace: namespace.into(),
                ids: $crate::state::writes::to_ids(ids),
            };
            self.apply_owned(index, command)
        }

        /// Purges jobs of one namespace; atomic
        /// ([`Command::PurgeJobs`](crate::Command::PurgeJobs)).
        ///
        /// # Errors
        /// See [`apply`](Self::apply).
        pub fn purge_jobs(
            &self,
            index: u64,
            namespace: &str,
            ids: &[impl AsRef<str>],
        ) -> ::std::result::Result<$crate::Commit, $err> {
            let command = $crate::Command::PurgeJobs {
                namespace: namespace.into(),
                ids: $crate::state::writes::to_ids(ids),
            };
            self.apply_owned(index, command)
        }
    };
}

pub(crate) use typed_writes;

/// Ids from any string slices (`&[Id]`, `&[&str]`, `&[String]`).
pub(crate) fn to_ids(ids: &[impl AsRef<str>]) -> Vec<crate::model::Id> {
    ids.iter()
        .map(|s| crate::model::Id::from(s.as_ref()))
        .collect()
}
