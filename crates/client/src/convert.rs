//! Conversions between the client protobufs and the core's types, as the
//! client needs them (the server keeps its own, for the other direction).

use crate::acl::{Acl, Id};
use crate::proto::client as pb;
use crate::tree::stat::Stat;

/// Stat from protobuf.
pub fn stat_from_pb(s: &pb::Stat) -> Stat {
    Stat {
        czxid: s.czxid,
        mzxid: s.mzxid,
        ctime: s.ctime,
        mtime: s.mtime,
        version: s.version,
        cversion: s.cversion,
        aversion: s.aversion,
        ephemeral_owner: s.ephemeral_owner,
        data_length: s.data_length,
        num_children: s.num_children,
        pzxid: s.pzxid,
    }
}

/// ACL to protobuf.
pub fn acl_to_pb(acl: &[Acl]) -> Vec<pb::Acl> {
    acl.iter().map(|a| pb::Acl { perms: a.perms, scheme: a.id.scheme.clone(), id: a.id.id.clone() }).collect()
}

/// ACL from protobuf.
pub fn acl_from_pb(acl: &[pb::Acl]) -> Vec<Acl> {
    acl.iter().map(|a| Acl { perms: a.perms, id: Id::new(a.scheme.clone(), a.id.clone()) }).collect()
}
