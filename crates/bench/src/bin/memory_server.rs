//! The zabkeeper server with its storage in memory: NOT DURABLE, for
//! measurement only. `zabkeeper --config FILE --id N` takes the same
//! arguments; this one keeps the log and snapshots in `MemStorage`, so a
//! group commit costs no write and no fsync.
//!
//! Run under `integration-tests/zk_bench.py --binary` it measures what
//! everything but the disk costs: the ceiling the write path reaches
//! whatever the storage does (README, "Against Apache ZooKeeper"). A member
//! restarted from it has lost everything, so the benchmark's scale phase
//! (restart, failover) means nothing here: run it with `--znodes 0`.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use zabkeeper::serve::{init_logs, log_filter, serve, shutdown_signal, Bound};
use zabkeeper_config::{ServerConfig, Sources};
use zabkeeper_core::storage::mem_store::MemStorage;

/// The allocator the real server runs, so the two compare like for like.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// One replica whose storage is memory.
#[derive(Parser, Debug)]
struct Args {
    /// The ensemble's TOML file, as the server takes it.
    #[arg(long)]
    config: PathBuf,
    /// This member's id in the file.
    #[arg(long)]
    id: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let config = match ServerConfig::load(&args.config, &Sources::of_process(args.id)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("memory_server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(&log_filter(std::env::var("ZABKEEPER_LOG").ok(), &config), config.log_format);
    tracing::warn!("storage in memory: nothing this member acknowledges survives it (measurement only)");
    let id = config.id;
    let ready = |bound: Bound| {
        println!("{} (storage in memory)", bound.ready_line(id));
    };
    let result = serve(config, Arc::new(MemStorage::new()), shutdown_signal(), ready).await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memory_server: {e}");
            ExitCode::from(1)
        }
    }
}
