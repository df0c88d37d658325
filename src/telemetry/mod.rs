//! What is counted where it happens and read by the operations surface:
//! Prometheus [`metrics`] and ZooKeeper's request [`stats`] (`srvr`, `cons`,
//! `stat`). Leaves: nothing else of the server is imported here.

pub mod metrics;
pub mod stats;
