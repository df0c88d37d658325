//! The process tests: real `zabkeeper` members (and `zkctl`) started on
//! loopback, driven by our Rust client, a ZooKeeper client we did not write,
//! and the command line. One test binary for all of them, so the server
//! library is linked once, not once per file; a test that starts an ensemble
//! takes `support::serial()` where timing matters.

mod support;

mod addresses;
mod admin;
mod backup;
mod client;
mod crash_stop;
mod curator;
mod disk_faults;
mod ensemble;
mod handover;
mod hardening;
mod linearizable;
mod load;
mod observers;
mod previous_format;
mod reconfig;
mod server;
mod tls;
mod zkctl_io;
mod zookeeper_compat;
