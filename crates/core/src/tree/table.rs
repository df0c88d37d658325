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
use std::sync::Arc;

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

/// Most nodes in one leaf. A leaf is copied whole the first time a write
/// touches it while a snapshot shares it, so it stays small; big enough that
/// the index over leaves is a few percent of the table.
const LEAF: usize = 32;

// A leaf remembers its last insert position in a byte.
const _: () = assert!(LEAF < u8::MAX as usize);

/// A leaf below this many nodes merges with a neighbour that has room.
const LEAF_MIN: usize = LEAF / 4;

/// A run of consecutive nodes, sorted, never empty, and one past where the
/// last insert landed (0: none yet), to tell a run of ascending inserts.
#[derive(Debug)]
struct Leaf(Vec<(NodePath, Znode)>, u8);

impl Clone for Leaf {
    fn clone(&self) -> Leaf {
        // Room for one more: the write that copies a shared leaf often adds
        // a node (a full leaf splits instead of growing).
        let mut nodes = Vec::with_capacity((self.0.len() + 1).min(LEAF));
        nodes.extend(self.0.iter().cloned());
        Leaf(nodes, self.1)
    }
}

impl Leaf {
    fn first(&self) -> &NodePath {
        // A leaf in the index is never empty (every removal that empties one drops it).
        &self.0[0].0
    }

    fn find(&self, probe: &Probe<'_>) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| probe.order(k).reverse())
    }

    /// Puts `entry` at `at` in a leaf with room for it (growing to at most
    /// [`LEAF`], not doubling) and remembers where it landed.
    fn put(&mut self, at: usize, entry: (NodePath, Znode)) {
        if self.0.len() == self.0.capacity() {
            self.0.reserve_exact(LEAF - self.0.len());
        }
        self.0.insert(at, entry);
        self.1 = (at + 1) as u8;
    }
}

/// The nodes of a new leaf holding only `entry`, with room to fill.
fn lone(entry: (NodePath, Znode)) -> Vec<(NodePath, Znode)> {
    let mut nodes = Vec::with_capacity(LEAF);
    nodes.push(entry);
    nodes
}

/// Splits the full `leaf` to take `entry` at `at`; returns the nodes of the
/// new leaf. The cut goes where the insert lands when names arrive in order
/// (after its last node, before its first, or right after the previous
/// insert, as a directory's sequential children do when another directory's
/// run follows in the same leaf), so the part before stays full; anything
/// else splits it in halves.
fn split_full(leaf: &mut Leaf, at: usize, ascending: bool, entry: (NodePath, Znode)) -> Vec<(NodePath, Znode)> {
    if at == LEAF || at == 0 {
        // A leaf of its own after it, or before it (filed by its first path).
        return lone(entry);
    }
    let cut = if ascending { at } else { LEAF / 2 };
    let mut right = Vec::with_capacity(LEAF);
    right.extend(leaf.0.drain(cut..));
    if at <= cut {
        leaf.put(at, entry);
    } else {
        right.insert(at - cut, entry);
        leaf.1 = 0;
    }
    right
}

/// Leaves by their first path: a persistent B-tree (imbl) over sorted runs.
type Index = imbl::OrdMap<NodePath, Arc<Leaf>>;

/// Every znode by path, in runs of up to [`LEAF`] nodes. Cloning is O(1):
/// collections share structure, and a write copies only what it touches.
///
/// imbl's own leaves split in half, so under the inserts a coordination
/// service sees (sequential names, appends to a few directories) they stay
/// half full: ~70 B per znode for 32 B of key and pointer. These leaves
/// split where the insert lands, so appends leave them full.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    leaves: Index,
    len: usize,
}

impl Table {
    /// Whether both tables are the very same structure (so equal without a look inside).
    pub fn same_as(&self, other: &Table) -> bool {
        self.leaves.ptr_eq(&other.leaves)
    }

    /// The leaf that holds `path` if any does: the last one starting at or before it.
    fn leaf_of(&self, path: &str) -> Option<&Leaf> {
        self.leaves.get_prev(&Probe::Path(path)).map(|(_, leaf)| &**leaf)
    }

    /// The node at `path`.
    pub fn get(&self, path: &str) -> Option<&Znode> {
        let leaf = self.leaf_of(path)?;
        leaf.find(&Probe::Path(path)).ok().map(|i| &leaf.0[i].1)
    }

    /// The node at `path`, to change.
    pub fn get_mut(&mut self, path: &str) -> Option<&mut Znode> {
        let probe = Probe::Path(path);
        let (_, slot) = self.leaves.get_prev_mut(&probe)?;
        // Look before taking the leaf for writing: that copies it if shared.
        let i = slot.find(&probe).ok()?;
        Some(&mut Arc::make_mut(slot).0[i].1)
    }

    /// Whether a node is at `path`.
    pub fn contains(&self, path: &str) -> bool {
        self.get(path).is_some()
    }

    /// Puts `node` at `path`; returns the node it replaced.
    pub fn insert(&mut self, path: &str, node: Znode) -> Option<Znode> {
        let probe = Probe::Path(path);
        // After every node (loading a snapshot, or the newest of sequential
        // names): the last leaf takes it with one lookup, not two.
        let append = self.leaves.get_max().and_then(|(key, leaf)| {
            let (last, _) = leaf.0.last()?;
            (probe.order(last) == Ordering::Greater).then(|| (key.clone(), leaf.0.len()))
        });
        if let Some((key, len)) = append {
            let entry = (NodePath(CompactString::new(path)), node);
            self.len += 1;
            if len == LEAF {
                self.add_leaf(lone(entry));
                return None;
            }
            let Some(slot) = self.leaves.get_mut(&key) else { unreachable!("the last leaf was just found") };
            Arc::make_mut(slot).put(len, entry);
            return None;
        }
        let before_all = match self.leaves.get_min() {
            Some((first, _)) => probe.order(first) == Ordering::Less,
            None => {
                self.len = 1;
                self.add_leaf(lone((NodePath(CompactString::new(path)), node)));
                return None;
            }
        };
        // The leaf that would hold it; before every leaf, the first one.
        let found = if before_all { self.leaves.get_next_mut(&probe) } else { self.leaves.get_prev_mut(&probe) };
        let Some((key, slot)) = found else { unreachable!("a table with leaves has a first one") };
        let leaf = Arc::make_mut(slot);
        let at = match leaf.find(&probe) {
            Ok(i) => return Some(std::mem::replace(&mut leaf.0[i].1, node)),
            Err(i) => i,
        };
        self.len += 1;
        let entry = (NodePath(CompactString::new(path)), node);
        // One past the previous insert: names arriving in order.
        let ascending = usize::from(leaf.1) == at;
        if leaf.0.len() < LEAF {
            leaf.put(at, entry);
            if at == 0 {
                let key = key.clone();
                self.rekey(&key);
            }
            return None;
        }
        // A full leaf first hands the nodes before the insert to the leaf
        // before it, when that has room for a fair share of them (names
        // arriving in order but between older ones, as `n-10`..`n-19` land
        // around `n-1`..`n-2`, would otherwise leave a trail of half leaves).
        let right = if at > 0 && at < LEAF {
            let key = key.clone();
            let entry = match self.shift_to_previous(&key, at, entry) {
                Ok(()) => return None,
                Err(entry) => entry,
            };
            let Some(slot) = self.leaves.get_mut(&key) else { unreachable!("the key was just found in the index") };
            split_full(Arc::make_mut(slot), at, ascending, entry)
        } else {
            split_full(leaf, at, ascending, entry)
        };
        self.add_leaf(right);
        None
    }

    /// Moves the nodes before position `at` of the full leaf filed under
    /// `key` (as many as fit, at least a quarter leaf's worth) to the end of
    /// the leaf before it, then puts `entry` at `at`; false when that leaf
    /// lacks the room (the entry comes back, nothing changed).
    fn shift_to_previous(
        &mut self,
        key: &NodePath,
        at: usize,
        entry: (NodePath, Znode),
    ) -> Result<(), (NodePath, Znode)> {
        let room = self.leaves.range::<_, NodePath>(..key).next_back().map(|(k, l)| (k.clone(), LEAF - l.0.len()));
        let Some((previous, room)) = room.filter(|(_, room)| (*room).min(at) >= LEAF / 4) else { return Err(entry) };
        let moved = room.min(at);
        let Some(slot) = self.leaves.get_mut(key) else { unreachable!("the full leaf was just found") };
        let leaf = Arc::make_mut(slot);
        let shifted: Vec<(NodePath, Znode)> = leaf.0.drain(..moved).collect();
        leaf.put(at - moved, entry);
        let Some(slot) = self.leaves.get_mut(&previous) else { unreachable!("the leaf before was just found") };
        let before = Arc::make_mut(slot);
        before.0.reserve_exact(shifted.len());
        before.0.extend(shifted);
        self.rekey(key);
        Ok(())
    }

    /// Files a new leaf of `nodes` (sorted, not empty) under its first path.
    fn add_leaf(&mut self, nodes: Vec<(NodePath, Znode)>) {
        let leaf = Leaf(nodes, 0);
        self.leaves.insert(leaf.first().clone(), Arc::new(leaf));
    }

    /// Files the leaf indexed under `old` under its first path again.
    fn rekey(&mut self, old: &NodePath) {
        if let Some(leaf) = self.leaves.remove(old) {
            self.leaves.insert(leaf.first().clone(), leaf);
        }
    }

    /// Removes the node at `path`.
    pub fn remove(&mut self, path: &str) -> Option<Znode> {
        let probe = Probe::Path(path);
        let (key, slot) = self.leaves.get_prev_mut(&probe)?;
        let i = slot.find(&probe).ok()?;
        let leaf = Arc::make_mut(slot);
        let (_, node) = leaf.0.remove(i);
        leaf.1 = 0;
        self.len -= 1;
        let left = leaf.0.len();
        if left > 0 && left * 4 <= leaf.0.capacity() {
            leaf.0.shrink_to_fit();
        }
        if left == 0 {
            let key = key.clone();
            self.leaves.remove(&key);
        } else if left < LEAF_MIN {
            let key = key.clone();
            self.merge_small(&key);
        } else if i == 0 {
            let key = key.clone();
            self.rekey(&key);
        }
        Some(node)
    }

    /// A leaf grown small joins a neighbour when both fit in one leaf, so
    /// deleting most nodes does not leave a leaf per survivor behind. It ends
    /// up filed under its (possibly new) first path either way.
    fn merge_small(&mut self, key: &NodePath) {
        let Some(here) = self.leaves.get(key).map(|leaf| leaf.0.len()) else { return };
        let fits = |(k, leaf): (&NodePath, &Arc<Leaf>)| (here + leaf.0.len() <= LEAF).then(|| k.clone());
        let next = self.leaves.range::<_, NodePath>((Bound::Excluded(key), Bound::Unbounded)).next().and_then(fits);
        let prev = || self.leaves.range::<_, NodePath>(..key).next_back().and_then(fits);
        let (first, second) = match next {
            Some(next) => (key.clone(), next),
            None => match prev() {
                Some(prev) => (prev, key.clone()),
                None => return self.rekey(key),
            },
        };
        let (Some(mut into), Some(from)) = (self.leaves.remove(&first), self.leaves.remove(&second)) else {
            unreachable!("both leaves were just found in the index")
        };
        let nodes = &mut Arc::make_mut(&mut into).0;
        nodes.reserve_exact(from.0.len());
        nodes.extend(from.0.iter().cloned());
        self.leaves.insert(into.first().clone(), into);
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The children of `path` as (child path, node), by name.
    pub fn children<'a>(&'a self, path: &'a str) -> impl Iterator<Item = (&'a str, &'a Znode)> + 'a {
        let part = children_part(path);
        let (start, end) = (Probe::ChildrenStart(part), Probe::ChildrenEnd(part));
        // From the leaf that would hold the first child, while paths stay below the end.
        let from = match self.leaves.get_prev(&start) {
            Some((key, _)) => Bound::Included(key),
            None => Bound::Unbounded,
        };
        self.leaves
            .range::<_, NodePath>((from, Bound::Unbounded))
            .flat_map(|(_, leaf)| leaf.0.iter())
            .skip_while(move |(k, _)| start.order(k) != Ordering::Less)
            .take_while(move |(k, _)| end.order(k) == Ordering::Greater)
            .map(|(k, v)| (k.as_str(), v))
    }

    /// Every node, each parent before its children.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Znode)> {
        self.leaves.values().flat_map(|leaf| leaf.0.iter()).map(|(k, v)| (k.as_str(), v))
    }

    /// The table's structure is what its invariants say (for tests).
    #[cfg(test)]
    fn check(&self) {
        let mut previous: Option<&NodePath> = None;
        let mut count = 0;
        for (key, leaf) in self.leaves.iter() {
            assert!(!leaf.0.is_empty() && leaf.0.len() <= LEAF, "leaf of {} nodes", leaf.0.len());
            assert_eq!(key, leaf.first(), "a leaf is filed under its first path");
            for (k, _) in &leaf.0 {
                assert!(previous.is_none_or(|p| p < k), "{k:?} out of order");
                previous = Some(k);
            }
            count += leaf.0.len();
        }
        assert_eq!(count, self.len);
    }

    /// How many leaves hold the nodes (for tests).
    #[cfg(test)]
    fn leaf_count(&self) -> usize {
        self.leaves.len()
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

    fn valued(n: u8) -> Znode {
        let data = crate::data::Data::from(bytes::Bytes::from(vec![n]));
        Znode::new(&data, SharedAcl::new(Acl::open_unsafe().into()), StatPersisted::default(), 0)
    }

    #[test]
    fn sequential_names_fill_their_leaves() {
        // The benchmark's shape: names in order under a few parents, each
        // parent's run of children growing at its end.
        let mut t = table(&["/", "/a", "/b"]);
        for i in 0..3000 {
            let parent = if i % 2 == 0 { "/a" } else { "/b" };
            t.insert(&format!("{parent}/n{i:06}"), node());
        }
        t.check();
        let full = t.len().div_ceil(LEAF);
        assert!(t.leaf_count() <= full + 3, "{} leaves for {} nodes: not full", t.leaf_count(), t.len());
        // Deleting most of them merges the leaves left nearly empty.
        for i in (0..3000).filter(|i| i % 10 != 0) {
            let parent = if i % 2 == 0 { "/a" } else { "/b" };
            assert!(t.remove(&format!("{parent}/n{i:06}")).is_some());
        }
        t.check();
        assert!(t.leaf_count() <= t.len() / LEAF_MIN + 2, "{} leaves for {} nodes", t.leaf_count(), t.len());
    }

    /// Nodes per leaf slot after inserting `count` children of `/scale` named by `name`.
    fn fill(count: u32, name: impl Fn(u32) -> String) -> f64 {
        let mut t = table(&["/", "/scale"]);
        for i in 0..count {
            t.insert(&format!("/scale/{}", name(i)), node());
        }
        t.check();
        t.len() as f64 / (t.leaf_count() * LEAF) as f64
    }

    #[test]
    fn names_in_order_fill_leaves_even_between_older_names() {
        // Padded sequential names (ZooKeeper's sequential nodes) append.
        let padded = fill(20_000, |i| format!("n-{i:010}"));
        assert!(padded > 0.95, "fill {padded:.2}");
        // Unpadded ones (the benchmark's) land between older names: `n-10`
        // after `n-1`, `n-100` after `n-10`. Halving splits left 0.55 here.
        let unpadded = fill(20_000, |i| format!("n-{i}"));
        assert!(unpadded > 0.8, "fill {unpadded:.2}");
        // Scattered names split in halves, about as imbl's leaves were.
        let scattered = fill(20_000, |i| format!("n-{}", (u64::from(i) * 2_654_435_761) % 1_000_003));
        assert!(scattered > 0.6, "fill {scattered:.2}");
    }

    #[derive(Clone, Debug)]
    enum Step {
        Put(usize, u8),
        Remove(usize),
        Change(usize, u8),
        /// Keep a copy (as a snapshot does) and check it later.
        Keep,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            4 => (0..PATHS, any::<u8>()).prop_map(|(p, v)| Step::Put(p, v)),
            2 => (0..PATHS).prop_map(Step::Remove),
            1 => (0..PATHS, any::<u8>()).prop_map(|(p, v)| Step::Change(p, v)),
            1 => Just(Step::Keep),
        ];
        proptest::collection::vec(step, 1..600)
    }

    /// Paths enough for several leaves, under a few parents, with names
    /// that sort around each other and around '/'.
    const PATHS: usize = 240;

    fn path_of(i: usize) -> String {
        let parent = ["", "/p", "/p-", "/p/q"][i % 4];
        format!("{parent}/{}{}", ["a", "b.", "c-"][i / 4 % 3], i / 12)
    }

    fn same(t: &Table, model: &std::collections::BTreeMap<String, u8>) -> Result<(), TestCaseError> {
        t.check();
        prop_assert_eq!(t.len(), model.len());
        for (p, v) in model {
            prop_assert_eq!(t.get(p).map(|n| n.data().to_vec()), Some(vec![*v]), "{}", p);
        }
        let mut listed: Vec<&str> = t.iter().map(|(p, _)| p).collect();
        listed.sort_unstable();
        prop_assert_eq!(listed, model.keys().map(String::as_str).collect::<Vec<_>>());
        for parent in ["/", "/p", "/p-", "/p/q", "/a0"] {
            let mut expected: Vec<&str> =
                model.keys().map(String::as_str).filter(|c| *c != "/" && path::parent(c) == parent).collect();
            expected.sort_by_key(|c| path::name(c));
            prop_assert_eq!(children(t, parent), expected, "children of {}", parent);
        }
        Ok(())
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
        fn the_table_behaves_as_an_ordered_map_and_copies_stay_as_they_were(steps in steps()) {
            let mut t = Table::default();
            let mut model = std::collections::BTreeMap::new();
            let mut kept = Vec::new();
            for step in steps {
                match step {
                    Step::Put(i, v) => {
                        let p = path_of(i);
                        let old = t.insert(&p, valued(v)).map(|n| n.data()[0]);
                        prop_assert_eq!(old, model.insert(p, v));
                    }
                    Step::Remove(i) => {
                        let p = path_of(i);
                        prop_assert_eq!(t.remove(&p).map(|n| n.data()[0]), model.remove(&p));
                    }
                    Step::Change(i, v) => {
                        let p = path_of(i);
                        match (t.get_mut(&p), model.get_mut(&p)) {
                            (Some(node), Some(value)) => {
                                *node = valued(v);
                                *value = v;
                            }
                            (None, None) => {}
                            (mine, theirs) => prop_assert!(false, "{}: {:?} vs {:?}", p, mine.is_some(), theirs),
                        }
                    }
                    Step::Keep => kept.push((t.clone(), model.clone())),
                }
            }
            same(&t, &model)?;
            for (copy, then) in &kept {
                same(copy, then)?;
            }
        }

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
            let mut seen = rustc_hash::FxHashSet::default();
            for (p, _) in t.iter() {
                prop_assert!(p == "/" || seen.contains(path::parent(p)), "{} before its parent", p);
                seen.insert(p);
            }
            prop_assert_eq!(seen.len(), paths.len());
        }
    }
}
