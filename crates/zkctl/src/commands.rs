//! What each zkctl subcommand does with a connected client.

use super::output::{data_json, stat_json, watched_line, Encoding, Exit, Printer};
use futures::stream::{self, StreamExt};
use serde_json::json;
use std::collections::VecDeque;
use zabkeeper_client::acl_spec::parse_acl;
use zabkeeper_client::{Client, ClientError, ConnectionState, OneshotWatcher, WatchedEvent};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::watch::{AddWatchMode, WatcherType};

/// Requests kept in flight by the tree walks (the session answers them in order).
const PIPELINE: usize = 64;

/// Resolves on Ctrl-C (SIGINT) or SIGTERM: either ends a waiting command
/// cleanly, so a lock or candidacy is given up at once rather than when the
/// session times out.
pub async fn interrupted() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    // Without a SIGTERM handler, Ctrl-C alone; if even that cannot be
    // installed, never resolve rather than end the command at once.
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The create mode the flags ask for.
pub fn create_mode(ephemeral: bool, sequential: bool, container: bool, ttl: bool) -> Result<CreateMode, String> {
    Ok(match (ephemeral, sequential, container, ttl) {
        (false, false, false, false) => CreateMode::Persistent,
        (true, false, false, false) => CreateMode::Ephemeral,
        (false, true, false, false) => CreateMode::PersistentSequential,
        (true, true, false, false) => CreateMode::EphemeralSequential,
        (false, false, true, false) => CreateMode::Container,
        (false, false, false, true) => CreateMode::PersistentWithTtl,
        (false, true, false, true) => CreateMode::PersistentSequentialWithTtl,
        _ => return Err("-c cannot be combined with -e, -s or --ttl, and -e not with --ttl".into()),
    })
}

/// `create`: prints the created path.
pub async fn create(
    client: &Client,
    out: &Printer,
    path: &str,
    data: &[u8],
    mode: CreateMode,
    acl: &[Acl],
    ttl_ms: Option<u64>,
) -> Result<Exit, ClientError> {
    let (created, stat) = match ttl_ms {
        Some(ms) => client.create_ttl_with_stat(path, data, mode, acl, std::time::Duration::from_millis(ms)).await?,
        None => client.create_with_stat(path, data, mode, acl).await?,
    };
    if out.json {
        out.doc(json!({ "path": created, "stat": stat_json(&stat) }));
    } else {
        out.line(&created);
    }
    Ok(Exit::Ok)
}

/// `get`: prints the data (and Stat), then with `watch` the watch's event.
pub async fn get(
    client: &Client,
    out: &Printer,
    path: &str,
    with_stat: bool,
    watch: bool,
    encoding: Encoding,
) -> Result<Exit, ClientError> {
    let (data, stat, watcher) = if watch {
        let (data, stat, watcher) = client.get_data_and_watch(path).await?;
        (data, stat, Some(watcher))
    } else {
        let (data, stat) = client.get_data(path).await?;
        (data, stat, None)
    };
    if out.json {
        let mut doc = data_json(&data, encoding);
        if with_stat {
            doc["stat"] = stat_json(&stat);
        }
        out.doc(doc);
    } else {
        out.data(&data, encoding);
        if with_stat {
            out.stat(&stat);
        }
    }
    match watcher {
        Some(watcher) => watched(out, watcher).await,
        None => Ok(Exit::Ok),
    }
}

/// The event of a one-shot watch just left. A one-shot command waits for it
/// and prints it (Ctrl-C ends the wait). The shell, like zkCli, gives the
/// prompt back at once and prints the event when it fires, so a watch can
/// be left while other commands run (and `removewatches` tried).
async fn watched(out: &Printer, watcher: OneshotWatcher) -> Result<Exit, ClientError> {
    if let Some(events) = &out.events {
        let (events, json) = (events.clone(), out.json);
        tokio::spawn(async move {
            let event = watcher.await;
            // The shell closing its own session (quit, connect) is no news.
            if event != WatchedEvent::State(ConnectionState::Closed) {
                events.show(watched_line(&event, json));
            }
        });
        return Ok(Exit::Ok);
    }
    tokio::select! {
        event = watcher => match event {
            WatchedEvent::State(state) if state.is_terminal() => Ok(out.session_over(state)),
            event => {
                out.watched(&event);
                Ok(Exit::Ok)
            }
        },
        _ = interrupted() => Ok(Exit::Interrupted),
    }
}

/// `set`: prints the new Stat.
pub async fn set(client: &Client, out: &Printer, path: &str, data: &[u8], version: i32) -> Result<Exit, ClientError> {
    let stat = client.set_data(path, data, version).await?;
    out.stat(&stat);
    Ok(Exit::Ok)
}

/// `check`: succeeds only if the node exists with the version (-1: any).
pub async fn check(client: &Client, out: &Printer, path: &str, version: i32) -> Result<Exit, ClientError> {
    client.check(path, version).await?;
    if out.json {
        out.doc(json!({ "checked": path, "version": version }));
    }
    Ok(Exit::Ok)
}

/// `removewatches`: removes this session's watches of a kind on a path.
pub async fn remove_watches(
    client: &Client,
    out: &Printer,
    path: &str,
    kind: WatcherType,
) -> Result<Exit, ClientError> {
    let name = match kind {
        WatcherType::Children => "child",
        WatcherType::Data => "data",
        _ => "any",
    };
    match client.remove_watches(path, kind).await {
        Ok(()) => {}
        // The server's NoWatcher names no kind; say which was asked for.
        Err(ClientError::Server(mut e)) if e.code == ErrorCode::NoWatcher && e.reason.is_empty() => {
            e.reason = match kind {
                WatcherType::Any => "this session has no watch on the node".into(),
                _ => format!("this session has no {name} watch on the node"),
            };
            return Err(ClientError::Server(e));
        }
        Err(e) => return Err(e),
    }
    if out.json {
        out.doc(json!({ "removed": path, "type": name }));
    }
    Ok(Exit::Ok)
}

/// `delete`.
pub async fn delete(client: &Client, out: &Printer, path: &str, version: i32) -> Result<Exit, ClientError> {
    client.delete(path, version).await?;
    if out.json {
        out.doc(json!({ "deleted": [path] }));
    }
    Ok(Exit::Ok)
}

/// Every path of the subtree at `root`, parents before children (breadth
/// first), at most `max_nodes` of them.
async fn subtree(client: &Client, root: &str, max_nodes: usize) -> Result<Vec<String>, ClientError> {
    let mut found = vec![root.to_string()];
    let mut queue = VecDeque::from([root.to_string()]);
    while !queue.is_empty() {
        let batch: Vec<String> = queue.drain(..queue.len().min(PIPELINE)).collect();
        let listed: Vec<_> =
            stream::iter(batch.iter().map(|p| client.get_children(p))).buffered(PIPELINE).collect().await;
        for (parent, children) in batch.iter().zip(listed) {
            let children = match children {
                Ok(c) => c,
                // Deleted meanwhile: nothing below it any more.
                Err(e) if e.is_server_code(ErrorCode::NoNode) && parent != root => continue,
                Err(e) => return Err(e),
            };
            for child in children {
                let path = if parent == "/" { format!("/{child}") } else { format!("{parent}/{child}") };
                if found.len() >= max_nodes {
                    return Err(ClientError::InvalidArgument(format!(
                        "{root} has more than {max_nodes} nodes; raise --max-nodes to go on"
                    )));
                }
                found.push(path.clone());
                queue.push_back(path);
            }
        }
    }
    Ok(found)
}

/// `rm`: deletes a node, or with `recursive` its whole subtree (children first).
pub async fn rm(
    client: &Client,
    out: &Printer,
    path: &str,
    recursive: bool,
    max_nodes: usize,
) -> Result<Exit, ClientError> {
    if !recursive {
        return delete(client, out, path, -1).await;
    }
    let mut paths = subtree(client, path, max_nodes).await?;
    if path == "/" {
        // The root and the system subtree cannot be deleted; the rest can.
        paths.retain(|p| p != "/" && p != "/zookeeper" && !p.starts_with("/zookeeper/"));
    }
    paths.reverse();
    let results: Vec<_> = stream::iter(paths.iter().map(|p| client.delete(p, -1))).buffered(PIPELINE).collect().await;
    let mut deleted = Vec::new();
    for (p, result) in paths.iter().zip(results) {
        match result {
            Ok(()) => deleted.push(p.clone()),
            // Someone else deleted it: the goal is reached all the same.
            Err(e) if e.is_server_code(ErrorCode::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    if out.json {
        out.doc(json!({ "deleted": deleted }));
    }
    Ok(Exit::Ok)
}

/// What `ls` lists and how.
pub struct Listing {
    /// Every path below, not only the children.
    pub recursive: bool,
    /// The node's Stat too.
    pub with_stat: bool,
    /// The most nodes a recursive listing walks.
    pub max_nodes: usize,
    /// Leave a child watch and print its event.
    pub watch: bool,
}

/// `ls`: children names (or every path below), the Stat if asked, then the watch's event.
pub async fn ls(client: &Client, out: &Printer, path: &str, how: Listing) -> Result<Exit, ClientError> {
    let mut watcher = None;
    let (names, stat) = if how.recursive {
        let stat = if how.with_stat { client.exists(path).await? } else { None };
        let mut all = subtree(client, path, how.max_nodes).await?;
        all.remove(0);
        (all, stat)
    } else if how.watch {
        let (children, child_watch) = client.get_children_and_watch(path).await?;
        watcher = Some(child_watch);
        // A watching getChildren carries no Stat; the one read after it may
        // be a little newer than the list, which `-s` users accept.
        let stat = if how.with_stat { client.exists(path).await? } else { None };
        (children, stat)
    } else if how.with_stat {
        let (children, stat) = client.get_children_with_stat(path).await?;
        (children, Some(stat))
    } else {
        (client.get_children(path).await?, None)
    };
    if out.json {
        let mut doc = json!({ "path": path, "children": names });
        if let Some(stat) = &stat {
            doc["stat"] = stat_json(stat);
        }
        out.doc(doc);
    } else {
        for name in &names {
            out.line(name);
        }
        if let Some(stat) = &stat {
            out.stat(stat);
        }
    }
    match watcher {
        Some(watcher) => watched(out, watcher).await,
        None => Ok(Exit::Ok),
    }
}

/// `stat`.
pub async fn stat(client: &Client, out: &Printer, path: &str) -> Result<Exit, ClientError> {
    match client.exists(path).await? {
        Some(stat) => {
            out.stat(&stat);
            Ok(Exit::Ok)
        }
        None => Err(ClientError::Server(zabkeeper_core::error::ZkError::new(ErrorCode::NoNode, path))),
    }
}

/// `watch`: prints events of a persistent watch until `count` node events, Ctrl-C, or the session's end.
pub async fn watch(
    client: &Client,
    out: &Printer,
    path: &str,
    recursive: bool,
    count: Option<u64>,
) -> Result<Exit, ClientError> {
    let mode = if recursive { AddWatchMode::PersistentRecursive } else { AddWatchMode::Persistent };
    let mut watcher = client.add_watch(path, mode).await?;
    let mut seen = 0u64;
    if count == Some(0) {
        return Ok(Exit::Ok);
    }
    loop {
        tokio::select! {
            event = watcher.next_event() => match event {
                Some(WatchedEvent::State(state)) if state.is_terminal() => return Ok(out.session_over(state)),
                Some(event) => {
                    out.watched(&event);
                    if matches!(event, WatchedEvent::Node(_)) {
                        seen += 1;
                        if count.is_some_and(|n| seen >= n) {
                            return Ok(Exit::Ok);
                        }
                    }
                    if matches!(event, WatchedEvent::Overflowed) {
                        return Err(ClientError::ConnectionLoss("the watch overflowed".into()));
                    }
                }
                None => return Ok(Exit::Ok),
            },
            _ = interrupted() => return Ok(Exit::Ok),
        }
    }
}

/// `sync`: prints the path.
pub async fn sync(client: &Client, out: &Printer, path: &str) -> Result<Exit, ClientError> {
    let synced = client.sync(path).await?;
    if out.json {
        out.doc(json!({ "synced": synced }));
    } else {
        out.line(&synced);
    }
    Ok(Exit::Ok)
}

/// `getacl`.
pub async fn getacl(client: &Client, out: &Printer, path: &str) -> Result<Exit, ClientError> {
    let (acl, stat) = client.get_acl(path).await?;
    out.acl(&acl, &stat);
    Ok(Exit::Ok)
}

/// `setacl`: prints the new Stat.
pub async fn setacl(client: &Client, out: &Printer, path: &str, acl: &str, version: i32) -> Result<Exit, ClientError> {
    let acl = parse_acl(acl)?;
    let stat = client.set_acl(path, &acl, version).await?;
    out.stat(&stat);
    Ok(Exit::Ok)
}

/// `whoami` (and `addauth`, which adds credentials first): prints the session's identities.
pub async fn whoami(client: &Client, out: &Printer, add: Option<(&str, &str)>) -> Result<Exit, ClientError> {
    if let Some((scheme, auth)) = add {
        client.add_auth(scheme, auth.as_bytes()).await?;
    }
    let ids = client.who_am_i().await?;
    if out.json {
        let ids: Vec<_> = ids.iter().map(|i| json!({ "scheme": i.scheme, "id": i.id })).collect();
        out.doc(json!({ "identities": ids }));
    } else {
        for id in ids {
            out.line(&format!("{}: {}", id.scheme, id.id));
        }
    }
    Ok(Exit::Ok)
}

/// `ephemerals`: this invocation's session's ephemerals under a prefix.
pub async fn ephemerals(client: &Client, out: &Printer, prefix: &str) -> Result<Exit, ClientError> {
    let paths = client.get_ephemerals(prefix).await?;
    if out.json {
        out.doc(json!({ "ephemerals": paths }));
    } else {
        for p in paths {
            out.line(&p);
        }
    }
    Ok(Exit::Ok)
}

/// `count`: the number of descendants.
pub async fn count(client: &Client, out: &Printer, path: &str) -> Result<Exit, ClientError> {
    let n = client.get_all_children_number(path).await?;
    if out.json {
        out.doc(json!({ "path": path, "count": n }));
    } else {
        out.line(&n.to_string());
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_choose_the_create_mode_and_refuse_contradictions() {
        assert_eq!(create_mode(false, false, false, false), Ok(CreateMode::Persistent));
        assert_eq!(create_mode(true, true, false, false), Ok(CreateMode::EphemeralSequential));
        assert_eq!(create_mode(false, true, false, true), Ok(CreateMode::PersistentSequentialWithTtl));
        assert_eq!(create_mode(false, false, true, false), Ok(CreateMode::Container));
        assert!(create_mode(true, false, true, false).is_err());
        assert!(create_mode(true, false, false, true).is_err());
    }
}
