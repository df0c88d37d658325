//! The serialized form of a [`TxnBody`].
//!
//! Logs, snapshots and proposals hold transactions as postcard bytes, where
//! an enum variant is its index. Null data came after logs existed, so a
//! transaction with bytes keeps exactly the bytes it always had (an old log
//! reads back unchanged, and no write pays for the difference), and the two
//! null forms are new variants at the end, which an older build refuses as
//! malformed rather than misreads.

use super::TxnBody;
use crate::acl::Acl;
use crate::data::Data;
use crate::error::ErrorCode;
use crate::members::Change;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A body as written, borrowing from the transaction. The variant order is
/// the format: append, never reorder.
#[derive(Serialize)]
enum Written<'a> {
    CreateSession { timeout_ms: i32, password: &'a Bytes },
    CloseSession { paths: &'a [String] },
    Create { path: &'a str, data: &'a Bytes, acl: &'a [Acl], ephemeral_owner: i64, parent_cversion: i32 },
    Delete { path: &'a str },
    SetData { path: &'a str, data: &'a Bytes, version: i32 },
    SetAcl { path: &'a str, acl: &'a [Acl], version: i32 },
    Check { path: &'a str },
    Multi(&'a [TxnBody]),
    MultiError(&'a [ErrorCode]),
    Error(ErrorCode),
    CreateNull { path: &'a str, acl: &'a [Acl], ephemeral_owner: i64, parent_cversion: i32 },
    SetDataNull { path: &'a str, version: i32 },
    Reconfig(&'a Change),
    Load { chunks: &'a [Bytes], epoch: u32 },
}

/// A body as read: the same variants, owned.
#[derive(Deserialize)]
enum Read {
    CreateSession { timeout_ms: i32, password: Bytes },
    CloseSession { paths: Vec<String> },
    Create { path: String, data: Bytes, acl: Vec<Acl>, ephemeral_owner: i64, parent_cversion: i32 },
    Delete { path: String },
    SetData { path: String, data: Bytes, version: i32 },
    SetAcl { path: String, acl: Vec<Acl>, version: i32 },
    Check { path: String },
    Multi(Vec<TxnBody>),
    MultiError(Vec<ErrorCode>),
    Error(ErrorCode),
    CreateNull { path: String, acl: Vec<Acl>, ephemeral_owner: i64, parent_cversion: i32 },
    SetDataNull { path: String, version: i32 },
    Reconfig(Change),
    Load { chunks: Vec<Bytes>, epoch: u32 },
}

impl<'a> From<&'a TxnBody> for Written<'a> {
    fn from(body: &'a TxnBody) -> Written<'a> {
        match body {
            TxnBody::CreateSession { timeout_ms, password } => {
                Written::CreateSession { timeout_ms: *timeout_ms, password }
            }
            TxnBody::CloseSession { paths } => Written::CloseSession { paths },
            TxnBody::Create { path, data, acl, ephemeral_owner, parent_cversion } => match data.as_option() {
                Some(data) => Written::Create {
                    path,
                    data,
                    acl,
                    ephemeral_owner: *ephemeral_owner,
                    parent_cversion: *parent_cversion,
                },
                None => Written::CreateNull {
                    path,
                    acl,
                    ephemeral_owner: *ephemeral_owner,
                    parent_cversion: *parent_cversion,
                },
            },
            TxnBody::Delete { path } => Written::Delete { path },
            TxnBody::SetData { path, data, version } => match data.as_option() {
                Some(data) => Written::SetData { path, data, version: *version },
                None => Written::SetDataNull { path, version: *version },
            },
            TxnBody::SetAcl { path, acl, version } => Written::SetAcl { path, acl, version: *version },
            TxnBody::Check { path } => Written::Check { path },
            TxnBody::Multi(ops) => Written::Multi(ops),
            TxnBody::MultiError(codes) => Written::MultiError(codes),
            TxnBody::Error(code) => Written::Error(*code),
            TxnBody::Reconfig(change) => Written::Reconfig(change),
            TxnBody::Load { chunks, epoch } => Written::Load { chunks, epoch: *epoch },
        }
    }
}

impl From<Read> for TxnBody {
    fn from(read: Read) -> TxnBody {
        match read {
            Read::CreateSession { timeout_ms, password } => TxnBody::CreateSession { timeout_ms, password },
            Read::CloseSession { paths } => TxnBody::CloseSession { paths },
            Read::Create { path, data, acl, ephemeral_owner, parent_cversion } => {
                TxnBody::Create { path, data: data.into(), acl, ephemeral_owner, parent_cversion }
            }
            Read::Delete { path } => TxnBody::Delete { path },
            Read::SetData { path, data, version } => TxnBody::SetData { path, data: data.into(), version },
            Read::SetAcl { path, acl, version } => TxnBody::SetAcl { path, acl, version },
            Read::Check { path } => TxnBody::Check { path },
            Read::Multi(ops) => TxnBody::Multi(ops),
            Read::MultiError(codes) => TxnBody::MultiError(codes),
            Read::Error(code) => TxnBody::Error(code),
            Read::CreateNull { path, acl, ephemeral_owner, parent_cversion } => {
                TxnBody::Create { path, data: Data::NULL, acl, ephemeral_owner, parent_cversion }
            }
            Read::SetDataNull { path, version } => TxnBody::SetData { path, data: Data::NULL, version },
            Read::Reconfig(change) => TxnBody::Reconfig(change),
            Read::Load { chunks, epoch } => TxnBody::Load { chunks, epoch },
        }
    }
}

impl Serialize for TxnBody {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Written::from(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TxnBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TxnBody, D::Error> {
        Read::deserialize(deserializer).map(TxnBody::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::codec;

    /// `TxnBody` as it was derived before null data: what every existing
    /// log and snapshot holds.
    #[derive(Serialize)]
    enum Before {
        #[allow(dead_code)]
        CreateSession {
            timeout_ms: i32,
            password: Bytes,
        },
        #[allow(dead_code)]
        CloseSession {
            paths: Vec<String>,
        },
        Create {
            path: String,
            data: Bytes,
            acl: Vec<Acl>,
            ephemeral_owner: i64,
            parent_cversion: i32,
        },
        #[allow(dead_code)]
        Delete {
            path: String,
        },
        SetData {
            path: String,
            data: Bytes,
            version: i32,
        },
        #[allow(dead_code)]
        SetAcl {
            path: String,
            acl: Vec<Acl>,
            version: i32,
        },
        #[allow(dead_code)]
        Check {
            path: String,
        },
        Multi(Vec<Before>),
    }

    #[test]
    fn bodies_with_bytes_keep_the_bytes_they_had_before_null_data() {
        let before = Before::Multi(vec![
            Before::Create {
                path: "/a".into(),
                data: Bytes::from_static(b"hello"),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 7,
                parent_cversion: 3,
            },
            Before::SetData { path: "/a".into(), data: Bytes::new(), version: 1 },
        ]);
        let now = TxnBody::Multi(vec![
            TxnBody::Create {
                path: "/a".into(),
                data: Data::from(b"hello"),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 7,
                parent_cversion: 3,
            },
            TxnBody::SetData { path: "/a".into(), data: Data::EMPTY, version: 1 },
        ]);
        let old_bytes = codec::encode_value(&before);
        assert_eq!(codec::encode_value(&now), old_bytes);
        assert_eq!(codec::decode_value::<TxnBody>(&old_bytes).unwrap(), now);
    }

    #[test]
    fn null_data_round_trips_apart_from_empty() {
        for data in [Data::NULL, Data::EMPTY, Data::from(b"x")] {
            let create = TxnBody::Create {
                path: "/n".into(),
                data: data.clone(),
                acl: Acl::open_unsafe(),
                ephemeral_owner: 0,
                parent_cversion: 1,
            };
            let set = TxnBody::SetData { path: "/n".into(), data: data.clone(), version: 2 };
            let multi = TxnBody::Multi(vec![create.clone(), set.clone()]);
            for body in [create, set, multi] {
                let back: TxnBody = codec::decode_value(&codec::encode_value(&body)).unwrap();
                assert_eq!(back, body);
            }
        }
    }
}
