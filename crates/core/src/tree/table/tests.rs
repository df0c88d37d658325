//! The node table's tests: children as exact ranges, leaves that stay full
//! under sequential names, and the table against a plain ordered map.

use super::path_order::{order, shared_prefix, split};
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
