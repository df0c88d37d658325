//! A data directory written by the store format before the current one
//! (`integration-tests/fixtures/storage-format-3.tar.gz`, made by
//! `fixtures/make-previous-format.sh` with the last build of format 3) is
//! what a user upgrading has: this build starts on it, serves every node as
//! that build wrote it (data, every Stat field, ACL), upgrades the store to
//! its own format, writes, and after a restart still serves both.
//!
//! The fixture is unpacked with python3's `tarfile` (CI has python3, and the
//! workspace has no gzip crate); it is found from this crate's directory.

use crate::support::{connect, runtime, serial, Ensemble, Settings};
use serde_json::Value;
use sha1::{Digest, Sha1};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use zabkeeper_client::acl_spec::format_perms;
use zabkeeper_client::{Acl, Client, CreateMode, Stat};

/// The fixture's name, beside this file.
const FIXTURE: &str = "storage-format-3";
/// The format marker the fixture's store carries.
const PREVIOUS_FORMAT: &str = "zabkeeper-storage/3";
/// The store's marker file (`SIDECAR` in crates/store), which
/// names its format.
const MARKER_FILE: &str = "ZABKEEPER";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("integration-tests").join("fixtures")
}

/// One node as the previous build served it.
struct Expected {
    /// The data, or for a large value its SHA-1 (hex) and length.
    data: ExpectedData,
    stat: Stat,
    /// `scheme:id:perms`, in order.
    acl: Vec<String>,
}

enum ExpectedData {
    Bytes(Vec<u8>),
    Sha1(String),
}

/// The fixture's JSON: every node from /fixture down, and the last zxid.
fn expected_tree() -> (BTreeMap<String, Expected>, i64) {
    let path = fixtures().join(format!("{FIXTURE}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(doc["format"], PREVIOUS_FORMAT, "the fixture is of the previous format");
    let number = |v: &Value, what: &str| v.as_i64().unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    let mut nodes = BTreeMap::new();
    for (path, node) in doc["nodes"].as_object().expect("nodes") {
        let s = &node["stat"];
        let stat = Stat {
            czxid: number(&s["czxid"], "czxid"),
            mzxid: number(&s["mzxid"], "mzxid"),
            ctime: number(&s["ctime"], "ctime"),
            mtime: number(&s["mtime"], "mtime"),
            version: number(&s["version"], "version") as i32,
            cversion: number(&s["cversion"], "cversion") as i32,
            aversion: number(&s["aversion"], "aversion") as i32,
            ephemeral_owner: number(&s["ephemeralOwner"], "ephemeralOwner"),
            data_length: number(&s["dataLength"], "dataLength") as i32,
            num_children: number(&s["numChildren"], "numChildren") as i32,
            pzxid: number(&s["pzxid"], "pzxid"),
        };
        let data = match (node["data_hex"].as_str(), node["data_sha1"].as_str()) {
            (Some(hex), _) => ExpectedData::Bytes(from_hex(hex)),
            (None, Some(sha1)) => ExpectedData::Sha1(sha1.to_string()),
            (None, None) => panic!("{path}: no data in the fixture"),
        };
        let acl = node["acl"].as_array().expect("acl").iter().map(|a| a.as_str().expect("an entry").to_string());
        nodes.insert(path.clone(), Expected { data, stat, acl: acl.collect() });
    }
    let last = doc["last_zxid"].as_str().and_then(|z| z.strip_prefix("0x")).expect("last_zxid as 0x…");
    let last = i64::from_str_radix(last, 16).expect("last_zxid in hex");
    (nodes, last)
}

fn from_hex(hex: &str) -> Vec<u8> {
    assert!(hex.len().is_multiple_of(2), "odd hex {hex:?}");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex")).collect()
}

fn sha1_hex(data: &[u8]) -> String {
    Sha1::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// Unpacks the fixture's tarball into `into` (which it creates).
fn unpack(into: &Path) {
    let tarball = fixtures().join(format!("{FIXTURE}.tar.gz"));
    assert!(
        tarball.is_file(),
        "{} is missing: run integration-tests/fixtures/make-previous-format.sh",
        tarball.display()
    );
    std::fs::create_dir_all(into).expect("create the data directory");
    // The "data" filter (where this python has it) keeps every name inside.
    let script = "import sys, tarfile\n\
                  t = tarfile.open(sys.argv[1])\n\
                  kw = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}\n\
                  t.extractall(sys.argv[2], **kw)\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&tarball)
        .arg(into)
        .output()
        .expect("run python3 (CI machines have it) to unpack the fixture");
    assert!(out.status.success(), "unpacking {}: {}", tarball.display(), String::from_utf8_lossy(&out.stderr));
}

/// The marker a store of this build carries: read from a fresh store, so
/// this test names no format and follows the store's.
fn current_marker() -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("fresh");
    drop(zabkeeper_store::SledStorage::open(&store).expect("a fresh store"));
    std::fs::read_to_string(store.join(MARKER_FILE)).expect("a fresh store's marker")
}

fn acl_text(acl: &[Acl]) -> Vec<String> {
    acl.iter().map(|a| format!("{}:{}:{}", a.id.scheme, a.id.id, format_perms(a.perms))).collect()
}

/// Every path from `root` down, parents first.
async fn walk(client: &Client, root: &str) -> Vec<String> {
    let mut out = vec![root.to_string()];
    let mut next = 0;
    while next < out.len() {
        let parent = out[next].clone();
        next += 1;
        let mut children = client.get_children(&parent).await.unwrap_or_else(|e| panic!("children of {parent}: {e}"));
        children.sort();
        out.extend(children.into_iter().map(|c| format!("{parent}/{c}")));
        assert!(out.len() < 1000, "the fixture's tree is small; {root} has grown to {}", out.len());
    }
    out
}

/// Checks every node of `expected` (and that there are no others), as
/// `client` reads them with alice's credentials.
async fn check_tree(client: &Client, expected: &BTreeMap<String, Expected>) {
    // As the fixture was read: a digest id is shown only to who may administer the node.
    client.add_auth("digest", b"alice:secret").await.expect("add alice's credentials");
    let mut found = walk(client, "/fixture").await;
    found.sort();
    assert_eq!(found, expected.keys().cloned().collect::<Vec<_>>(), "the paths below /fixture");
    for (path, want) in expected {
        let (data, stat) = client.get_data(path).await.unwrap_or_else(|e| panic!("get {path}: {e}"));
        match &want.data {
            ExpectedData::Bytes(bytes) => assert!(data == *bytes, "{path}: data {:?}, expected {:?}", data, bytes),
            ExpectedData::Sha1(sha1) => assert_eq!(&sha1_hex(&data), sha1, "{path}: SHA-1 of its {} bytes", data.len()),
        }
        assert_eq!(stat, want.stat, "{path}: Stat");
        let (acl, acl_stat) = client.get_acl(path).await.unwrap_or_else(|e| panic!("getacl {path}: {e}"));
        assert_eq!(acl_text(&acl), want.acl, "{path}: ACL");
        assert_eq!(acl_stat, want.stat, "{path}: Stat with the ACL");
    }
}

#[test]
fn a_data_directory_of_the_previous_format_is_served_upgraded_and_written() {
    let _serial = serial();
    let (mut expected, last_zxid) = expected_tree();
    assert!(expected.len() > 10 && expected.contains_key("/fixture/big"), "the fixture holds a varied tree");
    let mut ensemble = Ensemble::configure(Settings { size: 1, ..Settings::default() });
    let data_dir = ensemble.data_dir(1);
    unpack(&data_dir);
    let marker = || std::fs::read_to_string(data_dir.join(MARKER_FILE)).expect("the store's marker");
    assert_eq!(marker(), PREVIOUS_FORMAT, "the fixture as unpacked");
    ensemble.start_all();
    let current = current_marker();
    assert_ne!(current, PREVIOUS_FORMAT);
    assert_eq!(marker(), current, "the store is upgraded to this build's format on open");

    let rt = runtime();
    let acl = [Acl::new(zabkeeper_client::perms::ALL, "world", "anyone")];
    let (created, set) = rt.block_on(crate::support::within(60, async {
        let client = connect(&ensemble.grpc(&[1])).await;
        check_tree(&client, &expected).await;
        let status = ensemble.status(1).await.expect("member 1's status");
        assert!(
            status.last_committed_zxid as i64 > last_zxid,
            "this build goes on after the fixture's last zxid {last_zxid:#x}: {:#x}",
            status.last_committed_zxid
        );
        // Written by this build over the previous format's data.
        let (_, created) = client
            .create_with_stat("/fixture/after-upgrade", b"written by this build", CreateMode::Persistent, &acl)
            .await
            .expect("create");
        let counter = &expected["/fixture/counter"].stat;
        let set = client.set_data("/fixture/counter", b"41", counter.version).await.expect("set at its version");
        assert!(created.czxid > last_zxid, "a new write's zxid {:#x} follows {last_zxid:#x}", created.czxid);
        client.close().await.expect("close the session");
        (created, set)
    }));

    // What both builds wrote, after a restart.
    assert!(ensemble.terminate(1).is_some_and(|s| s.success()), "member 1 stops cleanly:\n{}", ensemble.log(1));
    ensemble.spawn(1);
    ensemble.wait_serving(vec![1], Duration::from_secs(30));
    let root = expected.get_mut("/fixture").expect("/fixture");
    root.stat.num_children += 1;
    root.stat.cversion += 1;
    root.stat.pzxid = created.czxid;
    let counter = expected.get_mut("/fixture/counter").expect("/fixture/counter");
    assert_eq!((set.version, set.czxid), (counter.stat.version + 1, counter.stat.czxid), "the counter's set");
    counter.data = ExpectedData::Bytes(b"41".to_vec());
    counter.stat = set;
    let new = Expected {
        data: ExpectedData::Bytes(b"written by this build".to_vec()),
        stat: created,
        acl: vec!["world:anyone:cdrwa".into()],
    };
    expected.insert("/fixture/after-upgrade".into(), new);
    rt.block_on(crate::support::within(60, async {
        let client = connect(&ensemble.grpc(&[1])).await;
        check_tree(&client, &expected).await;
    }));
    assert_eq!(marker(), current, "the store keeps this build's format");
    assert!(ensemble.panics().is_empty(), "{:?}", ensemble.panics());
}
