//! The jute records clients send and receive, field for field as
//! `zookeeper.jute` declares them (module `org.apache.zookeeper.proto` and the
//! shared `org.apache.zookeeper.data` records). Field order is wire order.
//!
//! `Stat`, `Id` and `ACL` are our model's own types ([`Stat`], [`Id`],
//! [`Acl`]), given their jute encoding here. `ConnectRequest` and
//! `ConnectResponse` are written by hand: their trailing `readOnly` is
//! optional on the wire.

use super::jute::{Jute, JuteError, Reader, Writer};
use crate::acl::{Acl, Id};
use crate::data::Data;
use crate::tree::stat::Stat;
use bytes::Bytes;

/// `KeeperState.SyncConnected`, the state every server notification carries.
pub const STATE_SYNC_CONNECTED: i32 = 3;

/// Declares a jute record: a struct whose fields are read and written in
/// declaration order, errors naming `Record.field`.
macro_rules! record {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl Jute for $name {
            const MIN_LEN: usize = 0 $(+ <$ty as Jute>::MIN_LEN)*;

            fn write(&self, w: &mut Writer) {
                $(Jute::write(&self.$field, w);)*
            }

            fn read(r: &mut Reader<'_>, _field: &'static str) -> Result<Self, JuteError> {
                Ok($name {
                    $($field: <$ty as Jute>::read(r, concat!(stringify!($name), ".", stringify!($field)))?,)*
                })
            }
        }

        #[cfg(test)]
        impl crate::wire::tests::gen::Gen for $name {
            fn strategy() -> proptest::strategy::BoxedStrategy<Self> {
                use crate::wire::tests::gen::Gen;
                use proptest::strategy::Strategy;
                ($(<$ty as Gen>::strategy(),)*)
                    .prop_map(|($($field,)*)| $name { $($field,)* })
                    .boxed()
            }
        }
    };
}

impl Jute for Stat {
    const MIN_LEN: usize = 68;

    fn write(&self, w: &mut Writer) {
        w.long(self.czxid);
        w.long(self.mzxid);
        w.long(self.ctime);
        w.long(self.mtime);
        w.int(self.version);
        w.int(self.cversion);
        w.int(self.aversion);
        w.long(self.ephemeral_owner);
        w.int(self.data_length);
        w.int(self.num_children);
        w.long(self.pzxid);
    }

    fn read(r: &mut Reader<'_>, _field: &'static str) -> Result<Self, JuteError> {
        Ok(Stat {
            czxid: r.long("Stat.czxid")?,
            mzxid: r.long("Stat.mzxid")?,
            ctime: r.long("Stat.ctime")?,
            mtime: r.long("Stat.mtime")?,
            version: r.int("Stat.version")?,
            cversion: r.int("Stat.cversion")?,
            aversion: r.int("Stat.aversion")?,
            ephemeral_owner: r.long("Stat.ephemeralOwner")?,
            data_length: r.int("Stat.dataLength")?,
            num_children: r.int("Stat.numChildren")?,
            pzxid: r.long("Stat.pzxid")?,
        })
    }
}

impl Jute for Id {
    const MIN_LEN: usize = 8;

    fn write(&self, w: &mut Writer) {
        w.ustring(&self.scheme);
        w.ustring(&self.id);
    }

    fn read(r: &mut Reader<'_>, _field: &'static str) -> Result<Self, JuteError> {
        Ok(Id { scheme: r.ustring("Id.scheme")?, id: r.ustring("Id.id")? })
    }
}

impl Jute for Acl {
    const MIN_LEN: usize = 12;

    fn write(&self, w: &mut Writer) {
        w.int(self.perms);
        self.id.write(w);
    }

    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, JuteError> {
        Ok(Acl { perms: r.int("ACL.perms")?, id: Id::read(r, field)? })
    }
}

/// The first frame of a connection (no RequestHeader before it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Always 0.
    pub protocol_version: i32,
    /// The newest zxid the client has seen; a server behind it must refuse.
    pub last_zxid_seen: i64,
    /// Requested session timeout, ms.
    pub timeout_ms: i32,
    /// 0 for a new session, else the session to resume.
    pub session_id: i64,
    /// The session password (16 bytes; zeros for a new session).
    pub passwd: Bytes,
    /// Whether the client accepts a read-only server; `None` when the client
    /// (3.3 or older) did not send the field, so the reply must omit it too.
    pub read_only: Option<bool>,
}

impl ConnectRequest {
    /// Reads the record; `readOnly` is read only if bytes remain after
    /// `passwd` (ZooKeeper's `ProtocolManager` probes the same way).
    pub fn read(r: &mut Reader<'_>) -> Result<ConnectRequest, JuteError> {
        Ok(ConnectRequest {
            protocol_version: r.int("ConnectRequest.protocolVersion")?,
            last_zxid_seen: r.long("ConnectRequest.lastZxidSeen")?,
            timeout_ms: r.int("ConnectRequest.timeOut")?,
            session_id: r.long("ConnectRequest.sessionId")?,
            passwd: r.buffer("ConnectRequest.passwd")?,
            read_only: if r.remaining() > 0 { Some(r.bool("ConnectRequest.readOnly")?) } else { None },
        })
    }

    /// Writes the record, `readOnly` only when present.
    pub fn write(&self, w: &mut Writer) {
        w.int(self.protocol_version);
        w.long(self.last_zxid_seen);
        w.int(self.timeout_ms);
        w.long(self.session_id);
        w.buffer(&self.passwd);
        if let Some(read_only) = self.read_only {
            w.bool(read_only);
        }
    }
}

/// The server's answer to a ConnectRequest (no ReplyHeader before it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectResponse {
    /// Always 0.
    pub protocol_version: i32,
    /// Negotiated session timeout, ms; 0 tells the client its session expired.
    pub timeout_ms: i32,
    /// The session id; 0 when the session is invalid.
    pub session_id: i64,
    /// The session password; 16 zero bytes when the session is invalid.
    pub passwd: Bytes,
    /// Whether this server is read-only; `None` to omit the field for a
    /// client that did not send it.
    pub read_only: Option<bool>,
}

impl ConnectResponse {
    /// The answer establishing (or resuming) a session for `request`;
    /// `readOnly` is echoed only if the client sent it.
    pub fn accept(
        request: &ConnectRequest,
        timeout_ms: i32,
        session_id: i64,
        passwd: Bytes,
        read_only_server: bool,
    ) -> ConnectResponse {
        ConnectResponse {
            protocol_version: 0,
            timeout_ms,
            session_id,
            passwd,
            read_only: request.read_only.map(|_| read_only_server),
        }
    }

    /// The answer for a session that is unknown or expired: timeout 0,
    /// session 0 and 16 zero bytes (`ZooKeeperServer.finishSessionInit`); the
    /// client reports SESSIONEXPIRED and the server then closes the connection.
    pub fn expired(request: &ConnectRequest, read_only_server: bool) -> ConnectResponse {
        ConnectResponse::accept(request, 0, 0, Bytes::from_static(&[0; 16]), read_only_server)
    }

    /// Reads the record; `readOnly` is read only if bytes remain.
    pub fn read(r: &mut Reader<'_>) -> Result<ConnectResponse, JuteError> {
        Ok(ConnectResponse {
            protocol_version: r.int("ConnectResponse.protocolVersion")?,
            timeout_ms: r.int("ConnectResponse.timeOut")?,
            session_id: r.long("ConnectResponse.sessionId")?,
            passwd: r.buffer("ConnectResponse.passwd")?,
            read_only: if r.remaining() > 0 { Some(r.bool("ConnectResponse.readOnly")?) } else { None },
        })
    }

    /// Writes the record, `readOnly` only when present.
    pub fn write(&self, w: &mut Writer) {
        w.int(self.protocol_version);
        w.int(self.timeout_ms);
        w.long(self.session_id);
        w.buffer(&self.passwd);
        if let Some(read_only) = self.read_only {
            w.bool(read_only);
        }
    }
}

record! {
    /// Precedes every request after the handshake.
    RequestHeader {
        /// The client's request id, echoed in the reply (or a special xid).
        xid: i32,
        /// The opcode.
        op_type: i32,
    }
}

record! {
    /// Precedes every reply and notification.
    ReplyHeader {
        /// The request's xid (or a special xid).
        xid: i32,
        /// The server's last processed zxid (a notification's: its txn's).
        zxid: i64,
        /// The error code; the body follows only when 0.
        err: i32,
    }
}

record! {
    /// Precedes each op inside multi requests and results.
    MultiHeader {
        /// The op's opcode (-1 for an error result or the terminator).
        op_type: i32,
        /// True only on the terminator.
        done: bool,
        /// The op's error code in results; -1 in requests.
        err: i32,
    }
}

record! {
    /// Adds credentials to the session (opcode 100, xid -4).
    AuthPacket {
        /// Unused; clients send 0.
        auth_type: i32,
        /// The scheme (digest).
        scheme: String,
        /// The credentials.
        auth: Bytes,
    }
}

record! {
    /// Re-registers watches after a reconnect (opcode 101).
    SetWatches {
        /// The client's last seen zxid.
        relative_zxid: i64,
        /// getData watches.
        data_watches: Vec<String>,
        /// exists watches.
        exist_watches: Vec<String>,
        /// getChildren watches.
        child_watches: Vec<String>,
    }
}

record! {
    /// Re-registers watches, persistent ones included (opcode 105).
    SetWatches2 {
        /// The client's last seen zxid.
        relative_zxid: i64,
        /// getData watches.
        data_watches: Vec<String>,
        /// exists watches.
        exist_watches: Vec<String>,
        /// getChildren watches.
        child_watches: Vec<String>,
        /// Persistent watches.
        persistent_watches: Vec<String>,
        /// Persistent recursive watches.
        persistent_recursive_watches: Vec<String>,
    }
}

record! {
    /// getData request (opcode 4).
    GetDataRequest {
        /// The node.
        path: String,
        /// Leave a data watch.
        watch: bool,
    }
}

record! {
    /// setData request (opcode 5).
    SetDataRequest {
        /// The node.
        path: String,
        /// New data (null kept apart from empty).
        data: Data,
        /// Expected version, -1 for any.
        version: i32,
    }
}

record! {
    /// setData reply; also a setData result inside multi.
    SetDataResponse {
        /// The node's new Stat.
        stat: Stat,
    }
}

record! {
    /// create, create2 and createContainer request (opcodes 1, 15, 19).
    CreateRequest {
        /// The node.
        path: String,
        /// Initial data (null kept apart from empty).
        data: Data,
        /// The ACL.
        acl: Vec<Acl>,
        /// The create mode flag (0..=6).
        flags: i32,
    }
}

record! {
    /// createTTL request (opcode 21).
    CreateTtlRequest {
        /// The node.
        path: String,
        /// Initial data (null kept apart from empty).
        data: Data,
        /// The ACL.
        acl: Vec<Acl>,
        /// The create mode flag (5 or 6).
        flags: i32,
        /// The TTL, ms.
        ttl: i64,
    }
}

record! {
    /// delete request (opcode 2).
    DeleteRequest {
        /// The node.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    }
}

record! {
    /// getChildren request (opcode 8).
    GetChildrenRequest {
        /// The node.
        path: String,
        /// Leave a child watch.
        watch: bool,
    }
}

record! {
    /// getAllChildrenNumber request (opcode 104).
    GetAllChildrenNumberRequest {
        /// The node.
        path: String,
    }
}

record! {
    /// getChildren2 request (opcode 12).
    GetChildren2Request {
        /// The node.
        path: String,
        /// Leave a child watch.
        watch: bool,
    }
}

record! {
    /// check request (opcode 13, inside multi).
    CheckVersionRequest {
        /// The node.
        path: String,
        /// Expected version, -1 for any.
        version: i32,
    }
}

record! {
    /// sync request (opcode 9).
    SyncRequest {
        /// The node.
        path: String,
    }
}

record! {
    /// sync reply.
    SyncResponse {
        /// The path of the request, echoed.
        path: String,
    }
}

record! {
    /// getACL request (opcode 6).
    GetAclRequest {
        /// The node.
        path: String,
    }
}

record! {
    /// setACL request (opcode 7).
    SetAclRequest {
        /// The node.
        path: String,
        /// The new ACL.
        acl: Vec<Acl>,
        /// Expected ACL version, -1 for any.
        version: i32,
    }
}

record! {
    /// setACL reply.
    SetAclResponse {
        /// The node's new Stat.
        stat: Stat,
    }
}

record! {
    /// addWatch request (opcode 106).
    AddWatchRequest {
        /// The node.
        path: String,
        /// 0 persistent, 1 persistent recursive.
        mode: i32,
    }
}

record! {
    /// A watch notification's body (after ReplyHeader(-1, zxid, 0)).
    WatcherEvent {
        /// The event type number.
        event_type: i32,
        /// The keeper state number (3, SyncConnected, from the server).
        state: i32,
        /// The node.
        path: String,
    }
}

record! {
    /// An error result inside a MultiResponse; also addWatch's reply body.
    ErrorResponse {
        /// The error code.
        err: i32,
    }
}

record! {
    /// create reply; also a create(1) result inside multi.
    CreateResponse {
        /// The created path (with its sequence suffix).
        path: String,
    }
}

record! {
    /// create2/createContainer/createTTL reply; also their results inside multi.
    Create2Response {
        /// The created path.
        path: String,
        /// The new node's Stat.
        stat: Stat,
    }
}

record! {
    /// exists request (opcode 3).
    ExistsRequest {
        /// The node.
        path: String,
        /// Leave a watch.
        watch: bool,
    }
}

record! {
    /// exists reply.
    ExistsResponse {
        /// The node's Stat.
        stat: Stat,
    }
}

record! {
    /// getData reply; also a getData result inside multiRead.
    GetDataResponse {
        /// The data (null kept apart from empty).
        data: Data,
        /// The node's Stat.
        stat: Stat,
    }
}

record! {
    /// getChildren reply; also a getChildren result inside multiRead.
    GetChildrenResponse {
        /// Child names.
        children: Vec<String>,
    }
}

record! {
    /// getAllChildrenNumber reply.
    GetAllChildrenNumberResponse {
        /// The number of descendants.
        total_number: i32,
    }
}

record! {
    /// getChildren2 reply.
    GetChildren2Response {
        /// Child names.
        children: Vec<String>,
        /// The node's Stat.
        stat: Stat,
    }
}

record! {
    /// getACL reply.
    GetAclResponse {
        /// The ACL.
        acl: Vec<Acl>,
        /// The node's Stat.
        stat: Stat,
    }
}

record! {
    /// checkWatches request (opcode 17).
    CheckWatchesRequest {
        /// The node.
        path: String,
        /// The WatcherType number.
        watcher_type: i32,
    }
}

record! {
    /// removeWatches request (opcode 18).
    RemoveWatchesRequest {
        /// The node.
        path: String,
        /// The WatcherType number.
        watcher_type: i32,
    }
}

record! {
    /// reconfig request (opcode 16); answered with a GetDataResponse of
    /// `/zookeeper/config`.
    ReconfigRequest {
        /// Members to add or change, comma-separated `server.N=...` lines (incremental).
        joining_servers: String,
        /// Member ids to remove, comma-separated (incremental).
        leaving_servers: String,
        /// The whole new membership, comma-separated lines (non-incremental).
        new_members: String,
        /// The configuration version it is based on; -1: any.
        cur_config_id: i64,
    }
}

record! {
    /// getEphemerals request (opcode 103).
    GetEphemeralsRequest {
        /// Path prefix; empty or "/" for all.
        prefix_path: String,
    }
}

record! {
    /// getEphemerals reply.
    GetEphemeralsResponse {
        /// The session's ephemeral paths.
        ephemerals: Vec<String>,
    }
}

record! {
    /// One identity of a session, as whoAmI reports it.
    ClientInfo {
        /// The scheme (digest, ip, …).
        auth_scheme: String,
        /// The user name (digest: the part before ':').
        user: String,
    }
}

record! {
    /// whoAmI reply.
    WhoAmIResponse {
        /// The session's identities.
        client_info: Vec<ClientInfo>,
    }
}

/// Reads a whole record from the front of `bytes`.
pub fn from_bytes<T: Jute>(bytes: &[u8]) -> Result<T, JuteError> {
    T::read(&mut Reader::new(bytes), "record")
}

/// Encodes one record.
pub fn to_bytes<T: Jute>(record: &T) -> Vec<u8> {
    let mut w = Writer::new();
    record.write(&mut w);
    w.into_bytes()
}
