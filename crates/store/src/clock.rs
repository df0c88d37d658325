//! The only place that reads the wall clock. The pure core gets time as
//! ticks and as the `now_ms` carried by each tick.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}
