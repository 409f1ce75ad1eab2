//! The client's reads: the cluster's nodes, allocations, plugins, volumes and jobs,
//! in Nomad's JSON shapes, each with its index for a blocking query.

use schedstate::model::{AllocListStub, Allocation, CsiPlugin, CsiVolume, Job, Node};

use super::{Client, ClientError, Indexed, ReadOptions, path_segment};
use crate::api::PluginListStub;
use crate::api::nomad::{
    NomadAllocListStub, NomadAllocation, NomadCsiPlugin, NomadCsiVolume, NomadJob, NomadNode,
};

impl Client {
    /// `GET /v1/nodes` (whole nodes: `?full`).
    pub async fn nodes(&self, opts: ReadOptions) -> Result<Indexed<Vec<Node>>, ClientError> {
        self.list_as::<NomadNode, Node>("/v1/nodes", &[], opts)
            .await
    }

    /// `GET /v1/node/<id>`.
    pub async fn node(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Node>>, ClientError> {
        let path = format!("/v1/node/{}", path_segment(id));
        self.get_as::<NomadNode, Node>(&path, &[], opts).await
    }

    /// `GET /v1/node/<id>/allocations`.
    pub async fn node_allocations(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Vec<Allocation>>>, ClientError> {
        let path = format!("/v1/node/{}/allocations", path_segment(id));
        let r = self.get::<Vec<NomadAllocation>>(&path, &[], opts).await?;
        let value = r
            .value
            .map(|list| {
                list.into_iter()
                    .map(|a| Allocation::try_from(a).map_err(|e| self.shape_error(&path, &e)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
    }

    /// `GET /v1/allocations?namespace=` (every namespace when `None`; whole
    /// allocations: `?full`).
    pub async fn allocations(
        &self,
        namespace: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<Allocation>>, ClientError> {
        let ns = namespace.unwrap_or("*");
        self.list_as::<NomadAllocation, Allocation>("/v1/allocations", &[("namespace", ns)], opts)
            .await
    }

    /// `GET /v1/allocation/<id>`.
    pub async fn allocation(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Allocation>>, ClientError> {
        let path = format!("/v1/allocation/{}", path_segment(id));
        self.get_as::<NomadAllocation, Allocation>(&path, &[], opts)
            .await
    }

    /// `GET /v1/plugins` (whole plugins, summed up as list rows).
    pub async fn plugins(
        &self,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<PluginListStub>>, ClientError> {
        let r = self
            .list_as::<NomadCsiPlugin, CsiPlugin>("/v1/plugins", &[], opts)
            .await?;
        Ok(Indexed {
            value: r.value.iter().map(PluginListStub::of).collect(),
            index: r.index,
        })
    }

    /// `GET /v1/plugin/csi/<id>`: the plugin with its allocations filled in.
    pub async fn plugin(
        &self,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<CsiPlugin>>, ClientError> {
        let path = format!("/v1/plugin/csi/{}", path_segment(id));
        self.get_as::<NomadCsiPlugin, CsiPlugin>(&path, &[], opts)
            .await
    }

    /// `GET /v1/volumes?namespace=&prefix=` (every namespace when `namespace` is
    /// `None`): denormalized, secrets redacted.
    pub async fn volumes(
        &self,
        namespace: Option<&str>,
        prefix: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<CsiVolume>>, ClientError> {
        let mut extra = vec![("namespace", namespace.unwrap_or("*"))];
        if let Some(p) = prefix {
            extra.push(("prefix", p));
        }
        self.list_as::<NomadCsiVolume, CsiVolume>("/v1/volumes", &extra, opts)
            .await
    }

    /// `GET /v1/volume/csi/<id>?namespace=`: denormalized, secrets redacted.
    pub async fn volume(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<CsiVolume>>, ClientError> {
        let path = format!("/v1/volume/csi/{}", path_segment(id));
        self.get_as::<NomadCsiVolume, CsiVolume>(&path, &[("namespace", namespace)], opts)
            .await
    }

    /// `GET /v1/jobs?namespace=` (every namespace when `None`; whole jobs: `?full`),
    /// in (namespace, id) order.
    pub async fn jobs(
        &self,
        namespace: Option<&str>,
        opts: ReadOptions,
    ) -> Result<Indexed<Vec<Job>>, ClientError> {
        let ns = namespace.unwrap_or("*");
        self.list_as::<NomadJob, Job>("/v1/jobs", &[("namespace", ns)], opts)
            .await
    }

    /// `GET /v1/job/<id>?namespace=`: answers with the job's modify index, so a
    /// blocking read with it wakes on a write of this job only.
    pub async fn job(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Job>>, ClientError> {
        let path = format!("/v1/job/{}", path_segment(id));
        self.get_as::<NomadJob, Job>(&path, &[("namespace", namespace)], opts)
            .await
    }

    /// `GET /v1/job/<id>/allocations?namespace=`: the job's allocations as stubs
    /// (`None` when neither the job nor an allocation of it exists).
    pub async fn job_allocations(
        &self,
        namespace: &str,
        id: &str,
        opts: ReadOptions,
    ) -> Result<Indexed<Option<Vec<AllocListStub>>>, ClientError> {
        let path = format!("/v1/job/{}/allocations", path_segment(id));
        let r = self
            .get::<Vec<NomadAllocListStub>>(&path, &[("namespace", namespace)], opts)
            .await?;
        let value = r
            .value
            .map(|list| {
                list.into_iter()
                    .map(|a| {
                        Allocation::try_from(a)
                            .map(|a| AllocListStub::new(std::sync::Arc::new(a)))
                            .map_err(|e| self.shape_error(&path, &e))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(Indexed {
            value,
            index: r.index,
        })
    }
}
