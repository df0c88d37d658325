#!/usr/bin/env python3
"""Throughput and latency of zabkeeper and Apache ZooKeeper, side by side,
as users deploy them: a 3-member ensemble of each.

Starts a 3-member zabkeeper ensemble (release build) and a 3-member Apache
ZooKeeper (Debian's `zookeeper` package, each member its own JVM, fsync on),
both on loopback with data under temporary directories, and runs the same
load against each with `zk_load` (a Rust load generator speaking ZooKeeper's
protocol through the `zookeeper-client` crate), its sessions spread over the
members round robin. Three load shapes: 32 sessions with one request in
flight each, the same sessions with 8 in flight (pipelined), and a single
session with one in flight (latency); each runs create, getData, setData,
mixed (90% getData, 10% setData) and delete phases. ZooKeeper gets an untimed warm-up first
so its JIT is measured at its best; then the ensembles take turns for
`--rounds` rounds so a noisy machine disturbs both alike, and the table gives
each one's median per phase and the ratio zabkeeper / ZooKeeper. Both are
stopped by PID. Without the package it says the comparison is skipped and
measures zabkeeper alone. BENCH_QUICK=1 runs a short version.

Usage: make bench-vs-zookeeper [BENCH_QUICK=1] (or python3
integration-tests/zk_bench.py --binary target/release/zabkeeper --load
target/release/examples/zk_load).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

import zk_support as zk

PHASES = ["create", "get", "set", "mixed", "delete"]


def run_load(load, hosts, root, args, sessions, inflight):
    cmd = [load, "--hosts", hosts, "--root", root, "--ops", str(args.ops), "--sessions", str(sessions),
           "--inflight", str(inflight), "--size", str(args.size)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"zk_load against {hosts} failed: {out.stderr.strip()}")
    return {doc["phase"]: doc for doc in (json.loads(line) for line in out.stdout.splitlines() if line.strip())}


def main():
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True, help="the zabkeeper server binary (release build)")
    parser.add_argument("--load", required=True, help="the zk_load example binary")
    parser.add_argument("--members", type=int, default=3, help="members of each ensemble (1: standalone)")
    parser.add_argument("--rounds", type=int, default=1 if quick else 3)
    parser.add_argument("--ops", type=int, default=3000 if quick else 20000, help="operations per phase")
    parser.add_argument("--warmup-ops", type=int, default=10000 if quick else 40000,
                        help="untimed operations per phase against ZooKeeper first (its JIT)")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    # (label prefix, sessions, requests in flight per session, operations per phase)
    shapes = [("", args.sessions, 1, args.ops), ("piped-", args.sessions, 8, args.ops),
              ("single-", 1, 1, max(args.ops // 10, 500))]

    classpath, why = zk.find_zookeeper_classpath()
    servers = {}
    ours = zk.Ensemble(args.binary, size=args.members)
    apache = None
    try:
        ours.start()
        servers["zabkeeper"] = ours.hosts()
        if classpath is None:
            print(f"comparison with Apache ZooKeeper SKIPPED: {why} (apt-get install -y zookeeper)")
        else:
            if args.members == 1:
                apache = zk.ApacheZooKeeper(classpath).start()
                servers["zookeeper"] = f"127.0.0.1:{apache.port}"
            else:
                apache = zk.ApacheEnsemble(classpath, size=args.members).start()
                servers["zookeeper"] = apache.hosts()
            print(f"Apache ZooKeeper {zk.zookeeper_version(classpath)} (Debian package) vs zabkeeper "
                  f"({args.binary}), {args.members} members each")
            # Untimed: the JIT compiles ZooKeeper's hot paths.
            warm = argparse.Namespace(**{**vars(args), "ops": args.warmup_ops})
            for inflight in (1, 8):
                run_load(args.load, servers["zookeeper"], f"/warmup-{inflight}", warm, args.sessions, inflight)
        print(f"load: {args.ops} ops per phase, {args.sessions} sessions spread over the members, "
              f"1 and 8 (piped-) in flight each, then one session with one in flight (single-); "
              f"{args.size}-byte data, {args.rounds} rounds taking turns")
        results = {}
        for r in range(args.rounds):
            for prefix, sessions, inflight, ops in shapes:
                shape = argparse.Namespace(**{**vars(args), "ops": ops})
                for name, hosts in servers.items():
                    docs = run_load(args.load, hosts, f"/bench-{r}-{prefix}", shape, sessions, inflight)
                    for phase, doc in docs.items():
                        results.setdefault(prefix + phase, {}).setdefault(name, []).append(doc)
    finally:
        if apache is not None:
            apache.stop()
        panics = ours.stop()
    if panics:
        print("zabkeeper panicked:\n" + "\n".join(panics))
        return 1

    def median(phase, name, key):
        return statistics.median(d[key] for d in results[phase][name])

    header = f"{'phase':<14} {'server':<10} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
    print(header)
    print("-" * len(header))
    for prefix, *_ in shapes:
        for base in PHASES:
            phase = prefix + base
            for name in servers:
                print(f"{phase:<14} {name:<10} {median(phase, name, 'ops_per_sec'):>9.0f} "
                      f"{median(phase, name, 'p50_ms'):>8.2f} {median(phase, name, 'p99_ms'):>8.2f}")
            if "zookeeper" in servers:
                ratio = median(phase, "zabkeeper", "ops_per_sec") / median(phase, "zookeeper", "ops_per_sec")
                print(f"{phase:<14} {'ratio':<10} {ratio:>8.2f}x (zabkeeper / ZooKeeper throughput)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
