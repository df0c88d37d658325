//! What is counted where it happens and read by the operations surface:
//! Prometheus [`metrics`], ZooKeeper's request [`stats`] (`srvr`, `cons`,
//! `stat`) and its [`trace_mask`] (`gtmk`, `stmk`). Leaves: nothing else of
//! the server is imported here.

pub mod metrics;
pub mod stats;
pub mod trace_mask;
