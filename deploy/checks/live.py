"""The health checks and probes run for real: in private network and UTS
namespaces, against no member, a lone member of three without a quorum, and a
member serving the image's default config.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import LIVENESS, READINESS, REPO, SCRIPT, clean_env, loopback_up, server_message


# Member 1, on the ports the probes dial.
MEMBER_1 = """[[server]]
id = 1
peer_addr = "127.0.0.1:2888"
grpc_addr = "127.0.0.1:3181"
client_addr = "127.0.0.1:2181"
admin_addr = "127.0.0.1:4181"
metrics_addr = "127.0.0.1:9181"
"""
# Member 1 of a 3-member ensemble; the two others are never started, so it
# stays without a quorum.
LONE_MEMBER = """
data_dir = "{data}/zk{{id}}"
""" + MEMBER_1 + """[[server]]
id = 2
peer_addr = "127.0.0.2:2888"
grpc_addr = "127.0.0.2:3181"
[[server]]
id = 3
peer_addr = "127.0.0.3:2888"
grpc_addr = "127.0.0.3:3181"
"""
# Only if the image's own config cannot be used: the same ports, standalone.
STANDALONE = """
data_dir = "{data}/standalone"
""" + MEMBER_1


def check_probes_live(report, binaries, probes, image_config):
    if not probes:
        return
    spec = {
        "zabkeeper": str(binaries.paths["zabkeeper"]),
        "zkctl": str(binaries.paths["zkctl"]),
        "image_config": str(image_config) if image_config else None,
        "probes": [{"where": p.where, "kind": p.kind, "argv": p.argv, "timeout": p.timeout} for p in probes],
    }
    with tempfile.TemporaryDirectory(prefix="deploy-check-probes-") as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        worker = [sys.executable, str(SCRIPT), "--probe-worker", str(spec_file)]
        attempts = [["unshare", "--net", "--uts", "--"], ["unshare", "--user", "--map-root-user", "--net", "--uts", "--"]]
        why = []
        for prefix in attempts:
            try:
                out = subprocess.run(prefix + worker, capture_output=True, text=True, timeout=600, env=clean_env())
            except FileNotFoundError:
                why.append("no unshare command")
                break
            results = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            if results:
                for line in results:
                    status, message = json.loads(line[len("RESULT "):])
                    {"ok": report.ok, "fail": report.fail, "skip": report.skip}[status](message)
                if out.returncode not in (0, 1):
                    report.fail(f"live probes: the worker exited {out.returncode}: {out.stderr.strip()[-500:]}")
                return
            why.append(f"`{' '.join(prefix[:-1])}`: {(out.stderr.strip().splitlines() or ['exit %d' % out.returncode])[-1]}")
        report.skip(f"live probes: no private network namespace here ({'; '.join(why)}); the probe commands were checked statically only")


def probe_worker(spec_file):
    """Runs inside fresh network and UTS namespaces: the probes' fixed ports
    are free, and the host name is ours to set."""
    import socket

    spec = json.loads(Path(spec_file).read_text())

    def result(status, message):
        print("RESULT " + json.dumps([status, message]), flush=True)

    loopback_up()
    socket.sethostname("zk-0")

    with tempfile.TemporaryDirectory(prefix="deploy-check-live-") as tmp:
        return live_members(spec, Path(tmp), result)


def live_members(spec, tmp, result):
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name in ("zabkeeper", "zkctl"):
        (bin_dir / name).symlink_to(Path(spec[name]).resolve())
    base_env = clean_env({"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
    probes = spec["probes"]

    def run_probe(p):
        try:
            start = time.monotonic()
            out = subprocess.run(p["argv"], capture_output=True, text=True, env=base_env, cwd=tmp, timeout=p["timeout"])
            return out.returncode, time.monotonic() - start, (out.stderr or out.stdout).strip()
        except subprocess.TimeoutExpired:
            return None, p["timeout"], f"did not finish within its timeout ({p['timeout']} s)"

    def expect(p, passing, state, within=10.0):
        """Polls the probe until it gives the expected verdict (a member
        takes a moment to serve) or `within` seconds pass."""
        deadline = time.monotonic() + within
        while True:
            code, took, message = run_probe(p)
            if (code == 0) == passing and code is not None:
                result("ok", f"{p['where']}: {'passes' if passing else 'fails'} {state} ({took:.1f} s)")
                return
            if time.monotonic() >= deadline or code is None:
                verdict = "timed out" if code is None else ("exit 0" if code == 0 else f"exit {code}")
                result("fail", f"{p['where']}: should {'pass' if passing else 'fail'} {state}, got {verdict}: {message[-300:]}")
                return
            time.sleep(0.5)

    def start(config_text, args, env=None, name="member"):
        config = tmp / f"{name}.toml"
        config.write_text(config_text)
        out = open(tmp / f"{name}.out", "w+")
        err = open(tmp / f"{name}.err", "w+")
        proc = subprocess.Popen([str(bin_dir / "zabkeeper"), "--config", str(config), *args], stdout=out, stderr=err,
                                env={**base_env, **(env or {})}, cwd=tmp)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out.seek(0)
            text = out.read()
            if "ready" in text:
                return proc, text.strip()
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        stop(proc)
        err.seek(0)
        text = err.read()
        return None, server_message(text) if text.strip() else "no ready line within 30 s"

    def stop(proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    for p in probes:
        expect(p, False, "with no member running", within=0)

    data = tmp / "data"
    lone = LONE_MEMBER.format(data=data)
    proc, line = start(lone, [], name="lone")
    if proc:
        m = re.search(r"zabkeeper (\d+) ready", line)
        if m and m.group(1) == "1":
            result("ok", "live: started as host zk-0 without --id, the member took id 1 from its host name")
        else:
            result("fail", f"live: started as host zk-0 without --id, the member's ready line says: {line!r} (want id 1)")
    else:
        result("fail", f"live: started as host zk-0 without --id, zabkeeper did not take its id from the host name: {line}")
        proc, line = start(lone, ["--id", "1"], name="lone-with-id")
    if proc:
        try:
            for p in probes:
                if p["kind"] == LIVENESS:
                    expect(p, True, "for a member without a quorum")
            for p in probes:
                if p["kind"] == READINESS:
                    expect(p, False, "for a member without a quorum", within=0)
        finally:
            stop(proc)
    else:
        result("fail", f"live: a lone member of 3 did not start: {line}")

    proc = None
    if spec["image_config"]:
        where = os.path.relpath(spec["image_config"], REPO)
        proc, line = start(Path(spec["image_config"]).read_text(), [], env={"ZABKEEPER_DATA_DIR": str(data / "image")}, name="image")
        if proc:
            result("ok", f"live: {where} starts standalone with ZABKEEPER_DATA_DIR set")
        else:
            result("fail", f"live: {where} with ZABKEEPER_DATA_DIR={data / 'image'} did not start: {line}")
    if not proc:
        proc, line = start(STANDALONE.format(data=data), [], name="standalone")
        if not proc:
            result("fail", f"live: a standalone member did not start: {line}")
            return 1
    try:
        for p in probes:
            expect(p, True, "for a serving member", within=15)
    finally:
        stop(proc)
    return 0
