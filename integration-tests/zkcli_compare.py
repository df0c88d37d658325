#!/usr/bin/env python3
"""Debian's zkCli.sh, scripted, against Apache ZooKeeper and against a
3-member zabkeeper ensemble: the same session of commands on each, outputs
compared line by line with what differs by nature masked (timestamps,
zxids, session ids, the connect string).

The session covers create (-e, -s, -c, -t), get -s, set -v, stat, ls -R,
delete, deleteall, getAcl/setAcl, addauth digest, sync, addWatch -m
PERSISTENT_RECURSIVE, getEphemerals and whoami, with their error messages.
Watch events arrive on zkCli's event thread, so they are compared as a list
apart from the command output.

Then zkCli's `config` and `reconfig -remove/-add/-members` against an
ensemble with reconfig_enabled (ZooKeeper standalone has no reconfig to
compare with): refused without the super user, a member removed and added
back with its line as `config` printed it, a member list without a reachable
quorum refused.

Usage: zkcli_compare.py [--binary target/debug/zabkeeper] [--require-zookeeper]
Without Debian's zookeeper package the check prints why it is skipped and
exits 0, unless --require-zookeeper is given.
"""

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zk_support as zk  # noqa: E402

ZKCLI = "/usr/share/zookeeper/bin/zkCli.sh"

SCRIPT = """
create /cli hello
create /cli hello-again
get -s /cli
set -v 0 /cli world
set -v 0 /cli stale
get /cli
stat /cli
create -e /cli/eph e
create -s /cli/seq- s
create -s /cli/seq- s
create -e -s /cli/eseq- es
create -c /cli/box
create /cli/box/item i
create -t 60000 /cli/ttl t
ls /cli
ls -s /cli
ls -R /cli
getEphemerals /cli
getEphemerals
whoami
addauth digest alice:secret
whoami
create /cli/private p digest:alice:aYXlLOpEooaV1cRAvUL1fp9Qt7E=:cdrwa
getAcl /cli/private
setAcl /cli/private world:anyone:r
getAcl /cli/private
set /cli/private denied
getAcl /cli
setAcl -v 0 /cli world:anyone:cdrwa
setAcl -v 5 /cli world:anyone:cdrwa
sync /cli
addWatch -m PERSISTENT_RECURSIVE /cli
set /cli/box/item changed
create /cli/watched w
delete /cli/watched
delete /cli/missing
delete /cli
delete -v 7 /cli/box/item
deleteall /cli/box
ls /cli
stat /cli/missing
get /cli/missing
deleteall /cli
ls /
quit
"""

MASKS = [
    (re.compile(r"^(ctime|mtime) = .*$"), r"\1 = <time>"),
    (re.compile(r"^(cZxid|mZxid|pZxid) = 0x[0-9a-f]+$"), r"\1 = <zxid>"),
    (re.compile(r"^ephemeralOwner = 0x[1-9a-f][0-9a-f]*$"), "ephemeralOwner = <session>"),
]


def session_output(server):
    """Runs the script through zkCli.sh against `server`; returns (command
    lines, watch events), both normalized."""
    proc = subprocess.run([ZKCLI, "-server", server], input=SCRIPT.encode(), capture_output=True, timeout=120)
    lines, events = [], []
    for stream in (proc.stdout, proc.stderr):
        for raw in stream.decode(errors="replace").splitlines():
            line = raw.rstrip()
            if not line or line.startswith("SLF4J:") or line.startswith("Connecting to ") or line == "WATCHER::":
                continue
            if line.startswith("WatchedEvent "):
                # zkCli's own close on `quit` (no server sent it): whether its
                # event thread prints it before the JVM exits is a race a
                # loaded machine lost once in CI, against either server.
                if "state:Closed" not in line:
                    events.append(line)
                continue
            for pattern, repl in MASKS:
                line = pattern.sub(repl, line)
            lines.append(line)
    return sort_listings(lines), sort_deletions(events)


def sort_deletions(events):
    """`deleteall` deletes in the order getChildren returns (unspecified in
    ZooKeeper): each run of NodeDeleted events is compared as a set."""
    out, run = [], []
    for event in events + [None]:
        if event is not None and "type:NodeDeleted" in event:
            run.append(event)
            continue
        out.extend(sorted(run))
        run = []
        if event is not None:
            out.append(event)
    return out


def sort_listings(lines):
    """`ls -R` prints a tree in the order getChildren returns, which
    ZooKeeper leaves unspecified: each run of paths is compared as a set."""
    out, run = [], []
    for line in lines + [""]:
        if line.startswith("/") and " " not in line:
            run.append(line)
            continue
        out.extend(sorted(run))
        run = []
        if line:
            out.append(line)
    return out


SUPER_PASSWORD = "zkcli-secret"


def reconfig_session(binary):
    """zkCli.sh's config and reconfig against a 3-member ensemble that
    serves reconfig; returns the number of failures."""
    import base64
    import hashlib
    digest = base64.b64encode(hashlib.sha1(f"super:{SUPER_PASSWORD}".encode()).digest()).decode()
    ours = zk.Ensemble(binary, size=3, extra=f'reconfig_enabled = true\nsuper_digest = "super:{digest}"')
    failures = []
    try:
        ours.start()
        server = f"127.0.0.1:{ours.client_port(1)}"

        def run(script):
            proc = subprocess.run([ZKCLI, "-server", server], input=script.encode(), capture_output=True, timeout=120)
            return proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")

        out = run("config\nreconfig -remove 3\nquit\n")
        line3 = next((l.strip() for l in out.splitlines() if l.startswith("server.3=")), None)
        if line3 is None:
            failures.append(f"`config` does not list member 3:\n{out}")
        if "Insufficient permission" not in out and "NoAuth" not in out:
            failures.append(f"reconfig without the super user was not refused:\n{out}")
        out = run(f"addauth digest super:{SUPER_PASSWORD}\nreconfig -remove 3\nconfig\nquit\n")
        after = [l for l in out.splitlines() if l.startswith("server.")]
        if "Committed new configuration" not in out or any(l.startswith("server.3=") for l in after):
            failures.append(f"`reconfig -remove 3` did not remove member 3:\n{out}")
        out = run(f"addauth digest super:{SUPER_PASSWORD}\nreconfig -add {line3}\nconfig\nquit\n")
        if "Committed new configuration" not in out or line3 not in out:
            failures.append(f"`reconfig -add` with the line `config` printed did not add member 3:\n{out}")
        members = "server.1=127.0.0.1:1:1:participant;1,server.8=127.0.0.1:2:2:participant;2"
        out = run(f"addauth digest super:{SUPER_PASSWORD}\nreconfig -members {members}\nquit\n")
        if "NewConfigNoQuorum" not in out and "No quorum of new config" not in out:
            failures.append(f"`reconfig -members` toward members that do not run was not refused:\n{out}")
    finally:
        failures += [f"zabkeeper panicked: {line}" for line in ours.stop()]
    for f in failures:
        print(f"reconfig: {f}")
    print(f"zkCli.sh reconfig: {len(failures)} failures")
    return len(failures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=zk.default_binary())
    parser.add_argument("--require-zookeeper", action="store_true",
                        help="fail instead of skipping when Apache ZooKeeper is not installed")
    args = parser.parse_args()

    classpath = zk.zookeeper_or_skip("zkCli comparison", args.require_zookeeper, also=[ZKCLI])
    if classpath is None:
        return 0

    apache = zk.ApacheZooKeeper(classpath)
    ours = zk.Ensemble(args.binary, size=3)
    try:
        apache.start()
        ours.start()
        theirs_lines, theirs_events = session_output(f"127.0.0.1:{apache.port}")
        servers = ",".join(f"127.0.0.1:{ours.client_port(i)}" for i in range(1, 4))
        our_lines, our_events = session_output(servers)
    finally:
        apache.stop()
        panics = ours.stop()

    failures = 0
    width = max(len(theirs_lines), len(our_lines))
    for i in range(width):
        a = theirs_lines[i] if i < len(theirs_lines) else "<nothing>"
        b = our_lines[i] if i < len(our_lines) else "<nothing>"
        if a != b:
            print(f"line {i + 1}: ZooKeeper {a!r}\n{'':>{len(str(i + 1)) + 6}}zabkeeper {b!r}")
            failures += 1
    if theirs_events != our_events:
        print(f"watch events differ:\n  ZooKeeper {theirs_events}\n  zabkeeper {our_events}")
        failures += 1
    for line in panics:
        print(f"zabkeeper panicked: {line}")
        failures += 1
    print(f"zkCli.sh: {len(theirs_lines)} output lines and {len(theirs_events)} watch events from ZooKeeper, "
          f"{len(our_lines)} and {len(our_events)} from zabkeeper; {failures} differences")
    failures += reconfig_session(args.binary)
    if failures:
        zk.fail("zkCli.sh behaves differently on zabkeeper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
