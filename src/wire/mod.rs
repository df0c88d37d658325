//! ZooKeeper's client protocol (jute over TCP), so that ZooKeeper's own
//! clients work unchanged against us. No networking here: the connection
//! loop calls this codec.
//!
//! - [`jute`]: the primitive encoding, a reader that never panics.
//! - [`opcode`]: opcodes and special xids.
//! - [`frame`]: splits the byte stream into frames.
//! - [`four_letter`]: recognizes admin words on a fresh connection.

mod cesu8;
pub mod four_letter;
pub mod frame;
pub mod jute;
pub mod opcode;
