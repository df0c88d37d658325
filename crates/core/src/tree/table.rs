//! The node table: every znode by path, in a persistent ordered map whose
//! order puts a node's children in one contiguous range.
//!
//! Paths are ordered by (parent, name) rather than as plain strings. Under
//! that order the children of `/a` are exactly the keys whose parent part is
//! `/a`, one range, so a node needs no child set of its own (the set, with a
//! second copy of every name, was most of a small node's cost). A parent
//! also sorts before its children (its whole path is a proper prefix of
//! their parent part), so iterating the table visits parents first, the
//! order a snapshot needs to rebuild the tree. That order is in
//! `path_order`; this file is the leaves and the index over them.

mod path_order;

use super::node::Znode;
use compact_str::CompactString;
pub(super) use path_order::sorts_before;
pub use path_order::NodePath;
use path_order::{children_part, Probe};
use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;

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
mod tests;
