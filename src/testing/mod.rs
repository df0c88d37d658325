//! Test helpers: bounded waits (every wait in a test ends, and says what it
//! waited for) and free loopback ports; and, in this crate's own tests, a
//! real server in the test process for the client's and the recipes'
//! end-to-end tests.

#[cfg(test)]
mod client_e2e;
#[cfg(test)]
mod recipes_e2e;
#[cfg(test)]
pub(crate) mod test_server;

use std::collections::BTreeSet;
use std::future::Future;
use std::net::TcpListener;
use std::sync::Mutex;
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

/// A free port on 127.0.0.1 (the listener is closed before the server binds
/// it), never one handed out before in this process: the OS readily gives a
/// just-released port again, and one server or ensemble needs several distinct ones.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding port 0 on loopback cannot fail");
        let port = listener.local_addr().expect("a bound listener has an address").port();
        if handed_out.insert(port) {
            return port;
        }
    }
    panic!("no fresh loopback port in 1000 tries");
}
