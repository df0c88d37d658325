//! A znode's data as ZooKeeper keeps it: bytes, or null.
//!
//! ZooKeeper tells a node created or set with a null buffer (jute length -1)
//! from one holding zero bytes: Java's `getData` returns `null`, kazoo `None`.
//! [`Data`] carries that difference from the request through the
//! transaction, the tree and the snapshot back to the reply. Everywhere the
//! bytes matter and nullness does not (sizes, limits, the gRPC API, whose
//! proto3 `bytes` has no null), it reads as a byte slice, null as empty.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Deref;

/// A znode's data: bytes (possibly empty), or ZooKeeper's null.
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Data(Option<Bytes>);

impl Data {
    /// ZooKeeper's null data (Stat.dataLength 0, read back as null).
    pub const NULL: Data = Data(None);

    /// Zero bytes, not null.
    pub const EMPTY: Data = Data(Some(Bytes::new()));

    /// Whether this is null rather than bytes.
    pub fn is_null(&self) -> bool {
        self.0.is_none()
    }

    /// The bytes, `None` for null.
    pub fn as_option(&self) -> Option<&Bytes> {
        self.0.as_ref()
    }

    /// The bytes, null as empty (for APIs without a null, as gRPC).
    pub fn to_bytes(&self) -> Bytes {
        self.0.clone().unwrap_or_default()
    }

    /// The same nullness with these bytes copied in: what a reader of a
    /// node's stored data gets back.
    pub fn copied(null: bool, bytes: &[u8]) -> Data {
        if null {
            Data::NULL
        } else {
            Data(Some(Bytes::copy_from_slice(bytes)))
        }
    }
}

/// Zero bytes: what a record or request without data holds.
impl Default for Data {
    fn default() -> Data {
        Data::EMPTY
    }
}

impl Deref for Data {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl AsRef<[u8]> for Data {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Bytes> for Data {
    fn from(bytes: Bytes) -> Data {
        Data(Some(bytes))
    }
}

impl From<Option<Bytes>> for Data {
    fn from(bytes: Option<Bytes>) -> Data {
        Data(bytes)
    }
}

impl From<Vec<u8>> for Data {
    fn from(bytes: Vec<u8>) -> Data {
        Data(Some(bytes.into()))
    }
}

impl From<&'static [u8]> for Data {
    fn from(bytes: &'static [u8]) -> Data {
        Data(Some(Bytes::from_static(bytes)))
    }
}

impl<const N: usize> From<&'static [u8; N]> for Data {
    fn from(bytes: &'static [u8; N]) -> Data {
        Data(Some(Bytes::from_static(bytes)))
    }
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(bytes) => fmt::Debug::fmt(bytes, f),
            None => f.write_str("null"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_reads_as_empty_bytes_but_stays_apart_from_empty() {
        assert!(Data::NULL.is_null());
        assert!(!Data::EMPTY.is_null());
        assert_eq!(&*Data::NULL, b"");
        assert_ne!(Data::NULL, Data::EMPTY);
        assert_eq!(Data::NULL.to_bytes(), Bytes::new());
        assert_eq!(Data::copied(true, b"ignored"), Data::NULL);
        assert_eq!(Data::copied(false, b"xy"), Data::from(b"xy"));
        assert_eq!(format!("{:?}", Data::NULL), "null");
    }
}
