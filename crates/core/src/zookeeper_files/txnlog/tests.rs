//! Log decoding: well-formed files, their endings, and damage.

use super::*;
use crate::acl::Acl;
use crate::wire::jute::{Jute, Writer};

/// Encodes `txn` as a log record body (without header).
pub(crate) fn record(txn: &Txn) -> (i32, Vec<u8>) {
    let mut w = Writer::new();
    let data = |w: &mut Writer, d: &Option<Bytes>| match d {
        Some(d) => w.buffer(d),
        None => w.null(),
    };
    let op = match txn {
        Txn::CreateSession { timeout } => {
            w.int(*timeout);
            op::CREATE_SESSION
        }
        Txn::CloseSession { paths } => {
            if let Some(paths) = paths {
                w.vector_len(paths.len());
                paths.iter().for_each(|p| w.ustring(p));
            }
            op::CLOSE_SESSION
        }
        Txn::Create { op, path, data: d, acl, owner, parent_cversion } => {
            w.ustring(path);
            data(&mut w, d);
            acl.write(&mut w);
            match owner {
                Owner::Persistent | Owner::Session if *op == op::CREATE || *op == op::CREATE2 => {
                    w.bool(*owner == Owner::Session);
                    w.int(*parent_cversion);
                }
                Owner::Ttl(ttl) => {
                    w.int(*parent_cversion);
                    w.long(*ttl);
                }
                _ => w.int(*parent_cversion),
            }
            *op
        }
        Txn::Delete { path } => {
            w.ustring(path);
            op::DELETE
        }
        Txn::SetData { path, data: d, version } => {
            w.ustring(path);
            data(&mut w, d);
            w.int(*version);
            op::SET_DATA
        }
        Txn::SetAcl { path, acl, version } => {
            w.ustring(path);
            acl.write(&mut w);
            w.int(*version);
            op::SET_ACL
        }
        Txn::Check { path } => {
            w.ustring(path);
            w.int(-1);
            op::CHECK
        }
        Txn::Error { err } => {
            w.int(*err);
            op::ERROR
        }
        Txn::Multi(subs) => {
            w.vector_len(subs.len());
            for sub in subs {
                let (sub_op, bytes) = record(sub);
                w.int(sub_op);
                w.buffer(&bytes);
            }
            op::MULTI
        }
    };
    (op, w.into_bytes())
}

/// A log file of these entries (session, zxid, txn), each with a digest when `digests`.
pub(crate) fn log_file(entries: &[(i64, i64, Txn)], digests: bool) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&LOG_MAGIC.to_be_bytes());
    out.extend_from_slice(&2i32.to_be_bytes());
    out.extend_from_slice(&0i64.to_be_bytes());
    for (session, zxid, txn) in entries {
        let (op, body) = record(txn);
        let mut w = Writer::new();
        w.long(*session);
        w.int(1);
        w.long(*zxid);
        w.long(5000 + zxid);
        w.int(op);
        let mut bytes = w.into_bytes();
        bytes.extend_from_slice(&body);
        if digests {
            bytes.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9]);
        }
        out.extend_from_slice(&adler32(&bytes).to_be_bytes());
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(&bytes);
        out.push(0x42);
    }
    out
}

pub(crate) fn create(path: &str, parent_cversion: i32, owner: Owner) -> Txn {
    let op = match owner {
        Owner::Container => op::CREATE_CONTAINER,
        Owner::Ttl(_) => op::CREATE_TTL,
        _ => op::CREATE2,
    };
    Txn::Create {
        op,
        path: path.into(),
        data: Some(Bytes::from_static(b"v")),
        acl: Acl::open_unsafe(),
        owner,
        parent_cversion,
    }
}

fn sample() -> Vec<(i64, i64, Txn)> {
    vec![
        (7, 1, Txn::CreateSession { timeout: 30_000 }),
        (7, 2, create("/a", 1, Owner::Persistent)),
        (7, 3, create("/a/e", 1, Owner::Session)),
        (7, 4, create("/c", 2, Owner::Container)),
        (7, 5, create("/t", 3, Owner::Ttl(60_000))),
        (7, 6, Txn::SetData { path: "/a".into(), data: None, version: 1 }),
        (7, 7, Txn::SetAcl { path: "/a".into(), acl: Acl::read_unsafe(), version: 1 }),
        (
            7,
            8,
            Txn::Multi(vec![
                Txn::Check { path: "/a".into() },
                create("/m", 4, Owner::Persistent),
                Txn::Delete { path: "/t".into() },
            ]),
        ),
        (7, 9, Txn::Error { err: -101 }),
        (7, 10, Txn::CloseSession { paths: Some(vec!["/a/e".into()]) }),
    ]
}

#[test]
fn every_kind_of_entry_round_trips_with_and_without_digests() {
    for digests in [false, true] {
        let bytes = log_file(&sample(), digests);
        let log = decode("log.1", &bytes).expect("decodes");
        assert_eq!(log.end, LogEnd::Exact);
        let got: Vec<(i64, i64, Txn)> =
            log.entries.iter().map(|e| (e.header.client_id, e.header.zxid, e.txn.clone())).collect();
        assert_eq!(got, sample());
        assert_eq!(log.entries[1].header.time, 5002);
    }
}

#[test]
fn preallocated_zeros_and_a_torn_tail_end_the_log() {
    let mut bytes = log_file(&sample(), true);
    let whole = bytes.len();
    bytes.extend_from_slice(&[0; 4096]);
    let log = decode("log.1", &bytes).expect("decodes");
    assert_eq!((log.end, log.entries.len()), (LogEnd::Padding(whole as u64), 10));
    // Every cut inside the last entry ends the log before that entry.
    let last = decode("log.1", &bytes).expect("decodes").entries[9].offset as usize;
    for cut in last + 1..whole {
        let log = decode("log.1", &bytes[..cut]).expect("a torn tail is an end");
        assert_eq!((log.end, log.entries.len()), (LogEnd::Torn(last as u64), 9), "cut at {cut}");
    }
    // An entry whose end-of-record byte is not 0x42 is torn too (ZooKeeper's "partial").
    let mut partial = log_file(&sample(), false);
    let n = partial.len();
    partial[n - 1] = 0;
    assert!(matches!(decode("log.1", &partial).expect("decodes").end, LogEnd::Torn(_)));
}

#[test]
fn a_bad_checksum_is_an_error_naming_the_file_and_the_entry() {
    let bytes = log_file(&sample(), false);
    let offset = decode("log.1", &bytes).expect("decodes").entries[3].offset as usize;
    let mut bad = bytes.clone();
    bad[offset + 30] ^= 0x01;
    let err = decode("version-2/log.1", &bad).unwrap_err();
    assert!(matches!(err, ZkFileError::Checksum { offset: o, .. } if o == offset as u64), "{err}");
    assert!(err.to_string().starts_with(&format!("version-2/log.1: offset {offset}: Adler32")), "{err}");
}

#[test]
fn damage_anywhere_is_an_error_or_an_end_never_a_panic() {
    let bytes = log_file(&sample(), true);
    // Bytes 8..16 are the header's dbid, which nothing checks (nor does ZooKeeper).
    for at in (0..bytes.len()).filter(|at| !(8..16).contains(at)) {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bad = bytes.clone();
            bad[at] ^= flip;
            // Either refused, or read as a shorter log: never all ten entries unchanged.
            if let Ok(log) = decode("log.1", &bad) {
                assert!(log.entries.len() < 10, "flip {flip:#x} at {at} went unnoticed");
            }
        }
    }
    let err = decode("log.1", b"ZKSN\0\0\0\x02\0\0\0\0\0\0\0\0").unwrap_err();
    assert!(matches!(err, ZkFileError::BadMagic { .. }), "{err}");
    assert!(decode("log.1", b"ZK").is_err());
    let mut v3 = log_file(&[], false);
    v3[7] = 3;
    assert!(matches!(decode("log.1", &v3), Err(ZkFileError::Version { found: 3, .. })));
}

#[test]
fn closes_before_3_6_and_creates_before_3_3_read() {
    // closeSession with no record, create without parentCVersion (CreateTxnV0).
    let mut w = Writer::new();
    w.ustring("/old");
    w.buffer(b"d");
    Acl::open_unsafe().write(&mut w);
    w.bool(false);
    let v0 = w.into_bytes();
    let mut out = log_file(&[], false);
    for (zxid, op, body) in [(1i64, op::CLOSE_SESSION, Vec::new()), (2, op::CREATE, v0)] {
        let mut w = Writer::new();
        w.long(7);
        w.int(1);
        w.long(zxid);
        w.long(0);
        w.int(op);
        let mut bytes = w.into_bytes();
        bytes.extend_from_slice(&body);
        out.extend_from_slice(&adler32(&bytes).to_be_bytes());
        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(&bytes);
        out.push(0x42);
    }
    let log = decode("log.1", &out).expect("decodes");
    assert_eq!(log.entries[0].txn, Txn::CloseSession { paths: None });
    assert!(matches!(&log.entries[1].txn, Txn::Create { parent_cversion: -1, path, .. } if path == "/old"));
}
