//! `zkctl lock` and `zkctl elect`: the lock and election recipes for shell
//! scripts, in the manner of `etcdctl lock` / `etcdctl elect`.

use super::commands::interrupted;
use super::output::{data_json, Encoding, Exit, Printer};
use serde_json::json;
use std::time::Duration;
use zabkeeper_client::recipes::{Election, Lock, RecipeError};
use zabkeeper_client::{Client, ClientError};
use zabkeeper_core::error::{ErrorCode, ZkError};

/// A recipe's failure as the error zkctl reports.
fn client_error(e: RecipeError) -> ClientError {
    match e {
        RecipeError::Client(e) => e,
        RecipeError::NodeLost { path } => ClientError::Server(ZkError::with_reason(
            ErrorCode::NoNode,
            path,
            "our node was deleted (session expired or removed by another client)",
        )),
        other => ClientError::InvalidArgument(other.to_string()),
    }
}

/// The error for a lock or leadership that ended without us giving it up:
/// what `lost()` failed with, else our node at `path` is gone.
fn lost_error(lost: Result<(), RecipeError>, path: &str) -> ClientError {
    client_error(lost.err().unwrap_or_else(|| RecipeError::NodeLost { path: path.to_string() }))
}

/// `lock`: holds the lock until Ctrl-C, or while `command` runs.
pub async fn lock(
    client: &Client,
    out: &Printer,
    path: &str,
    wait_ms: Option<u64>,
    command: &[String],
) -> Result<Exit, ClientError> {
    let lock = Lock::new(client, path);
    let acquiring = async {
        match wait_ms {
            Some(ms) => lock.try_acquire_for(Duration::from_millis(ms)).await,
            None => lock.acquire().await.map(Some),
        }
    };
    let guard = tokio::select! {
        got = acquiring => match got.map_err(client_error)? {
            Some(guard) => guard,
            None => {
                return Err(ClientError::Server(ZkError::with_reason(
                    ErrorCode::OperationTimeout,
                    path,
                    format!("the lock is held by another client after {} ms", wait_ms.unwrap_or_default()),
                )))
            }
        },
        _ = interrupted() => return Ok(Exit::Interrupted),
    };
    if out.json {
        out.doc(json!({ "locked": path, "node": guard.path() }));
    } else {
        out.line(&format!("locked {path} ({})", guard.path()));
    }
    let Some((program, args)) = command.split_first() else {
        tokio::select! {
            lost = guard.lost() => return Err(lost_error(lost, guard.path())),
            _ = interrupted() => {}
        }
        guard.release().await.map_err(client_error)?;
        return Ok(Exit::Ok);
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .env("ZKCTL_LOCK_NODE", guard.path())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ClientError::InvalidArgument(format!("cannot run {program:?}: {e}")))?;
    let exit = tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| ClientError::InvalidArgument(format!("waiting for {program:?}: {e}")))?;
            // A command killed by a signal exits like a shell reports it: 128 + signal.
            Exit::Command(status.code().map(|c| u8::try_from(c).unwrap_or(1)).unwrap_or_else(|| 128 + signal_of(&status)))
        }
        lost = guard.lost() => {
            // Best effort: the child may have ended at this very moment.
            let _ = child.kill().await;
            return Err(lost_error(lost, guard.path()));
        }
        _ = interrupted() => {
            let _ = child.kill().await;
            Exit::Interrupted
        }
    };
    guard.release().await.map_err(client_error)?;
    Ok(exit)
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().and_then(|s| u8::try_from(s).ok()).unwrap_or(0)
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> u8 {
    0
}

/// `elect VALUE`: campaigns, then leads until Ctrl-C.
pub async fn elect(client: &Client, out: &Printer, path: &str, value: &[u8]) -> Result<Exit, ClientError> {
    let election = Election::new(client, path);
    let leadership = tokio::select! {
        elected = election.campaign(value) => elected.map_err(client_error)?,
        _ = interrupted() => return Ok(Exit::Interrupted),
    };
    if out.json {
        out.doc(json!({ "elected": path, "node": leadership.path() }));
    } else {
        out.line(&format!("elected in {path} ({})", leadership.path()));
    }
    tokio::select! {
        lost = leadership.lost() => return Err(lost_error(lost, leadership.path())),
        _ = interrupted() => {}
    }
    leadership.resign().await.map_err(client_error)?;
    Ok(Exit::Ok)
}

/// `elect --leader`: prints the current leader's value (`null` / "no leader" if none).
pub async fn leader(client: &Client, out: &Printer, path: &str, encoding: Encoding) -> Result<Exit, ClientError> {
    let leader = Election::new(client, path).leader().await.map_err(client_error)?;
    match (&leader, out.json) {
        (Some(value), true) => out.doc(json!({ "leader": data_json(value, encoding) })),
        (None, true) => out.doc(json!({ "leader": null })),
        (Some(value), false) => out.data(value, encoding),
        (None, false) => out.line("no leader"),
    }
    Ok(Exit::Ok)
}
