//! One znode, laid out for a tree of millions: its metadata and its data in
//! a single reference-counted allocation behind one thin pointer.
//!
//! The node table's leaves hold only the path and this pointer, so a leaf
//! that a snapshot shares is cheap to copy when the tree next writes to it,
//! and a 100-byte znode costs one allocation of about 200 bytes rather than
//! the four it took as separate `Arc`s, `Bytes` and a child set.

use super::stat::{Stat, StatPersisted};
use crate::acl::AclList;
use crate::data::Data;
use triomphe::ThinArc;

/// An interned ACL list behind a thin pointer: equal lists share one.
pub(crate) type SharedAcl = triomphe::Arc<AclList>;

/// The fixed part of a node, stored in front of its data. The Stat's fields
/// are laid out flat, with the child count in what would be padding, so a
/// 100-byte node fits a 208-byte allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    czxid: i64,
    mzxid: i64,
    ctime: i64,
    mtime: i64,
    pzxid: i64,
    ephemeral_owner: i64,
    version: i32,
    cversion: i32,
    aversion: i32,
    /// Children are found by range in the node table; the count is kept
    /// here so a Stat needs no scan. Its low 31 bits are the count (a Stat
    /// holds it as an i32, as ZooKeeper's does) and its top bit, [`NULL_DATA`],
    /// says the data is null rather than empty, at no cost in size.
    children: u32,
    acl: SharedAcl,
}

/// The bit of `Header::children` that marks null data.
const NULL_DATA: u32 = 1 << 31;

impl Header {
    fn new(stat: StatPersisted, children: u32, acl: SharedAcl) -> Header {
        let StatPersisted { czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeral_owner, pzxid } = stat;
        Header { czxid, mzxid, ctime, mtime, pzxid, ephemeral_owner, version, cversion, aversion, children, acl }
    }

    fn persisted(&self) -> StatPersisted {
        let Header { czxid, mzxid, ctime, mtime, pzxid, ephemeral_owner, version, cversion, aversion, .. } = *self;
        StatPersisted { czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeral_owner, pzxid }
    }

    fn set_persisted(&mut self, stat: StatPersisted) {
        *self = Header::new(stat, self.children, self.acl.clone());
    }
}

/// One znode: data, ACL and persisted Stat, and how many children it has.
/// Cloning shares the allocation (a snapshot's copy costs a count).
#[derive(Clone, PartialEq, Eq)]
pub struct Znode(ThinArc<Header, u8>);

impl Znode {
    /// A node with these contents.
    pub(crate) fn new(data: &Data, acl: SharedAcl, stat: StatPersisted, children: u32) -> Znode {
        debug_assert!(children < NULL_DATA, "a child count fits 31 bits");
        Znode(ThinArc::from_header_and_slice(Header::new(stat, children | null_bit(data), acl), data))
    }

    /// The data's bytes (null reads as empty).
    pub fn data(&self) -> &[u8] {
        &self.0.slice
    }

    /// Whether the data is null rather than bytes.
    pub fn data_is_null(&self) -> bool {
        self.0.header.header.children & NULL_DATA != 0
    }

    /// A copy of the data, null kept apart from empty (what getData returns).
    pub fn data_value(&self) -> Data {
        Data::copied(self.data_is_null(), self.data())
    }

    /// The ACL, shared with every node that has the same list.
    pub fn acl(&self) -> &AclList {
        &self.0.header.header.acl
    }

    /// The interned handle of the ACL.
    pub(crate) fn shared_acl(&self) -> &SharedAcl {
        &self.0.header.header.acl
    }

    /// The persisted metadata.
    pub fn persisted(&self) -> StatPersisted {
        self.0.header.header.persisted()
    }

    /// Number of children.
    pub fn num_children(&self) -> usize {
        // u32 -> usize widens on every target we build for.
        (self.0.header.header.children & !NULL_DATA) as usize
    }

    /// The full Stat.
    pub fn stat(&self) -> Stat {
        self.persisted().to_stat(self.data().len(), self.num_children())
    }

    /// The same node with other data and metadata (setData).
    pub(crate) fn with_data(&self, data: &Data, stat: StatPersisted) -> Znode {
        let header = &self.0.header.header;
        let children = (header.children & !NULL_DATA) | null_bit(data);
        Znode(ThinArc::from_header_and_slice(Header::new(stat, children, header.acl.clone()), data))
    }

    /// Changes the metadata in place when no snapshot shares this node,
    /// else on a fresh copy (the data is copied once per snapshot at most).
    fn update(&mut self, change: impl FnOnce(&mut Header)) {
        let mut change = Some(change);
        let in_place = self.0.with_arc_mut(|arc| match triomphe::Arc::get_mut(arc) {
            Some(inner) => {
                if let Some(change) = change.take() {
                    change(inner.header_mut());
                }
                true
            }
            None => false,
        });
        if !in_place {
            let mut header = self.0.header.header.clone();
            if let Some(change) = change.take() {
                change(&mut header);
            }
            *self = Znode(ThinArc::from_header_and_slice(header, &self.0.slice));
        }
    }

    /// Changes the persisted metadata.
    pub(crate) fn update_stat(&mut self, change: impl FnOnce(&mut StatPersisted)) {
        self.update(|h| {
            let mut stat = h.persisted();
            change(&mut stat);
            h.set_persisted(stat);
        });
    }

    /// Replaces the ACL and its version (setACL).
    pub(crate) fn set_acl(&mut self, acl: SharedAcl, aversion: i32) {
        self.update(|h| {
            h.acl = acl;
            h.aversion = aversion;
        });
    }

    /// Counts a child in (`+1`) or out (`-1`). A count that would leave
    /// 0..=i32::MAX means the table and the counts disagree (or a node has
    /// more children than a Stat can report): a bug caught where it happens.
    pub(crate) fn add_child(&mut self, delta: i32) {
        self.update(|h| {
            let count = (h.children & !NULL_DATA)
                .checked_add_signed(delta)
                .filter(|count| *count < NULL_DATA)
                .expect("a node's child count stays within 0..=i32::MAX");
            h.children = (h.children & NULL_DATA) | count;
        });
    }
}

fn null_bit(data: &Data) -> u32 {
    if data.is_null() {
        NULL_DATA
    } else {
        0
    }
}

impl std::fmt::Debug for Znode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Znode")
            .field("data_len", &self.data().len())
            .field("null", &self.data_is_null())
            .field("acl", self.acl())
            .field("stat", &self.persisted())
            .field("children", &self.num_children())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;

    fn node(data: &'static [u8]) -> Znode {
        Znode::new(&Data::from(data), SharedAcl::new(Acl::open_unsafe().into()), StatPersisted::created(7, 1_000, 0), 0)
    }

    #[test]
    fn holds_what_it_was_given() {
        let n = node(b"hello");
        assert_eq!(n.data(), b"hello");
        assert_eq!(n.persisted().czxid, 7);
        assert_eq!(n.stat().data_length, 5);
        assert_eq!(n.acl().as_ref(), Acl::open_unsafe().as_slice());
    }

    #[test]
    fn a_shared_node_is_copied_on_change_and_the_copy_it_shares_stays() {
        let mut n = node(b"data");
        let frozen = n.clone();
        n.add_child(1);
        n.update_stat(|s| s.pzxid = 9);
        assert_eq!((n.num_children(), n.persisted().pzxid), (1, 9));
        assert_eq!((frozen.num_children(), frozen.persisted().pzxid), (0, 7), "the snapshot's copy is untouched");
        assert_eq!(n.data(), frozen.data());
    }

    #[test]
    fn an_unshared_node_changes_in_place() {
        let mut n = node(b"x");
        let before = n.data().as_ptr();
        n.add_child(1);
        n.add_child(1);
        n.add_child(-1);
        assert_eq!(n.num_children(), 1);
        assert_eq!(n.data().as_ptr(), before, "no new allocation");
    }

    #[test]
    fn set_data_keeps_acl_and_children() {
        let mut n = node(b"old");
        n.add_child(1);
        let m = n.with_data(&Data::from(b"new data"), StatPersisted { version: 1, ..n.persisted() });
        assert_eq!((m.data(), m.num_children(), m.persisted().version), (&b"new data"[..], 1, 1));
    }

    #[test]
    fn null_data_is_kept_apart_from_empty_and_from_the_child_count() {
        let mut n = Znode::new(&Data::NULL, SharedAcl::new(Acl::open_unsafe().into()), StatPersisted::default(), 0);
        assert!(n.data_is_null());
        assert_eq!(n.data_value(), Data::NULL);
        n.add_child(1);
        n.add_child(1);
        assert_eq!((n.num_children(), n.data_is_null()), (2, true));
        assert_eq!(n.stat().data_length, 0);
        let set = n.with_data(&Data::EMPTY, n.persisted());
        assert_eq!((set.num_children(), set.data_is_null(), set.data_value()), (2, false, Data::EMPTY));
        let back = set.with_data(&Data::NULL, set.persisted());
        assert_eq!((back.num_children(), back.data_is_null()), (2, true));
        assert!(!node(b"").data_is_null());
    }

    #[test]
    fn a_node_is_one_pointer_to_a_compact_header() {
        assert_eq!(std::mem::size_of::<Znode>(), std::mem::size_of::<usize>());
        assert_eq!(std::mem::size_of::<Header>(), 72, "six i64, four 32-bit fields, one pointer");
    }
}
