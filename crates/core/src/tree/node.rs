//! One znode, laid out for a tree of millions: its metadata and its data in
//! a single reference-counted allocation behind one thin pointer.
//!
//! The node table's leaves hold only the path and this pointer, so a leaf
//! that a snapshot shares is cheap to copy when the tree next writes to it,
//! and a 100-byte znode costs one allocation (160 bytes as created, 192
//! once set) rather than the four it took as separate `Arc`s, `Bytes` and a
//! child set.
//!
//! Most of a Stat is usually its defaults: a node never set has its
//! modification zxid and time equal to its creation's, a leaf's pzxid is its
//! czxid, and the versions and ephemeral owner are 0. Only the fields that
//! differ are stored, in front of the data; a fixed header holds the rest.
//! A created 100-byte node takes 148 bytes (jemalloc's 160 class) where the
//! whole Stat took 188 (its 192 class): 32 B per znode at any scale.

use super::stat::{Stat, StatPersisted};
use crate::acl::AclList;
use crate::data::Data;
use triomphe::ThinArc;

/// An interned ACL list behind a thin pointer: equal lists share one.
pub(crate) type SharedAcl = triomphe::Arc<AclList>;

/// The fixed part of a node, stored in front of its optional fields and data.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    czxid: i64,
    ctime: i64,
    acl: SharedAcl,
    /// Children are found by range in the node table; the count is kept
    /// here so a Stat needs no scan. Its low 31 bits are the count (a Stat
    /// holds it as an i32, as ZooKeeper's does) and its top bit, [`NULL_DATA`],
    /// says the data is null rather than empty, at no cost in size.
    children: u32,
    /// Which optional fields the slice holds: bit `k` for the `k`th of [`WIDTHS`].
    present: u8,
}

/// Fields and data up to this many bytes are assembled on the stack.
const SMALL_NODE: usize = 512;

/// The bit of `Header::children` that marks null data.
const NULL_DATA: u32 = 1 << 31;

/// The Stat fields stored only when they differ from their default, in
/// their order in the slice, with their width in bytes (little-endian):
/// mzxid, mtime, pzxid, ephemeral owner, version, cversion, aversion.
const WIDTHS: [usize; 7] = [8, 8, 8, 8, 4, 4, 4];

/// The optional fields' values, in `WIDTHS` order.
fn optional_values(stat: &StatPersisted) -> [i64; 7] {
    [
        stat.mzxid,
        stat.mtime,
        stat.pzxid,
        stat.ephemeral_owner,
        i64::from(stat.version),
        i64::from(stat.cversion),
        i64::from(stat.aversion),
    ]
}

/// Their values when not stored, given the creation's zxid and time.
fn defaults(czxid: i64, ctime: i64) -> [i64; 7] {
    [czxid, ctime, czxid, 0, 0, 0, 0]
}

/// Bytes the present optional fields take in front of the data: the first
/// four are 8 bytes wide, the last three 4 (every read of data asks this).
fn fields_len(present: u8) -> usize {
    (8 * (present & 0x0F).count_ones() + 4 * (present & 0x70).count_ones()) as usize
}

/// The fields of `stat` that differ from their default: which (bits) and their bytes.
fn encode_fields(stat: &StatPersisted) -> (u8, [u8; 44], usize) {
    let (mut present, mut out, mut len) = (0u8, [0u8; 44], 0usize);
    let defaults = defaults(stat.czxid, stat.ctime);
    for (k, (value, width)) in optional_values(stat).into_iter().zip(WIDTHS).enumerate() {
        if value != defaults[k] {
            present |= 1 << k;
            // The 4-byte fields hold i32s, whose low bytes are the whole value.
            out[len..len + width].copy_from_slice(&value.to_le_bytes()[..width]);
            len += width;
        }
    }
    (present, out, len)
}

/// The whole persisted Stat from the header and the optional fields' bytes.
fn decode_fields(header: &Header, fields: &[u8]) -> StatPersisted {
    let mut values = defaults(header.czxid, header.ctime);
    let mut at = 0;
    for (k, width) in WIDTHS.into_iter().enumerate() {
        if header.present & (1 << k) != 0 {
            values[k] = match width {
                8 => i64::from_le_bytes(fields[at..at + 8].try_into().expect("an 8-byte field")),
                _ => i64::from(i32::from_le_bytes(fields[at..at + 4].try_into().expect("a 4-byte field"))),
            };
            at += width;
        }
    }
    let [mzxid, mtime, pzxid, ephemeral_owner, version, cversion, aversion] = values;
    // The last three were stored from i32s (or are 0).
    let narrow = |v: i64| i32::try_from(v).expect("a version field holds an i32");
    StatPersisted {
        czxid: header.czxid,
        mzxid,
        ctime: header.ctime,
        mtime,
        version: narrow(version),
        cversion: narrow(cversion),
        aversion: narrow(aversion),
        ephemeral_owner,
        pzxid,
    }
}

/// One znode: data, ACL and persisted Stat, and how many children it has.
/// Cloning shares the allocation (a snapshot's copy costs a count).
#[derive(Clone, PartialEq, Eq)]
pub struct Znode(ThinArc<Header, u8>);

/// A node's contents taken apart, to change and put back.
struct Parts {
    stat: StatPersisted,
    /// The child count with the [`NULL_DATA`] bit.
    children: u32,
    acl: SharedAcl,
}

impl Znode {
    /// A node with these contents.
    pub(crate) fn new(data: &Data, acl: SharedAcl, stat: StatPersisted, children: u32) -> Znode {
        debug_assert!(children < NULL_DATA, "a child count fits 31 bits");
        Znode::build(Parts { stat, children: children | null_bit(data), acl }, data)
    }

    /// One allocation holding `parts` and `data`.
    fn build(parts: Parts, data: &[u8]) -> Znode {
        let (present, fields, len) = encode_fields(&parts.stat);
        let header = Header {
            czxid: parts.stat.czxid,
            ctime: parts.stat.ctime,
            acl: parts.acl,
            children: parts.children,
            present,
        };
        if len == 0 {
            return Znode(ThinArc::from_header_and_slice(header, data));
        }
        // Fields and data are copied in one go; small nodes (most) are
        // assembled on the stack rather than in a second allocation.
        let total = len + data.len();
        if total <= SMALL_NODE {
            let mut slice = [0u8; SMALL_NODE];
            slice[..len].copy_from_slice(&fields[..len]);
            slice[len..total].copy_from_slice(data);
            return Znode(ThinArc::from_header_and_slice(header, &slice[..total]));
        }
        let mut slice = Vec::with_capacity(total);
        slice.extend_from_slice(&fields[..len]);
        slice.extend_from_slice(data);
        Znode(ThinArc::from_header_and_slice(header, &slice))
    }

    fn header(&self) -> &Header {
        &self.0.header.header
    }

    /// The contents but the data, taken apart.
    fn parts(&self) -> Parts {
        let header = self.header();
        Parts { stat: self.persisted(), children: header.children, acl: header.acl.clone() }
    }

    /// The data's bytes (null reads as empty).
    pub fn data(&self) -> &[u8] {
        &self.0.slice[fields_len(self.header().present)..]
    }

    /// Whether the data is null rather than bytes.
    pub fn data_is_null(&self) -> bool {
        self.header().children & NULL_DATA != 0
    }

    /// A copy of the data, null kept apart from empty (what getData returns).
    pub fn data_value(&self) -> Data {
        Data::copied(self.data_is_null(), self.data())
    }

    /// The ACL, shared with every node that has the same list.
    pub fn acl(&self) -> &AclList {
        &self.header().acl
    }

    /// The interned handle of the ACL.
    pub(crate) fn shared_acl(&self) -> &SharedAcl {
        &self.header().acl
    }

    /// The persisted metadata.
    pub fn persisted(&self) -> StatPersisted {
        let header = self.header();
        decode_fields(header, &self.0.slice[..fields_len(header.present)])
    }

    /// Number of children.
    pub fn num_children(&self) -> usize {
        // u32 -> usize widens on every target we build for.
        (self.header().children & !NULL_DATA) as usize
    }

    /// The full Stat.
    pub fn stat(&self) -> Stat {
        self.persisted().to_stat(self.data().len(), self.num_children())
    }

    /// The same node with other data and metadata (setData).
    pub(crate) fn with_data(&self, data: &Data, stat: StatPersisted) -> Znode {
        let header = self.header();
        let children = (header.children & !NULL_DATA) | null_bit(data);
        Znode::build(Parts { stat, children, acl: header.acl.clone() }, data)
    }

    /// Changes the metadata in place when no snapshot shares this node and
    /// the same optional fields stay stored, else on a fresh copy (the data
    /// is copied once per snapshot at most, and when a field first leaves
    /// its default).
    fn update(&mut self, change: impl FnOnce(&mut Parts)) {
        let mut parts = self.parts();
        change(&mut parts);
        let (present, fields, len) = encode_fields(&parts.stat);
        let in_place = present == self.header().present
            && self.0.with_arc_mut(|arc| match triomphe::Arc::get_mut(arc) {
                Some(inner) => {
                    let header = inner.header_mut();
                    (header.czxid, header.ctime) = (parts.stat.czxid, parts.stat.ctime);
                    header.children = parts.children;
                    header.acl = parts.acl.clone();
                    inner.slice_mut()[..len].copy_from_slice(&fields[..len]);
                    true
                }
                None => false,
            });
        if !in_place {
            let copy = Znode::build(parts, self.data());
            *self = copy;
        }
    }

    /// Changes the persisted metadata.
    pub(crate) fn update_stat(&mut self, change: impl FnOnce(&mut StatPersisted)) {
        self.update(|parts| change(&mut parts.stat));
    }

    /// Replaces the ACL and its version (setACL).
    pub(crate) fn set_acl(&mut self, acl: SharedAcl, aversion: i32) {
        self.update(|parts| {
            parts.acl = acl;
            parts.stat.aversion = aversion;
        });
    }

    /// Counts a child in (`+1`) or out (`-1`). A count that would leave
    /// 0..=i32::MAX means the table and the counts disagree (or a node has
    /// more children than a Stat can report): a bug caught where it happens.
    pub(crate) fn add_child(&mut self, delta: i32) {
        self.update(|parts| {
            let count = (parts.children & !NULL_DATA)
                .checked_add_signed(delta)
                .filter(|count| *count < NULL_DATA)
                .expect("a node's child count stays within 0..=i32::MAX");
            parts.children = (parts.children & NULL_DATA) | count;
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
        assert_eq!(std::mem::size_of::<Header>(), 32, "two i64, one pointer, a count and the field bits");
        assert_eq!(fields_len(0x7F), WIDTHS.iter().sum::<usize>(), "the widths and their count agree");
        // A node as created stores no optional field: its slice is its data.
        let n = node(&[7u8; 100]);
        assert_eq!(n.0.slice.len(), 100);
    }

    #[test]
    fn every_field_survives_leaving_and_returning_to_its_default() {
        let mut n = node(b"payload");
        let base = n.persisted();
        let changes: [fn(&mut StatPersisted); 7] = [
            |s| s.mzxid = 99,
            |s| s.mtime = -5,
            |s| s.pzxid = i64::MAX,
            |s| s.ephemeral_owner = i64::MIN,
            |s| s.version = -1,
            |s| s.cversion = i32::MAX,
            |s| s.aversion = i32::MIN,
        ];
        let mut want = base;
        for change in changes {
            change(&mut want);
            n.update_stat(change);
            assert_eq!(n.persisted(), want);
            assert_eq!(n.data(), b"payload", "the data stays behind the fields");
        }
        assert_eq!(n.0.slice.len(), 44 + 7, "every optional field stored");
        // Back to the defaults: nothing stored again.
        n.update_stat(|s| *s = base);
        assert_eq!((n.persisted(), n.data(), n.0.slice.len()), (base, &b"payload"[..], 7));
        // Creation fields live in the header.
        n.update_stat(|s| (s.czxid, s.ctime) = (3, 4));
        assert_eq!((n.persisted().czxid, n.persisted().ctime, n.persisted().mzxid), (3, 4, 7));
    }

    #[test]
    fn equal_contents_are_equal_nodes_however_they_were_reached() {
        let mut a = node(b"d");
        a.update_stat(|s| s.version = 2);
        a.update_stat(|s| s.version = 0);
        assert_eq!(a, node(b"d"));
    }
}
