//! Which member this process is: named by `--id` or `ZABKEEPER_ID`, the
//! file's only member, or its host name's StatefulSet ordinal, so one file
//! and one pod template serve every member.

use crate::member::Member;
use crate::{address, invalid, ConfigError};
use zabkeeper_core::ids::ServerId;

/// Where a config's member id and overrides come from besides the file.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// `--id` or `ZABKEEPER_ID`.
    pub id: Option<ServerId>,
    /// This machine's host name, whose StatefulSet ordinal (`zk-2`) names
    /// the member when no id is given.
    pub hostname: Option<String>,
    /// The environment, for `ZABKEEPER_*` overrides.
    pub env: Vec<(String, String)>,
}

impl Sources {
    /// The process's own: its host name and environment, and `id`.
    pub fn of_process(id: Option<ServerId>) -> Sources {
        let hostname = rustix::system::uname().nodename().to_str().ok().map(str::to_string);
        Sources { id, hostname, env: std::env::vars().collect() }
    }
}

/// The member this process is: the given id, the only member, or the one its
/// host name's StatefulSet ordinal names.
pub(crate) fn pick_member(members: &[Member], sources: &Sources) -> Result<ServerId, ConfigError> {
    let ids = || members.iter().map(|m| m.id.to_string()).collect::<Vec<_>>().join(", ");
    let (id, source) = match (sources.id, members) {
        (Some(id), _) => (id, "--id"),
        (None, [only]) => (only.id, "the only [[server]]"),
        (None, _) => match sources.hostname.as_deref().and_then(|h| Some((h, address::id_from_hostname(h)?))) {
            Some((host, id)) => {
                if !members.iter().any(|m| m.id == id) {
                    return Err(invalid(
                        "--id",
                        format!("the host name {host:?} names member {id} (its ordinal plus one), but the file's ids are {}; pick one with --id or ZABKEEPER_ID", ids()),
                    ));
                }
                (id, "host name")
            }
            None => {
                return Err(invalid(
                    "--id",
                    format!(
                        "the file describes {} servers: pick one with --id or ZABKEEPER_ID, or run on a host named as a StatefulSet's pods are (zk-0 is member 1)",
                        members.len()
                    ),
                ))
            }
        },
    };
    if !members.iter().any(|m| m.id == id) {
        return Err(invalid(source, format!("no [[server]] with id {id} (ids: {})", ids())));
    }
    Ok(id)
}
