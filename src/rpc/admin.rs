//! The operator API (`proto/admin.proto`): a replica's role and position, and
//! a view into its transaction log and snapshots.

use crate::handle::{Event, Handle, Query};
use crate::ids::Zxid;
use crate::proto::admin as pb;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

/// Most log entries one ReadLog call returns.
pub const MAX_LOG_ENTRIES: u32 = 10_000;

/// Serves the admin API.
pub struct AdminService {
    handle: Handle,
}

impl AdminService {
    /// A service in front of `handle`'s replica.
    pub fn new(handle: Handle) -> AdminService {
        AdminService { handle }
    }
}

fn unavailable() -> Status {
    Status::unavailable("the replica is shutting down")
}

fn storage_error(e: crate::storage::StorageError) -> Status {
    Status::internal(format!("storage: {e}"))
}

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    async fn status(&self, _: Request<pb::StatusRequest>) -> Result<Response<pb::StatusReply>, Status> {
        let r = self.handle.status_report().await.ok_or_else(unavailable)?;
        let last_snapshot_zxid = self.handle.storage.snapshots().map_err(storage_error)?.last().map_or(0, |s| s.zxid.0);
        Ok(Response::new(pb::StatusReply {
            server_id: r.id,
            role: r.status.role.name(self.handle.config.standalone()).into(),
            leader_id: r.status.leader.unwrap_or(0),
            accepted_epoch: r.accepted_epoch,
            current_epoch: r.current_epoch,
            last_logged_zxid: r.last_logged.0,
            last_committed_zxid: r.last_committed.0,
            last_applied_zxid: r.last_applied.0,
            node_count: u64::try_from(r.nodes).unwrap_or(u64::MAX),
            session_count: u64::try_from(r.sessions).unwrap_or(u64::MAX),
            connection_count: u64::try_from(r.connections).unwrap_or(u64::MAX),
            watch_count: u64::try_from(r.watches).unwrap_or(u64::MAX),
            synced_followers: r.synced_followers,
            ensemble_size: u64::try_from(r.ensemble_size).unwrap_or(u64::MAX),
            last_snapshot_zxid,
            serving: r.status.serving,
        }))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogReply>, Status> {
        let req = request.into_inner();
        let limit = if req.limit == 0 { 100 } else { req.limit.min(MAX_LOG_ENTRIES) } as usize;
        let storage = self.handle.storage.clone();
        let (entries, bounds) = tokio::task::spawn_blocking(move || {
            let entries = storage.read_log(Zxid(req.from_zxid), limit)?;
            let bounds = storage.log_bounds()?;
            Ok::<_, crate::storage::StorageError>((entries, bounds))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(storage_error)?;
        let (first, last) = bounds.map_or((0, 0), |(f, l)| (f.0, l.0));
        Ok(Response::new(pb::ReadLogReply {
            entries: entries
                .into_iter()
                .map(|e| pb::LogEntry {
                    zxid: e.zxid.0,
                    session_id: e.txn.session.0,
                    cxid: e.txn.cxid,
                    time_ms: e.txn.time_ms,
                    description: e.txn.body.to_string(),
                    size_bytes: u32::try_from(crate::txn::codec::encode(&e.txn).len()).unwrap_or(u32::MAX),
                })
                .collect(),
            first_zxid: first,
            last_zxid: last,
        }))
    }

    async fn list_snapshots(
        &self,
        _: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsReply>, Status> {
        let snapshots = self.handle.storage.snapshots().map_err(storage_error)?;
        Ok(Response::new(pb::ListSnapshotsReply {
            snapshots: snapshots
                .into_iter()
                .map(|s| pb::SnapshotInfo { zxid: s.zxid.0, size_bytes: s.bytes, node_count: 0 })
                .collect(),
        }))
    }

    async fn take_snapshot(
        &self,
        _: Request<pb::TakeSnapshotRequest>,
    ) -> Result<Response<pb::TakeSnapshotReply>, Status> {
        let (tx, rx) = oneshot::channel();
        self.handle.events.send(Event::Query(Query::TakeSnapshot(tx))).await.map_err(|_| unavailable())?;
        let zxid = rx.await.map_err(|_| unavailable())?.map_err(Status::internal)?;
        Ok(Response::new(pb::TakeSnapshotReply { zxid: zxid.0 }))
    }
}
