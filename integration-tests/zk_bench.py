#!/usr/bin/env python3
"""Throughput and latency of zabkeeper and Apache ZooKeeper, side by side.

Starts a standalone Apache ZooKeeper (Debian's `zookeeper` package) and a
one-member zabkeeper (release build), both fsync'ing to a temporary directory
on loopback, and runs the same load against each with `zk_load` (a Rust load
generator speaking ZooKeeper's protocol through the `zookeeper-client`
crate): create, getData, setData and delete phases with several sessions and
many requests in flight. The servers take turns for `--rounds` rounds so a
noisy machine disturbs both alike; the table gives each one's median per
phase and the ratio zabkeeper / ZooKeeper. Without the package it says the
comparison is skipped and measures zabkeeper alone.

Usage: make bench-vs-zookeeper (or python3 integration-tests/zk_bench.py
--binary target/release/zabkeeper --load target/release/examples/zk_load).
"""

import argparse
import json
import statistics
import subprocess
import sys

import zk_support as zk

PHASES = ["create", "get", "set", "delete"]


def run_load(load, hosts, root, args):
    cmd = [load, "--hosts", hosts, "--root", root, "--ops", str(args.ops), "--sessions", str(args.sessions),
           "--inflight", str(args.inflight), "--size", str(args.size)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"zk_load against {hosts} failed: {out.stderr.strip()}")
    return {doc["phase"]: doc for doc in (json.loads(line) for line in out.stdout.splitlines() if line.strip())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True, help="the zabkeeper server binary (release build)")
    parser.add_argument("--load", required=True, help="the zk_load example binary")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ops", type=int, default=10000)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--inflight", type=int, default=32)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()

    classpath, why = zk.find_zookeeper_classpath()
    servers = {}
    ours = zk.Ensemble(args.binary, size=1)
    apache = None
    try:
        ours.start()
        servers["zabkeeper"] = ours.hosts()
        if classpath is None:
            print(f"comparison with Apache ZooKeeper SKIPPED: {why} (apt-get install -y zookeeper)")
        else:
            apache = zk.ApacheZooKeeper(classpath).start()
            servers["zookeeper"] = f"127.0.0.1:{apache.port}"
            print(f"Apache ZooKeeper {zk.zookeeper_version(classpath)} (Debian package, standalone) "
                  f"vs zabkeeper (one member, {args.binary})")
        print(f"load: {args.ops} ops per phase, {args.sessions} sessions x {args.inflight} in flight, "
              f"{args.size}-byte data, {args.rounds} rounds taking turns")
        results = {name: {p: [] for p in PHASES} for name in servers}
        for r in range(args.rounds):
            for name, hosts in servers.items():
                for phase, doc in run_load(args.load, hosts, f"/bench-{r}", args).items():
                    results[name][phase].append(doc)
    finally:
        if apache is not None:
            apache.stop()
        panics = ours.stop()
    if panics:
        print("zabkeeper panicked:\n" + "\n".join(panics))
        return 1

    def median(name, phase, key):
        return statistics.median(d[key] for d in results[name][phase])

    header = f"{'phase':<8} {'server':<10} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
    print(header)
    print("-" * len(header))
    for phase in PHASES:
        for name in servers:
            print(f"{phase:<8} {name:<10} {median(name, phase, 'ops_per_sec'):>9.0f} "
                  f"{median(name, phase, 'p50_ms'):>8.2f} {median(name, phase, 'p99_ms'):>8.2f}")
        if "zookeeper" in servers:
            ratio = median("zabkeeper", phase, "ops_per_sec") / median("zookeeper", phase, "ops_per_sec")
            print(f"{phase:<8} {'ratio':<10} {ratio:>8.2f}x (zabkeeper / ZooKeeper throughput)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
