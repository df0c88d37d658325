#!/usr/bin/env python3
"""ZooKeeper's AdminServer commands, field by field: a 3-member zabkeeper
ensemble and a 3-member Apache ZooKeeper (Debian's `zookeeper` package, its
AdminServer on loopback) get the same sessions, znodes, watches and
ephemerals, then every command both serve is asked of each one's leader and
of a follower, and the JSON is compared by shape: the same field names with
the same JSON types, nested objects and list items alike (maps keyed by
session, path, member or time are compared by their values' shape).

A field only one side has fails the check unless it is listed below with
why. Then zabkeeper's own endpoints are checked: `/commands` (the same
primary names as ZooKeeper's page, bar what is listed), an unknown command,
`/livez` and `/readyz` (503 once the member has no quorum), and `snapshot`
and `restore` behind the admin token (restore refused: no snapshot, or a tree
with nodes).

Usage: admin_http_compare.py [--binary target/debug/zabkeeper] [--require-zookeeper]
Without Debian's zookeeper package the comparison with ZooKeeper is skipped,
saying why (zabkeeper's own checks still run), unless --require-zookeeper.
Loopback only; every process is stopped by PID; every wait is bounded.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zk_support as zk  # noqa: E402
from zk_support import OPEN_ACL_UNSAFE, JuteConnection, create_body, path_watch_body  # noqa: E402

TOKEN = "adm1n-t0ken"

# The commands both serve, by ZooKeeper's primary name.
COMMANDS = ["ruok", "srvr", "stat", "mntr", "conf", "cons", "wchs", "wchc", "wchp", "dump", "envi",
            "isro", "lead", "voting_view", "zabstate", "lsnp", "hash", "obsr", "dirs",
            "gtmk", "stmk?traceMask=306", "crst", "srst"]

# Maps whose keys are data (session ids, paths, member ids, expiry times):
# their values are compared by shape, not their keys.
DATA_KEYED = {"expiry_time_to_session_ids", "session_id_to_ephemeral_paths", "session_id_to_watched_paths",
              "path_to_session_ids", "current_config"}

NOT_KEPT = "not counted by zabkeeper (no such figure is kept, so none is invented)"
# (command, dotted field) -> why ZooKeeper has it and zabkeeper does not.
MISSING = {
    ("srvr", "server_stats.fsync_threshold_exceed_count"): NOT_KEPT,
    ("srvr", "server_stats.auth_failed_count"): NOT_KEPT,
    ("srvr", "server_stats.non_mtlsremote_conn_count"): NOT_KEPT,
    ("srvr", "server_stats.non_mtlslocal_conn_count"): NOT_KEPT,
    ("envi", "java.*"): "no JVM: zabkeeper is a native process",
    ("envi", "os.memory.*"): "JVM heap figures: no JVM",
}
for field in ("server_stats.fsync_threshold_exceed_count", "server_stats.auth_failed_count",
              "server_stats.non_mtlsremote_conn_count", "server_stats.non_mtlslocal_conn_count"):
    MISSING[("stat", field)] = MISSING[("srvr", field)]
# mntr: ZooKeeper's metrics provider adds hundreds of Java pipeline timers
# (avg_/min_/max_/p99_...); these are what a zabkeeper mntr must have.
MNTR_REQUIRED = {"version", "server_state", "peer_state", "avg_latency", "max_latency", "min_latency",
                 "packets_received", "packets_sent", "num_alive_connections", "outstanding_requests",
                 "znode_count", "watch_count", "ephemerals_count", "approximate_data_size",
                 "global_sessions", "local_sessions", "uptime", "quorum_size",
                 "open_file_descriptor_count", "max_file_descriptor_count"}
MNTR_LEADER_REQUIRED = {"learners", "synced_followers", "synced_non_voting_followers", "synced_observers",
                        "pending_syncs"}
# (command, dotted field) -> why zabkeeper has it and ZooKeeper 3.8 does not.
EXTRA = {
    ("envi", "process.id"): "the server's pid, which zabkeeper's envi has always given",
    ("mntr", "disk_*"): "the data directory's bytes by what they hold (log, snapshots, sled's own, other)",
}
# Primary names ZooKeeper 3.8 lists that zabkeeper does not serve, and ours it lacks.
NOT_SERVED = {"initial_configuration", "observer_connection_stat_reset", "system_properties"}
OURS_ONLY = {"snapshot", "restore"}  # ZooKeeper 3.9's, not in 3.8.0


def http(port, path, method="GET", headers=None, timeout=10.0, data=b""):
    """(status, headers, body bytes) of one request to 127.0.0.1:port."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=headers or {},
                                 data=data if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def command(port, name):
    status, _, body = http(port, f"/commands/{name}")
    if status != 200:
        zk.fail(f"/commands/{name} on port {port}: HTTP {status}: {body[:300]!r}")
    return json.loads(body)


def kind(v):
    if v is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "object"}[type(v)]


def shape(v, prefix="", out=None):
    """{dotted field: (JSON type, every value there is an empty list or map)};
    list items are merged under `field[]`, data-keyed maps' entries under `field.*`."""
    out = {} if out is None else out

    def note(name, item):
        t, empty = out.get(name, (kind(item), True))
        out[name] = (t, empty and item in ([], {}))
        shape(item, name, out)

    if isinstance(v, dict):
        for k, item in v.items():
            if prefix.rsplit(".", 1)[-1] in DATA_KEYED:
                k = "*"
            note(f"{prefix}.{k}" if prefix else k, item)
    elif isinstance(v, list):
        for item in v:
            note(f"{prefix}[]", item)
    return out


def parent(f):
    """The field holding `f`: `a.b` -> `a`, `a[]` -> `a`, `a[].b` -> `a[]`; None at the top."""
    if f.endswith("[]"):
        return f[:-2]
    return f.rsplit(".", 1)[0] if "." in f else None


def listed(table, cmd, field):
    for (c, f), why in table.items():
        if c == cmd and (f == field or (f.endswith("*") and field.startswith(f[:-1]))
                         or field.startswith(f + ".") or field.startswith(f + "[]")):
            return why
    return None


def compare(cmd, ours, theirs, where, problems, notes):
    a, b = shape(ours), shape(theirs)
    if cmd == "mntr":
        required = MNTR_REQUIRED | (MNTR_LEADER_REQUIRED if "learners" in b else set())
        for f in sorted(required - set(a)):
            problems.append(f"{where} mntr: no {f} (ZooKeeper has it)")
        b = {f: t for f, t in b.items() if f in a}

    def nothing_to_compare(other, f):
        # Inside a list or map the other side has empty (no sessions there, say).
        p = parent(f)
        while p is not None and p not in other:
            p = parent(p)
        return p is not None and other[p][1]

    for f in sorted(set(a) | set(b)):
        if f in a and f in b:
            # null is ZooKeeper's "none"; an empty container says nothing of its items' type.
            if a[f][0] != b[f][0] and "null" not in (a[f][0], b[f][0]):
                problems.append(f"{where} {cmd}.{f}: zabkeeper gives {a[f][0]}, ZooKeeper {b[f][0]}")
        elif f in b:
            why = listed(MISSING, cmd, f)
            if why:
                notes.add(f"{cmd}.{f}: not given ({why})")
            elif not nothing_to_compare(a, f):
                problems.append(f"{where} {cmd}: no field {f} (ZooKeeper has it: {b[f][0]})")
        else:
            why = listed(EXTRA, cmd, f)
            if why:
                notes.add(f"{cmd}.{f}: zabkeeper only ({why})")
            elif not nothing_to_compare(b, f):
                problems.append(f"{where} {cmd}: field {f} ZooKeeper does not have ({a[f][0]})")


def workload(port, tag):
    """Two sessions on a member: znodes, an ephemeral, data and child watches."""
    a = JuteConnection("127.0.0.1", port, timeout_ms=20000)
    b = JuteConnection("127.0.0.1", port, timeout_ms=20000)
    for path in (f"/{tag}", f"/{tag}/x"):
        err, _, _ = a.call("create", create_body(path, b"v", OPEN_ACL_UNSAFE, 0))
        if err not in ("OK", "NODEEXISTS"):
            zk.fail(f"create {path}: {err}")
    err, _, _ = b.call("create", create_body(f"/{tag}/eph", b"", OPEN_ACL_UNSAFE, 1))
    if err != "OK":
        zk.fail(f"create ephemeral: {err}")
    a.call("getData", path_watch_body(f"/{tag}/x", True))
    b.call("getData", path_watch_body(f"/{tag}/x", True))
    b.call("getChildren", path_watch_body(f"/{tag}", True))
    return [a, b]


def wait_for(what, check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            zk.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def roles(modes):
    leader = next(i for i, m in modes.items() if m == "leader")
    follower = next(i for i, m in modes.items() if m == "follower")
    return leader, follower


def compare_with_zookeeper(ours, ours_http, classpath, problems, notes):
    classpath, why = zk.admin_server_classpath(classpath)
    if classpath is None:
        return why
    apache = zk.ApacheEnsemble(classpath, size=3, admin_server=True, heap="256m")
    sessions = []
    try:
        apache.start()
        modes = {i: apache.mode(i) for i in apache.ports}
        z_leader, z_follower = roles(modes)
        o_leader, o_follower = roles({i: ours.mode(i) for i in ours.ports})
        sessions += workload(apache.client_port(z_follower), "cmp") + workload(ours.client_port(o_follower), "cmp")
        wait_for("ZooKeeper's AdminServer", lambda: command(apache.admin_port(z_leader), "ruok")["error"] is None)
        # ZooKeeper's list of commands against ours.
        _, _, page = http(apache.admin_port(z_leader), "/commands")
        theirs = {line.split('">', 1)[1].split("<", 1)[0] for line in page.decode().splitlines() if "href" in line}
        _, _, body = http(ours_http[o_leader], "/commands")
        mine = {c["name"] for c in json.loads(body)["commands"]}
        if mine - theirs - OURS_ONLY or theirs - mine - NOT_SERVED:
            problems.append(f"/commands: zabkeeper only {sorted(mine - theirs)}, ZooKeeper only {sorted(theirs - mine)}")
        notes.add(f"/commands: not served {sorted(NOT_SERVED)}; zabkeeper adds ZooKeeper 3.9's {sorted(OURS_ONLY)}")
        for role, z, o in (("leader", z_leader, o_leader), ("follower", z_follower, o_follower)):
            for cmd in COMMANDS:
                theirs_json = command(apache.admin_port(z), cmd)
                ours_json = command(ours_http[o], cmd)
                if ours_json.get("command") != theirs_json.get("command"):
                    problems.append(f"{role} {cmd}: command {ours_json.get('command')!r}, ZooKeeper's "
                                    f"{theirs_json.get('command')!r}")
                if theirs_json.get("error") is not None or ours_json.get("error") is not None:
                    problems.append(f"{role} {cmd}: errors: zabkeeper {ours_json.get('error')!r}, "
                                    f"ZooKeeper {theirs_json.get('error')!r}")
                compare(cmd, ours_json, theirs_json, role, problems, notes)
        # Unknown commands and a trace mask missing or malformed: ZooKeeper's answer, word for word.
        for name in ("nosuch", "srvr2", "stmk", "set_trace_mask?traceMask=0x10", "stmk?traceMask="):
            a, b = command(ours_http[o_leader], name), command(apache.admin_port(z_leader), name)
            if a != b:
                problems.append(f"{name}: zabkeeper {a}, ZooKeeper {b}")
        print(f"compared {len(COMMANDS)} commands on a leader and a follower of each ensemble")
        return None
    finally:
        for s in sessions:
            s.shutdown()
        apache.stop()


def check_our_endpoints(ours, ours_http, problems):
    leader, follower = roles({i: ours.mode(i) for i in ours.ports})
    port = ours_http[leader]
    for path in ("/livez", "/readyz"):
        status, _, body = http(port, path)
        if status != 200:
            problems.append(f"{path} on the leader: HTTP {status} {body[:200]!r}")
    # snapshot and restore need the token.
    for headers, want in (({}, 401), ({"Authorization": "Bearer wrong"}, 401),
                          ({"Authorization": f"digest root:{TOKEN}x"}, 401)):
        status, _, body = http(port, "/commands/snapshot", headers=headers)
        if status != want or json.loads(body).get("command") != "snapshot":
            problems.append(f"snapshot with {headers}: HTTP {status} {body[:200]!r}, want {want}")
    status, headers, snapshot = http(port, "/commands/snapshot?streaming=true",
                                     headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    size = headers.get("snapshot_size")
    if status != 200 or not headers.get("last_zxid", "").startswith("0x") or str(len(snapshot)) != size or not snapshot:
        problems.append(f"snapshot streaming: HTTP {status}, headers {headers}, {len(snapshot)} bytes")
    status, headers, body = http(port, "/commands/snap?streaming=false", headers={"Authorization": f"digest root:{TOKEN}"})
    if status != 200 or json.loads(body) != {"command": "snapshot", "error": None} or "last_zxid" not in headers:
        problems.append(f"snapshot, not streamed: HTTP {status} {body[:200]!r}")
    status, _, body = http(port, "/commands/restore", method="POST")
    if status != 401:
        problems.append(f"restore without the token: HTTP {status} {body[:200]!r}")
    # restore loads into an empty tree only (integration-tests/load.rs loads
    # one): no snapshot in the body, or a tree with nodes, is refused.
    token = {"Authorization": f"Bearer {TOKEN}"}
    status, _, body = http(port, "/commands/restore", method="POST", headers=token)
    if status != 400 or "neither a snapshot" not in (json.loads(body).get("error") or ""):
        problems.append(f"restore of an empty body: HTTP {status} {body[:200]!r}")
    status, _, body = http(port, "/commands/restore", method="POST", headers=token, data=snapshot, timeout=60)
    if status != 409 or "not empty" not in (json.loads(body).get("error") or ""):
        problems.append(f"restore into a tree with nodes: HTTP {status} {body[:200]!r}")
    # A member without a quorum is live and not ready.
    for i in [i for i in ours.ports if i != follower]:
        ours.kill(i)

    def not_ready():
        status, _, body = http(ours_http[follower], "/readyz")
        return status == 503 and json.loads(body)
    reason = wait_for("/readyz 503 on a member without a quorum", not_ready)
    print(f"/readyz without a quorum: 503 {reason}")
    status, _, _ = http(ours_http[follower], "/livez")
    if status != 200:
        problems.append(f"/livez on a member without a quorum: HTTP {status}")
    srvr = command(ours_http[follower], "srvr")
    if srvr.get("error") != "This ZooKeeper instance is not currently serving requests":
        problems.append(f"srvr without a quorum: {srvr}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=zk.default_binary())
    parser.add_argument("--require-zookeeper", action="store_true",
                        help="fail instead of skipping when Apache ZooKeeper is not installed")
    args = parser.parse_args()
    classpath = zk.zookeeper_or_skip("AdminServer comparison", args.require_zookeeper)
    ours = zk.Ensemble(args.binary, size=3, extra=f'admin_token = "{TOKEN}"')
    ours_http = {i: p["metrics"] for i, p in ours.ports.items()}
    problems, notes = [], set()
    skipped = None
    try:
        ours.start()
        wait_for("every zabkeeper member ready", lambda: all(http(p, "/readyz")[0] == 200 for p in ours_http.values()))
        if classpath is not None:
            skipped = compare_with_zookeeper(ours, ours_http, classpath, problems, notes)
            if skipped and args.require_zookeeper:
                problems.append(skipped)
        check_our_endpoints(ours, ours_http, problems)
    finally:
        panics = ours.stop(keep_dir=bool(problems))
        problems += panics
    for note in sorted(notes):
        print(f"known: {note}")
    if skipped:
        print(f"AdminServer comparison SKIPPED: {skipped}")
    if problems:
        for p in problems:
            print(f"DIFF: {p}", file=sys.stderr)
        zk.fail(f"{len(problems)} difference(s) (zabkeeper's data kept in {ours.dir})")
    print("admin HTTP API: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
