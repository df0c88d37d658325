#!/usr/bin/env python3
"""Migration from Apache ZooKeeper, checked field by field: a tree is built
with kazoo (and raw frames for containers and TTL nodes, which kazoo cannot
create) on a real standalone ZooKeeper (Debian's package) that snapshots
every few transactions, so the import needs a snapshot and the log entries
after it; ZooKeeper is stopped with sessions still open; `zkctl import`
makes a data directory; one zabkeeper member starts on it while ZooKeeper
restarts on its own data; then every node is compared through both servers
(data with null kept apart from empty, every Stat field, ACLs, children),
an imported session resumes on zabkeeper with ZooKeeper's password, a short
session's ephemeral expires on both, a new sequential create gets the same
name on both, and zabkeeper's first new zxid is above ZooKeeper's last.
The same data is also loaded into a running 3-member ensemble whose tree
is empty (`zkctl import --load`, through its leader) and compared field by
field on every member, sequence and zxid continuing there too; and
ZooKeeper's newest snapshot file, POSTed to the AdminServer's `restore` of
another running member, brings every node it holds unchanged since.
Then the way back: a snapshot saved from the running member, `zkctl
export`ed, and a fresh ZooKeeper started on it serves the same tree.

Usage: zk_import.py [--binary target/debug/zabkeeper] [--require-zookeeper]
Without Debian's zookeeper package (or kazoo) the check says why it is
skipped and exits 0, unless --require-zookeeper is given.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zk_support as zk  # noqa: E402
from zk_support import JuteConnection, create_body  # noqa: E402

DIGEST_USER = ("alice", "secret")
SNAP_COUNT = 20


def kazoo_or_skip(require):
    try:
        import kazoo  # noqa: F401
        return True
    except ImportError:
        msg = "zk_import SKIPPED: kazoo is not installed (run it with .ci/python-env's python)"
        if require:
            zk.fail(msg)
        print(msg)
        return False


def newest_snapshot_zxid(data_dir):
    v2 = os.path.join(data_dir, "version-2")
    zxids = [int(n.split(".")[1], 16) for n in os.listdir(v2) if n.startswith("snapshot.")] if os.path.isdir(v2) else []
    return max(zxids, default=-1)


def build(hosts, port, digest_acl, ip_acl):
    """The tree, on ZooKeeper. Returns the open raw sessions (left open on
    purpose) and the last zxid written."""
    from kazoo.client import KazooClient
    from kazoo.security import ACL, Id
    c = KazooClient(hosts=hosts, auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
    c.start(timeout=30)
    c.create("/deep/a/b/c/d/e/f/g/h/i/j", b"bottom", makepath=True)
    for i in range(150):
        c.create(f"/wide/n{i:03d}", bytes([i % 256]) * (i % 9), makepath=True)
    c.create("/bin", bytes(range(256)))
    c.create("/null", None)
    c.create("/empty", b"")
    c.create("/big", os.urandom(200_000))
    c.create("/acl/digest", b"d", acl=[digest_acl], makepath=True)
    c.create("/acl/ip", b"i", acl=[ip_acl])
    c.create("/acl/mixed", b"m", acl=[ACL(1, Id("world", "anyone")), digest_acl])
    c.set_acls("/acl/mixed", [ACL(3, Id("world", "anyone")), digest_acl, ip_acl])
    for _ in range(7):
        c.create("/seq/job-", b"j", sequence=True, makepath=True)
    c.delete("/seq/job-0000000002")
    c.create("/seq/plain", b"")
    for i in range(4):
        c.set("/bin", bytes(range(i, 256)))
    for i in range(0, 150, 10):
        c.delete(f"/wide/n{i:03d}")
    t = c.transaction()
    t.create("/multi", b"one")
    t.create("/multi/child", b"two")
    t.set_data("/empty", b"now set")
    t.delete("/wide/n001")
    t.check("/deep", 0)
    results = t.commit()
    if any(isinstance(r, Exception) for r in results):
        zk.fail(f"multi failed on ZooKeeper: {results}")
    t = c.transaction()  # fails as a whole: logged as an error multi
    t.create("/never", b"")
    t.delete("/does-not-exist")
    t.commit()
    c.create("/seqe/e-", b"", ephemeral=True, sequence=True, makepath=True)

    # Containers and TTL nodes, and sessions left open, over raw frames.
    raw = JuteConnection("127.0.0.1", port, timeout_ms=60000)
    short = JuteConnection("127.0.0.1", port, timeout_ms=4000)
    for conn, path, flags, ttl in [
        (raw, "/container", 4, None),
        (raw, "/container/kept", 0, None),
        (raw, "/reaped", 4, None),
        (raw, "/reaped/gone", 0, None),
        (raw, "/ttl", 5, 3_600_000),
        (raw, "/ttl-seq-", 6, 3_600_000),
        (raw, "/eph", 1, None),
        (raw, "/eph-seq-", 3, None),
        (short, "/short", 0, None),
        (short, "/short/eph", 1, None),
    ]:
        op = {4: "createContainer", 5: "createTTL", 6: "createTTL"}.get(flags, "create2")
        err, _, _ = conn.call(op, create_body(path, b"r", flags=flags, ttl=ttl))
        if err != "OK":
            zk.fail(f"create {path} (flags {flags}) on ZooKeeper: {err}")
    err, _, _ = raw.call("delete", zk.path_version_body("/reaped/gone", -1))
    # The reaper deletes the now empty container (a deleteContainer transaction).
    deadline = time.monotonic() + 30
    while c.exists("/reaped") is not None:
        if time.monotonic() > deadline:
            zk.fail("ZooKeeper's container reaper did not delete /reaped within 30 s")
        time.sleep(0.2)
    c.stop()  # closes its session: /seqe's ephemeral goes (a closeSession with paths)
    c.close()
    return raw, short


def finish_after_snapshot(hosts, data_dir):
    """Writes until ZooKeeper's newest snapshot is older than the last write
    by a few transactions, so the import needs both. Returns the last zxid."""
    from kazoo.client import KazooClient
    last = 0
    for round_ in range(SNAP_COUNT):
        c = KazooClient(hosts=hosts, timeout=15)
        c.start(timeout=30)
        for i in range(3):
            last = c.set("/bin", bytes([round_ % 256, i]) * 3).mzxid
        c.stop()  # a closeSession transaction, which may start a snapshot
        c.close()
        # ZooKeeper writes its snapshots in a thread of their own: give a
        # snapshot just begun the time to show before judging.
        time.sleep(0.5)
        if 0 <= newest_snapshot_zxid(data_dir) < last - 2:
            return last
    zk.fail(f"ZooKeeper's newest snapshot stays at its last write ({last:#x})")


def walk(client, path="/"):
    """Every node under `path`: path -> (data, stat, acls, sorted children)."""
    out = {}
    stack = [path]
    while stack:
        p = stack.pop()
        data, stat = client.get(p)
        acls, _ = client.get_acls(p)
        children = sorted(client.get_children(p))
        out[p] = (data, stat, sorted((a.perms, a.id.scheme, a.id.id) for a in acls), children)
        stack.extend((p.rstrip("/") + "/" + ch) for ch in children)
    return out


STAT_FIELDS = ["czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
               "ephemeralOwner", "dataLength", "numChildren", "pzxid"]


def compare(zk_tree, zb_tree, skip):
    problems = []
    for path in sorted(set(zk_tree) | set(zb_tree)):
        if any(path == s or path.startswith(s + "/") for s in skip):
            continue
        if path not in zb_tree or path not in zk_tree:
            problems.append(f"{path}: only on {'ZooKeeper' if path in zk_tree else 'zabkeeper'}")
            continue
        (d1, s1, a1, c1), (d2, s2, a2, c2) = zk_tree[path], zb_tree[path]
        if d1 != d2:
            problems.append(f"{path}: data {d1!r:.60} vs {d2!r:.60}")
        for f in STAT_FIELDS:
            if getattr(s1, f) != getattr(s2, f):
                problems.append(f"{path}: {f} {getattr(s1, f)} vs {getattr(s2, f)}")
        if a1 != a2:
            problems.append(f"{path}: ACL {a1} vs {a2}")
        if c1 != c2:
            problems.append(f"{path}: children {c1} vs {c2}")
    return problems


def load_running(zkctl, loaded, copy, zk_tree):
    """`zkctl import --load` into `loaded`, a 3-member ensemble whose tree is
    empty, then every member compared with ZooKeeper. Returns a client of it
    and the differences."""
    from kazoo.client import KazooClient
    loaded.start(timeout=60)
    # A follower's address or the leader's: zkctl finds the leader.
    admin = f"127.0.0.1:{loaded.ports[2]['admin']}"
    run = subprocess.run([zkctl, "--json", "--admin", admin, "import", "--zookeeper-data", copy, "--load"],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        zk.fail(f"zkctl import --load failed ({run.returncode}): {run.stderr}{run.stdout}")
    print(f"loaded into a running ensemble: {run.stdout.strip()}")
    problems = []
    for i in sorted(loaded.ports):
        c = KazooClient(hosts=f"127.0.0.1:{loaded.ports[i]['client']}",
                        auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
        c.start(timeout=30)
        c.sync("/")
        # The configuration node is this ensemble's membership, not ZooKeeper's.
        problems += [f"loaded, member {i}: {p}" for p in compare(zk_tree, walk(c), skip=["/short", "/zookeeper/config"])]
        c.stop()
        c.close()
    client = KazooClient(hosts=loaded.hosts(), auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
    client.start(timeout=30)
    print(f"loaded: compared {len(zk_tree)} nodes on each of {len(loaded.ports)} members")
    return client, problems


def restore_snapshot(binary, copy, zk_client):
    """ZooKeeper's newest snapshot file POSTed to the AdminServer's `restore`
    of a running member with an empty tree: every node the snapshot holds
    unchanged since must be identical to ZooKeeper's. Returns the differences."""
    import urllib.request
    from kazoo.client import KazooClient
    v2 = os.path.join(copy, "version-2")
    snap = max((n for n in os.listdir(v2) if n.startswith("snapshot.")), key=lambda n: int(n[9:], 16))
    at = int(snap[9:], 16)
    member = zk.Ensemble(binary, size=1)
    try:
        member.start(timeout=60)
        with open(os.path.join(v2, snap), "rb") as f:
            body = f.read()
        req = urllib.request.Request(f"http://127.0.0.1:{member.ports[1]['metrics']}/commands/restore",
                                     method="POST", data=body)
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read())
        print(f"restore of ZooKeeper's {snap}: {answer}")
        if answer.get("error") is not None or answer.get("command") != "restore":
            return [f"restore of {snap}: {answer}"]
        c = KazooClient(hosts=member.hosts(), auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
        c.start(timeout=30)
        zk_tree = walk(zk_client)
        unchanged = {p: v for p, v in zk_tree.items()
                     if max(v[1].czxid, v[1].mzxid, v[1].pzxid) <= at and not p.startswith("/zookeeper")}
        restored = walk(c)
        c.stop()
        c.close()
        problems = compare(unchanged, {p: restored[p] for p in unchanged if p in restored}, skip=["/short"])
        print(f"restored: {len(unchanged)} nodes unchanged since {snap} compared")
        if len(unchanged) < 100:
            problems.append(f"only {len(unchanged)} nodes to compare: the check is too weak")
        return [f"restored {snap}: {p}" for p in problems]
    finally:
        member.stop()


def the_way_back(zkctl, classpath, ours, client, work):
    """zkctl export: a snapshot saved from the running member, exported as
    ZooKeeper's, and a fresh Apache ZooKeeper started on it must serve every
    node as the member does. Returns the differences."""
    from kazoo.client import KazooClient
    client.create("/back", b"written on zabkeeper, after the import")
    client.sync("/")
    saved = os.path.join(work, "saved.snap")
    admin = f"127.0.0.1:{ours.ports[1]['admin']}"
    # The newest state as a snapshot, then that snapshot saved to a file.
    for step in (["take"], ["save", saved]):
        run = subprocess.run([zkctl, "--admin", admin, "admin", "snapshot", *step],
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            zk.fail(f"zkctl admin snapshot {step[0]} failed ({run.returncode}): {run.stderr}{run.stdout}")
    back = zk.ApacheZooKeeper(classpath)
    version_2 = os.path.join(back.dir, "data", "version-2")
    os.makedirs(version_2)
    run = subprocess.run([zkctl, "--json", "export", "--snapshot", saved, "--zookeeper-snapshot", version_2],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        zk.fail(f"zkctl export failed ({run.returncode}): {run.stderr}{run.stdout}")
    report = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"exported: {report}")
    theirs = None
    try:
        back.start()
        theirs = KazooClient(hosts=f"127.0.0.1:{back.port}", auth_data=[("digest", ":".join(DIGEST_USER))],
                             timeout=15)
        theirs.start(timeout=30)
        zb_tree, zk_tree = walk(client), walk(theirs)
        # Ephemerals of sessions still open on zabkeeper live on ZooKeeper until
        # their timeout: compared like every other node while both have them.
        problems = compare(zk_tree, zb_tree, skip=["/short"])
        print(f"way back: compared {len(zb_tree)} nodes on zabkeeper with {len(zk_tree)} on ZooKeeper "
              f"started from the export")
        if "/back" not in zk_tree:
            problems.append("the write made on zabkeeper after the import is not in the export")
        n1, n2 = theirs.create("/seq/job-", b"", sequence=True), client.create("/seq/job-", b"", sequence=True)
        if n1 != n2:
            problems.append(f"after the export, next sequential name differs: ZooKeeper {n1}, zabkeeper {n2}")
        return [f"way back: {p}" for p in problems]
    finally:
        if theirs is not None:
            theirs.stop()
        zk.stop_pid(back.proc)
        shutil.rmtree(back.dir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=zk.default_binary())
    parser.add_argument("--zkctl", default=None, help="zkctl binary (default: beside --binary)")
    parser.add_argument("--require-zookeeper", action="store_true")
    args = parser.parse_args()
    zkctl = args.zkctl or os.path.join(os.path.dirname(args.binary), "zkctl")
    classpath = zk.zookeeper_or_skip("zk_import", args.require_zookeeper)
    if classpath is None or not kazoo_or_skip(args.require_zookeeper):
        return 0
    from kazoo.client import KazooClient
    from kazoo.security import ACL, Id, make_digest_acl
    print(f"zk_import: Apache ZooKeeper {zk.zookeeper_version(classpath)} -> zkctl import -> zabkeeper ({args.binary})")

    digest_acl = make_digest_acl(*DIGEST_USER, all=True)
    ip_acl = ACL(31, Id("ip", "127.0.0.1"))
    apache = zk.ApacheZooKeeper(classpath)
    with open(os.path.join(apache.dir, "zoo.cfg"), "a") as f:
        f.write(f"snapCount={SNAP_COUNT}\n")
    zk_data = os.path.join(apache.dir, "data")
    ours = zk.Ensemble(args.binary, size=1)
    loaded = zk.Ensemble(args.binary, size=3)
    work = tempfile.mkdtemp(prefix="zk-import-")
    raw = short = None
    problems = []
    try:
        apache.start()
        hosts = f"127.0.0.1:{apache.port}"
        raw, short = build(hosts, apache.port, digest_acl, ip_acl)
        last_zk = finish_after_snapshot(hosts, zk_data)
        snap = newest_snapshot_zxid(zk_data)
        # Sessions stay open: their sockets just go away with the server.
        zk.stop_pid(apache.proc)
        raw_id, raw_pw = raw.session_id, raw.passwd
        raw.shutdown()
        short.shutdown()
        # In zxid order (the names are hex: "log.f" comes before "log.de").
        logs = sorted((n for n in os.listdir(os.path.join(zk_data, "version-2")) if n.startswith("log.")),
                      key=lambda n: int(n[4:], 16))
        print(f"ZooKeeper stopped: last zxid {last_zk:#x}, newest snapshot {snap:#x}, logs {logs}")
        if not 0 <= snap < last_zk:
            zk.fail(f"the import should need log entries after the snapshot ({snap:#x} vs {last_zk:#x})")

        # A copy, so ZooKeeper's restart below cannot change what was imported.
        copy = os.path.join(work, "zk")
        shutil.copytree(zk_data, copy)
        member_dir = os.path.join(ours.dir, "zk1")
        run = subprocess.run([zkctl, "--json", "import", "--zookeeper-data", copy, "--data-dir", member_dir],
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            zk.fail(f"zkctl import failed ({run.returncode}): {run.stderr}{run.stdout}")
        report = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"imported: {report}")
        # The last write's client closed its session after it: one more transaction.
        if int(report["last_zxid"], 16) < last_zk or report["replayed"] == 0:
            zk.fail(f"import ended at {report['last_zxid']}, ZooKeeper wrote {last_zk:#x}")
        last_zk = int(report["last_zxid"], 16)
        # Damage is refused, naming the file and offset.
        damaged = os.path.join(work, "damaged")
        shutil.copytree(copy, damaged)
        log_path = os.path.join(damaged, "version-2", logs[-1])
        with open(log_path, "r+b") as f:
            f.seek(40)
            b = f.read(1)
            f.seek(40)
            f.write(bytes([b[0] ^ 0xFF]))
        run = subprocess.run([zkctl, "import", "--zookeeper-data", damaged, "--data-dir", os.path.join(work, "m2")],
                             capture_output=True, text=True, timeout=120)
        if run.returncode == 0 or logs[-1] not in run.stderr or "offset 16" not in run.stderr:
            zk.fail(f"a damaged log was not refused with its file and offset: {run.returncode} {run.stderr}")
        print(f"damaged log refused: {run.stderr.strip()}")

        apache.start()
        ours.start(timeout=60)
        a = KazooClient(hosts=hosts, auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
        b = KazooClient(hosts=ours.hosts(), auth_data=[("digest", ":".join(DIGEST_USER))], timeout=15)
        a.start(timeout=30)
        b.start(timeout=30)
        # The long session resumes on zabkeeper with the password ZooKeeper gave it.
        resumed = JuteConnection("127.0.0.1", ours.client_port(1), timeout_ms=60000,
                                 session_id=raw_id, passwd=raw_pw, last_zxid=last_zk)
        if resumed.session_id != raw_id:
            problems.append(f"session {raw_id:#x} did not resume on zabkeeper ({resumed.session_id:#x})")
        resumed.shutdown()
        zk_tree, zb_tree = walk(a), walk(b)
        # /short's ephemeral expires meanwhile, at a different moment on each.
        problems += compare(zk_tree, zb_tree, skip=["/short"])
        print(f"compared {len(zk_tree)} nodes on ZooKeeper with {len(zb_tree)} on zabkeeper")
        for p in ("/eph", "/container", "/ttl", "/null", "/big"):
            if p not in zb_tree:
                problems.append(f"{p} missing on zabkeeper")
        l_client, found = load_running(zkctl, loaded, copy, zk_tree)
        problems += found
        problems += restore_snapshot(args.binary, copy, a)
        if zb_tree.get("/null", (b"",))[0] is not None:
            problems.append("/null's data is not null on zabkeeper")

        deadline = time.monotonic() + 30
        while a.exists("/short/eph") or b.exists("/short/eph"):
            if time.monotonic() > deadline:
                problems.append("the short session's ephemeral did not expire on both within 30 s")
                break
            time.sleep(0.2)
        s1, s2 = a.exists("/short"), b.exists("/short")
        if (s1.cversion, s1.numChildren) != (s2.cversion, s2.numChildren):
            problems.append(f"/short after expiry: {s1} vs {s2}")

        n1 = a.create("/seq/job-", b"", sequence=True)
        n2 = b.create("/seq/job-", b"", sequence=True)
        n3 = l_client.create("/seq/job-", b"", sequence=True)
        print(f"next sequential: ZooKeeper {n1}, zabkeeper {n2}, loaded ensemble {n3}")
        if not n1 == n2 == n3:
            problems.append(f"next sequential name differs: {n1} vs {n2} vs loaded {n3}")
        for name, czxid in (("zabkeeper", b.exists(n2).czxid), ("loaded", l_client.exists(n3).czxid)):
            if czxid <= last_zk:
                problems.append(f"{name}: new zxid {czxid:#x} is not above ZooKeeper's last {last_zk:#x}")
        l_client.stop()
        a.stop()
        problems += the_way_back(zkctl, classpath, ours, b, work)
        b.stop()
    finally:
        for conn in (raw, short):
            if conn is not None:
                conn.shutdown()
        zk.stop_pid(apache.proc)
        panics = ours.stop() + [f"(loaded ensemble) {line}" for line in loaded.stop()]
        shutil.rmtree(apache.dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    problems += [f"zabkeeper panicked: {line}" for line in panics]
    for p in problems:
        print(f"DIFFERENCE: {p}")
    if problems:
        print(f"zk_import: {len(problems)} difference(s)")
        return 1
    print("zk_import: every node identical through both servers; sessions, sequence and zxid continue; "
          "exported back, ZooKeeper serves the same tree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
