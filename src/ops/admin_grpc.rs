//! The operator API (`proto/admin.proto`): a replica's role and position, the
//! ensemble as it sees it, its log (paged, filtered, followed live), its
//! snapshots, sessions and watches. Storage is read on blocking threads, and
//! every answer's memory is bounded: pages by a byte budget, streams through
//! small channels that wait for the client (backpressure).

use crate::runtime::handle::{Event, Handle, Query};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use zabkeeper_core::ids::{SessionId, Zxid};
use zabkeeper_core::members::{Configuration, Member};
use zabkeeper_core::storage::{SnapshotMeta, Storage, StorageError};
use zabkeeper_datadir::{convert, log, snapshots};
use zabkeeper_proto::admin as pb;

/// Most log entries one ReadLog call returns.
pub const MAX_LOG_ENTRIES: u32 = log::MAX_ENTRIES as u32;
/// Entries read from storage per step of a Follow stream.
const FOLLOW_BATCH: usize = 256;
/// How long Status waits to open a TCP connection to a member's peer port.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

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

/// Refuses every call without `authorization: Bearer <token>` when a token
/// is configured (tonic runs it before each call).
pub fn authenticate(token: Option<Arc<str>>) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        let Some(expected) = &token else { return Ok(request) };
        let given = request.metadata().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
        let given = given.strip_prefix("Bearer ").unwrap_or("");
        if equal_in_constant_time(given.as_bytes(), expected.as_bytes()) {
            Ok(request)
        } else {
            Err(Status::unauthenticated("this admin API needs its token: authorization: Bearer <token>"))
        }
    }
}

/// Compares without returning early, so timing does not reveal how much of a
/// guess was right (the admin gRPC API and the HTTP commands check tokens with it).
pub(crate) fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    // Every byte of the longer is looked at, so the time tells neither where
    // they differ nor the token's length (only the longer one's).
    let longest = a.len().max(b.len());
    let differ = (0..longest).fold(u8::from(a.len() != b.len()), |acc, i| {
        acc | (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0))
    });
    differ == 0
}

fn unavailable() -> Status {
    Status::unavailable("the replica is shutting down")
}

fn storage_error(e: StorageError) -> Status {
    Status::internal(format!("storage: {e}"))
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Runs a storage read on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(e.to_string()))?.map_err(storage_error)
}

/// The stored snapshot at `zxid`, or the newest when `zxid` is 0.
fn find_snapshot(storage: &dyn Storage, zxid: u64) -> Result<SnapshotMeta, Status> {
    snapshots::find(storage, zxid).map_err(storage_error)?.ok_or_else(|| match zxid {
        0 => Status::not_found("this member holds no snapshot yet (take one: zkctl admin snapshot take)"),
        z => {
            Status::not_found(format!("no snapshot at zxid 0x{z:x} on this member (list them: zkctl admin snapshots)"))
        }
    })
}

fn filter_of(path_prefix: String, session: Option<i64>, kind: String) -> Result<log::Filter, Status> {
    if !kind.is_empty() && !log::KINDS.contains(&kind.as_str()) {
        return Err(Status::invalid_argument(format!(
            "unknown transaction type {kind:?}; known: {}",
            log::KINDS.join(", ")
        )));
    }
    Ok(log::Filter {
        path_prefix: (!path_prefix.is_empty()).then_some(path_prefix),
        session: session.map(SessionId),
        kind: (!kind.is_empty()).then_some(kind),
    })
}

/// Whether `addr` accepts a TCP connection now (a name is resolved afresh).
async fn reachable(addr: &zabkeeper_config::HostPort) -> bool {
    let connect = tokio::net::TcpStream::connect((addr.host(), addr.port()));
    matches!(tokio::time::timeout(PROBE_TIMEOUT, connect).await, Ok(Ok(_)))
}

type Sent<T> = Result<Response<ReceiverStream<Result<T, Status>>>, Status>;

#[tonic::async_trait]
impl pb::admin_server::Admin for AdminService {
    type FollowStream = ReceiverStream<Result<pb::LogEntry, Status>>;
    type FollowRawStream = ReceiverStream<Result<pb::LogEntry, Status>>;
    type SaveSnapshotStream = ReceiverStream<Result<pb::SnapshotChunk, Status>>;
    type InspectSnapshotStream = ReceiverStream<Result<pb::SnapshotNode, Status>>;

    async fn status(&self, _: Request<pb::StatusRequest>) -> Result<Response<pb::StatusReply>, Status> {
        let r = self.handle.status_report().await.ok_or_else(unavailable)?;
        let config = &self.handle.config;
        // The members are the replicated configuration's (the shape the
        // ensemble has now); an address it does not know (a member added
        // with a ZooKeeper line, whose leader had not heard from it) comes
        // from this member's file, if that lists the member.
        let known = |replicated: &str, file: &str| if replicated.is_empty() { file } else { replicated }.to_string();
        let configuration =
            crate::ops::membership_change::configuration(&self.handle).await.map_err(|_| unavailable())?;
        let probes = configuration.members().map(|m| async move {
            let listed = config.members.iter().find(|f| f.id == m.id).map(zabkeeper_config::Member::endpoints);
            let listed = listed.unwrap_or_default();
            let peer_addr = zabkeeper_config::HostPort::peer_of(m);
            let is_self = m.id == config.id;
            let reachable = is_self
                || match &peer_addr {
                    Some(addr) => reachable(addr).await,
                    None => false,
                };
            pb::MemberInfo {
                id: m.id,
                peer_addr: peer_addr.map(|a| a.to_string()).unwrap_or_default(),
                grpc_addr: known(&m.endpoints.grpc, &listed.grpc),
                client_addr: m.client_address.clone(),
                admin_addr: known(&m.endpoints.admin, &listed.admin),
                reachable,
                is_self,
            }
        });
        let members = futures::future::join_all(probes).await;
        let storage = self.handle.storage.clone();
        let last_snapshot_zxid = blocking(move || storage.snapshots()).await?.last().map_or(0, |s| s.zxid.0);
        let disk = crate::ops::facts::disk_usage(config).await;
        Ok(Response::new(pb::StatusReply {
            server_id: r.id,
            role: config.role_name(r.status.role).into(),
            leader_id: r.status.leader.unwrap_or(0),
            accepted_epoch: r.accepted_epoch,
            current_epoch: r.current_epoch,
            last_logged_zxid: r.last_logged.0,
            last_committed_zxid: r.last_committed.0,
            last_applied_zxid: r.last_applied.0,
            node_count: count(r.nodes),
            session_count: count(r.sessions),
            connection_count: count(r.connections),
            watch_count: count(r.watches),
            synced_followers: r.synced_followers,
            ensemble_size: count(r.ensemble_size),
            last_snapshot_zxid,
            serving: r.status.serving,
            data_bytes: r.data_bytes,
            uptime_ms: u64::try_from(self.handle.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            version: env!("CARGO_PKG_VERSION").into(),
            followers: r
                .followers
                .iter()
                .map(|f| pb::FollowerStatus { id: f.id, synced: f.synced, acked_zxid: f.acked.0, lag: f.lag })
                .collect(),
            members,
            ephemeral_count: count(r.ephemerals),
            last_snapshot_error: r.last_snapshot_error.unwrap_or_default(),
            disk_free_bytes: r.disk_free_bytes.unwrap_or(0),
            disk_low: r.disk_low,
            disk_usage: Some(pb::DiskUsage {
                log_bytes: disk.log,
                snapshot_bytes: disk.snapshots,
                sled_bytes: disk.sled,
                other_bytes: disk.other,
            }),
        }))
    }

    async fn read_log(&self, request: Request<pb::ReadLogRequest>) -> Result<Response<pb::ReadLogReply>, Status> {
        let req = request.into_inner();
        let raw = req.raw;
        let query = log::Query {
            from: Zxid(req.from_zxid),
            to: if req.to_zxid == 0 { Zxid(u64::MAX) } else { Zxid(req.to_zxid) },
            last: (req.last > 0).then_some(req.last as usize),
            limit: if req.limit == 0 { 100 } else { req.limit.min(MAX_LOG_ENTRIES) as usize },
            max_bytes: if req.max_bytes == 0 { log::DEFAULT_MAX_BYTES } else { req.max_bytes.min(log::MAX_BYTES) },
            filter: filter_of(req.path_prefix, req.session_id, req.r#type)?,
        };
        let committed = self.handle.status_report().await.ok_or_else(unavailable)?.last_committed;
        let storage = self.handle.storage.clone();
        let (page, bounds) = blocking(move || Ok((log::read(&*storage, &query)?, storage.log_bounds()?))).await?;
        let (first, last) = bounds.map_or((0, 0), |(f, l)| (f.0, l.0));
        Ok(Response::new(pb::ReadLogReply {
            entries: page
                .entries
                .iter()
                .map(|e| if raw { convert::entry_with_raw(e, committed) } else { convert::entry(e, committed) })
                .collect(),
            first_zxid: first,
            last_zxid: last,
            next_zxid: page.next.map_or(0, |z| z.0),
            last_committed_zxid: committed.0,
        }))
    }

    async fn get_entry(&self, request: Request<pb::GetEntryRequest>) -> Result<Response<pb::LogEntry>, Status> {
        let zxid = Zxid(request.into_inner().zxid);
        let committed = self.handle.status_report().await.ok_or_else(unavailable)?.last_committed;
        let storage = self.handle.storage.clone();
        match blocking(move || log::entry(&*storage, zxid)).await? {
            Some(e) => Ok(Response::new(convert::entry(&e, committed))),
            None => Err(Status::not_found(format!(
                "no entry 0x{:x} in this member's log (purged, or never written)",
                zxid.0
            ))),
        }
    }

    async fn follow(&self, request: Request<pb::FollowRequest>) -> Sent<pb::LogEntry> {
        self.follow_entries(request.into_inner(), false).await
    }

    async fn follow_raw(&self, request: Request<pb::FollowRequest>) -> Sent<pb::LogEntry> {
        self.follow_entries(request.into_inner(), true).await
    }

    async fn list_snapshots(
        &self,
        _: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<pb::ListSnapshotsReply>, Status> {
        let storage = self.handle.storage.clone();
        let snapshots = blocking(move || storage.snapshots()).await?;
        Ok(Response::new(pb::ListSnapshotsReply { snapshots: snapshots.iter().map(snapshots::info).collect() }))
    }

    async fn take_snapshot(
        &self,
        _: Request<pb::TakeSnapshotRequest>,
    ) -> Result<Response<pb::TakeSnapshotReply>, Status> {
        let (tx, rx) = oneshot::channel();
        self.handle.events.send(Event::Query(Query::TakeSnapshot(tx))).await.map_err(|_| unavailable())?;
        let zxid =
            rx.await.map_err(|_| unavailable())?.map_err(|e| Status::internal(format!("snapshot failed: {e}")))?;
        let storage = self.handle.storage.clone();
        let meta = blocking(move || storage.snapshots()).await?.into_iter().find(|s| s.zxid == zxid);
        Ok(Response::new(pb::TakeSnapshotReply {
            zxid: zxid.0,
            size_bytes: meta.map_or(0, |m| m.bytes),
            node_count: meta.map_or(0, |m| m.nodes),
        }))
    }

    async fn save_snapshot(&self, request: Request<pb::SaveSnapshotRequest>) -> Sent<pb::SnapshotChunk> {
        let storage = self.handle.storage.clone();
        let meta = find_snapshot(&*storage, request.into_inner().zxid)?;
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            for index in 0..meta.chunks {
                let item = match storage.snapshot_chunk(meta.zxid, index) {
                    Ok(Some(data)) => {
                        Ok(pb::SnapshotChunk { zxid: meta.zxid.0, index, count: meta.chunks, data: data.to_vec() })
                    }
                    Ok(None) => Err(Status::not_found("the snapshot was purged while it was being read")),
                    Err(e) => Err(storage_error(e)),
                };
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn inspect_snapshot(&self, request: Request<pb::InspectSnapshotRequest>) -> Sent<pb::SnapshotNode> {
        let req = request.into_inner();
        let storage = self.handle.storage.clone();
        let meta = find_snapshot(&*storage, req.zxid)?;
        let (tx, rx) = mpsc::channel(256);
        tokio::task::spawn_blocking(move || {
            let limit = if req.limit == 0 { u64::MAX } else { req.limit };
            let chunks = snapshots::stored_chunks(&*storage, meta);
            let walked =
                snapshots::nodes(chunks, &req.path_prefix, limit, &mut |node| tx.blocking_send(Ok(node)).is_ok());
            let status = match walked {
                Ok(()) => return,
                Err(snapshots::WalkError::Storage(e)) => storage_error(e),
                Err(e @ snapshots::WalkError::Missing { .. }) => Status::not_found(e.to_string()),
                Err(e @ snapshots::WalkError::Damaged(_)) => {
                    Status::data_loss(format!("snapshot 0x{:x}: {e}", meta.zxid.0))
                }
            };
            let _ = tx.blocking_send(Err(status));
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn purge(&self, request: Request<pb::PurgeRequest>) -> Result<Response<pb::PurgeReply>, Status> {
        let keep = request.into_inner().keep;
        if keep == 0 {
            return Err(Status::invalid_argument("keep must be at least 1: a member always keeps a snapshot"));
        }
        let storage = self.handle.storage.clone();
        let (report, log_floor) = blocking(move || Ok((storage.purge(keep as usize)?, storage.log_floor()?))).await?;
        // A DIFF must no longer reach into what was purged.
        let purged = Event::Input(zabkeeper_core::replica::Input::LogPurged { log_floor });
        self.handle.events.send(purged).await.map_err(|_| unavailable())?;
        tracing::info!(
            keep,
            snapshots = report.snapshots_removed,
            entries = report.entries_removed,
            "purged by admin request"
        );
        Ok(Response::new(pb::PurgeReply {
            snapshots_removed: count(report.snapshots_removed),
            entries_removed: count(report.entries_removed),
        }))
    }

    async fn list_sessions(
        &self,
        _: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsReply>, Status> {
        let details = self.handle.details().await.ok_or_else(unavailable)?;
        let now_ms = zabkeeper_store::clock::now_ms();
        let sessions = details
            .sessions
            .iter()
            .map(|(id, timeout_ms)| {
                let conn = details.connections.iter().find(|c| c.session == Some(*id));
                let ephemerals = details
                    .ephemerals
                    .iter()
                    .find(|(s, _)| s == id)
                    .map(|(_, paths)| paths.clone())
                    .unwrap_or_default();
                pb::SessionInfo {
                    id: id.0,
                    timeout_ms: *timeout_ms,
                    local: conn.is_some(),
                    connection: conn.map_or(0, |c| c.conn),
                    last_heard_ms_ago: conn.map_or(-1, |c| (now_ms - c.last_heard_ms).max(0)),
                    ephemerals,
                }
            })
            .collect();
        Ok(Response::new(pb::ListSessionsReply { sessions }))
    }

    async fn list_watches(&self, _: Request<pb::ListWatchesRequest>) -> Result<Response<pb::ListWatchesReply>, Status> {
        let details = self.handle.details().await.ok_or_else(unavailable)?;
        Ok(Response::new(pb::ListWatchesReply {
            sessions: details
                .watches
                .into_iter()
                .map(|(session, paths)| pb::SessionWatches { session_id: session.0, paths })
                .collect(),
        }))
    }

    async fn transfer_leadership(
        &self,
        request: Request<pb::TransferLeadershipRequest>,
    ) -> Result<Response<pb::TransferLeadershipReply>, Status> {
        use crate::ops::handover::{hand_over, HandoverError};
        let r = request.into_inner();
        let to = (r.to != 0).then_some(r.to);
        let wait = Duration::from_millis(if r.wait_ms == 0 { 10_000 } else { u64::from(r.wait_ms) });
        match hand_over(&self.handle, to, wait).await {
            Ok(h) => Ok(Response::new(pb::TransferLeadershipReply {
                from: h.from,
                to: h.to,
                took_ms: u64::try_from(h.took.as_millis()).unwrap_or(u64::MAX),
            })),
            Err(HandoverError::Stopped) => Err(unavailable()),
            Err(e @ (HandoverError::NotLeader { .. } | HandoverError::Refused(_))) => {
                Err(Status::failed_precondition(e.to_string()))
            }
            Err(e @ (HandoverError::Abandoned(_) | HandoverError::TimedOut(..))) => {
                Err(Status::deadline_exceeded(e.to_string()))
            }
        }
    }

    async fn reconfigure(
        &self,
        request: Request<pb::ReconfigureRequest>,
    ) -> Result<Response<pb::ConfigurationReply>, Status> {
        use crate::ops::membership_change::{reconfigure, ReconfigError};
        use zabkeeper_core::replica::reconfig::{MemberChange, ReconfigError as Refusal};
        let r = request.into_inner();
        let joining = r.add.iter().map(|line| Member::parse(line)).collect::<Result<Vec<_>, _>>();
        let joining = joining.map_err(|e| Status::invalid_argument(e.to_string()))?;
        let change = MemberChange {
            joining,
            leaving: r.remove,
            promoted: r.promote,
            members: None,
            expected_version: r.expected_version.map(Zxid),
        };
        let wait = Duration::from_millis(if r.wait_ms == 0 { 10_000 } else { u64::from(r.wait_ms) });
        match reconfigure(&self.handle, change, wait).await {
            Ok(done) => {
                let mut reply = configuration_reply(&done.configuration);
                reply.took_ms = u64::try_from(done.took.as_millis()).unwrap_or(u64::MAX);
                Ok(Response::new(reply))
            }
            Err(ReconfigError::Stopped) => Err(unavailable()),
            Err(e @ ReconfigError::TimedOut(..)) => Err(Status::deadline_exceeded(e.to_string())),
            Err(ReconfigError::Refused(e @ (Refusal::Empty | Refusal::Invalid(_)))) => {
                Err(Status::invalid_argument(e.to_string()))
            }
            Err(ReconfigError::Refused(e @ Refusal::BadVersion { .. })) => Err(Status::aborted(e.to_string())),
            Err(ReconfigError::Refused(e)) => Err(Status::failed_precondition(e.to_string())),
        }
    }

    async fn load_tree(
        &self,
        request: Request<tonic::Streaming<pb::LoadTreeChunk>>,
    ) -> Result<Response<pb::LoadTreeReply>, Status> {
        use zabkeeper_core::replica::load::MAX_LOAD_BYTES;
        let mut stream = request.into_inner();
        let (mut all, mut first) = (Vec::new(), None);
        while let Some(chunk) = stream.message().await? {
            let bytes = all.len() + chunk.data.len();
            if bytes > MAX_LOAD_BYTES {
                return Err(Status::invalid_argument(
                    zabkeeper_core::replica::load::LoadError::TooLarge { bytes }.to_string(),
                ));
            }
            first.get_or_insert((chunk.epoch, chunk.wait_ms));
            all.extend_from_slice(&chunk.data);
        }
        let chunks = zabkeeper_core::replica::load::in_pieces(bytes::Bytes::from(all));
        let (epoch, wait_ms) = first.unwrap_or((0, 0));
        let wait = Duration::from_millis(if wait_ms == 0 { 30_000 } else { u64::from(wait_ms) });
        let done = crate::ops::tree_load::load_tree(&self.handle, chunks, epoch, wait).await.map_err(load_status)?;
        Ok(Response::new(pb::LoadTreeReply {
            zxid: done.zxid.0,
            nodes: count(done.nodes),
            epoch: done.epoch,
            took_ms: u64::try_from(done.took.as_millis()).unwrap_or(u64::MAX),
        }))
    }

    async fn get_configuration(
        &self,
        _: Request<pb::GetConfigurationRequest>,
    ) -> Result<Response<pb::ConfigurationReply>, Status> {
        let configuration =
            crate::ops::membership_change::configuration(&self.handle).await.map_err(|_| unavailable())?;
        Ok(Response::new(configuration_reply(&configuration)))
    }
}

/// The status a refused or unfinished load answers with.
pub(crate) fn load_status(e: crate::ops::tree_load::LoadTreeError) -> Status {
    use crate::ops::tree_load::LoadTreeError as E;
    use zabkeeper_core::replica::load::LoadError as Refusal;
    match e {
        E::Stopped => unavailable(),
        E::TimedOut(..) => Status::deadline_exceeded(e.to_string()),
        E::Refused(Refusal::TooLarge { .. } | Refusal::EpochTooLarge { .. }) => Status::invalid_argument(e.to_string()),
        E::Refused(Refusal::Refused(zabkeeper_core::tree::LoadRefusal::Unreadable(_))) => {
            Status::invalid_argument(e.to_string())
        }
        E::Refused(Refusal::Busy(_)) => Status::unavailable(e.to_string()),
        E::Refused(Refusal::NotLeader { .. } | Refusal::Refused(_))
        | E::NotApplied { .. }
        | E::MemberCannotLoad { .. } => Status::failed_precondition(e.to_string()),
    }
}

impl AdminService {
    /// The Follow stream, with each entry's stored bytes when `raw`.
    async fn follow_entries(&self, req: pb::FollowRequest, raw: bool) -> Sent<pb::LogEntry> {
        let filter = filter_of(req.path_prefix, req.session_id, req.r#type)?;
        let mut applied = self.handle.applied.clone();
        let start = match req.from_zxid {
            0 => Zxid(applied.borrow().0.saturating_add(1)),
            z => Zxid(z),
        };
        let storage = self.handle.storage.clone();
        let check = storage.clone();
        if let Err(purged) = blocking(move || log::available_from(&*check, start)).await? {
            return Err(Status::out_of_range(purged.to_string()));
        }
        if raw && req.from_zxid != 0 {
            // A backup goes on from the last transaction it holds: this
            // member must hold that one too, or what it streams after it
            // may leave some out (see `log::holds`).
            let after = Zxid(start.0 - 1);
            let check = storage.clone();
            if !blocking(move || log::holds(&*check, after)).await? {
                return Err(Status::out_of_range(format!(
                    "this member does not hold {after}, the transaction the stream would follow (it took a leader's snapshot past it, or purged it)"
                )));
            }
        }
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut next = start;
            loop {
                let bound = *applied.borrow_and_update();
                if next <= bound {
                    let storage = storage.clone();
                    let filter = filter.clone();
                    // The log on disk can trail the tree by a flush: read up
                    // to what it holds, and come back for the rest.
                    let step = blocking(move || {
                        if let Err(purged) = log::available_from(&*storage, next)? {
                            return Ok(Err(purged));
                        }
                        let held = storage.log_bounds()?.map_or(Zxid::ZERO, |(_, last)| last).min(bound);
                        let query =
                            log::Query { from: next, to: held, limit: FOLLOW_BATCH, filter, ..log::Query::default() };
                        Ok(Ok((log::read(&*storage, &query)?, held)))
                    })
                    .await;
                    let (page, held) = match step {
                        Ok(Ok(read)) => read,
                        Ok(Err(purged)) => {
                            let _ = tx.send(Err(Status::out_of_range(purged.to_string()))).await;
                            return;
                        }
                        Err(status) => {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                    };
                    for entry in &page.entries {
                        // Only committed entries reach here (at most `bound`).
                        let shown =
                            if raw { convert::entry_with_raw(entry, bound) } else { convert::entry(entry, bound) };
                        if tx.send(Ok(shown)).await.is_err() {
                            return;
                        }
                    }
                    match page.next {
                        Some(z) => next = z,
                        None if held >= next => next = Zxid(held.0.saturating_add(1)),
                        None => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                    continue;
                }
                tokio::select! {
                    changed = applied.changed() => if changed.is_err() {
                        let _ = tx.send(Err(unavailable())).await;
                        return;
                    },
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A configuration as the admin API shows it.
fn configuration_reply(c: &Configuration) -> pb::ConfigurationReply {
    let members = |m: &zabkeeper_core::members::Membership| -> Vec<pb::ConfigMember> {
        m.members()
            .iter()
            .map(|m| pb::ConfigMember {
                id: m.id,
                role: m.participation.name().into(),
                peer_address: m.peer_address.clone(),
                client_address: m.client_address.clone(),
                endpoints: m.endpoints.text(),
            })
            .collect()
    };
    pb::ConfigurationReply {
        version: c.version.0,
        joint: c.is_joint(),
        members: members(c.current()),
        previous: if c.is_joint() { members(&c.active) } else { Vec::new() },
        text: c.zookeeper_text(),
        took_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_checked_whole() {
        let mut check = authenticate(Some(Arc::from("s3cret")));
        let with = |value: &str| {
            let mut r = Request::new(());
            r.metadata_mut().insert("authorization", value.parse().unwrap());
            r
        };
        assert!(check(with("Bearer s3cret")).is_ok());
        for wrong in ["Bearer s3cre", "Bearer s3cret2", "s3cret", "Bearer "] {
            assert_eq!(check(with(wrong)).unwrap_err().code(), tonic::Code::Unauthenticated, "{wrong}");
        }
        assert_eq!(check(Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(authenticate(None)(Request::new(())).is_ok(), "no token configured: open");
    }
}
