//! Bounded waits for tests: every wait in a test ends, and says what it waited for.

use std::future::Future;
use std::time::{Duration, Instant};

/// Awaits `f`, failing the test after `secs` seconds.
pub async fn within<F: Future>(secs: u64, f: F) -> F::Output {
    within_for(secs, "operation", f).await
}

/// Awaits `f`, failing the test naming `what` after `secs` seconds.
pub async fn within_for<F: Future>(secs: u64, what: &str, f: F) -> F::Output {
    match tokio::time::timeout(Duration::from_secs(secs), f).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: not within {secs}s"),
    }
}

/// Polls `check` every 20 ms until it holds, failing the test naming `what` after `secs` seconds.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: not within {secs}s");
}
