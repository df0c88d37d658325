//! Conversions between the client protobufs and the core's types, as the
//! client needs them (the server keeps its own, for the other direction).

use crate::acl::{Acl, Id};
use crate::proto::client as pb;
use crate::tree::stat::{CreateMode, Stat};
use std::time::Duration;

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

/// Builds a create request; `ttl` only matters for the TTL modes.
pub(crate) fn create_request(
    path: &str,
    data: &[u8],
    mode: CreateMode,
    acl: &[Acl],
    ttl: Option<Duration>,
) -> pb::CreateRequest {
    pb::CreateRequest {
        path: path.to_string(),
        data: data.to_vec(),
        acl: acl_to_pb(acl),
        mode: mode.flag(),
        ttl_ms: ttl.map_or(0, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_travels_in_milliseconds_only_when_given() {
        let c = create_request("/t", b"", CreateMode::PersistentWithTtl, &[], Some(Duration::from_secs(2)));
        assert_eq!((c.mode, c.ttl_ms), (5, 2000));
        assert_eq!(create_request("/p", b"", CreateMode::Persistent, &[], None).ttl_ms, 0);
    }
}
