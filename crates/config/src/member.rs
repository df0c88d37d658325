//! One member of the ensemble as the rest of the server uses it: its
//! addresses (advertised and bound), data directory and role, and the line
//! it is in the replicated configuration.

use crate::address::HostPort;
use std::path::PathBuf;
use zabkeeper_core::ids::ServerId;

/// Whether a member votes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemberRole {
    /// Votes in elections and counts toward every quorum (ZooKeeper's participant).
    #[default]
    Participant,
    /// Takes every commit, serves sessions, reads and watches and forwards
    /// writes, but never votes nor counts toward a quorum (ZooKeeper's
    /// observer, etcd's learner).
    Observer,
}

impl MemberRole {
    /// The name ZooKeeper's dynamic configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            MemberRole::Participant => "participant",
            MemberRole::Observer => "observer",
        }
    }
}

/// One member of the ensemble.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id (1..=254, as ZooKeeper requires when TTL nodes are enabled).
    pub id: ServerId,
    /// Replica-to-replica gRPC (Zab), as peers reach it.
    pub peer_addr: HostPort,
    /// The gRPC client session API, as clients reach it.
    pub grpc_addr: HostPort,
    /// The ZooKeeper wire protocol port, if served, as clients reach it.
    pub client_addr: Option<HostPort>,
    /// The admin gRPC API, if served, as operators reach it.
    pub admin_addr: Option<HostPort>,
    /// Prometheus metrics over HTTP (`/metrics`), if served.
    pub metrics_addr: Option<HostPort>,
    /// The ZooKeeper wire protocol over TLS (ZooKeeper's secureClientPort), if served.
    pub secure_client_addr: Option<HostPort>,
    /// The name its peer certificate must carry under `[tls] peer = true`,
    /// when not the host of `peer_addr`.
    pub peer_name: Option<String>,
    /// Where each of those listens, when not where it is reached (behind
    /// NAT, in a container, on `0.0.0.0`).
    pub bind: Binds,
    /// Where its log and snapshots live.
    pub data_dir: PathBuf,
    /// Voter or observer.
    pub role: MemberRole,
}

impl Member {
    /// The name this member's peer certificate must carry: `peer_name`,
    /// else the host of `peer_addr`.
    pub fn peer_name(&self) -> &str {
        self.peer_name.as_deref().unwrap_or(self.peer_addr.host())
    }

    /// This member as the replicated configuration holds it, in ZooKeeper's
    /// form (`host:quorumPort:electionPort`: both are our one peer port).
    pub fn member_line(&self) -> zabkeeper_core::members::Member {
        use zabkeeper_core::members::Participation;
        let peer = self.peer_addr.to_string();
        let participation = match self.role {
            MemberRole::Participant => Participation::Participant,
            MemberRole::Observer => Participation::Observer,
        };
        zabkeeper_core::members::Member {
            id: self.id,
            participation,
            peer_address: format!("{peer}:{}", self.peer_addr.port()),
            client_address: self.client_addr.as_ref().map(ToString::to_string).unwrap_or_default(),
            endpoints: self.endpoints(),
        }
    }

    /// Its addresses beyond ZooKeeper's line (`zabkeeper.N=` in `/zookeeper/config`).
    pub fn endpoints(&self) -> zabkeeper_core::members::Endpoints {
        let text = |a: &Option<HostPort>| a.as_ref().map(ToString::to_string).unwrap_or_default();
        zabkeeper_core::members::Endpoints {
            grpc: self.grpc_addr.to_string(),
            admin: text(&self.admin_addr),
            metrics: text(&self.metrics_addr),
            secure_client: text(&self.secure_client_addr),
        }
    }
}

/// The addresses a member's listeners bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binds {
    /// The peer listener.
    pub peer: HostPort,
    /// The gRPC client listener.
    pub grpc: HostPort,
    /// The ZooKeeper-protocol listener.
    pub client: Option<HostPort>,
    /// The admin listener (loopback unless `admin_allow_remote`).
    pub admin: Option<HostPort>,
    /// The metrics listener.
    pub metrics: Option<HostPort>,
    /// The ZooKeeper-protocol TLS listener.
    pub secure_client: Option<HostPort>,
}
