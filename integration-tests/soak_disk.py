#!/usr/bin/env python3
"""A member's disk over a long life of overwrites: does it stay bounded?

One member (release build, `snapshot_every = 10000`, `snapshots_retained =
3`, as ensemble-configs/single.toml) takes `--writes` setData (1.2 M by
default) of `--size`-byte values (1 KiB) on `--keys` nodes (1 000), from 16
sessions with 4 in flight each, in steps of `--step` writes. After each step
it prints the data directory's size, split into the log's database and the
snapshots, beside what the member holds:
its log (every transaction after the oldest snapshot kept) and the
snapshots it keeps.

It fails (exit 1) when the data directory is ever larger than `--bound`
times what it holds plus the log database's floor (`--floor-mb`), or still
grows: the last third of the steps more than a quarter above the middle
third's largest size.

Usage: make soak-disk [SOAK_WRITES=1200000] (or python3
integration-tests/soak_disk.py --binary target/release/zabkeeper --load
target/release/zk_load).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import zk_support as zk


def du(path):
    """Bytes of the files under `path` (what vanishes while counted counts nothing)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def mib(n):
    return f"{n / (1 << 20):8.1f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", required=True, help="the zabkeeper server binary (release build)")
    parser.add_argument("--load", required=True, help="the zk_load example binary")
    parser.add_argument("--writes", type=int, default=int(os.environ.get("SOAK_WRITES") or 1_200_000))
    parser.add_argument("--step", type=int, default=50_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--bound", type=float, default=4.0,
                        help="the largest directory allowed, in multiples of what it holds")
    parser.add_argument("--floor-mb", type=float, default=16.0,
                        help="bytes the log's database keeps however little it holds")
    args = parser.parse_args()

    ensemble = zk.Ensemble(args.binary, size=1, snapshot_every=10_000, retained=3)
    failed = None
    try:
        ensemble.start()
        data_dir = os.path.join(ensemble.dir, "zk1")
        snapshots_dir = os.path.join(data_dir, "snapshots")
        common = [args.load, "--hosts", ensemble.hosts(), "--keys", str(args.keys), "--size", str(args.size),
                  "--sessions", "16", "--inflight", "4", "--keep", "--phase-limit-secs", "3000"]
        subprocess.run(common + ["--root", "/soak", "--ops", str(args.keys), "--phases", "create"],
                       check=True, capture_output=True, text=True, timeout=600)
        print(f"{args.writes} overwrites of {args.size}-byte values on {args.keys} nodes, one member, "
              f"snapshot_every 10000, 3 snapshots retained")
        print(f"{'writes':>9} {'dir MiB':>8} {'log db':>8} {'snaps':>8} {'held MiB':>9} {'ratio':>6} {'writes/s':>9}")
        sizes = []
        done = 0
        step = 0
        while done < args.writes:
            ops = min(args.step, args.writes - done)
            started = time.monotonic()
            out = subprocess.run(common + ["--root", "/soak", "--existing-root", "--ops", str(ops), "--phases", "set"],
                                 capture_output=True, text=True, timeout=3600)
            if out.returncode != 0:
                raise RuntimeError(f"zk_load failed: {out.stderr.strip()}")
            rate = [json.loads(line) for line in out.stdout.splitlines() if '"set"' in line][0]["ops_per_sec"]
            done += ops
            step += 1
            # Let the snapshot this step's last writes began finish.
            time.sleep(1.0)
            whole, snaps = du(data_dir), du(snapshots_dir)
            kept = sorted(int(d, 16) for d in os.listdir(snapshots_dir) if len(d) == 16)
            # The log holds every transaction after the oldest snapshot kept,
            # each the value and ~60 bytes of path, header and checksum.
            last = int(ensemble.metric(1, "zabkeeper_last_committed_zxid"))
            log_entries = (last & 0xFFFFFFFF) - (kept[0] & 0xFFFFFFFF) if kept else last & 0xFFFFFFFF
            held = snaps + log_entries * (args.size + 60)
            sizes.append(whole)
            print(f"{done:>9} {mib(whole)} {mib(whole - snaps)} {mib(snaps)} {mib(held):>9} "
                  f"{whole / held:>5.2f}x {rate:>9.0f}", flush=True)
            if whole > args.bound * held + args.floor_mb * (1 << 20):
                failed = f"the data directory holds {mib(whole)} MiB for {mib(held)} MiB of data and snapshots"
        third = len(sizes) // 3
        if third >= 1 and max(sizes[2 * third:]) * 4 > max(sizes[third:2 * third]) * 5:
            failed = f"the data directory still grows: {mib(max(sizes[third:2 * third]))} then {mib(max(sizes[2 * third:]))} MiB"
    finally:
        panics = ensemble.stop(keep_dir=failed is not None)
    if panics:
        print("zabkeeper panicked:\n" + "\n".join(panics))
        return 1
    if failed:
        print(f"FAIL: {failed} (data kept in {ensemble.dir})")
        return 1
    print("ok: the data directory stayed bounded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
