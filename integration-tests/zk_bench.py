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
each one's median per phase and the ratios zabkeeper / ZooKeeper (throughput,
latency p50 and p99).

Each write phase (create, setData, delete) of each shape is also counted,
over exactly its window (zk_load's `--step` waits for the driver before
each phase): CPU time, context switches, syscalls and fsync-family calls
summed over the three members' processes and all their threads (`perf
stat`; from /proc, with less, when perf cannot count here), and the
flushes the data directories' block device completed (/proc/diskstats).
A table per shape gives them per write beside throughput and latency, with
the ratios. Each round also counts the members' work when idle, and
measures the floor of a write here, an fdatasync and two loopback round
trips (p50s), next to each system's 1 x 1 phases; the 1 x 1 p50s are
printed as multiples of it.
`--only-writes` (BENCH_ONLY_WRITES=1) runs just that; `--json`
(BENCH_JSON=path) writes every figure to a file.

Then fresh reads (`--reads`, on by default): getData as it is (local, from
the member's tree), linearizable (a second zabkeeper ensemble with
`linearizable_reads = true`, read index), and sync-then-getData, the closest
thing ZooKeeper offers, on both; 32 sessions with 1 and 8 in flight, taking
turns; the table gives the medians, latency as p50, mean and p99, with the
members' CPU time and context switches per read (/proc) and, for zabkeeper,
the linearizable reads one read-index round carried (/metrics), and the
ratios linearizable / local and linearizable / ZooKeeper's sync+getData, with
the latency gaps in ms and in the followers' rounds.

Then, at scale, each ensemble in turn: `--znodes` (BENCH_ZNODES, 1 M by
default) 100-byte znodes are created and kept; the table gives each member's
RSS growth per znode (the largest of the members) and live heap growth (for
ZooKeeper after a full GC, `jcmd GC.run` then `GC.heap_info`; for zabkeeper
what jemalloc has allocated, from /metrics), CPU time per
create summed over the members (from /proc), how long a follower killed with
-9 takes to restart and serve again holding them, and, after a kill -9 of
the leader, how long until a session's next write is acknowledged. Both are
stopped by PID. Without the package it says the comparison is skipped and
measures zabkeeper alone. BENCH_QUICK=1 runs a short version.

Usage: make bench-vs-zookeeper [BENCH_QUICK=1] (or python3
integration-tests/zk_bench.py --binary target/release/zabkeeper --load
target/release/zk_load).
"""

import argparse
import glob
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time

import zk_support as zk
import work_counts as counts

PHASES = ["create", "get", "set", "mixed", "delete"]
# The phases whose cost is counted (CPU, context switches, syscalls, flushes per write).
WRITE_PHASES = ["create", "set", "delete"]
# Seconds each ensemble is counted idle each round.
IDLE_SECS = 2.0


def run_load(load, hosts, root, args, sessions, inflight, phases=None, count=None):
    """Runs zk_load; returns {phase: its JSON line}. With `count` (phase ->
    a counts.WorkCounter, or None for a phase not counted), zk_load waits before
    each phase (`--step`) while the counter starts, and the counter stops as
    soon as the phase's line arrives: what the counter saw is the phase's
    "work"."""
    cmd = [load, "--hosts", hosts, "--root", root, "--ops", str(args.ops), "--sessions", str(sessions),
           "--inflight", str(inflight), "--size", str(args.size)]
    if phases:
        cmd += ["--phases", ",".join(phases)]
    if count is not None:
        return run_stepped(cmd + ["--step"], hosts, count, timeout=600)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"zk_load against {hosts} failed: {out.stderr.strip()}")
    return {doc["phase"]: doc for doc in (json.loads(line) for line in out.stdout.splitlines() if line.strip())}


def run_stepped(cmd, hosts, count, timeout):
    """zk_load with `--step`: each `{"ready": phase}` line starts
    count(phase)'s window, then lets the phase go; the phase's result line
    ends the window. Bounded by `timeout` seconds in all; zk_load is
    stopped by its PID if it is still running then."""
    docs, counter, buf = {}, None, b""
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"zk_load against {hosts} not done within {timeout}s")
                ready, _, _ = select.select([proc.stdout], [], [], min(left, 5.0))
                if not ready:
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    doc = json.loads(line)
                    if "ready" in doc:
                        counter = count(doc["ready"])
                        if counter is not None:
                            counter.start()
                        try:
                            proc.stdin.write(b"go\n")
                            proc.stdin.flush()
                        except BrokenPipeError:
                            pass  # zk_load has ended: its exit status says why
                        continue
                    if counter is not None:
                        doc["work"] = counter.stop()
                        counter = None
                    docs[doc["phase"]] = doc
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if counter is not None:
                counter.abort()
            zk.kill_pid(proc)
            proc.stdin.close()
            proc.stdout.close()
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"zk_load against {hosts} failed: {err.read().decode(errors='replace').strip()}")
    return docs


# (label, server, zk_load phase): the fresh-read modes, between creating their nodes and deleting them.
READ_MODES = [("local", "zabkeeper", "get"), ("linearizable", "zabkeeper-lin", "get"),
              ("sync+get", "zabkeeper", "syncget"), ("local", "zookeeper", "get"),
              ("sync+get", "zookeeper", "syncget")]


def fresh_reads(args, servers, clusters):
    """Throughput and latency of each read mode, per in-flight depth, and
    the members' CPU time and context switches over each read phase (from
    /proc: these reads make no fsync to count); returns {(inflight, label,
    server): [docs]}."""
    def counter(name):
        cluster = clusters[name]
        pids = cluster.pids().values() if hasattr(cluster, "pids") else [cluster.proc.pid]
        return lambda phase: counts.WorkCounter(pids, None, False) if phase in ("get", "syncget") else None
    results = {}
    for r in range(args.rounds):
        for inflight in (1, 8):
            for label, name, phase in READ_MODES:
                if name not in servers:
                    continue
                root = f"/reads-{r}-{inflight}-{phase}"
                before = read_index_counts(clusters[name])
                docs = run_load(args.load, servers[name], root, args, args.sessions, inflight, ["create", phase, "delete"],
                                counter(name))
                after = read_index_counts(clusters[name])
                if before and after:
                    gained = {key: after[key] - before[key] for key in after}
                    # Only the read phase asks rounds: the writes around it make none.
                    if gained["rounds"] > 0:
                        docs[phase]["reads_per_round"] = gained["reads"] / gained["rounds"]
                    # The followers' rounds, timed at the ends of the turns that ask and answer them:
                    # about one quorum round trip under this load.
                    if gained["timed"] > 0:
                        docs[phase]["round_ms"] = 1000 * gained["timed_s"] / gained["timed"]
                results.setdefault((inflight, label, name), []).append(docs[phase])
    return results


READ_INDEX_METRICS = {"reads": "zabkeeper_linearizable_reads_total", "rounds": "zabkeeper_read_index_rounds_total",
                      "timed_s": "zabkeeper_read_index_round_duration_seconds_sum",
                      "timed": "zabkeeper_read_index_round_duration_seconds_count"}


def read_index_counts(cluster):
    """Linearizable reads, read-index rounds, and the seconds and count of
    the followers' timed rounds, summed over a zabkeeper ensemble's members
    from /metrics ({key of READ_INDEX_METRICS: total}); None for ZooKeeper."""
    if not hasattr(cluster, "metric"):
        return None
    totals = dict.fromkeys(READ_INDEX_METRICS, 0.0)
    for i in cluster.ports:
        # One scrape a member, so a round's sum and count agree.
        values = cluster.metrics(i, list(READ_INDEX_METRICS.values()))
        for key, name in READ_INDEX_METRICS.items():
            totals[key] += values.get(name) or 0.0
    return totals


def print_fresh_reads(results, sessions):
    med = lambda docs, key: statistics.median(d[key] for d in docs)

    def med_of_some(docs, key):
        """The median over the docs that have `key`, or None."""
        present = [d[key] for d in docs if key in d]
        return statistics.median(present) if present else None
    print(f"fresh reads: {sessions} sessions, median of rounds")
    header = (f"{'in flight':<10} {'read':<13} {'server':<14} {'ops/s':>9} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} "
              f"{'CPU us/read':>12} {'ctx/read':>9} {'reads/round':>12} {'round ms':>9}")
    print(header)
    print("-" * len(header))
    for (inflight, label, name), docs in sorted(results.items()):
        counted = [per_write(d) for d in docs if d.get("work")]
        cpu = f"{statistics.median(c['cpu_us'] for c in counted):>12.1f}" if counted else f"{'-':>12}"
        ctx = f"{statistics.median(c['ctx'] for c in counted):>9.2f}" if counted else f"{'-':>9}"
        batched, timed = med_of_some(docs, "reads_per_round"), med_of_some(docs, "round_ms")
        per_round = f"{batched:>12.1f}" if batched is not None else f"{'-':>12}"
        round_ms = f"{timed:>9.3f}" if timed is not None else f"{'-':>9}"
        mean = med_of_some(docs, "mean_ms")
        mean_ms = f"{mean:>8.2f}" if mean is not None else f"{'-':>8}"
        print(f"{inflight:<10} {label:<13} {name:<14} {med(docs, 'ops_per_sec'):>9.0f} "
              f"{med(docs, 'p50_ms'):>8.2f} {mean_ms} {med(docs, 'p99_ms'):>8.2f} {cpu} {ctx} {per_round} {round_ms}")
    for inflight in (1, 8):
        lin = results.get((inflight, "linearizable", "zabkeeper-lin"))
        local = results.get((inflight, "local", "zabkeeper"))
        theirs = results.get((inflight, "sync+get", "zookeeper"))
        if lin and local:
            timed = med_of_some(lin, "round_ms")

            def gap(key):
                """Linearizable minus local, in ms and (where rounds were timed) in rounds."""
                ours, base = med_of_some(lin, key), med_of_some(local, key)
                if ours is None or base is None:
                    return "-"
                rounds = f" = {(ours - base) / timed:.1f} rounds" if timed else ""
                return f"{ours - base:+.2f} ms{rounds}"
            round_trip = f" (a follower's round: {timed:.2f} ms, mean)" if timed is not None else ""
            print(f"x{inflight}: linearizable / local {med(lin, 'ops_per_sec') / med(local, 'ops_per_sec'):.2f}x "
                  f"throughput, p50 {gap('p50_ms')}, mean {gap('mean_ms')}{round_trip}")
        if lin and theirs:
            print(f"x{inflight}: linearizable / ZooKeeper sync+get "
                  f"{med(lin, 'ops_per_sec') / med(theirs, 'ops_per_sec'):.2f}x throughput, "
                  f"p50 {med(lin, 'p50_ms') / med(theirs, 'p50_ms'):.2f}x")


def setup_counting(args, clusters, servers):
    """How each write phase's work is counted: {"counters": {server: phase ->
    counts.WorkCounter or None}, "how": the source, "device": the block device
    whose flushes are counted}; says so."""
    use_perf, why = (False, "--no-perf given") if args.no_perf else counts.perf_usable()
    how = "perf stat" if use_perf else "/proc"
    devices = {name: counts.block_device_of(clusters[name].dir) for name in servers}
    print(f"counted over each write phase ({', '.join(WRITE_PHASES)}), summed over every member's process "
          f"and all its threads: ", end="")
    if use_perf:
        print("CPU time, context switches, syscalls and fsync/fdatasync/sync_file_range calls "
              f"with `perf stat -e {','.join(counts.PERF_EVENTS)}`")
    else:
        print(f"from /proc, NOT perf ({why}): CPU time from /proc/PID/stat; context switches from "
              "/proc/PID/task/*/status (threads that exit during a phase are lost); syscalls are only the "
              "read and write family (/proc/PID/io syscr + syscw); fsync calls not counted")
    for name, (device, why_not) in devices.items():
        if device:
            print(f"device flushes of {name}: flush requests /dev/{device} completed (/proc/diskstats), "
                  f"which holds {clusters[name].dir}; the whole device's, anything else flushing it counts too")
        else:
            print(f"device flushes of {name}: not counted ({why_not})")

    def counters(name):
        cluster, device = clusters[name], devices[name][0]

        def count(phase):
            if phase not in WRITE_PHASES and phase != "idle":
                return None
            pids = cluster.pids().values() if hasattr(cluster, "pids") else [cluster.proc.pid]
            return counts.WorkCounter(pids, device, use_perf)
        return count
    return {"counters": {name: counters(name) for name in servers}, "how": how,
            "device": devices["zabkeeper"][0]}


def per_write(doc):
    """A counted phase's figures per write (None where not counted)."""
    work, ops = doc.get("work"), doc["ops"]
    out = {"ops_per_sec": doc["ops_per_sec"], "p50_ms": doc["p50_ms"], "p99_ms": doc["p99_ms"]}
    if work and ops:
        out["cpu_us"] = work["cpu_s"] / ops * 1e6
        out["ctx"] = work["ctx"] / ops
        out["invol"] = work["ctx_invol"] / ops
        out["syscalls"] = work.get("syscalls", work["rw_syscalls"]) / ops
        out["fsyncs"] = work["fsyncs"] / ops if "fsyncs" in work else None
        out["flushes"] = work["flushes"] / ops if "flushes" in work else None
    return out


COST_COLUMNS = [("ops/s", "ops_per_sec", "{:.0f}"), ("p50 ms", "p50_ms", "{:.3f}"), ("p99 ms", "p99_ms", "{:.2f}"),
                ("CPU us", "cpu_us", "{:.1f}"), ("ctx sw", "ctx", "{:.2f}"), ("invol", "invol", "{:.2f}"),
                ("syscalls", "syscalls", "{:.1f}"), ("fsyncs", "fsyncs", "{:.3f}"), ("flushes", "flushes", "{:.3f}")]


def print_costs(results, shapes, names, how, members):
    """A table per load shape: each write phase's throughput, latency and
    its cost per write on each system (medians over the rounds), and the
    ratios zabkeeper / ZooKeeper."""
    for prefix, sessions, inflight, ops in shapes:
        phases = [b for b in WRITE_PHASES if prefix + b in results]
        if not phases:
            continue
        rounds = len(results[prefix + phases[0]][names[0]])
        print()
        print(f"the cost of a write at {sessions} x {inflight} ({ops} writes a phase, median of {rounds} rounds); "
              f"per write, summed over the {members} members (counted with {how}):")
        # Without perf, /proc counts only the read and write family of syscalls.
        labels = [("r/w sysc" if key == "syscalls" and how != "perf stat" else label) for label, key, _ in COST_COLUMNS]
        header = f"{'phase':<8} {'server':<10}" + "".join(f"{label:>9}" for label in labels)
        print(header)
        print("-" * len(header))
        for base in phases:
            medians = {}
            for name in names:
                rows = [per_write(d) for d in results[prefix + base][name]]
                medians[name] = {}
                for _, key, _ in COST_COLUMNS:
                    values = [r[key] for r in rows if r.get(key) is not None]
                    medians[name][key] = statistics.median(values) if values else None
                cells = "".join(f"{fmt.format(medians[name][key]) if medians[name][key] is not None else 'n/a':>9}"
                                for _, key, fmt in COST_COLUMNS)
                print(f"{base:<8} {name:<10}{cells}")
            if "zookeeper" in medians:
                ours, theirs = medians["zabkeeper"], medians["zookeeper"]
                cells = "".join(f"{ours[key] / theirs[key]:>8.2f}x" if ours[key] is not None and theirs[key]
                                else f"{'n/a':>9}" for _, key, _ in COST_COLUMNS)
                print(f"{base:<8} {'ratio':<10}{cells}")
    print("(CPU us: CPU time per write; ctx sw: context switches, voluntary and involuntary; invol: the "
          "involuntary ones, from /proc, live threads only; syscalls: syscalls entered (r/w sysc: only the "
          "read and write family, from /proc); fsyncs: fsync, "
          "fdatasync and sync_file_range calls; flushes: the device's completed flush requests; ratio: "
          "zabkeeper / ZooKeeper)")


def print_threads(results, shapes, names, top=6):
    """Where a single session's writes switch context: per write, by thread
    name (a pool's threads together), summed over the members; the median
    over the rounds and write phases, from /proc (live threads only)."""
    for prefix, sessions, inflight, ops in shapes:
        if (sessions, inflight) != (1, 1):
            continue
        print()
        print(f"context switches per write at {sessions} x {inflight} by thread, summed over the members "
              f"(median over rounds and write phases; /proc, live threads only):")
        for name in names:
            per = {}
            for base in WRITE_PHASES:
                for doc in results.get(prefix + base, {}).get(name, []):
                    work = doc.get("work") or {}
                    for thread, n in work.get("ctx_by_thread", {}).items():
                        per.setdefault(thread, []).append(n / doc["ops"])
            medians = sorted(((statistics.median(v), t) for t, v in per.items()), reverse=True)
            shown = ", ".join(f"{t} {m:.1f}" for m, t in medians[:top] if m >= 0.05)
            print(f"  {name:<10} {sum(m for m, _ in medians):.1f} in all: {shown}")


def print_idle(idle):
    """What each ensemble does idle, per second (medians over the rounds)."""
    cells = []
    for name, works in idle.items():
        rate = lambda key: statistics.median(w.get(key) or 0 for w in works) / IDLE_SECS
        cells.append(f"{name} {rate('cpu_s') * 1000:.1f} ms of CPU, {rate('ctx'):.0f} context switches, "
                     f"{rate('syscalls') if 'syscalls' in works[0] else rate('rw_syscalls'):.0f} syscalls")
    print(f"idle, per second, all members (no load, {IDLE_SECS:.0f} s a round; under every phase above): "
          + "; ".join(cells))


def print_floor(floors, results, names, device):
    """The floor of one write (an fdatasync and two loopback round trips,
    measured in this run) and the 1 x 1 p50s as multiples of it."""
    med = lambda key: statistics.median(f[key] for f in floors)
    floor = med("floor_us")
    print()
    print(f"the floor of a write: fdatasync p50 {med('fdatasync_us'):.0f} us (p10 {med('fdatasync_p10_us'):.0f} us; "
          f"a 100-byte overwrite in the data "
          f"directories' filesystem{', /dev/' + device if device else ''}) + 2 x loopback round trip p50 "
          f"{med('rtt_us'):.0f} us = {floor:.0f} us (median of {len(floors)} probes, next to the 1 x 1 "
          f"phases of each system and round; they ranged {min(f['floor_us'] for f in floors):.0f}-"
          f"{max(f['floor_us'] for f in floors):.0f} us)")
    for base, label in (("create", "create"), ("set", "setData"), ("delete", "delete")):
        phase = "single-" + base
        if phase not in results:
            continue
        cells = []
        for name in names:
            p50 = statistics.median(d["p50_ms"] for d in results[phase][name])
            cells.append(f"{name} {p50:.3f} ms = {p50 * 1000 / floor:.2f}x")
        print(f"1 x 1 {label:<8} p50 / floor: " + ", ".join(cells))


def scale(name, cluster, args):
    """Memory, CPU per write, restart and failover with `args.znodes` znodes
    in place. Leaves the ensemble one member short (its leader killed)."""
    pids = cluster.pids()
    heap0 = {i: live_heap(name, cluster, i, pid) for i, pid in pids.items()}
    rss0 = {i: zk.rss_bytes(pid) for i, pid in pids.items()}
    cpu0 = sum(zk.cpu_seconds(pid) for pid in pids.values())
    cmd = [args.load, "--hosts", cluster.hosts(), "--root", "/scale", "--ops", str(args.znodes),
           "--sessions", str(args.sessions), "--inflight", "8", "--size", str(args.size),
           "--phases", "create", "--keep", "--phase-limit-secs", "3000"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"creating {args.znodes} znodes in {name} failed: {out.stderr.strip()}")
    created = json.loads(out.stdout.splitlines()[0])
    cpu = sum(zk.cpu_seconds(pid) for pid in pids.values()) - cpu0
    # Let a snapshot begun by the last writes finish before reading RSS.
    time.sleep(5)
    result = {
        "create_ops_per_sec": created["ops_per_sec"],
        "rss_per_znode": max(zk.rss_bytes(pid) - rss0[i] for i, pid in pids.items()) / args.znodes,
        "cpu_us_per_write": cpu / args.znodes * 1e6,
    }
    heaps = [(live_heap(name, cluster, i, pid), heap0[i]) for i, pid in pids.items()]
    if all(after is not None and before is not None for after, before in heaps):
        result["heap_per_znode"] = max(after - before for after, before in heaps) / args.znodes
    result.update(write_pauses(name, cluster, args))
    result["restart_s"] = restart_follower(cluster)
    result["failover_ms"] = first_write_after_leader_kill(cluster)
    return result


def write_pauses(name, cluster, args):
    """The longest pause in writes while members write snapshots of the tree
    in place: a probe session writes every 10 ms for `args.probe_secs`
    while 8 others overwrite 1 000 nodes at 3 000 writes/s, enough that
    every member of either system takes a snapshot (both snapshot every
    100 000 transactions) during the probe."""
    cmd = [args.load, "--hosts", cluster.hosts(), "--root", "/stall", "--ops", "1000", "--keys", "1000",
           "--sessions", "9", "--inflight", "1", "--size", str(args.size), "--rate", "3000",
           "--phases", "create,probe", "--keep", "--probe-secs", str(args.probe_secs), "--probe-every-ms", "10"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.probe_secs + 300)
    if out.returncode != 0:
        raise RuntimeError(f"the write probe against {name} failed: {out.stderr.strip()}")
    docs = {d["phase"]: d for d in (json.loads(line) for line in out.stdout.splitlines() if line.strip())}
    probe = docs["probe"]
    result = {"max_pause_ms": probe["max_pause_ms"], "pauses_over_50_ms": probe["pauses_over_50_ms"]}
    result.update(snapshot_figures(name, cluster))
    return result


def snapshot_figures(name, cluster):
    """The newest snapshot's size (the largest over the members) and, for
    zabkeeper, the mean time to write one (from /metrics)."""
    if name == "zookeeper":
        sizes = []
        for i in cluster.pids():
            snaps = glob.glob(os.path.join(cluster.dir, f"zk{i}", "version-2", "snapshot.*"))
            if snaps:
                sizes.append(os.path.getsize(max(snaps, key=os.path.getmtime)))
        return {"snapshot_mb": max(sizes) / 1e6} if sizes else {}
    sizes, means = [], []
    for i in cluster.pids():
        size = cluster.metric(i, "zabkeeper_snapshot_size_bytes")
        total = cluster.metric(i, "zabkeeper_snapshot_duration_seconds_sum")
        count = cluster.metric(i, "zabkeeper_snapshot_duration_seconds_count")
        if size:
            sizes.append(size)
        if total is not None and count:
            means.append(total / count)
    out = {}
    if sizes:
        out["snapshot_mb"] = max(sizes) / 1e6
    if means:
        out["snapshot_write_s"] = max(means)
    return out


def live_heap(name, cluster, i, pid):
    """Bytes of live heap of member `i`: ZooKeeper's after a full GC, ours as
    jemalloc counts what is allocated (from /metrics); None if unknown."""
    if name == "zookeeper":
        return zk.jvm_live_heap(pid)
    return cluster.metric(i, "zabkeeper_heap_allocated_bytes")


def restart_follower(cluster, limit=900.0):
    """kill -9 of a follower, then seconds from its start until it serves as a follower again."""
    follower = next((i for i in sorted(cluster.pids()) if cluster.mode(i) == "follower"), None)
    if follower is None:
        raise RuntimeError("no follower to restart")
    cluster.kill(follower)
    started = time.monotonic()
    cluster.spawn(follower)
    while time.monotonic() - started < limit:
        if cluster.mode(follower) == "follower" and zk.handshake_ok(cluster.client_port(follower)):
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError(f"member {follower} not serving {limit}s after its restart")


def first_write_after_leader_kill(cluster, limit=60.0):
    """kill -9 of the leader; milliseconds until a session on a survivor has
    its next setData acknowledged. Both servers close their clients'
    connections when they lose the leader; the session then moves to another
    survivor, as a client library would. Each attempt waits 10 ms for its
    reply (a write takes about 1 ms here), so the figure is the gap's length
    to within 10 ms, not a timeout's."""
    ids = sorted(cluster.pids())
    leader = next((i for i in ids if cluster.mode(i) == "leader"), None)
    if leader is None:
        raise RuntimeError("no leader to kill")
    survivors = [i for i in ids if i != leader]
    path = "/failover-probe"
    conn = zk.JuteConnection("127.0.0.1", cluster.client_port(survivors[0]), timeout_ms=30000, io_timeout=5.0)
    err, _, _ = conn.call("create", zk.create_body(path, b""))
    if err not in ("OK", "NODEEXISTS"):
        raise RuntimeError(f"failover probe: create answered {err}")
    session, passwd = conn.session_id, conn.passwd
    killed = time.monotonic()
    cluster.kill(leader)
    attempt = 0
    while time.monotonic() - killed < limit:
        try:
            err, _, _ = conn.call("setData", zk.set_data_body(path, b"x"), timeout=0.01)
            if err == "OK":
                gap = time.monotonic() - killed
                conn.shutdown()
                return gap * 1000
            time.sleep(0.005)
        except zk.ProtocolError:
            conn.shutdown()
            attempt += 1
            port = cluster.client_port(survivors[attempt % len(survivors)])
            try:
                conn = zk.JuteConnection("127.0.0.1", port, timeout_ms=30000, session_id=session, passwd=passwd,
                                         last_zxid=conn.last_zxid, io_timeout=0.5)
            except zk.ProtocolError:
                time.sleep(0.005)
    raise RuntimeError(f"no write acknowledged within {limit}s of the leader's kill")


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
    parser.add_argument("--znodes", type=int,
                        default=int(os.environ.get("BENCH_ZNODES") or (100_000 if quick else 1_000_000)),
                        help="znodes created for the scale phase (memory, CPU, restart, failover); 0 skips it")
    parser.add_argument("--probe-secs", type=int, default=15 if quick else 40,
                        help="how long the write probe runs at scale (the longest pause while snapshots are written)")
    parser.add_argument("--only-scale", action="store_true", default=os.environ.get("BENCH_ONLY_SCALE") == "1",
                        help="skip the throughput rounds: only the figures at scale (BENCH_ONLY_SCALE=1)")
    parser.add_argument("--only-reads", action="store_true", default=os.environ.get("BENCH_ONLY_READS") == "1",
                        help="only the fresh-read comparison (BENCH_ONLY_READS=1)")
    parser.add_argument("--only-writes", action="store_true", default=os.environ.get("BENCH_ONLY_WRITES") == "1",
                        help="only the write phases (create, setData, delete) with their counts and the floor "
                             "(BENCH_ONLY_WRITES=1)")
    parser.add_argument("--no-perf", action="store_true", default=os.environ.get("BENCH_NO_PERF") == "1",
                        help="count from /proc only, not with perf stat (BENCH_NO_PERF=1)")
    parser.add_argument("--json", default=os.environ.get("BENCH_JSON") or None,
                        help="also write every figure to this file as JSON (BENCH_JSON=path)")
    args = parser.parse_args()
    if args.only_writes:
        args.znodes = 0
    # (label prefix, sessions, requests in flight per session, operations per phase)
    shapes = [("", args.sessions, 1, args.ops), ("piped-", args.sessions, 8, args.ops),
              ("single-", 1, 1, max(args.ops // 10, 500))]

    classpath, why = zk.find_zookeeper_classpath()
    servers = {}
    # Both snapshot every 100 000 transactions (ZooKeeper's default snapCount,
    # which it draws afresh between half and all of; our members take turns).
    ours = zk.Ensemble(args.binary, size=args.members, snapshot_every=100_000)
    # The same, every read linearizable: the fresh-read comparison.
    lin = zk.Ensemble(args.binary, size=args.members, snapshot_every=100_000, extra="linearizable_reads = true")
    apache = None
    reads = {}
    finished = False
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
                apache = zk.ApacheEnsemble(classpath, size=args.members, heap="4g").start()
                servers["zookeeper"] = apache.hosts()
            # Members on one host share its cores: say how many workers each took.
            workers = ours.metric(1, "zabkeeper_runtime_workers")
            workers = "?" if workers is None else f"{workers:.0f}"
            print(f"Apache ZooKeeper {zk.zookeeper_version(classpath)} (Debian package) vs zabkeeper "
                  f"({args.binary}, {workers} async worker(s) a member), {args.members} members each")
            # Untimed: the JIT compiles ZooKeeper's hot paths.
            warm = argparse.Namespace(**{**vars(args), "ops": args.warmup_ops})
            for inflight in (() if args.only_scale else (1, 8)):
                run_load(args.load, servers["zookeeper"], f"/warmup-{inflight}", warm, args.sessions, inflight)
        print(f"load: {args.ops} ops per phase, {args.sessions} sessions spread over the members, "
              f"1 and 8 (piped-) in flight each, then one session with one in flight (single-); "
              f"{args.size}-byte data, {args.rounds} rounds taking turns")
        results = {}
        floors, idle = [], {}
        clusters = {"zabkeeper": ours, "zookeeper": apache}
        rounds = 0 if args.only_scale or args.only_reads else args.rounds
        counting = setup_counting(args, clusters, servers) if rounds else {"counters": {}, "how": "", "device": None}
        if not args.only_scale and not args.only_writes:
            lin.start()
            reads = fresh_reads(args, {**servers, "zabkeeper-lin": lin.hosts()},
                                {**clusters, "zabkeeper-lin": lin})
            lin_panics = lin.stop()
            if lin_panics:
                raise RuntimeError("zabkeeper (linearizable_reads) panicked:\n" + "\n".join(lin_panics))
        phases = WRITE_PHASES if args.only_writes else PHASES
        for r in range(rounds):
            # What the members do with no load at all, per second: the background under every phase.
            for name in servers:
                counter = counting["counters"][name]("idle")
                counter.start()
                time.sleep(IDLE_SECS)
                idle.setdefault(name, []).append(counter.stop())
            for prefix, sessions, inflight, ops in shapes:
                shape = argparse.Namespace(**{**vars(args), "ops": ops})
                single = inflight == 1 and sessions == 1
                for name, hosts in servers.items():
                    if single:
                        # The floor of a write on the data directories' filesystem, right before
                        # each system's single session and after the last (the disk's latency
                        # moves with the load the machine's other users put on it).
                        floors.append(counts.write_floor(ours.dir, syncs=150))
                    docs = run_load(args.load, hosts, f"/bench-{r}-{prefix}", shape, sessions, inflight,
                                    phases if args.only_writes else None, counting["counters"][name])
                    for phase, doc in docs.items():
                        results.setdefault(prefix + phase, {}).setdefault(name, []).append(doc)
                if single:
                    floors.append(counts.write_floor(ours.dir, syncs=150))
        at_scale = {}
        if args.znodes > 0 and args.members > 1 and not args.only_reads:
            print(f"scale: {args.znodes} znodes of {args.size} bytes in each ensemble, one at a time")
            for name in servers:
                at_scale[name] = scale(name, clusters[name], args)
        finished = True
    finally:
        if apache is not None:
            apache.stop()
        # Also when it never started (--only-scale, --only-writes): that removes its directory.
        lin.stop()
        # A failed run keeps our members' data and logs: they say why.
        panics = ours.stop(keep_dir=not finished)
        if not finished:
            print(f"zabkeeper's data and logs are kept in {ours.dir}", file=sys.stderr)
    if panics:
        print("zabkeeper panicked:\n" + "\n".join(panics))
        return 1

    def median(phase, name, key):
        return statistics.median(d[key] for d in results[phase][name])

    header = f"{'phase':<14} {'server':<10} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8}"
    if results:
        print(header)
        print("-" * len(header))
    for prefix, *_ in (() if args.only_scale or args.only_reads else shapes):
        for base in phases:
            phase = prefix + base
            for name in servers:
                print(f"{phase:<14} {name:<10} {median(phase, name, 'ops_per_sec'):>9.0f} "
                      f"{median(phase, name, 'p50_ms'):>8.2f} {median(phase, name, 'p99_ms'):>8.2f}")
            if "zookeeper" in servers:
                def ratio(key):
                    theirs = median(phase, "zookeeper", key)
                    return median(phase, "zabkeeper", key) / theirs if theirs else float("nan")
                # The targets: throughput up, latency down (p50, p99 as ratios too).
                print(f"{phase:<14} {'ratio':<10} {ratio('ops_per_sec'):>8.2f}x {ratio('p50_ms'):>7.2f}x "
                      f"{ratio('p99_ms'):>7.2f}x (zabkeeper / ZooKeeper)")
    if results:
        print_costs(results, shapes, list(servers), counting["how"], args.members)
        print_threads(results, shapes, list(servers))
    if idle:
        print_idle(idle)
    if floors:
        print_floor(floors, results, list(servers), counting["device"])
    if reads:
        print_fresh_reads(reads, args.sessions)
    if at_scale:
        print_scale(at_scale, args.znodes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "floors": floors, "idle": idle, "device": counting["device"],
                       "counted_with": counting["how"], "at_scale": at_scale,
                       "reads": {f"{k[0]} {k[1]} {k[2]}": v for k, v in reads.items()}}, f, indent=1)
        print(f"every figure: {args.json}")
    return 0


def print_scale(at_scale, znodes):
    rows = [
        ("create ops/s (32x8)", "create_ops_per_sec", "{:.0f}"),
        ("RSS B/znode", "rss_per_znode", "{:.0f}"),
        ("live heap B/znode", "heap_per_znode", "{:.0f}"),
        ("CPU us/write", "cpu_us_per_write", "{:.0f}"),
        ("longest write pause ms", "max_pause_ms", "{:.0f}"),
        ("pauses over 50 ms", "pauses_over_50_ms", "{:.0f}"),
        ("snapshot MB", "snapshot_mb", "{:.1f}"),
        ("snapshot write s", "snapshot_write_s", "{:.2f}"),
        ("restart s", "restart_s", "{:.2f}"),
        ("leader kill ms", "failover_ms", "{:.0f}"),
    ]
    names = list(at_scale)
    header = f"{'at ' + str(znodes) + ' znodes':<22}" + "".join(f"{n:>12}" for n in names)
    if len(names) == 2:
        header += f"{'ratio':>9}"
    print(header)
    print("-" * len(header))
    for label, key, fmt in rows:
        values = [at_scale[n].get(key) for n in names]
        if all(v is None for v in values):
            continue
        line = f"{label:<22}" + "".join(f"{fmt.format(v) if v is not None else 'n/a':>12}" for v in values)
        if len(values) == 2 and None not in values and values[1]:
            line += f"{values[0] / values[1]:>8.2f}x"
        print(line)
    print("(ratio: zabkeeper / ZooKeeper; memory is the growth of the largest member; live heap is "
          "ZooKeeper's after a full GC, zabkeeper's as jemalloc counts it; CPU sums every member)")


if __name__ == "__main__":
    sys.exit(main())
