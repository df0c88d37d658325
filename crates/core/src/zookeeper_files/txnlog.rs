//! ZooKeeper's transaction log file (`FileTxnLog`): a `FileHeader` (magic
//! `ZKLG`, version 2, dbid), then entries, each the Adler32 of its bytes as
//! a long, the bytes as a jute buffer (a `TxnHeader`, the transaction's
//! record, since 3.6 maybe a `TxnDigest`) and the end-of-record byte `0x42`.
//! Files are preallocated with zeros: an entry of length 0 is the end. An
//! entry cut short (no room for its bytes or no `0x42` after them) is the
//! end too, as ZooKeeper reads it: it was being written when the server
//! stopped, so it was never acknowledged. A checksum that does not match
//! is an error.

use super::{adler32, file_reader, read_acl, ZkFileError, FILE_VERSION};
use crate::acl::Acl;
use crate::wire::jute::{JuteError, Reader};

use bytes::Bytes;

/// `ZKLG` as a big-endian int.
pub const LOG_MAGIC: u32 = u32::from_be_bytes(*b"ZKLG");

/// ZooKeeper's opcodes that appear in its log (`ZooDefs.OpCode`).
pub mod op {
    /// A failed write, logged to keep the session's order.
    pub const ERROR: i32 = -1;
    /// create.
    pub const CREATE: i32 = 1;
    /// delete.
    pub const DELETE: i32 = 2;
    /// setData.
    pub const SET_DATA: i32 = 5;
    /// setACL.
    pub const SET_ACL: i32 = 7;
    /// check (inside a multi).
    pub const CHECK: i32 = 13;
    /// multi.
    pub const MULTI: i32 = 14;
    /// create2.
    pub const CREATE2: i32 = 15;
    /// reconfig (logged as a setData of `/zookeeper/config`).
    pub const RECONFIG: i32 = 16;
    /// createContainer.
    pub const CREATE_CONTAINER: i32 = 19;
    /// deleteContainer (the container reaper's delete).
    pub const DELETE_CONTAINER: i32 = 20;
    /// createTTL.
    pub const CREATE_TTL: i32 = 21;
    /// createSession.
    pub const CREATE_SESSION: i32 = -10;
    /// closeSession.
    pub const CLOSE_SESSION: i32 = -11;
}

/// `TxnHeader`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnHeader {
    /// The session.
    pub client_id: i64,
    /// The client's request number.
    pub cxid: i32,
    /// The transaction's zxid.
    pub zxid: i64,
    /// The leader's clock at proposal, ms.
    pub time: i64,
    /// The opcode.
    pub op: i32,
}

/// What a created node's `ephemeralOwner` becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// `CreateTxn.ephemeral` false: 0.
    Persistent,
    /// `CreateTxn.ephemeral` true: the transaction's session.
    Session,
    /// A container.
    Container,
    /// A TTL node with this TTL in ms.
    Ttl(i64),
}

/// A logged transaction's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Txn {
    /// `CreateSessionTxn`.
    CreateSession {
        /// The negotiated timeout.
        timeout: i32,
    },
    /// `CloseSessionTxn` (None: written before 3.6, no paths).
    CloseSession {
        /// The ephemerals the leader resolved.
        paths: Option<Vec<String>>,
    },
    /// `CreateTxn`, `CreateContainerTxn` or `CreateTTLTxn`.
    Create {
        /// The opcode (create, create2, createContainer, createTTL).
        op: i32,
        /// The path.
        path: String,
        /// The data (None: null).
        data: Option<Bytes>,
        /// The ACL.
        acl: Vec<Acl>,
        /// What the owner becomes.
        owner: Owner,
        /// The parent's cversion after the create (-1: derive it, `CreateTxnV0`).
        parent_cversion: i32,
    },
    /// `DeleteTxn` (delete or deleteContainer).
    Delete {
        /// The path.
        path: String,
    },
    /// `SetDataTxn` (setData or reconfig).
    SetData {
        /// The path.
        path: String,
        /// The data (None: null).
        data: Option<Bytes>,
        /// The version after.
        version: i32,
    },
    /// `SetACLTxn`.
    SetAcl {
        /// The path.
        path: String,
        /// The ACL.
        acl: Vec<Acl>,
        /// The aversion after.
        version: i32,
    },
    /// `CheckVersionTxn` (inside a multi).
    Check {
        /// The path.
        path: String,
    },
    /// `ErrorTxn`.
    Error {
        /// The error code.
        err: i32,
    },
    /// `MultiTxn`: the sub-transactions in order.
    Multi(Vec<Txn>),
}

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Where the entry starts in its file.
    pub offset: u64,
    /// The header.
    pub header: TxnHeader,
    /// The record.
    pub txn: Txn,
}

/// How a log file ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEnd {
    /// At the last byte of the last entry.
    Exact,
    /// At the preallocated zeros, from this offset.
    Padding(u64),
    /// At an entry cut short at this offset (never acknowledged).
    Torn(u64),
}

/// A decoded log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFile {
    /// The header's database id.
    pub dbid: i64,
    /// The entries, in file order.
    pub entries: Vec<LogEntry>,
    /// How it ended.
    pub end: LogEnd,
}

/// Decodes a whole log file named `file`, checking every entry's checksum.
pub fn decode(file: &str, bytes: &[u8]) -> Result<LogFile, ZkFileError> {
    let mut r = file_reader(bytes);
    let bad = |at: usize| move |e| ZkFileError::malformed(file, at, e);
    let magic = r.int("FileHeader.magic").map_err(bad(0))? as u32;
    if magic != LOG_MAGIC {
        return Err(ZkFileError::BadMagic {
            file: file.to_string(),
            kind: "transaction log",
            kind_magic: "ZKLG",
            found: magic,
            expected: LOG_MAGIC,
        });
    }
    let version = r.int("FileHeader.version").map_err(bad(4))?;
    if version != FILE_VERSION {
        return Err(ZkFileError::Version { file: file.to_string(), found: version });
    }
    let dbid = r.long("FileHeader.dbid").map_err(bad(8))?;
    let mut entries = Vec::new();
    let mut at = r.position();
    let end = loop {
        let rest = &bytes[at..];
        if rest.is_empty() {
            break LogEnd::Exact;
        }
        // ZooKeeper's reader: an entry it cannot read whole is the end.
        let (Some(crc), Some(len)) = (rest.get(..8), rest.get(8..12)) else {
            break LogEnd::Torn(at as u64);
        };
        // Both slices have exactly the array's length (checked just above).
        let stored = u64::from_be_bytes(crc.try_into().unwrap_or([0; 8]));
        let len = i32::from_be_bytes(len.try_into().unwrap_or([0; 4]));
        if len == 0 || len == -1 {
            break LogEnd::Padding(at as u64);
        }
        let Ok(len) = usize::try_from(len) else {
            return Err(ZkFileError::invalid(file, at, format!("entry length {len}")));
        };
        let Some(body) = rest.get(12..12 + len) else {
            break LogEnd::Torn(at as u64);
        };
        if rest.get(12 + len) != Some(&0x42) {
            break LogEnd::Torn(at as u64);
        }
        let computed = adler32(body);
        if stored != computed {
            return Err(ZkFileError::Checksum { file: file.to_string(), offset: at as u64, stored, computed });
        }
        let (header, txn) = decode_entry(body).map_err(|e| match e {
            EntryError::Jute(source) => ZkFileError::malformed(file, at, source),
            EntryError::Invalid(reason) => ZkFileError::invalid(file, at, reason),
        })?;
        entries.push(LogEntry { offset: at as u64, header, txn });
        at += 12 + len + 1;
    };
    Ok(LogFile { dbid, entries, end })
}

/// Why an entry's bytes could not be decoded.
enum EntryError {
    Jute(JuteError),
    Invalid(String),
}

impl From<JuteError> for EntryError {
    fn from(e: JuteError) -> EntryError {
        EntryError::Jute(e)
    }
}

/// A `TxnDigest` (int version, long digest) may follow the record.
const DIGEST_LEN: usize = 12;

/// One entry's bytes: header, record, maybe a digest (`SerializeUtils.deserializeTxn`).
fn decode_entry(body: &[u8]) -> Result<(TxnHeader, Txn), EntryError> {
    let mut r = file_reader(body);
    let header = TxnHeader {
        client_id: r.long("TxnHeader.clientId")?,
        cxid: r.int("TxnHeader.cxid")?,
        zxid: r.long("TxnHeader.zxid")?,
        time: r.long("TxnHeader.time")?,
        op: r.int("TxnHeader.type")?,
    };
    let record_at = r.clone();
    let txn = match header.op {
        op::CLOSE_SESSION => {
            // The paths were added in 3.6; before, the record is empty. A
            // record that does not read as paths leaving nothing or a digest
            // is the empty form.
            let mut paths_reader = r.clone();
            match read_paths(&mut paths_reader) {
                Ok(paths) if matches!(paths_reader.remaining(), 0 | DIGEST_LEN) => {
                    r = paths_reader;
                    Txn::CloseSession { paths: Some(paths) }
                }
                _ => Txn::CloseSession { paths: None },
            }
        }
        op::CREATE => match read_record(&mut r, header.op) {
            Ok(txn) => txn,
            Err(_) => {
                // `CreateTxnV0` (before 3.3: no parentCVersion), as ZooKeeper retries.
                r = record_at;
                let txn = Txn::Create {
                    op: header.op,
                    path: r.ustring("CreateTxnV0.path")?,
                    data: r.buffer_opt("CreateTxnV0.data")?.map(Bytes::copy_from_slice),
                    acl: read_acl(&mut r, "CreateTxnV0.acl")?,
                    owner: if r.bool("CreateTxnV0.ephemeral")? { Owner::Session } else { Owner::Persistent },
                    parent_cversion: -1,
                };
                if r.remaining() != 0 {
                    return Err(EntryError::Invalid("a create record of neither known form".into()));
                }
                txn
            }
        },
        _ => read_record(&mut r, header.op)?,
    };
    match r.remaining() {
        0 => {}
        DIGEST_LEN => {
            r.int("TxnDigest.version")?;
            r.long("TxnDigest.treeDigest")?;
        }
        n => return Err(EntryError::Invalid(format!("{n} bytes left after the record (opcode {})", header.op))),
    }
    Ok((header, txn))
}

fn read_paths(r: &mut Reader<'_>) -> Result<Vec<String>, JuteError> {
    let count = r.vector_len("CloseSessionTxn.paths2Delete", 4)?;
    (0..count).map(|_| r.ustring("CloseSessionTxn.path")).collect()
}

/// One record of opcode `op` (also a multi's sub-transaction).
fn read_record(r: &mut Reader<'_>, op: i32) -> Result<Txn, EntryError> {
    Ok(match op {
        op::CREATE_SESSION => Txn::CreateSession { timeout: r.int("CreateSessionTxn.timeOut")? },
        op::CREATE | op::CREATE2 => Txn::Create {
            op,
            path: r.ustring("CreateTxn.path")?,
            data: r.buffer_opt("CreateTxn.data")?.map(Bytes::copy_from_slice),
            acl: read_acl(r, "CreateTxn.acl")?,
            owner: if r.bool("CreateTxn.ephemeral")? { Owner::Session } else { Owner::Persistent },
            parent_cversion: r.int("CreateTxn.parentCVersion")?,
        },
        op::CREATE_CONTAINER => Txn::Create {
            op,
            path: r.ustring("CreateContainerTxn.path")?,
            data: r.buffer_opt("CreateContainerTxn.data")?.map(Bytes::copy_from_slice),
            acl: read_acl(r, "CreateContainerTxn.acl")?,
            parent_cversion: r.int("CreateContainerTxn.parentCVersion")?,
            owner: Owner::Container,
        },
        op::CREATE_TTL => {
            let path = r.ustring("CreateTTLTxn.path")?;
            let data = r.buffer_opt("CreateTTLTxn.data")?.map(Bytes::copy_from_slice);
            let acl = read_acl(r, "CreateTTLTxn.acl")?;
            let parent_cversion = r.int("CreateTTLTxn.parentCVersion")?;
            let ttl = r.long("CreateTTLTxn.ttl")?;
            Txn::Create { op, path, data, acl, owner: Owner::Ttl(ttl), parent_cversion }
        }
        op::DELETE | op::DELETE_CONTAINER => Txn::Delete { path: r.ustring("DeleteTxn.path")? },
        op::SET_DATA | op::RECONFIG => Txn::SetData {
            path: r.ustring("SetDataTxn.path")?,
            data: r.buffer_opt("SetDataTxn.data")?.map(Bytes::copy_from_slice),
            version: r.int("SetDataTxn.version")?,
        },
        op::SET_ACL => Txn::SetAcl {
            path: r.ustring("SetACLTxn.path")?,
            acl: read_acl(r, "SetACLTxn.acl")?,
            version: r.int("SetACLTxn.version")?,
        },
        op::CHECK => {
            let path = r.ustring("CheckVersionTxn.path")?;
            r.int("CheckVersionTxn.version")?;
            Txn::Check { path }
        }
        op::ERROR => Txn::Error { err: r.int("ErrorTxn.err")? },
        op::MULTI => {
            let count = r.vector_len("MultiTxn.txns", 8)?;
            let mut subs = Vec::with_capacity(count);
            for _ in 0..count {
                let sub_op = r.int("Txn.type")?;
                let data = r.buffer_opt("Txn.data")?.unwrap_or_default();
                if matches!(sub_op, op::MULTI | op::CREATE_SESSION | op::CLOSE_SESSION) {
                    return Err(EntryError::Invalid(format!("opcode {sub_op} inside a multi")));
                }
                let mut sub = file_reader(data);
                let txn = read_record(&mut sub, sub_op)?;
                if sub.remaining() != 0 {
                    return Err(EntryError::Invalid(format!(
                        "{} bytes left in a multi's op {sub_op}",
                        sub.remaining()
                    )));
                }
                subs.push(txn);
            }
            Txn::Multi(subs)
        }
        other => return Err(EntryError::Invalid(format!("unknown transaction opcode {other}"))),
    })
}

#[cfg(test)]
pub(crate) mod tests;
