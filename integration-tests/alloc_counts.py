#!/usr/bin/env python3
"""Heap allocations per operation of a 3-member ensemble, counted exactly.

Each of jemalloc's allocating entry points in the server binary gets a
uprobe (`perf probe -x`); `perf stat` counts the hits in the three members
over one load phase, and the script prints them per operation, summed over
the members. A uprobe traps on every call, so the members run several times
slower while counted: the counts are the figure here, not the throughput.
With one request in flight (1 x 1) nothing is batched, so a write's count
does not depend on that speed; with many in flight the per-flush and
per-turn allocations spread over the writes the slowed members batch.

Runs as root (uprobes), needs perf; the probes are removed at the end.

    python3 integration-tests/alloc_counts.py --binary target/release/zabkeeper \\
        --load target/release/zk_load [--ops 2000]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import work_counts as counts  # noqa: E402
import zk_bench as bench  # noqa: E402
import zk_support as zk  # noqa: E402

# jemalloc's allocating calls as the server links them (tikv-jemallocator's prefix).
ENTRIES = ["malloc", "mallocx", "calloc", "realloc", "rallocx"]
GROUP = "zabkeeper_allocs"
# (phase, sessions, requests in flight each, extra member settings)
SHAPES = [
    ("set", 1, 1, ""),
    ("create", 1, 1, ""),
    ("delete", 1, 1, ""),
    ("set", 32, 8, ""),
    ("get", 32, 1, ""),
    ("get", 32, 1, "linearizable_reads = true"),
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def add_probes(binary):
    run(["perf", "probe", "-d", f"{GROUP}:*"])
    for entry in ENTRIES:
        out = run(["perf", "probe", "-x", binary, "-a", f"{GROUP}:allocs_{entry}=_rjem_{entry}"])
        if out.returncode != 0:
            raise RuntimeError(f"perf probe _rjem_{entry}: {out.stderr.strip()}")


class AllocWindow:
    """The probes' hits in `pids` over exactly one phase (perf's counters
    turned on as zk_load is let go, off as its result line arrives)."""

    def __init__(self, pids):
        self.window = counts.PerfWindow(pids, events=[f"{GROUP}:allocs_{e}" for e in ENTRIES])

    def start(self):
        self.window.start()

    def stop(self):
        try:
            self.window.disable()
            return sum(self.window.collect().values())
        finally:
            self.window.close()

    def abort(self):
        self.window.close()


def count(binary, load, phase, sessions, inflight, extra, ops):
    ens = zk.Ensemble(binary, size=3, extra=extra)
    try:
        ens.start()
        base = [load, "--hosts", ens.hosts(), "--root", "/allocs", "--sessions", str(sessions),
                "--inflight", str(inflight), "--ops", str(ops), "--keep"]
        # The nodes a phase reads, overwrites or deletes.
        run(base + ["--phases", "create"], check=True, timeout=300)
        if phase == "create":
            run(base + ["--phases", "delete", "--existing-root"], check=True, timeout=300)
        pids = list(ens.pids().values())
        cmd = base + ["--phases", phase, "--existing-root", "--step"]
        docs = bench.run_stepped(cmd, ens.hosts(), lambda _: AllocWindow(pids), timeout=600)
        return docs[phase]["work"] / ops
    finally:
        ens.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--load", required=True)
    ap.add_argument("--ops", type=int, default=2000)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is needed (make bench-vs-zookeeper installs it)")
    # A probe is set on a path: a copy of the binary, so a rebuild meanwhile changes nothing.
    binary = tempfile.NamedTemporaryFile(prefix="zabkeeper-allocs-", delete=False).name
    shutil.copy(args.binary, binary)
    try:
        add_probes(binary)
        print("allocations per operation, summed over the three members")
        for phase, sessions, inflight, extra in SHAPES:
            per_op = count(binary, args.load, phase, sessions, inflight, extra, args.ops)
            label = f"{phase} {sessions} x {inflight}" + (" (linearizable)" if extra else "")
            print(f"  {label:<28} {per_op:8.1f}", flush=True)
    finally:
        run(["perf", "probe", "-d", f"{GROUP}:*"])
        os.unlink(binary)


if __name__ == "__main__":
    main()
