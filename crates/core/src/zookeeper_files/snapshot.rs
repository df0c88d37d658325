//! ZooKeeper's snapshot file (`FileSnap`): a `FileHeader` (magic `ZKSN`,
//! version 2, dbid), the sessions (count, then id and timeout each), the
//! ACL cache (count, then an index and an ACL vector each), every node
//! (path, then `DataNode`: data buffer, ACL index, `StatPersisted`), parents
//! first, the root as path `""`, ended by the path `"/"`; then a seal: the
//! Adler32 of every byte before it as a long and the string `"/"`. Since
//! 3.6 an optional `ZxidDigest` and since 3.9 an optional last processed
//! zxid follow, each with a seal of its own over everything before it.

use super::{adler32, file_reader, read_acl, ZkFileError, FILE_VERSION};
use crate::acl::Acl;
use crate::tree::stat::StatPersisted;
use crate::wire::jute::Reader;
use bytes::Bytes;
use std::collections::BTreeMap;

/// `ZKSN` as a big-endian int.
pub const SNAP_MAGIC: u32 = u32::from_be_bytes(*b"ZKSN");

/// ZooKeeper's index for the open ACL, never stored in the cache.
pub const OPEN_ACL_INDEX: i64 = -1;

/// A decoded snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The header's database id.
    pub dbid: i64,
    /// Sessions and their timeouts, in file order.
    pub sessions: Vec<(i64, i32)>,
    /// The ACL cache: index to list.
    pub acls: BTreeMap<i64, Vec<Acl>>,
    /// Nodes in file order (parents first); the root's path is `""`.
    pub nodes: Vec<SnapNode>,
    /// The 3.6+ digest, when written.
    pub digest: Option<ZxidDigest>,
    /// The 3.9+ last processed zxid, when written.
    pub last_processed_zxid: Option<i64>,
}

/// One node of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapNode {
    /// ZooKeeper's path (`""` for the root).
    pub path: String,
    /// The data (`None`: null).
    pub data: Option<Bytes>,
    /// The ACL's index in the cache ([`OPEN_ACL_INDEX`] for the open ACL).
    pub acl: i64,
    /// The persisted Stat.
    pub stat: StatPersisted,
    /// Where the node's record starts in the file.
    pub offset: u64,
}

/// The digest ZooKeeper 3.6+ writes after the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZxidDigest {
    /// The zxid the digest was taken at (0: none).
    pub zxid: i64,
    /// The digest algorithm's version.
    pub version: i32,
    /// The digest.
    pub digest: i64,
}

/// Whether the file looks complete as ZooKeeper judges before reading it
/// (`SnapStream.isValidCheckedStream`): at least 10 bytes, ending with the
/// seal's string `"/"`. ZooKeeper skips a snapshot that does not (one cut
/// short by a crash while it was written).
pub fn looks_complete(bytes: &[u8]) -> bool {
    bytes.len() >= 10 && bytes.ends_with(&[0, 0, 0, 1, b'/'])
}

/// Decodes a whole snapshot file named `file`, checking every seal.
pub fn decode(file: &str, bytes: &[u8]) -> Result<Snapshot, ZkFileError> {
    let mut r = file_reader(bytes);
    let bad = |at: usize| move |e| ZkFileError::malformed(file, at, e);
    let magic = r.int("FileHeader.magic").map_err(bad(0))? as u32;
    if magic != SNAP_MAGIC {
        return Err(ZkFileError::BadMagic {
            file: file.to_string(),
            kind: "snapshot",
            kind_magic: "ZKSN",
            found: magic,
            expected: SNAP_MAGIC,
        });
    }
    let version = r.int("FileHeader.version").map_err(bad(4))?;
    if version != FILE_VERSION {
        return Err(ZkFileError::Version { file: file.to_string(), found: version });
    }
    let dbid = r.long("FileHeader.dbid").map_err(bad(8))?;

    let at = r.position();
    let count = r.vector_len("sessions.count", 12).map_err(bad(at))?;
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        let at = r.position();
        let id = r.long("session.id").map_err(bad(at))?;
        let timeout = r.int("session.timeout").map_err(bad(at))?;
        sessions.push((id, timeout));
    }

    let at = r.position();
    let count = r.vector_len("aclCache.map", 12).map_err(bad(at))?;
    let mut acls = BTreeMap::new();
    for _ in 0..count {
        let at = r.position();
        let index = r.long("aclCache.long").map_err(bad(at))?;
        let list = read_acl(&mut r, "aclCache.acls").map_err(bad(at))?;
        if acls.insert(index, list).is_some() {
            return Err(ZkFileError::invalid(file, at, format!("ACL index {index} appears twice")));
        }
    }

    let mut nodes = Vec::new();
    loop {
        let at = r.position();
        let path = r.ustring_opt("node.path").map_err(bad(at))?;
        let Some(path) = path else {
            return Err(ZkFileError::invalid(file, at, "a node with a null path"));
        };
        if path == "/" {
            break;
        }
        let data = r.buffer_opt("DataNode.data").map_err(bad(at))?.map(Bytes::copy_from_slice);
        let acl = r.long("DataNode.acl").map_err(bad(at))?;
        let stat = read_stat(&mut r).map_err(bad(at))?;
        nodes.push(SnapNode { path, data, acl, stat, offset: at as u64 });
    }
    check_seal(file, bytes, &mut r)?;

    // What follows the first seal depends on the writer's version and
    // settings; ZooKeeper reads each part if there are bytes left for it.
    // The last processed zxid alone (with its seal) is exactly 21 bytes,
    // a digest with its seal at least 33: the remaining length tells them apart.
    let mut digest = None;
    if r.remaining() > 0 && r.remaining() != 21 {
        let at = r.position();
        let zxid = r.long("ZxidDigest.zxid").map_err(bad(at))?;
        let version = r.int("ZxidDigest.digestVersion").map_err(bad(at))?;
        let value = if version < 2 {
            // Version 1 wrote the digest as a hex string.
            let text = r.ustring_opt("ZxidDigest.digest").map_err(bad(at))?;
            match text {
                None => 0,
                Some(text) => u64::from_str_radix(&text, 16)
                    .map(|v| v as i64)
                    .map_err(|_| ZkFileError::invalid(file, at, format!("digest {text:?} is not hex")))?,
            }
        } else {
            r.long("ZxidDigest.digest").map_err(bad(at))?
        };
        digest = Some(ZxidDigest { zxid, version, digest: value });
        check_seal(file, bytes, &mut r)?;
    }
    let mut last_processed_zxid = None;
    if r.remaining() > 0 {
        let at = r.position();
        last_processed_zxid = Some(r.long("lastProcessedZxid").map_err(bad(at))?);
        check_seal(file, bytes, &mut r)?;
    }
    if r.remaining() > 0 {
        return Err(ZkFileError::invalid(
            file,
            r.position(),
            format!("{} unexpected bytes after the last seal", r.remaining()),
        ));
    }
    Ok(Snapshot { dbid, sessions, acls, nodes, digest, last_processed_zxid })
}

/// A `StatPersisted` record.
pub(crate) fn read_stat(r: &mut Reader<'_>) -> Result<StatPersisted, crate::wire::jute::JuteError> {
    Ok(StatPersisted {
        czxid: r.long("StatPersisted.czxid")?,
        mzxid: r.long("StatPersisted.mzxid")?,
        ctime: r.long("StatPersisted.ctime")?,
        mtime: r.long("StatPersisted.mtime")?,
        version: r.int("StatPersisted.version")?,
        cversion: r.int("StatPersisted.cversion")?,
        aversion: r.int("StatPersisted.aversion")?,
        ephemeral_owner: r.long("StatPersisted.ephemeralOwner")?,
        pzxid: r.long("StatPersisted.pzxid")?,
    })
}

/// Reads a seal (`SnapStream.checkSealIntegrity`): the Adler32 of every
/// byte before it, then the string `"/"`.
fn check_seal(file: &str, bytes: &[u8], r: &mut Reader<'_>) -> Result<(), ZkFileError> {
    let at = r.position();
    let computed = adler32(&bytes[..at]);
    let stored = r.long("seal.checksum").map_err(|e| ZkFileError::malformed(file, at, e))? as u64;
    let slash = r.ustring_opt("seal.path").map_err(|e| ZkFileError::malformed(file, at, e))?;
    if stored != computed {
        return Err(ZkFileError::Checksum { file: file.to_string(), offset: at as u64, stored, computed });
    }
    if slash.as_deref() != Some("/") {
        return Err(ZkFileError::invalid(file, at + 8, "the seal does not end with \"/\""));
    }
    Ok(())
}

/// Encodes a snapshot in ZooKeeper's format (`zkctl export`, and tests):
/// header, sessions, ACLs, nodes, the seal, then the digest and the last
/// processed zxid when given, each sealed.
pub fn encode(snapshot: &Snapshot) -> Vec<u8> {
    use crate::wire::jute::{Jute, Writer};
    let mut w = Writer::new();
    w.int(SNAP_MAGIC as i32);
    w.int(FILE_VERSION);
    w.long(snapshot.dbid);
    w.int(snapshot.sessions.len() as i32);
    for (id, timeout) in &snapshot.sessions {
        w.long(*id);
        w.int(*timeout);
    }
    w.int(snapshot.acls.len() as i32);
    for (index, list) in &snapshot.acls {
        w.long(*index);
        list.write(&mut w);
    }
    for node in &snapshot.nodes {
        w.ustring(&node.path);
        match &node.data {
            Some(data) => w.buffer(data),
            None => w.null(),
        }
        w.long(node.acl);
        let s = node.stat;
        for v in [s.czxid, s.mzxid, s.ctime, s.mtime] {
            w.long(v);
        }
        for v in [s.version, s.cversion, s.aversion] {
            w.int(v);
        }
        w.long(s.ephemeral_owner);
        w.long(s.pzxid);
    }
    w.ustring("/");
    let mut out = w.into_bytes();
    seal(&mut out);
    if let Some(d) = snapshot.digest {
        let mut w = Writer::new();
        w.long(d.zxid);
        w.int(d.version);
        w.long(d.digest);
        out.extend_from_slice(&w.into_bytes());
        seal(&mut out);
    }
    if let Some(z) = snapshot.last_processed_zxid {
        out.extend_from_slice(&z.to_be_bytes());
        seal(&mut out);
    }
    out
}

/// Appends ZooKeeper's seal: the Adler32 of everything before it, and `"/"`.
fn seal(out: &mut Vec<u8>) {
    let sum = adler32(out);
    out.extend_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 1, b'/']);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Id;

    pub(crate) fn sample() -> Snapshot {
        let stat = |z: i64| StatPersisted::created(z, 1000 + z, 0);
        let digest_acl = vec![Acl { perms: 31, id: Id { scheme: "digest".into(), id: "u:hash=".into() } }];
        Snapshot {
            dbid: 0,
            sessions: vec![(0x0100_0000_0000_0001, 30_000)],
            acls: BTreeMap::from([(1, digest_acl)]),
            nodes: vec![
                SnapNode { path: "".into(), data: Some(Bytes::new()), acl: -1, stat: stat(0), offset: 0 },
                SnapNode {
                    path: "/a".into(),
                    data: Some(Bytes::from_static(b"\x00\xff")),
                    acl: 1,
                    stat: stat(1),
                    offset: 0,
                },
                SnapNode { path: "/a/b".into(), data: None, acl: -1, stat: stat(2), offset: 0 },
            ],
            digest: Some(ZxidDigest { zxid: 2, version: 2, digest: -5 }),
            last_processed_zxid: Some(2),
        }
    }

    fn without_offsets(mut s: Snapshot) -> Snapshot {
        s.nodes.iter_mut().for_each(|n| n.offset = 0);
        s
    }

    #[test]
    fn round_trips_with_and_without_the_optional_parts() {
        for (digest, last) in [(true, true), (true, false), (false, true), (false, false)] {
            let mut s = sample();
            if !digest {
                s.digest = None;
            }
            if !last {
                s.last_processed_zxid = None;
            }
            let bytes = encode(&s);
            assert!(looks_complete(&bytes));
            assert_eq!(without_offsets(decode("snap", &bytes).expect("decodes")), s);
        }
    }

    #[test]
    fn every_flipped_byte_or_cut_is_an_error_not_a_panic() {
        let bytes = encode(&sample());
        // A file cut right after a seal is a whole snapshot of an older
        // writer (ZooKeeper reads it so too); every other cut is torn.
        let first = encode(&Snapshot { digest: None, last_processed_zxid: None, ..sample() }).len();
        let second = encode(&Snapshot { last_processed_zxid: None, ..sample() }).len();
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x5a;
            assert!(decode("snap", &bad).is_err(), "flip at {at} went unnoticed");
            if at != first && at != second {
                assert!(decode("snap", &bytes[..at]).is_err(), "cut at {at} went unnoticed");
            }
        }
    }

    #[test]
    fn a_bad_checksum_names_file_and_offset() {
        let mut bytes = encode(&Snapshot { digest: None, last_processed_zxid: None, ..sample() });
        let n = bytes.len();
        bytes[n - 13] ^= 1; // inside the stored checksum
        let err = decode("version-2/snapshot.2", &bytes).unwrap_err();
        assert!(matches!(err, ZkFileError::Checksum { offset, .. } if offset == (n - 13) as u64), "{err}");
        assert!(err.to_string().starts_with("version-2/snapshot.2: offset "), "{err}");
        let err = decode("f", b"ZKLG\0\0\0\x02").unwrap_err();
        assert!(matches!(err, ZkFileError::BadMagic { .. }), "{err}");
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut bytes = encode(&sample());
        bytes[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(decode("snap", &bytes), Err(ZkFileError::Malformed { offset: 16, .. })));
    }
}
