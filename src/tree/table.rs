//! The node table: every znode by path, in a persistent ordered map whose
//! order puts a node's children in one contiguous range.
//!
//! Paths are ordered by (parent, name) rather than as plain strings. Under
//! that order the children of `/a` are exactly the keys whose parent part is
//! `/a`, one range, so a node needs no child set of its own (the set, with a
//! second copy of every name, was most of a small node's cost). A parent
//! also sorts before its children (its whole path is a proper prefix of
//! their parent part), so iterating the table visits parents first, the
//! order a snapshot needs to rebuild the tree.

use super::node::Znode;
use compact_str::CompactString;
use equivalent::{Comparable, Equivalent};
use std::cmp::Ordering;
use std::ops::Bound;

/// A path as a table key; paths up to 24 bytes are stored inline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePath(CompactString);

impl NodePath {
    /// The path.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

/// (parent part, name): "/" is ("", ""), "/a" is ("", "a"), "/a/b" is ("/a", "b").
fn split(path: &str) -> (&str, &str) {
    match path.as_bytes().iter().rposition(|&c| c == b'/') {
        // '/' is one byte in UTF-8, so both sides are on char boundaries.
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// The table order of two paths: by parent part, then by name.
fn order(a: &str, b: &str) -> Ordering {
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
fn shared_prefix(x: &[u8], y: &[u8]) -> usize {
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
pub(super) fn sorts_before(a: &str, b: &str) -> bool {
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
enum Probe<'a> {
    Path(&'a str),
    /// Just above the children's parent part with an empty name (the root's
    /// own key when the parent is "/"), below every child.
    ChildrenStart(&'a str),
    /// Above every key whose parent part is this one.
    ChildrenEnd(&'a str),
}

impl Probe<'_> {
    fn order(&self, key: &NodePath) -> Ordering {
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
fn children_part(path: &str) -> &str {
    if path == "/" {
        ""
    } else {
        path
    }
}

type Map = imbl::OrdMap<NodePath, Znode>;

/// Every znode by path. Cloning is O(1): collections share structure.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    nodes: Map,
}

impl Table {
    /// Whether both tables are the very same structure (so equal without a look inside).
    pub fn same_as(&self, other: &Table) -> bool {
        self.nodes.ptr_eq(&other.nodes)
    }

    /// The node at `path`.
    pub fn get(&self, path: &str) -> Option<&Znode> {
        self.nodes.get(&Probe::Path(path))
    }

    /// The node at `path`, to change.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Znode> {
        self.nodes.get_mut(&Probe::Path(path))
    }

    /// Whether a node is at `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// Puts `node` at `path`; returns the node it replaced.
    pub fn insert(&mut self, path: &str, node: Znode) -> Option<Znode> {
        self.nodes.insert(NodePath(CompactString::new(path)), node)
    }

    /// Removes the node at `path`.
    pub fn remove(&mut self, path: &str) -> Option<Znode> {
        self.nodes.remove(&Probe::Path(path))
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The children of `path` as (child path, node), by name.
    pub fn children<'a>(&'a self, path: &'a str) -> impl Iterator<Item = (&'a str, &'a Znode)> + 'a {
        let part = children_part(path);
        let range = (Bound::Excluded(Probe::ChildrenStart(part)), Bound::Excluded(Probe::ChildrenEnd(part)));
        self.nodes.range::<_, Probe<'_>>(range).map(|(k, v)| (k.as_str(), v))
    }

    /// Every node, each parent before its children.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Znode)> {
        self.nodes.iter().map(|(k, v)| (k.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;
    use crate::tree::node::SharedAcl;
    use crate::tree::path;
    use crate::tree::stat::StatPersisted;
    use proptest::prelude::*;

    fn node() -> Znode {
        Znode::new(&crate::data::Data::EMPTY, SharedAcl::new(Acl::open_unsafe().into()), StatPersisted::default(), 0)
    }

    fn table(paths: &[&str]) -> Table {
        let mut t = Table::default();
        for p in paths {
            t.insert(p, node());
        }
        t
    }

    fn children<'a>(t: &'a Table, p: &'a str) -> Vec<&'a str> {
        t.children(p).map(|(c, _)| c).collect()
    }

    #[test]
    fn children_are_exactly_the_direct_children_by_name() {
        let t = table(&["/", "/a", "/a/b", "/a/b/c", "/a/c", "/a-", "/a0", "/b", "/ab", "/a/b0"]);
        assert_eq!(children(&t, "/"), ["/a", "/a-", "/a0", "/ab", "/b"]);
        assert_eq!(children(&t, "/a"), ["/a/b", "/a/b0", "/a/c"]);
        assert_eq!(children(&t, "/a/b"), ["/a/b/c"]);
        assert!(children(&t, "/a/c").is_empty());
        assert!(children(&t, "/missing").is_empty());
    }

    #[test]
    fn lookups_find_inserted_paths_only() {
        let mut t = table(&["/", "/a", "/a/b"]);
        assert!(t.contains("/a/b") && !t.contains("/a/c") && !t.contains("/b"));
        assert!(t.remove("/a/b").is_some());
        assert!(!t.contains("/a/b"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn long_paths_work_as_keys() {
        let long = format!("/{}", "x".repeat(300));
        let t = table(&["/", &long]);
        assert!(t.contains(&long));
        assert_eq!(children(&t, "/"), [long.as_str()]);
    }

    fn tree_paths() -> impl Strategy<Value = Vec<String>> {
        // Short names from a small alphabet, including characters that sort
        // around '/', so prefixes and near-prefixes collide often.
        let name = proptest::string::string_regex("[a-c.0-]{1,3}").expect("valid regex");
        proptest::collection::vec(proptest::collection::vec(name, 1..4), 1..40).prop_map(|list| {
            let mut out = vec!["/".to_string()];
            for parts in list {
                let mut p = String::new();
                for part in parts {
                    p = format!("{p}/{part}");
                    out.push(p.clone());
                }
            }
            out.sort();
            out.dedup();
            out
        })
    }

    proptest! {
        #[test]
        fn the_fast_order_is_the_parent_then_name_order(a in "(/[a-c.0-]{1,3}){1,4}", b in "(/[a-c.0-]{1,3}){1,4}") {
            let (ap, an) = split(&a);
            let (bp, bn) = split(&b);
            prop_assert_eq!(order(&a, &b), ap.cmp(bp).then(an.cmp(bn)));
            prop_assert_eq!(order("/", &a), Ordering::Less);
        }

        #[test]
        fn long_shared_prefixes_order_as_their_parts(stem in "(/[ab]{0,12}){1,3}", a in "[ab/]{0,20}", b in "[ab/]{0,20}") {
            // Long shared stems and differences past the eighth byte: the
            // word-at-a-time prefix must find the first difference exactly.
            let (a, b) = (format!("{stem}{a}"), format!("{stem}{b}"));
            let (ap, an) = split(&a);
            let (bp, bn) = split(&b);
            prop_assert_eq!(order(&a, &b), ap.cmp(bp).then(an.cmp(bn)));
            let naive = a.bytes().zip(b.bytes()).take_while(|(p, q)| p == q).count();
            prop_assert_eq!(shared_prefix(a.as_bytes(), b.as_bytes()), naive);
        }

        #[test]
        fn children_and_iteration_order_match_the_path_rules(paths in tree_paths()) {
            let t = table(&paths.iter().map(String::as_str).collect::<Vec<_>>());
            for p in &paths {
                let mut expected: Vec<&str> =
                    paths.iter().map(String::as_str).filter(|c| *c != "/" && path::parent(c) == p).collect();
                expected.sort_by_key(|c| path::name(c));
                prop_assert_eq!(children(&t, p), expected);
            }
            let mut seen = std::collections::HashSet::new();
            for (p, _) in t.iter() {
                prop_assert!(p == "/" || seen.contains(path::parent(p)), "{} before its parent", p);
                seen.insert(p);
            }
            prop_assert_eq!(seen.len(), paths.len());
        }
    }
}
