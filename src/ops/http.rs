//! The member's HTTP listener: `/metrics` (each scrape reads the levels from
//! the replica through the [`Handle`] and renders [`crate::telemetry::metrics::Metrics`]),
//! and beside it ZooKeeper's AdminServer commands and the health endpoints
//! ([`super::admin_http`]) and the web console ([`super::console`]).

use crate::runtime::handle::Handle;
use crate::telemetry::metrics::Levels;

/// The levels the replica reports now (None when it does not answer).
async fn levels(handle: &Handle) -> Option<Levels> {
    let report = handle.status_report().await?;
    let details = handle.details().await;
    let disk = crate::ops::facts::disk_usage(&handle.config).await;
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    Some(Levels {
        connections: count(report.connections),
        sessions: count(report.sessions),
        znodes: count(report.nodes),
        data_bytes: report.data_bytes,
        watches: count(report.watches),
        ephemerals: count(report.ephemerals),
        leader: report.status.role == zabkeeper_core::zab::Role::Leading,
        serving: report.status.serving,
        last_committed_zxid: report.last_committed.0,
        disk_free_bytes: report.disk_free_bytes,
        disk_low: report.disk_low,
        follower_lag: report.followers.iter().map(|f| (f.id, f.lag)).collect(),
        outstanding: details.map(|d| count(d.connections.iter().map(|c| c.queued).sum())),
        data_dir_bytes: disk.total(),
        disk_usage: disk.by_kind().to_vec(),
        linearizable_reads: report.counters.linearizable_reads,
        read_index_rounds: report.counters.read_index_rounds,
    })
}

/// Serves `/metrics`, `/commands`, `/livez`, `/readyz` and the console
/// (`/ui/`) on `listener` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    handle: Handle,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let admin = super::admin_http::routes(handle.clone());
    let console = super::console::routes(handle.clone());
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let handle = handle.clone();
                async move {
                    let levels = levels(&handle).await;
                    let body = handle.metrics.render(levels.as_ref());
                    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
                }
            }),
        )
        .merge(admin)
        .merge(console);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { crate::runtime::handle::stopped(&mut stop).await })
        .await
        .map_err(|e| e.to_string())
}
