//! The `[[server]]` tables read into [`Member`]s: addresses parsed, binds
//! derived, roles named, and the ensemble-wide rules (distinct ids and
//! ports, at least one voter) checked. A fault in what only a member's own
//! table must satisfy is held back until it is known which member this
//! process is, as another member's listeners are that member's business.

use crate::address::HostPort;
use crate::file_format::{FileConfig, FileMember};
use crate::member::{Binds, Member, MemberRole};
use crate::{invalid, ConfigError};
use std::path::PathBuf;
use zabkeeper_core::ids::ServerId;

/// The members a file describes, sorted by id, and the faults that count
/// only if this process turns out to be the member named.
pub(crate) struct Tables {
    /// Every member, sorted by id.
    pub(crate) members: Vec<Member>,
    /// What only this member's own table must satisfy (what it listens
    /// on): another's is that member's business, and a table a rewrite
    /// added after a reconfiguration may not satisfy it here.
    pub(crate) own_only: Vec<(ServerId, ConfigError)>,
}

/// Reads every `[[server]]` table of `file` and checks the ensemble they make.
pub(crate) fn read(file: &FileConfig) -> Result<Tables, ConfigError> {
    if file.server.is_empty() {
        return Err(invalid("server", "at least one [[server]] entry is required"));
    }
    let bind_host = match &file.bind_host {
        Some(host) => Some(parse_addr("bind_host", &format!("{host}:0"))?),
        None => None,
    };
    let mut members = Vec::new();
    let mut own_only: Vec<(ServerId, ConfigError)> = Vec::new();
    for (i, m) in file.server.iter().enumerate() {
        members.push(member(file, i, m, bind_host.as_ref(), &mut own_only)?);
    }
    members.sort_by_key(|m| m.id);
    for pair in members.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(invalid("server.id", format!("id {} appears twice", pair[0].id)));
        }
    }
    check_distinct_ports(&members)?;
    if !members.iter().any(|m| m.role == MemberRole::Participant) {
        return Err(invalid("server.role", "every member is an observer: at least one must vote"));
    }
    Ok(Tables { members, own_only })
}

/// The member of table `m` (the `i`th), with what only its own process
/// must satisfy pushed to `own_only`.
fn member(
    file: &FileConfig,
    i: usize,
    m: &FileMember,
    bind_host: Option<&HostPort>,
    own_only: &mut Vec<(ServerId, ConfigError)>,
) -> Result<Member, ConfigError> {
    if !zabkeeper_core::members::is_server_id(m.id) {
        return Err(invalid(format!("server[{i}].id"), format!("must be within 1..=254, got {}", m.id)));
    }
    let key = |field: &str| format!("server[id={}].{field}", m.id);
    let data_dir = match (&m.data_dir, &file.data_dir) {
        (Some(dir), _) => dir.clone(),
        (None, Some(pattern)) => pattern.replace("{id}", &m.id.to_string()),
        // Only this member's own is needed (checked once it is known).
        (None, None) => String::new(),
    };
    let optional =
        |field: &str, value: &Option<String>| value.as_deref().map(|a| parse_addr(&key(field), a)).transpose();
    let peer_addr = parse_addr(&key("peer_addr"), &m.peer_addr)?;
    let grpc_addr = parse_addr(&key("grpc_addr"), &m.grpc_addr)?;
    let client_addr = optional("client_addr", &m.client_addr)?;
    let admin_addr = optional("admin_addr", &m.admin_addr)?;
    let metrics_addr = optional("metrics_addr", &m.metrics_addr)?;
    let secure_client_addr = optional("secure_client_addr", &m.secure_client_addr)?;
    if secure_client_addr.is_some() && file.tls.is_none() {
        let why = "needs a [tls] section with cert_file and key_file";
        own_only.push((m.id, invalid(key("secure_client_addr"), why)));
    }
    // An explicit `*_bind` wins; else `bind_host` at the advertised
    // port (never for the admin API, which stays where it is put);
    // else the advertised address itself.
    let bind = |field: &str, explicit: &Option<String>, advertised: &HostPort, shared: bool| {
        Ok::<_, ConfigError>(match optional(field, explicit)? {
            Some(addr) => addr,
            None => match (bind_host, shared) {
                (Some(host), true) => host.with_port(advertised.port()),
                _ => advertised.clone(),
            },
        })
    };
    let bind_optional = |field: &str, explicit: &Option<String>, advertised: &Option<HostPort>, shared| match advertised
    {
        Some(advertised) => bind(field, explicit, advertised, shared).map(Some),
        None if explicit.is_some() => {
            let addr = field.replace("_bind", "_addr");
            Err(invalid(key(field), format!("set only with {addr}, the address clients are given")))
        }
        None => Ok(None),
    };
    let binds = Binds {
        peer: bind("peer_bind", &m.peer_bind, &peer_addr, true)?,
        grpc: bind("grpc_bind", &m.grpc_bind, &grpc_addr, true)?,
        client: bind_optional("client_bind", &m.client_bind, &client_addr, true)?,
        admin: bind_optional("admin_bind", &m.admin_bind, &admin_addr, false)?,
        metrics: bind_optional("metrics_bind", &m.metrics_bind, &metrics_addr, true)?,
        secure_client: bind_optional("secure_client_bind", &m.secure_client_bind, &secure_client_addr, true)?,
    };
    if let Some(addr) = &binds.admin {
        if !addr.is_loopback() && !file.admin_allow_remote.unwrap_or(false) {
            let field = if m.admin_bind.is_some() { "admin_bind" } else { "admin_addr" };
            own_only.push((
                m.id,
                invalid(
                    key(field),
                    format!(
                        "{addr} is not a loopback address: the admin API can take snapshots and purge, so \
                         it stays on loopback unless `admin_allow_remote = true` (set `admin_token` too)"
                    ),
                ),
            ));
        }
    }
    let role = match m.role.as_deref() {
        None | Some("participant") => MemberRole::Participant,
        Some("observer") => MemberRole::Observer,
        Some(other) => {
            return Err(invalid(key("role"), format!("{other:?} is neither \"participant\" nor \"observer\"")))
        }
    };
    Ok(Member {
        id: m.id,
        role,
        peer_addr,
        grpc_addr,
        client_addr,
        admin_addr,
        metrics_addr,
        secure_client_addr,
        peer_name: m.peer_name.clone(),
        bind: binds,
        data_dir: PathBuf::from(data_dir),
    })
}

/// `value` as a `host:port`, or an error naming `key`.
fn parse_addr(key: &str, value: &str) -> Result<HostPort, ConfigError> {
    HostPort::parse(value).map_err(|e| invalid(key, format!("{value:?}: {e}")))
}

/// Members on one machine (the same peer host, or loopback both:
/// [`HostPort::same_machine`]) must not share a port. Members on different
/// machines may: each may keep its admin API on 127.0.0.1:4181.
fn check_distinct_ports(members: &[Member]) -> Result<(), ConfigError> {
    let mut seen: Vec<(&HostPort, &HostPort, ServerId)> = Vec::new();
    for m in members {
        let machine = &m.peer_addr;
        let advertised = [Some(&m.peer_addr), Some(&m.grpc_addr), m.client_addr.as_ref(), m.admin_addr.as_ref()];
        let more = [m.metrics_addr.as_ref(), m.secure_client_addr.as_ref()];
        for addr in advertised.into_iter().chain(more).flatten() {
            if addr.port() == 0 {
                continue;
            }
            let clash = seen.iter().find(|(peer, other, _)| peer.same_machine(machine) && *other == addr);
            if let Some((_, _, other)) = clash {
                return Err(invalid(
                    format!("server[id={}]", m.id),
                    format!("address {addr} is also used by server {other}"),
                ));
            }
            seen.push((machine, addr, m.id));
        }
    }
    Ok(())
}
