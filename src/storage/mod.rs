//! Durable state of one replica: the [`Storage`] trait, its rules and the
//! in-memory store come from the core (`zabkeeper_core::storage`); the
//! store on disk is [`sled_store`].

pub use zabkeeper_core::storage::*;

pub mod sled_store;

#[cfg(test)]
mod replay_props;
