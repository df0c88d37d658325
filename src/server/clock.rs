//! The only place that reads the wall clock. The pure core gets time as
//! ticks and as the `now_ms` carried by each tick.

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
