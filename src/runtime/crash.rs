//! Crash-stop for panics: a panic in a task that holds the replica or its
//! durability stops the member with a failure (see `ServerError::Panicked`),
//! and [`log_panics`] puts every panic's message in the member's log.
//!
//! And injected panics for the tests of it: in a debug build, the
//! `FAILPOINTS` environment variable (`name=panic`, comma-separated) makes
//! the named point panic when reached. Release builds compile every point
//! away, so no setting of a deployed member can reach one.
//!
//! The points, each in a task that holds durability:
//! - `owner-persist`: the owner task, handing a log append to storage;
//! - `storage-flush`: the storage thread, before it flushes a batch;
//! - `snapshot-write`: the snapshot writer, before it writes.

/// Logs every panic (its thread, place and message) as an error, before the
/// default report on standard error: a member's log says why it stopped.
pub fn log_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        let place = info.location().map(ToString::to_string).unwrap_or_default();
        let message = zabkeeper_core::panics::message(info.payload());
        tracing::error!(thread, place, message, "panicked");
        report(info);
    }));
}

/// Panics if `name` is armed in `FAILPOINTS` (debug builds only).
#[inline]
pub fn failpoint(name: &str) {
    #[cfg(debug_assertions)]
    if armed(name) {
        panic!("failpoint {name} reached (FAILPOINTS)");
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

#[cfg(debug_assertions)]
fn armed(name: &str) -> bool {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| parse(&std::env::var("FAILPOINTS").unwrap_or_default()));
    armed.iter().any(|a| a == name)
}

/// The names armed to panic in a `FAILPOINTS` value.
#[cfg(debug_assertions)]
fn parse(value: &str) -> Vec<String> {
    value
        .split(',')
        .filter_map(|point| point.trim().split_once('='))
        .filter(|(_, action)| action.trim() == "panic")
        .map(|(name, _)| name.trim().to_string())
        .collect()
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn only_points_set_to_panic_are_armed() {
        assert_eq!(parse("owner-persist=panic, storage-flush = panic"), ["owner-persist", "storage-flush"]);
        assert!(parse("snapshot-write=off,nonsense,=,").is_empty());
        assert!(parse("").is_empty());
    }
}
