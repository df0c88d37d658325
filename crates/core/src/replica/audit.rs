//! The audit trail of writes (ZooKeeper 3.6's audit log): who changed what,
//! one record per change, made by the member the client is connected to once
//! the write committed (or was refused by the leader), and only when
//! [`Config::audit`](super::Config::audit) asks for it. The host writes them
//! out ([`Output::Audit`](super::Output::Audit)).

use crate::acl::{perms, Acl, Id};
use crate::error::ErrorCode;
use crate::ids::{SessionId, Zxid};
use crate::op::Op;
use crate::tree::stat::CreateMode;
use crate::tree::TxnResult;

/// One audited change, with ZooKeeper's audit log fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// The transaction (zero for a change refused before it was ordered).
    pub zxid: Zxid,
    /// The client's session.
    pub session: SessionId,
    /// Who the client is: its identities' user names, comma-separated
    /// (`alice` for a digest identity, the subject for x509, the address for ip).
    pub user: String,
    /// The client's address (its `ip` identity).
    pub ip: String,
    /// ZooKeeper's operation name: create, delete, setData, setAcl, multiOperation, reconfig.
    pub operation: &'static str,
    /// The node (the final name of a sequential create); empty for reconfig.
    pub znode: String,
    /// The create mode of a create, as ZooKeeper spells it (`persistent_sequential`).
    pub znode_type: Option<&'static str>,
    /// The ACL a create or setAcl sets, as ZooKeeper prints it (`world:anyone:rwcda`).
    pub acl: Option<String>,
    /// "success", or the error's name (`NoNode`, `BadVersion`).
    pub result: &'static str,
}

/// The records of `op`, done by a connection with `identities`, that ended
/// as `result` at `zxid`: one a change, one for each change of a multi that
/// succeeded (a multi that failed is one `multiOperation` record, as
/// ZooKeeper's). Reads and other requests give none.
pub fn records(zxid: Zxid, session: SessionId, identities: &[Id], op: &Op, result: &TxnResult) -> Vec<AuditRecord> {
    let who = Who::of(identities);
    match (op, result) {
        (Op::Multi(ops), TxnResult::Multi(results)) => {
            // A multi that failed answers every op with an error; the one
            // that failed it is the first that is not RuntimeInconsistency.
            let errors = || results.iter().filter_map(|r| r.as_ref().err());
            let failed = errors().find(|c| **c != ErrorCode::RuntimeInconsistency).or_else(|| errors().next());
            if let Some(code) = failed {
                return vec![who.with(zxid, session, "multiOperation", String::new(), code.name())];
            }
            ops.iter()
                .zip(results)
                .filter_map(|(op, result)| who.record(zxid, session, op, result.as_ref().ok()?))
                .collect()
        }
        (Op::Multi(_), TxnResult::Error(code)) => {
            vec![who.with(zxid, session, "multiOperation", String::new(), code.name())]
        }
        (op, result) => who.record(zxid, session, op, result).into_iter().collect(),
    }
}

/// The user and address fields of one connection.
struct Who {
    user: String,
    ip: String,
}

impl Who {
    fn of(identities: &[Id]) -> Who {
        let users: Vec<&str> = identities
            .iter()
            .filter(|i| i.scheme != "super")
            .map(|i| match i.scheme.as_str() {
                "digest" => i.id.split(':').next().unwrap_or_default(),
                _ => i.id.as_str(),
            })
            .collect();
        let ip = identities.iter().find(|i| i.scheme == "ip").map(|i| i.id.clone()).unwrap_or_default();
        Who { user: users.join(","), ip }
    }

    fn with(
        &self,
        zxid: Zxid,
        session: SessionId,
        operation: &'static str,
        znode: String,
        result: &'static str,
    ) -> AuditRecord {
        let (user, ip) = (self.user.clone(), self.ip.clone());
        AuditRecord { zxid, session, user, ip, operation, znode, znode_type: None, acl: None, result }
    }

    /// The record of one change, None for what is not one (a read, a check).
    fn record(&self, zxid: Zxid, session: SessionId, op: &Op, result: &TxnResult) -> Option<AuditRecord> {
        let outcome = match result {
            TxnResult::Error(code) => code.name(),
            _ => "success",
        };
        let path = |p: &str| p.to_string();
        Some(match op {
            Op::Create { path: asked, acl, mode, .. } => {
                let znode = match result {
                    TxnResult::Created { path, .. } => path.clone(),
                    _ => asked.clone(),
                };
                let mut r = self.with(zxid, session, "create", znode, outcome);
                r.znode_type = Some(mode_name(*mode));
                r.acl = Some(acl_text(acl));
                r
            }
            Op::Delete { path: p, .. } => self.with(zxid, session, "delete", path(p), outcome),
            Op::SetData { path: p, .. } => self.with(zxid, session, "setData", path(p), outcome),
            Op::SetAcl { path: p, acl, .. } => {
                let mut r = self.with(zxid, session, "setAcl", path(p), outcome);
                r.acl = Some(acl_text(acl));
                r
            }
            Op::Reconfig { .. } => self.with(zxid, session, "reconfig", String::new(), outcome),
            _ => return None,
        })
    }
}

/// ZooKeeper's `CreateMode` names, lower case.
fn mode_name(mode: CreateMode) -> &'static str {
    match mode {
        CreateMode::Persistent => "persistent",
        CreateMode::Ephemeral => "ephemeral",
        CreateMode::PersistentSequential => "persistent_sequential",
        CreateMode::EphemeralSequential => "ephemeral_sequential",
        CreateMode::Container => "container",
        CreateMode::PersistentWithTtl => "persistent_with_ttl",
        CreateMode::PersistentSequentialWithTtl => "persistent_sequential_with_ttl",
    }
}

/// An ACL as ZooKeeper's `ZKUtil.aclToString` prints it: `scheme:id:perms`
/// entries, comma-separated, the permissions in its order (`rwcda`).
fn acl_text(acl: &[Acl]) -> String {
    let letters =
        [(perms::READ, 'r'), (perms::WRITE, 'w'), (perms::CREATE, 'c'), (perms::DELETE, 'd'), (perms::ADMIN, 'a')];
    acl.iter()
        .map(|a| {
            let p: String = letters.iter().filter(|(bit, _)| a.perms & bit != 0).map(|(_, c)| *c).collect();
            format!("{}:{}:{p}", a.id.scheme, a.id.id)
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Data;
    use crate::tree::stat::Stat;

    const Z: Zxid = Zxid(0x1_0000_0007);
    const S: SessionId = SessionId(0x10);

    fn alice() -> Vec<Id> {
        vec![Id::new("ip", "127.0.0.1"), Id::new("digest", "alice:hash="), Id::new("super", "")]
    }

    fn create(path: &str, mode: CreateMode) -> Op {
        Op::Create { path: path.into(), data: Data::from(&b"x"[..]), acl: Acl::open_unsafe(), mode, ttl_ms: 0 }
    }

    #[test]
    fn a_create_names_its_final_path_mode_and_acl() {
        let created = TxnResult::Created { path: "/q/n0000000003".into(), stat: Stat::default() };
        let r = records(Z, S, &alice(), &create("/q/n", CreateMode::PersistentSequential), &created);
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!((r.operation, r.znode.as_str(), r.result), ("create", "/q/n0000000003", "success"));
        assert_eq!((r.user.as_str(), r.ip.as_str()), ("127.0.0.1,alice", "127.0.0.1"));
        assert_eq!((r.znode_type, r.acl.as_deref()), (Some("persistent_sequential"), Some("world:anyone:rwcda")));
    }

    #[test]
    fn a_failure_is_named_and_reads_are_not_audited() {
        let delete = Op::Delete { path: "/gone".into(), version: -1 };
        let r = records(Z, S, &alice(), &delete, &TxnResult::Error(ErrorCode::NoNode));
        assert_eq!((r[0].operation, r[0].result), ("delete", "NoNode"));
        let read = Op::GetData { path: "/a".into(), watch: false };
        assert!(records(Z, S, &alice(), &read, &TxnResult::Checked).is_empty());
    }

    #[test]
    fn a_multi_is_one_record_per_change_or_one_failure() {
        let ops = Op::Multi(vec![
            create("/m", CreateMode::Ephemeral),
            Op::Check { path: "/m".into(), version: 0 },
            Op::SetData { path: "/m".into(), data: Data::from(&b"y"[..]), version: -1 },
        ]);
        let done = TxnResult::Multi(vec![
            Ok(TxnResult::Created { path: "/m".into(), stat: Stat::default() }),
            Ok(TxnResult::Checked),
            Ok(TxnResult::DataSet(Stat::default())),
        ]);
        let r = records(Z, S, &alice(), &ops, &done);
        assert_eq!(r.iter().map(|r| r.operation).collect::<Vec<_>>(), ["create", "setData"]);
        let failed = TxnResult::Multi(vec![
            Err(ErrorCode::RuntimeInconsistency),
            Err(ErrorCode::BadVersion),
            Err(ErrorCode::RuntimeInconsistency),
        ]);
        let failed = records(Z, S, &alice(), &ops, &failed);
        assert_eq!(failed.len(), 1);
        assert_eq!((failed[0].operation, failed[0].result), ("multiOperation", "BadVersion"));
    }
}
