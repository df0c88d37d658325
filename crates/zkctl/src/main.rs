//! zkctl: a command-line client for zabkeeper, in the style of zkCli and
//! etcdctl. Each invocation opens one session, runs one subcommand, and
//! closes the session (so an ephemeral created by `zkctl create -e` lives only
//! as long as that invocation). Without a subcommand it opens an interactive
//! shell on one session (see `shell`).
//!
//! Exit codes: 0 success, 1 the server answered with an error code, 2 usage
//! (bad arguments, ACL or connect string), 3 connection problems (no server,
//! connection loss, timeout, session expired), 130 interrupted while waiting.

mod admin;
mod commands;
mod events;
mod import;
mod input;
mod multi;
mod output;
mod recipes;
mod restore;
mod shell;

use clap::{Parser, Subcommand};
use input::Stdin;
use output::{Encoding, Exit, Printer};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use zabkeeper_client::acl_spec::parse_acl;
use zabkeeper_client::{Client, ClientError, ClientOptions, ClientTls};
use zabkeeper_core::tree::watch::WatcherType;

/// Largest subtree `ls -R` and `rm -r` walk unless told otherwise.
const DEFAULT_MAX_NODES: usize = 100_000;

/// Command-line client for a zabkeeper ensemble.
///
/// Authentication: ZooKeeper's `addauth` belongs to an interactive session; here
/// every invocation is its own session, so pass credentials with `--auth` (any
/// number of times) and they are added before the subcommand runs, e.g.
/// `zkctl --auth digest:alice:secret get /private`.
///
/// Output: zkCli-like text, or with --json one JSON document per line.
/// Errors go to stderr and name their code, e.g. `Error: NoNode (-101) for /x`.
///
/// Exit codes: 0 success, 1 the server answered with an error code, 2 usage,
/// 3 connection problems (no server, connection loss, timeout, expired
/// session), 130 interrupted while waiting for a watch event.
#[derive(Parser, Debug)]
#[command(name = "zkctl", version)]
struct Cli {
    /// Servers to connect to: host:port[,host:port...] (their gRPC addresses).
    #[arg(long, global = true, env = "ZKCTL_SERVER", default_value = "127.0.0.1:3181")]
    server: String,
    /// Limit for connecting and for each request, in ms.
    #[arg(long, global = true, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    timeout_ms: u64,
    /// Session timeout to ask for, in ms.
    #[arg(long, global = true, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..=2_147_483_647))]
    session_timeout_ms: u64,
    /// The admin address of one replica, for `zkctl admin` (its admin_addr).
    #[arg(long, global = true, env = "ZKCTL_ADMIN", default_value = "127.0.0.1:4181")]
    admin: String,
    /// Print one JSON document per result (one per line); errors as JSON on stderr.
    #[arg(long, global = true)]
    json: bool,
    /// Credentials added to the session before the subcommand: SCHEME:CREDENTIALS, e.g. digest:user:password.
    #[arg(long = "auth", global = true, value_name = "SCHEME:CREDENTIALS")]
    auth: Vec<String>,
    /// Speak TLS to the servers' gRPC and admin ports, trusting the CA certificates in this PEM file.
    #[arg(long, global = true, env = "ZKCTL_CACERT", value_name = "PEM")]
    cacert: Option<PathBuf>,
    /// This client's certificate (PEM), for servers that demand one (with --key and --cacert).
    #[arg(long, global = true, env = "ZKCTL_CERT", value_name = "PEM", requires_all = ["key", "cacert"])]
    cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, global = true, env = "ZKCTL_KEY", value_name = "PEM", requires = "cert")]
    key: Option<PathBuf>,
    #[command(flatten)]
    admin_options: admin::AdminOptions,
    /// Without one, an interactive shell (history, tab completion of commands and paths).
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where `admin` commands go (also from the shell).
pub struct AdminTarget {
    /// The admin address.
    address: String,
    /// Token and data-directory options.
    options: admin::AdminOptions,
    /// Limit for each call.
    timeout: Duration,
}

/// What a command's arguments come to once checked and read, before any
/// session is used: nothing is sent for a command that cannot run.
#[derive(Default)]
struct Plan {
    /// A create's mode and ACL.
    create: Option<(zabkeeper_core::tree::stat::CreateMode, Vec<zabkeeper_core::acl::Acl>)>,
    /// The data of `create` / `set`: from the line, a file or stdin.
    data: Vec<u8>,
    /// The operations of `multi`.
    ops: Vec<multi::PlannedOp>,
}

/// `--hex` / `--base64`: data printed so any bytes survive (JSON too).
#[derive(clap::Args, Debug, Clone, Copy, Default)]
struct DataFormat {
    /// Print data as lowercase hex.
    #[arg(long, conflicts_with = "base64")]
    hex: bool,
    /// Print data as base64 (standard alphabet, padded).
    #[arg(long)]
    base64: bool,
}

impl DataFormat {
    /// The encoding the flags ask for.
    fn encoding(self) -> Encoding {
        Encoding::from_flags(self.hex, self.base64)
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Ask a replica's admin API (`--admin host:port`), or read a stopped member's data directory:
    /// status, members, log, snapshots, sessions, watches.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Make a member's data directory from an Apache ZooKeeper data directory
    /// (3.4 to 3.9): the newest snapshot and every logged transaction after
    /// it, checksums verified, recovered as ZooKeeper would on restart.
    /// Start one member on it; the others of an ensemble catch up by sync.
    /// Or, with --load, load it into a running ensemble whose tree is empty
    /// (through its leader, found from `--admin`).
    Import {
        /// ZooKeeper's dataDir (holding version-2/snapshot.* and, unless
        /// --zookeeper-log-dir, version-2/log.*). Stop ZooKeeper first.
        #[arg(long, value_name = "ZKDIR")]
        zookeeper_data: PathBuf,
        /// ZooKeeper's dataLogDir, when it is not its dataDir.
        #[arg(long, value_name = "DIR")]
        zookeeper_log_dir: Option<PathBuf>,
        /// The member's data directory to create (must be absent or empty).
        #[arg(long, value_name = "DIR", required_unless_present = "load", conflicts_with = "load")]
        data_dir: Option<PathBuf>,
        /// Load the tree into the running ensemble at `--admin` instead.
        #[arg(long)]
        load: bool,
    },
    /// Write an Apache ZooKeeper snapshot of a tree (the way back from a
    /// migration): from a snapshot saved from a running member (`admin
    /// snapshot save`), or from a stopped member's newest snapshot. ZooKeeper
    /// 3.4 to 3.9 start from it as `<dataDir>/version-2/snapshot.<zxid>`.
    Export {
        /// A snapshot file saved with `zkctl admin snapshot save`.
        #[arg(long, value_name = "FILE", conflicts_with = "data_dir", required_unless_present = "data_dir")]
        snapshot: Option<PathBuf>,
        /// A stopped member's data directory (its newest snapshot).
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// The file to write, or a directory (ZooKeeper's `version-2`) to
        /// write `snapshot.<zxid>` in.
        #[arg(long, value_name = "FILE")]
        zookeeper_snapshot: PathBuf,
    },
    /// Make a member's data directory holding the state after one
    /// transaction of a backup kept by `zkctl admin backup` (--to-zxid, or
    /// --to-time for the last one at or before a time); or show what the
    /// backup holds (--list, --log). Start a new ensemble on it, or read it
    /// with the offline commands (`admin log --data-dir`, `admin snapshot inspect --data-dir`).
    Restore(restore::RestoreArgs),
    /// Create a node and print its path (sequential nodes get a suffix).
    Create {
        /// Ephemeral: deleted when this invocation's session ends.
        #[arg(short = 'e')]
        ephemeral: bool,
        /// Sequential: a 10-digit counter is appended to the name.
        #[arg(short = 's')]
        sequential: bool,
        /// Container: removed by the server once its last child is gone.
        #[arg(short = 'c')]
        container: bool,
        /// TTL in ms: removed once unchanged and childless for this long.
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        ttl: Option<u64>,
        /// ACL in zkCli syntax, e.g. world:anyone:r,digest:user:hash:cdrwa.
        #[arg(long, default_value = "world:anyone:cdrwa")]
        acl: String,
        /// The node's path.
        path: String,
        /// The node's data (empty if omitted; `-` reads stdin).
        data: Option<String>,
        /// Read the data from this file, byte for byte (`-`: stdin).
        #[arg(long, value_name = "FILE", conflicts_with = "data")]
        file: Option<PathBuf>,
    },
    /// Print a node's data.
    Get {
        /// Also print the Stat.
        #[arg(short = 's')]
        stat: bool,
        /// Leave a watch and print its event: the command waits for it, the shell prints it when it fires.
        #[arg(short = 'w', long)]
        watch: bool,
        /// A linearizable read: it sees every write acknowledged before it
        /// (one quorum round trip), where a plain read may lag.
        #[arg(long)]
        linearizable: bool,
        #[command(flatten)]
        format: DataFormat,
        /// The node's path.
        path: String,
    },
    /// Replace a node's data and print the new Stat.
    Set {
        /// Expected version (-1: any).
        #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
        version: i32,
        /// The node's path.
        path: String,
        /// The new data (`-` reads stdin).
        #[arg(required_unless_present = "file")]
        data: Option<String>,
        /// Read the new data from this file, byte for byte (`-`: stdin).
        #[arg(long, value_name = "FILE", conflicts_with = "data")]
        file: Option<PathBuf>,
    },
    /// Succeed only if a node exists with this version (for scripts and `multi`).
    Check {
        /// Expected version (-1: any, i.e. the node exists).
        #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
        version: i32,
        /// The node's path.
        path: String,
    },
    /// Apply a file of write operations atomically (all or none), one a line:
    /// `create ...`, `set ...`, `delete ...`, `check PATH -v N`.
    ///
    /// Lines take the same flags as the commands; blank lines and lines
    /// starting with `#` are skipped; words are split as a shell does. Every
    /// line is checked before anything is sent. On success each op's result
    /// is printed; on failure the line whose op failed, and nothing is applied.
    Multi {
        /// The file of operations (`-`: stdin).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
    },
    /// Delete a node (it must have no children).
    Delete {
        /// Expected version (-1: any).
        #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
        version: i32,
        /// The node's path.
        path: String,
    },
    /// Delete a node; with -r its whole subtree, children first (zkCli's deleteall).
    Rm {
        /// Recursive.
        #[arg(short = 'r')]
        recursive: bool,
        /// Refuse subtrees larger than this.
        #[arg(long, default_value_t = DEFAULT_MAX_NODES)]
        max_nodes: usize,
        /// The node's path.
        path: String,
    },
    /// List a node's children, one per line.
    Ls {
        /// Every path below the node, parents first.
        #[arg(short = 'R')]
        recursive: bool,
        /// Also print the node's Stat.
        #[arg(short = 's')]
        stat: bool,
        /// Refuse subtrees larger than this (with -R).
        #[arg(long, default_value_t = DEFAULT_MAX_NODES)]
        max_nodes: usize,
        /// Leave a child watch and print its event: the command waits for it, the shell prints it when it fires.
        #[arg(short = 'w', long, conflicts_with = "recursive")]
        watch: bool,
        /// Linearizable reads: they see every write acknowledged before them
        /// (one quorum round trip each), where plain reads may lag.
        #[arg(long)]
        linearizable: bool,
        /// The node's path.
        path: String,
    },
    /// Remove this session's watches on a node (zkCli's removewatches); NoWatcher if there are none.
    ///
    /// A one-shot invocation is a fresh session with no watches: this is for
    /// the shell, after `get -w` or `ls -w`.
    Removewatches {
        /// Child watches only.
        #[arg(short = 'c', conflicts_with_all = ["data", "any"])]
        children: bool,
        /// Data (and exists) watches only.
        #[arg(short = 'd', conflicts_with = "any")]
        data: bool,
        /// Every kind (the default).
        #[arg(short = 'a')]
        any: bool,
        /// The node's path.
        path: String,
    },
    /// Print a node's Stat.
    Stat {
        /// The node's path.
        path: String,
    },
    /// Print the events of a persistent watch until Ctrl-C or --count events.
    Watch {
        /// Watch every node below too (persistent recursive).
        #[arg(long)]
        recursive: bool,
        /// Stop after this many node events.
        #[arg(long)]
        count: Option<u64>,
        /// The node's path (it need not exist).
        path: String,
    },
    /// Wait until the server has caught up with the leader; print the path.
    Sync {
        /// The path.
        path: String,
    },
    /// Print a node's ACL, one scheme:id:perms entry per line.
    Getacl {
        /// The node's path.
        path: String,
    },
    /// Replace a node's ACL (zkCli syntax, e.g. world:anyone:r,digest:u:hash:cdrwa).
    Setacl {
        /// Expected ACL version (-1: any).
        #[arg(short = 'v', long, default_value_t = -1, allow_negative_numbers = true)]
        version: i32,
        /// The node's path.
        path: String,
        /// The ACL.
        acl: String,
    },
    /// Check credentials: add them to this invocation's session and print its identities.
    ///
    /// Credentials last only as long as this invocation; to run a command
    /// authenticated, use the global --auth instead.
    Addauth {
        /// The scheme, e.g. digest.
        scheme: String,
        /// The credentials, e.g. user:password.
        credentials: String,
    },
    /// Print the identities of this invocation's session.
    Whoami,
    /// Print this invocation's session's ephemeral nodes under a prefix.
    ///
    /// ZooKeeper's getEphemerals only lists the calling session's nodes, and
    /// each zkctl invocation is a new session: this mostly shows that none remain.
    Ephemerals {
        /// Path prefix (default /).
        prefix: Option<String>,
    },
    /// Print the number of nodes below a node.
    Count {
        /// The node's path.
        path: String,
    },
    /// Take a lock (the lock recipe) and hold it until Ctrl-C, or while COMMAND runs.
    ///
    /// With a command (after `--`), zkctl runs it once the lock is held, with
    /// ZKCTL_LOCK_NODE set to the lock's node, releases the lock when it ends
    /// and exits with its exit code. If the lock is lost meanwhile (session
    /// expired, node deleted), the command is killed.
    Lock {
        /// Give up if the lock is not ours within this many ms (exit 1, OperationTimeout).
        #[arg(long, value_name = "MS")]
        wait_ms: Option<u64>,
        /// The lock's directory node (created if missing).
        path: String,
        /// The command to run while holding the lock.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Campaign in a leader election and lead until Ctrl-C; or with --leader print the current leader.
    Elect {
        /// Print the current leader's value and exit, without campaigning.
        #[arg(short = 'l', long)]
        leader: bool,
        /// The election's directory node (created if missing).
        path: String,
        /// The value others see while this candidate leads (needed to campaign).
        value: Option<String>,
        #[command(flatten)]
        format: DataFormat,
    },
}

/// Splits `SCHEME:CREDENTIALS` (the credentials may contain colons).
fn parse_auth(text: &str) -> Result<(String, Vec<u8>), String> {
    match text.split_once(':') {
        Some((scheme, auth)) if !scheme.is_empty() && !auth.is_empty() => {
            Ok((scheme.to_string(), auth.as_bytes().to_vec()))
        }
        _ => Err(format!("--auth {text:?} is not SCHEME:CREDENTIALS (e.g. digest:user:password)")),
    }
}

async fn run(mut cli: Cli) -> Exit {
    let out = Printer { json: cli.json, events: None };
    let timeout = Duration::from_millis(cli.timeout_ms);
    let tls = match &cli.cacert {
        Some(ca) => match ClientTls::from_files(ca, cli.cert.as_deref().zip(cli.key.as_deref())) {
            Ok(tls) => Some(tls),
            Err(e) => return out.usage(&e.to_string()),
        },
        None => None,
    };
    cli.admin_options.tls = tls.clone();
    let command = match cli.command {
        Some(Command::Admin(command)) => {
            return admin::run(&cli.admin, &cli.admin_options, timeout, command, &out).await;
        }
        Some(Command::Import { zookeeper_data, zookeeper_log_dir, data_dir: Some(data_dir), .. }) => {
            let result = import::run(&zookeeper_data, zookeeper_log_dir.as_deref(), &data_dir, &out);
            return result.unwrap_or_else(|e| out.fail(&e));
        }
        Some(Command::Import { zookeeper_data, zookeeper_log_dir, data_dir: None, .. }) => {
            let result = import::load(
                &zookeeper_data,
                zookeeper_log_dir.as_deref(),
                &cli.admin,
                &cli.admin_options,
                timeout,
                &out,
            );
            return result.await.unwrap_or_else(|e| out.fail(&e));
        }
        Some(Command::Restore(args)) => return restore::run(args, &out).unwrap_or_else(|e| out.fail(&e)),
        Some(Command::Export { snapshot, data_dir, zookeeper_snapshot }) => {
            let result = import::export(snapshot.as_deref(), data_dir.as_deref(), &zookeeper_snapshot, &out);
            return result.unwrap_or_else(|e| out.fail(&e));
        }
        Some(command) => Some(command),
        None => None,
    };
    let mut options = ClientOptions::default()
        .with_session_timeout(Duration::from_millis(cli.session_timeout_ms))
        .with_connect_timeout(timeout)
        .with_request_timeout(timeout);
    for text in &cli.auth {
        match parse_auth(text) {
            Ok((scheme, auth)) => options = options.with_auth(&scheme, &auth),
            Err(message) => return out.usage(&message),
        }
    }
    if let Some(tls) = tls {
        options = options.with_tls(tls);
    }
    let Some(command) = command else {
        let admin = AdminTarget { address: cli.admin, options: cli.admin_options, timeout };
        return shell::run(cli.server, options, admin, out).await;
    };
    // Arguments are checked (and data read) before a session is opened for nothing.
    let plan = match plan(&command, &out, Stdin::Readable) {
        Ok(plan) => plan,
        Err(exit) => return exit,
    };
    let client = match Client::connect(&cli.server, options).await {
        Ok(client) => client,
        Err(e) => return out.fail(&e),
    };
    let result = dispatch(&client, &out, command, plan).await;
    // The session's end is part of the command (it removes `create -e` nodes); a failure here changes nothing.
    let _ = client.close().await;
    match result {
        Ok(exit) => exit,
        Err(e) => out.fail(&e),
    }
}

/// Runs one command on an open session (the shell's way: stdin is the terminal).
async fn execute(client: &Client, out: &Printer, command: Command) -> Exit {
    let plan = match plan(&command, out, Stdin::Terminal) {
        Ok(plan) => plan,
        Err(exit) => return exit,
    };
    match dispatch(client, out, command, plan).await {
        Ok(exit) => exit,
        Err(e) => out.fail(&e),
    }
}

/// Checks a command's arguments and reads its input: a create's mode and
/// ACL, data from a file or stdin, a multi's operations.
fn plan(command: &Command, out: &Printer, stdin: Stdin) -> Result<Plan, Exit> {
    let mut plan = Plan::default();
    match command {
        Command::Create { ephemeral, sequential, container, ttl, acl, data, file, .. } => {
            let mode = match commands::create_mode(*ephemeral, *sequential, *container, ttl.is_some()) {
                Ok(mode) => mode,
                Err(message) => return Err(out.usage(&message)),
            };
            match parse_acl(acl) {
                Ok(acl) => plan.create = Some((mode, acl)),
                Err(e) => return Err(out.fail(&e)),
            }
            plan.data =
                input::read_data(data.as_deref(), file.as_deref(), stdin).map_err(|e| out.usage(&e.to_string()))?;
        }
        Command::Set { data, file, .. } => {
            plan.data =
                input::read_data(data.as_deref(), file.as_deref(), stdin).map_err(|e| out.usage(&e.to_string()))?;
        }
        Command::Multi { file } => {
            plan.ops = multi::load(file, stdin).map_err(|e| out.usage(&e.to_string()))?;
        }
        Command::Setacl { acl, .. } => {
            if let Err(e) = parse_acl(acl) {
                return Err(out.fail(&e));
            }
        }
        Command::Elect { leader: false, value: None, .. } => {
            return Err(out.usage("elect needs a VALUE to campaign with, or --leader to print the leader"));
        }
        _ => {}
    }
    Ok(plan)
}

async fn dispatch(client: &Client, out: &Printer, command: Command, plan: Plan) -> Result<Exit, ClientError> {
    match command {
        Command::Create { path, ttl, .. } => {
            let Some((mode, acl)) = plan.create else {
                return Err(ClientError::InvalidArgument("create arguments were not checked".into()));
            };
            commands::create(client, out, &path, &plan.data, mode, &acl, ttl).await
        }
        Command::Get { stat, watch, linearizable, format, path } => {
            let client = if linearizable { &client.linearizable() } else { client };
            commands::get(client, out, &path, stat, watch, format.encoding()).await
        }
        Command::Set { version, path, .. } => commands::set(client, out, &path, &plan.data, version).await,
        Command::Check { version, path } => commands::check(client, out, &path, version).await,
        Command::Multi { .. } => multi::run(client, out, &plan.ops).await,
        Command::Delete { version, path } => commands::delete(client, out, &path, version).await,
        Command::Rm { recursive, max_nodes, path } => commands::rm(client, out, &path, recursive, max_nodes).await,
        Command::Ls { recursive, stat, max_nodes, watch, linearizable, path } => {
            let client = if linearizable { &client.linearizable() } else { client };
            commands::ls(client, out, &path, commands::Listing { recursive, with_stat: stat, max_nodes, watch }).await
        }
        Command::Removewatches { children, data, path, .. } => {
            let kind = match (children, data) {
                (true, _) => WatcherType::Children,
                (false, true) => WatcherType::Data,
                // -a, or nothing: every kind, as zkCli's default.
                (false, false) => WatcherType::Any,
            };
            commands::remove_watches(client, out, &path, kind).await
        }
        Command::Stat { path } => commands::stat(client, out, &path).await,
        Command::Watch { recursive, count, path } => commands::watch(client, out, &path, recursive, count).await,
        Command::Sync { path } => commands::sync(client, out, &path).await,
        Command::Getacl { path } => commands::getacl(client, out, &path).await,
        Command::Setacl { version, path, acl } => commands::setacl(client, out, &path, &acl, version).await,
        Command::Addauth { scheme, credentials } => commands::whoami(client, out, Some((&scheme, &credentials))).await,
        Command::Whoami => commands::whoami(client, out, None).await,
        Command::Ephemerals { prefix } => commands::ephemerals(client, out, prefix.as_deref().unwrap_or("/")).await,
        Command::Count { path } => commands::count(client, out, &path).await,
        Command::Lock { wait_ms, path, command } => recipes::lock(client, out, &path, wait_ms, &command).await,
        Command::Elect { leader: true, path, format, .. } => {
            recipes::leader(client, out, &path, format.encoding()).await
        }
        Command::Elect { path, value, .. } => {
            recipes::elect(client, out, &path, value.unwrap_or_default().as_bytes()).await
        }
        Command::Admin(_) | Command::Import { .. } | Command::Export { .. } | Command::Restore(_) => {
            Err(ClientError::InvalidArgument("admin, import, export and restore commands need no session".into()))
        }
    }
}

fn main() -> ExitCode {
    // Usage errors exit with 2, --help and --version with 0 (clap's convention matches ours).
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Connection.code());
        }
    };
    let exit = runtime.block_on(run(cli));
    ExitCode::from(exit.code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn auth_splits_at_the_first_colon_only() {
        assert_eq!(parse_auth("digest:u:p"), Ok(("digest".to_string(), b"u:p".to_vec())));
        assert!(parse_auth("digest").is_err());
        assert!(parse_auth(":x").is_err());
        assert!(parse_auth("digest:").is_err());
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        let cli = Cli::try_parse_from(["zkctl", "--json", "get", "-s", "/a", "--server", "h:1"]).unwrap();
        assert!(cli.json);
        assert_eq!(cli.server, "h:1");
        assert!(matches!(cli.command, Some(Command::Get { stat: true, watch: false, ref path, .. }) if path == "/a"));
        let cli = Cli::try_parse_from(["zkctl", "set", "-v", "-1", "/a", "x"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Set { version: -1, .. })));
        let cli = Cli::try_parse_from(["zkctl", "--auth", "digest:a:b", "--auth", "digest:c:d", "whoami"]).unwrap();
        assert_eq!(cli.auth.len(), 2);
        let cli = Cli::try_parse_from(["zkctl", "create", "-e", "-s", "--ttl", "5", "/a", "d"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Create { ephemeral: true, sequential: true, ttl: Some(5), .. })));
        let cli = Cli::try_parse_from(["zkctl", "--auth", "digest:x:y", "addauth", "digest", "u:p"]).unwrap();
        assert_eq!(cli.auth, vec!["digest:x:y".to_string()]);
        assert!(
            matches!(cli.command, Some(Command::Addauth { ref scheme, ref credentials }) if scheme == "digest" && credentials == "u:p")
        );
        let cli = Cli::try_parse_from(["zkctl", "lock", "--wait-ms", "5", "/l", "--", "sh", "-c", "exit 3"]).unwrap();
        assert!(
            matches!(cli.command, Some(Command::Lock { wait_ms: Some(5), ref command, .. }) if command == &["sh", "-c", "exit 3"])
        );
        let cli = Cli::try_parse_from(["zkctl", "elect", "-l", "/e"]).unwrap();
        assert!(matches!(cli.command, Some(Command::Elect { leader: true, value: None, .. })));
        assert!(Cli::try_parse_from(["zkctl", "frobnicate"]).is_err());
        assert!(Cli::try_parse_from(["zkctl", "--timeout-ms", "0", "whoami"]).is_err());
    }

    #[test]
    fn data_sources_watches_and_encodings_parse_and_contradictions_are_refused() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|cli| cli.command);
        let cli = parse(&["zkctl", "set", "/a", "--file", "f"]).unwrap();
        assert!(matches!(cli, Some(Command::Set { data: None, file: Some(ref f), .. }) if f == Path::new("f")));
        assert!(
            matches!(parse(&["zkctl", "create", "/a", "-"]).unwrap(), Some(Command::Create { data: Some(ref d), .. }) if d == "-")
        );
        assert!(parse(&["zkctl", "set", "/a"]).is_err(), "set needs DATA or --file");
        assert!(parse(&["zkctl", "create", "/a", "x", "--file", "f"]).is_err(), "inline data or a file, not both");
        let cli = parse(&["zkctl", "get", "--watch", "--base64", "/a"]).unwrap();
        assert!(matches!(cli, Some(Command::Get { watch: true, format: DataFormat { hex: false, base64: true }, .. })));
        assert!(parse(&["zkctl", "get", "--hex", "--base64", "/a"]).is_err());
        assert!(matches!(parse(&["zkctl", "ls", "-w", "/a"]).unwrap(), Some(Command::Ls { watch: true, .. })));
        let linearizable = |args: &[&str]| {
            matches!(
                parse(args).unwrap(),
                Some(Command::Get { linearizable: true, .. } | Command::Ls { linearizable: true, .. })
            )
        };
        assert!(linearizable(&["zkctl", "get", "--linearizable", "/a"]));
        assert!(linearizable(&["zkctl", "ls", "-R", "--linearizable", "/a"]));
        assert!(!linearizable(&["zkctl", "get", "/a"]));
        assert!(parse(&["zkctl", "ls", "-w", "-R", "/a"]).is_err(), "a child watch is on one node");
        assert!(matches!(
            parse(&["zkctl", "removewatches", "/a", "-d"]).unwrap(),
            Some(Command::Removewatches { data: true, .. })
        ));
        assert!(parse(&["zkctl", "removewatches", "-c", "-a", "/a"]).is_err());
        assert!(matches!(parse(&["zkctl", "multi", "--file", "-"]).unwrap(), Some(Command::Multi { .. })));
        assert!(matches!(
            parse(&["zkctl", "check", "-v", "-1", "/a"]).unwrap(),
            Some(Command::Check { version: -1, .. })
        ));
    }
}
