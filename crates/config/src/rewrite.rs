//! Keeps a member's config file in step with the replicated configuration,
//! as ZooKeeper rewrites its dynamic configuration file after a `reconfig`:
//! members removed lose their `[[server]]` table, members added get one,
//! a member moved or made a voter has its table changed. The rest of the
//! file (settings, comments, each table's other keys) is left as it was.
//! The replicated configuration wins at start anyway; the file matters to a
//! member that starts again without its data, and to the person reading it.

use std::io::Write;
use std::path::{Path, PathBuf};
use toml_edit::{value, DocumentMut, Item, Table};
use zabkeeper_core::ids::{ServerId, Zxid};
use zabkeeper_core::members::{Member, Membership, Participation};

/// Why the file was not rewritten.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// Reading, writing or renaming it failed (a read-only mount, say).
    #[error("config file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// It is not TOML with `[[server]]` tables (changed by hand since the start).
    #[error("config file {path}: {why}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// Rewrites one member's file on a thread of its own, in the order the
/// configurations come (a slow disk never holds up the member's event loop).
/// The thread ends when the rewriter is dropped.
pub struct Rewriter {
    tx: std::sync::mpsc::Sender<(Zxid, Membership)>,
}

impl Rewriter {
    /// Starts the thread for member `me`'s file at `path`.
    pub fn start(path: PathBuf, me: ServerId) -> std::io::Result<Rewriter> {
        let (tx, rx) = std::sync::mpsc::channel::<(Zxid, Membership)>();
        std::thread::Builder::new().name("config-rewrite".into()).spawn(move || {
            for (version, members) in rx {
                match rewrite(&path, me, &members) {
                    Ok(true) => tracing::info!(version = %version, file = %path.display(), "config file rewritten to the configuration in force"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(version = %version, error = %e, "config file not rewritten (the replicated configuration wins at start anyway)"),
                }
            }
        })?;
        Ok(Rewriter { tx })
    }

    /// Brings the file to `members`, the configuration at `version`.
    pub fn ask(&self, version: Zxid, members: Membership) {
        let _ = self.tx.send((version, members));
    }
}

/// Rewrites the `[[server]]` tables of the file at `path` to `members`.
/// Member `me` keeps its own table as the operator wrote it (its addresses
/// are what it listens on; only its role follows), even when removed: it
/// still runs on it. Returns whether the file changed.
pub fn rewrite(path: &Path, me: ServerId, members: &Membership) -> Result<bool, RewriteError> {
    let shown = path.display().to_string();
    let io = |source| RewriteError::Io { path: shown.clone(), source };
    let before = std::fs::read_to_string(path).map_err(io)?;
    let after = rewritten(&before, me, members).map_err(|why| RewriteError::Unreadable { path: shown.clone(), why })?;
    if after == before {
        return Ok(false);
    }
    // Beside it with its permissions (it may hold admin_token or
    // super_digest), synced, then renamed over it, so a crash leaves one or
    // the other; a temporary left by a crash is replaced, never written through.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{me}.rewrite"));
    let permissions = std::fs::metadata(path).map_err(io)?.permissions();
    let _ = std::fs::remove_file(&temporary);
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temporary)?;
        file.set_permissions(permissions)?;
        file.write_all(after.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)?;
        match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => std::fs::File::open(dir)?.sync_all(),
            None => std::fs::File::open(".")?.sync_all(),
        }
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        io(e)
    })?;
    Ok(true)
}

/// The text of a config file whose `[[server]]` tables show `members`.
pub fn rewritten(text: &str, me: ServerId, members: &Membership) -> Result<String, String> {
    let mut doc: DocumentMut = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let servers = doc
        .get_mut("server")
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| "no [[server]] tables".to_string())?;
    let id_of = |t: &Table| t.get("id").and_then(Item::as_integer).and_then(|id| u64::try_from(id).ok());
    servers.retain(|t| id_of(t).is_some_and(|id| id == me || members.get(id).is_some()));
    for table in servers.iter_mut() {
        match id_of(table).and_then(|id| members.get(id)) {
            Some(m) if m.id == me => set_role(table, m),
            Some(m) => update(table, m),
            None => {}
        }
    }
    // A member moved to where nobody told its gRPC address: its table would not load.
    servers.retain(|t| {
        let keep = t.get("grpc_addr").is_some();
        if !keep {
            tracing::warn!(member = ?id_of(t), "dropped from the config file: its gRPC address is not known");
        }
        keep
    });
    let listed: Vec<u64> = servers.iter().filter_map(id_of).collect();
    for m in members.members().iter().filter(|m| !listed.contains(&m.id)) {
        let mut table = Table::new();
        table.insert("id", value(i64::try_from(m.id).map_err(|_| format!("id {} is out of range", m.id))?));
        update(&mut table, m);
        if table.get("grpc_addr").is_none() {
            // A member whose gRPC address nobody told: its table would not load.
            tracing::warn!(member = m.id, "not written to the config file: its gRPC address is not known");
            continue;
        }
        servers.push(table);
    }
    Ok(doc.to_string())
}

/// Sets what the configuration says of `m` where the table says otherwise.
/// A member moved to another peer address takes none of its old table's
/// addresses along: what the configuration does not know of it is dropped.
fn update(table: &mut Table, m: &Member) {
    let peer = m.peer_host_port().unwrap_or_default();
    if !peer.is_empty() && table.get("peer_addr").and_then(Item::as_str) != Some(peer.as_str()) {
        let addresses = ["client_addr", "grpc_addr", "admin_addr", "metrics_addr", "secure_client_addr", "peer_name"];
        let binds = ["peer_bind", "grpc_bind", "client_bind", "admin_bind", "metrics_bind", "secure_client_bind"];
        for key in addresses.into_iter().chain(binds) {
            table.remove(key);
        }
    }
    // A client address given as a bare port has no host to write.
    let client = if m.client_address.contains(':') { m.client_address.as_str() } else { "" };
    let wanted = [
        ("peer_addr", peer.as_str()),
        ("client_addr", client),
        ("grpc_addr", &m.endpoints.grpc),
        ("admin_addr", &m.endpoints.admin),
        ("metrics_addr", &m.endpoints.metrics),
        ("secure_client_addr", &m.endpoints.secure_client),
    ];
    for (key, wanted) in wanted {
        if !wanted.is_empty() && table.get(key).and_then(Item::as_str) != Some(wanted) {
            table.insert(key, value(wanted));
        }
    }
    set_role(table, m);
}

/// The table's role, as the configuration has it (a voter's may be left out).
fn set_role(table: &mut Table, m: &Member) {
    let role = table.get("role").and_then(Item::as_str);
    let wanted = match (m.participation, role) {
        (Participation::Observer, _) => "observer",
        (Participation::Participant, Some(_)) => "participant",
        (Participation::Participant, None) => return,
    };
    if role != Some(wanted) {
        table.insert("role", value(wanted));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemberRole, ServerConfig};
    use zabkeeper_core::members::Endpoints;

    const FILE: &str = "# The ensemble.\ndata_dir = \"d{id}\"\n\n\
        # First.\n[[server]]\nid = 1\npeer_addr = \"a:1\"\ngrpc_addr = \"a:2\"\nadmin_addr = \"127.0.0.1:3\"\n\n\
        [[server]]\nid = 2\npeer_addr = \"b:1\"\ngrpc_addr = \"b:2\"\n\n\
        # Third, on its own disk.\n[[server]]\nid = 3\npeer_addr = \"c:1\"\ngrpc_addr = \"c:2\"\ndata_dir = \"/disk3\"\n";

    fn member(line: &str, grpc: &str) -> Member {
        let mut m = Member::parse(line).unwrap();
        m.endpoints = Endpoints { grpc: grpc.into(), ..Endpoints::default() };
        m
    }

    #[test]
    fn a_file_follows_a_reconfiguration_and_keeps_what_it_does_not_concern() {
        // 2 removed, 3 made an observer, 4 added, 1 unchanged (its admin address not told).
        let members = Membership::new(vec![
            member("server.1=a:1:1:participant", ""),
            member("server.3=c:1:1:observer;c:9", "c:2"),
            member("server.4=d:1:1:participant;d:9", "d:2"),
        ])
        .unwrap();
        let text = rewritten(FILE, 1, &members).unwrap();
        assert!(text.starts_with("# The ensemble.\n") && text.contains("# Third, on its own disk."), "{text}");
        let config = ServerConfig::parse(&text, Some(1)).expect("the rewritten file loads");
        let ids: Vec<u64> = config.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![1, 3, 4]);
        let three = &config.members[1];
        assert_eq!((three.role, three.data_dir.to_str()), (MemberRole::Observer, Some("/disk3")));
        assert_eq!(three.client_addr.as_ref().map(ToString::to_string).as_deref(), Some("c:9"));
        assert_eq!(config.members[0].admin_addr.as_ref().map(ToString::to_string).as_deref(), Some("127.0.0.1:3"));
        assert_eq!(config.members[2].grpc_addr.to_string(), "d:2");
        assert_eq!(rewritten(&text, 1, &members).unwrap(), text, "a second rewrite changes nothing");
    }

    #[test]
    fn a_removed_member_keeps_its_own_table_and_an_unknown_grpc_address_is_not_written() {
        let members = Membership::new(vec![member("server.1=a:1:1", "a:2"), member("server.5=e:1:1", "")]).unwrap();
        let text = rewritten(FILE, 2, &members).unwrap();
        let config = ServerConfig::parse(&text, Some(2)).expect("member 2 still starts on it");
        let ids: Vec<u64> = config.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![1, 2], "5 has no gRPC address to write");
        assert!(rewritten("id = 1", 1, &members).unwrap_err().contains("no [[server]]"));
    }

    #[test]
    fn its_own_table_keeps_its_addresses_and_a_moved_member_drops_its_old_ones() {
        let mut one = member("server.1=x:1:1:observer", "x:2");
        one.endpoints.admin = "x:3".into();
        // 2 moved with nothing known but its peer address, 3 moved with its gRPC address.
        let members =
            Membership::new(vec![one, member("server.2=y:1:1", ""), member("server.3=z:1:1", "z:2")]).unwrap();
        let text = rewritten(FILE, 1, &members).unwrap();
        let config = ServerConfig::parse(&text, Some(1)).expect("loads");
        let ids: Vec<u64> = config.members.iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![1, 3], "2's table would not load without a gRPC address: {text}");
        let (own, moved) = (&config.members[0], &config.members[1]);
        assert_eq!((own.peer_addr.to_string(), own.grpc_addr.to_string()), ("a:1".into(), "a:2".into()), "{text}");
        assert_eq!(own.role, MemberRole::Observer, "only its role follows the configuration");
        assert_eq!((moved.peer_addr.to_string(), moved.grpc_addr.to_string()), ("z:1".into(), "z:2".into()));
        assert_eq!(moved.data_dir.to_str(), Some("/disk3"), "what is not an address stays");
    }

    #[cfg(unix)]
    #[test]
    fn the_rewritten_file_keeps_its_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zabkeeper.toml");
        std::fs::write(&path, FILE).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let members = Membership::new(vec![member("server.1=a:1:1", "a:2")]).unwrap();
        assert!(rewrite(&path, 1, &members).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn the_file_is_replaced_whole_and_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zabkeeper.toml");
        std::fs::write(&path, FILE).unwrap();
        let members = Membership::new(vec![member("server.1=a:1:1", "a:2"), member("server.2=b:1:1", "b:2")]).unwrap();
        assert!(rewrite(&path, 1, &members).unwrap());
        assert!(!rewrite(&path, 1, &members).unwrap(), "already so");
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names, vec!["zabkeeper.toml".to_string()], "no temporary file left");
        let missing = rewrite(&dir.path().join("gone.toml"), 1, &members).unwrap_err().to_string();
        assert!(missing.contains("gone.toml"), "{missing}");
    }
}
