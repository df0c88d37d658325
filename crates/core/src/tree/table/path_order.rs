//! The order of the node table's keys: by (parent, name), not as plain
//! strings, so a node's children are one contiguous range of keys and a
//! parent sorts before its children. It is apart from the table because
//! the snapshot reader checks the same order, and because its fast paths
//! (a comparison runs on every lookup) deserve tests of their own.

use compact_str::CompactString;
use equivalent::{Comparable, Equivalent};
use std::cmp::Ordering;

/// A path as a table key; paths up to 24 bytes are stored inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePath(pub(super) CompactString);

impl NodePath {
    /// The path.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// (parent part, name): "/" is ("", ""), "/a" is ("", "a"), "/a/b" is ("/a", "b").
pub(super) fn split(path: &str) -> (&str, &str) {
    match path.as_bytes().iter().rposition(|&c| c == b'/') {
        // '/' is one byte in UTF-8, so both sides are on char boundaries.
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// The table order of two paths: by parent part, then by name.
pub(super) fn order(a: &str, b: &str) -> Ordering {
    // Fast path, the common case of siblings (every lookup compares the
    // key with its neighbours): when no '/' follows the bytes the paths
    // share, their last '/' is the same shared one, so they have the same
    // parent and order by name, which from here is plain byte order.
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let shared = shared_prefix(x, y);
    let (x, y) = (&x[shared..], &y[shared..]);
    if !x.contains(&b'/') && !y.contains(&b'/') {
        // The paths first differ at `shared`, so the bytes there decide (an
        // ended path, `None`, sorts first): no second pass over the names.
        return x.first().cmp(&y.first());
    }
    let (ap, an) = split(a);
    let (bp, bn) = split(b);
    ap.cmp(bp).then_with(|| an.cmp(bn))
}

/// How many leading bytes `x` and `y` share, compared eight at a time: the
/// table compares paths on every lookup, and loading a snapshot of a million
/// nodes spent a fifth of its time here when this went byte by byte.
pub(super) fn shared_prefix(x: &[u8], y: &[u8]) -> usize {
    let mut i = 0;
    while let (Some(p), Some(q)) = (x[i..].first_chunk::<8>(), y[i..].first_chunk::<8>()) {
        let diff = u64::from_le_bytes(*p) ^ u64::from_le_bytes(*q);
        if diff != 0 {
            // Little-endian: the lowest set bit lies in the first differing byte.
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i + x[i..].iter().zip(&y[i..]).take_while(|(p, q)| p == q).count()
}

/// Whether `a` comes before `b` in the table.
pub(in crate::tree) fn sorts_before(a: &str, b: &str) -> bool {
    order(a, b) == Ordering::Less
}

impl Ord for NodePath {
    fn cmp(&self, other: &Self) -> Ordering {
        order(self.as_str(), other.as_str())
    }
}

impl PartialOrd for NodePath {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a lookup compares keys with: a path, or the edges of a node's
/// range of children (between all keys, never equal to one).
#[derive(Clone, Copy, Debug)]
pub(super) enum Probe<'a> {
    Path(&'a str),
    /// Just above the children's parent part with an empty name (the root's
    /// own key when the parent is "/"), below every child.
    ChildrenStart(&'a str),
    /// Above every key whose parent part is this one.
    ChildrenEnd(&'a str),
}

impl Probe<'_> {
    /// Where `key` lies from this probe.
    pub(super) fn order(&self, key: &NodePath) -> Ordering {
        match *self {
            Probe::Path(path) => order(path, key.as_str()),
            Probe::ChildrenStart(part) => {
                let (kp, kn) = split(key.as_str());
                part.cmp(kp).then(if kn.is_empty() { Ordering::Greater } else { Ordering::Less })
            }
            Probe::ChildrenEnd(part) => part.cmp(split(key.as_str()).0).then(Ordering::Greater),
        }
    }
}

impl Equivalent<NodePath> for Probe<'_> {
    fn equivalent(&self, key: &NodePath) -> bool {
        self.order(key) == Ordering::Equal
    }
}

impl Comparable<NodePath> for Probe<'_> {
    fn compare(&self, key: &NodePath) -> Ordering {
        self.order(key)
    }
}

/// The parent part the children of `path` have.
pub(super) fn children_part(path: &str) -> &str {
    if path == "/" {
        ""
    } else {
        path
    }
}
