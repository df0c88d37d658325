//! Apache ZooKeeper's own files, read without ZooKeeper: its snapshots
//! (`version-2/snapshot.<zxid>`, [`snapshot`]), its transaction logs
//! (`version-2/log.<zxid>`, [`txnlog`]), and its recovery from them
//! ([`recover`]): the newest snapshot plus every logged transaction after
//! it, applied with ZooKeeper's own replay rules (its snapshots are fuzzy,
//! so a replayed transaction may meet its own effect), into a [`TreeState`]
//! a member can start from. This is what `zkctl import` is made of.
//!
//! Pure: the caller reads the files and hands over their bytes and names;
//! every decoder checks each length against the bytes it has and reports
//! bad input as an error naming the file and the offset, never by a panic.
//! Formats as ZooKeeper 3.4 to 3.9 write them (`FileSnap`, `FileTxnLog`,
//! `SerializeUtils`, `DataTree.serialize`, `zookeeper.jute`).
//!
//! [`TreeState`]: crate::tree::TreeState

pub mod export;
pub mod recover;
pub mod snapshot;
pub mod txnlog;

use crate::acl::Acl;
use crate::wire::jute::{Jute, JuteError, Reader};

/// ZooKeeper's `FileHeader.version` for both snapshots and logs.
pub const FILE_VERSION: i32 = 2;

/// What went wrong reading ZooKeeper's files or replaying them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZkFileError {
    /// The file does not start with the magic number of its kind.
    #[error("{file}: not a ZooKeeper {kind}: magic {found:#010x}, expected {expected:#010x} ({kind_magic})")]
    BadMagic {
        /// The file.
        file: String,
        /// "snapshot" or "transaction log".
        kind: &'static str,
        /// The magic as text.
        kind_magic: &'static str,
        /// The magic found.
        found: u32,
        /// The magic expected.
        expected: u32,
    },
    /// A file header of a format version this reader does not know.
    #[error("{file}: file format version {found}, only version {FILE_VERSION} (ZooKeeper 3.x) is known")]
    Version {
        /// The file.
        file: String,
        /// The version found.
        found: i32,
    },
    /// A record could not be decoded.
    #[error("{file}: offset {offset}: {source}")]
    Malformed {
        /// The file.
        file: String,
        /// Where the record starts.
        offset: u64,
        /// The decoder's finding.
        source: JuteError,
    },
    /// A stored Adler32 checksum does not match the bytes it seals.
    #[error("{file}: offset {offset}: Adler32 checksum mismatch: stored {stored:#x}, computed {computed:#x}")]
    Checksum {
        /// The file.
        file: String,
        /// Where the checksum is stored.
        offset: u64,
        /// The stored value.
        stored: u64,
        /// The value of the bytes.
        computed: u64,
    },
    /// Well-formed bytes that do not make a valid file or history.
    #[error("{file}: offset {offset}: {reason}")]
    Invalid {
        /// The file.
        file: String,
        /// Where.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// Something ZooKeeper's data holds that our model cannot hold exactly.
    #[error("cannot import exactly: {reason}")]
    Unsupported {
        /// What and where.
        reason: String,
    },
}

impl ZkFileError {
    /// A decoding error in `file` for a record starting at `offset`.
    pub(crate) fn malformed(file: &str, offset: usize, source: JuteError) -> ZkFileError {
        ZkFileError::Malformed { file: file.to_string(), offset: offset as u64, source }
    }

    /// An invalid-content error in `file` at `offset`.
    pub(crate) fn invalid(file: &str, offset: usize, reason: impl Into<String>) -> ZkFileError {
        ZkFileError::Invalid { file: file.to_string(), offset: offset as u64, reason: reason.into() }
    }
}

/// Adler32 of `bytes` (`java.util.zip.Adler32`, which both formats use).
pub fn adler32(bytes: &[u8]) -> u64 {
    const MOD: u32 = 65521;
    // 5552 bytes is the most that can be summed before a u32 can overflow
    // (zlib's NMAX), so the modulo is taken once per block, not per byte.
    let (mut a, mut b) = (1u32, 0u32);
    for block in bytes.chunks(5552) {
        for &byte in block {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    u64::from((b << 16) | a)
}

/// A reader over a whole file: lengths are bounded by the bytes present,
/// not by `jute.maxbuffer` (a server may have raised it for big nodes).
pub(crate) fn file_reader(bytes: &[u8]) -> Reader<'_> {
    Reader::with_limit(bytes, bytes.len())
}

/// A jute `vector<ACL>`.
pub(crate) fn read_acl(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<Acl>, JuteError> {
    <Vec<Acl> as Jute>::read(r, field)
}

/// The 16-byte password ZooKeeper gives session `id`
/// (`ZooKeeperServer.generatePasswd`: `java.util.Random(id ^ 0xB3415C00)`'s
/// first 16 bytes), so a client of the old ensemble can resume its session.
pub fn session_password(id: i64) -> [u8; 16] {
    const MULTIPLIER: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;
    // java.util.Random's seed scrambling and 48-bit linear congruence.
    let mut seed = ((id ^ 0xB341_5C00) as u64 ^ MULTIPLIER) & MASK;
    let mut out = [0u8; 16];
    for word in out.chunks_mut(4) {
        seed = seed.wrapping_mul(MULTIPLIER).wrapping_add(0xB) & MASK;
        // next(32): the top 32 of the 48 bits, as an int; nextBytes takes
        // its bytes low first.
        let value = (seed >> 16) as u32;
        word.copy_from_slice(&value.to_le_bytes()[..word.len()]);
    }
    out
}

/// The file-name zxid of `snapshot.<hex>` or `log.<hex>` (ZooKeeper's
/// `Util.getZxidFromName`: a suffix after the hex, such as `.gz`, is allowed).
pub fn zxid_from_name(name: &str, prefix: &str) -> Option<i64> {
    let mut parts = name.split('.');
    if parts.next()? != prefix {
        return None;
    }
    let hex = parts.next()?;
    // Java's Long.parseLong(hex, 16): signed, at most i64::MAX.
    i64::from_str_radix(hex, 16).ok().filter(|z| *z >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adler32_matches_known_values() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        // Long enough to cross the modulo blocks.
        let long = vec![0xFFu8; 100_000];
        let (mut a, mut b) = (1u64, 0u64);
        for byte in &long {
            a = (a + u64::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(adler32(&long), (b << 16) | a);
    }

    #[test]
    fn session_passwords_are_java_randoms() {
        // jshell: var r = new java.util.Random(0x0100000000000001L ^ 0xB3415C00L);
        // var p = new byte[16]; r.nextBytes(p); -> these bytes (as signed Java bytes).
        let java: [i8; 16] = [5, 76, -57, 74, 55, 50, 125, -78, 21, -25, 2, -30, 12, 115, -16, 5];
        assert_eq!(session_password(0x0100_0000_0000_0001), java.map(|b| b as u8));
        assert_ne!(session_password(1), session_password(2));
    }

    #[test]
    fn zxids_come_from_file_names() {
        assert_eq!(zxid_from_name("snapshot.1a", "snapshot"), Some(0x1a));
        assert_eq!(zxid_from_name("snapshot.100000002.gz", "snapshot"), Some(0x1_0000_0002));
        assert_eq!(zxid_from_name("log.0", "log"), Some(0));
        assert_eq!(zxid_from_name("log.zz", "log"), None);
        assert_eq!(zxid_from_name("snapshot.5", "log"), None);
        assert_eq!(zxid_from_name("acceptedEpoch", "log"), None);
    }
}
