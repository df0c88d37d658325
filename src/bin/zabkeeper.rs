//! The zabkeeper server: `zabkeeper --config FILE [--id N]`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use zabkeeper::serve::{init_logs, log_filter, serve, shutdown_signal};
use zabkeeper_config::{LogFormat, ServerConfig, Sources};
use zabkeeper_store::SledStorage;

/// jemalloc, not glibc's malloc: with a million znodes glibc's heap holds
/// millions of small free chunks, and the first large allocation after a
/// leader change made it consolidate them all (`malloc_consolidate`), a
/// ~100 ms stall on the write path right when clients come back.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its first allocation (the symbol is
/// prefixed: tikv-jemallocator builds jemalloc with `_rjem_`). Freed pages
/// go back to the kernel after a second instead of ten, by jemalloc's own
/// background thread rather than on the write path: snapshots and log
/// compaction free hundreds of megabytes at 1 M znodes, and with the default
/// they stayed resident, ~250 B per znode of RSS over the live heap.
/// `_RJEM_MALLOC_CONF` in the environment still overrides each option.
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: Option<&'static std::ffi::CStr> =
    Some(c"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0");

/// The heap as jemalloc counts it, for `/metrics`. Its statistics are
/// cached until the epoch advances, so each read advances it first.
fn jemalloc_heap() -> Option<zabkeeper::telemetry::metrics::HeapStats> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()?;
    let resident = stats::resident::read().ok()?;
    Some(zabkeeper::telemetry::metrics::HeapStats { allocated: allocated as u64, resident: resident as u64 })
}

/// One replica of a zabkeeper ensemble.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The ensemble's TOML file (one file for every member). Any key can be
    /// overridden by ZABKEEPER_<KEY> (ZABKEEPER_SERVER_<ID>_<KEY> for a member's).
    #[arg(long, env = "ZABKEEPER_CONFIG")]
    config: PathBuf,
    /// This member's id in the file. Without it: the only member of a
    /// single-member file, else the host name's StatefulSet ordinal plus one
    /// (zk-0 is member 1).
    #[arg(long, env = "ZABKEEPER_ID")]
    id: Option<u64>,
    /// Print the ensemble's connect strings (one line per protocol) and exit.
    #[arg(long)]
    print_connect_strings: bool,
    /// Join a running ensemble: the admin address of any of its members,
    /// asked for the membership at start. This member follows without a vote
    /// until `zkctl admin member add` adds it (its line is logged); its file
    /// need list only itself.
    #[arg(long, env = "ZABKEEPER_JOIN", value_name = "ADMIN_ADDR")]
    join: Option<String>,
    /// Log filter (tracing's EnvFilter syntax), e.g. `info` or `zabkeeper=debug`.
    /// Without it: RUST_LOG, then the config's `log_level`, then `info`.
    #[arg(long, env = "ZABKEEPER_LOG")]
    log: Option<String>,
    /// Log line format (default: the config's `log_format`, else text).
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    zabkeeper::telemetry::metrics::set_heap_stats(jemalloc_heap);
    let config = match ServerConfig::load(&args.config, &Sources::of_process(args.id)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("zabkeeper: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(&log_filter(args.log.clone(), &config), args.log_format.unwrap_or(config.log_format));
    zabkeeper::runtime::crash::log_panics();
    // The runtime is sized by the config, so it is built once the config is read.
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let workers = config.runtime_workers(cpus);
    tracing::info!(
        workers,
        cpus,
        members_here = config.members_on_this_machine(),
        set = config.worker_threads.is_some(),
        "async runtime"
    );
    match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build() {
        Ok(runtime) => runtime.block_on(run(args, config)),
        Err(e) => {
            eprintln!("zabkeeper: cannot start the async runtime: {e}");
            ExitCode::from(1)
        }
    }
}

/// The member, from its validated config to its stop.
async fn run(args: Args, mut config: ServerConfig) -> ExitCode {
    if args.print_connect_strings {
        let join = |addrs: Vec<String>| addrs.join(",");
        println!("grpc: {}", join(config.members.iter().map(|m| m.grpc_addr.to_string()).collect()));
        let zk: Vec<String> =
            config.members.iter().filter_map(|m| m.client_addr.as_ref().map(|a| a.to_string())).collect();
        if !zk.is_empty() {
            println!("zookeeper: {}", join(zk));
        }
        let admin: Vec<String> =
            config.members.iter().filter_map(|m| m.admin_addr.as_ref().map(|a| a.to_string())).collect();
        if !admin.is_empty() {
            println!("admin: {}", join(admin));
        }
        return ExitCode::SUCCESS;
    }
    if let Some(addr) = &args.join {
        match zabkeeper::ops::membership_change::fetch_membership(
            addr,
            config.admin_token.as_deref(),
            config.tls.as_ref(),
        )
        .await
        {
            Ok(membership) => {
                let line = config.me().member_line();
                tracing::info!(via = %addr, members = %membership, "joining: add this member with `zkctl admin member add '{line}'`");
                config.joined = Some(membership);
            }
            Err(e) => {
                eprintln!("zabkeeper: --join {addr}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let me = config.me().clone();
    if let Err(e) = std::fs::create_dir_all(&me.data_dir) {
        eprintln!("zabkeeper: cannot create data_dir {}: {e}", me.data_dir.display());
        return ExitCode::from(1);
    }
    let storage = match SledStorage::open(&me.data_dir) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("zabkeeper: cannot open storage in {}: {e}", me.data_dir.display());
            return ExitCode::from(1);
        }
    };
    let id = config.id;
    let result = serve(config, storage, shutdown_signal(), |bound| {
        let line = bound.ready_line(id);
        tracing::info!("{line}");
        println!("{line}");
    })
    .await;
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zabkeeper: {e}");
            ExitCode::from(1)
        }
    }
}
