"""Scaling the StatefulSet, live: the container's command and its preStop
hook (member.sh, from the ConfigMap) run for real, as the kubelet would run
them, against the real binaries: 3 -> 5 -> 3 for the smallest manifest set.

It runs in private network, UTS and mount namespaces (root or user
namespaces needed; skipped, saying so, otherwise). Each pod zk-N is a process
tree with its own host name (its own UTS namespace), its own loopback address
127.0.0.(N+1), which a bind-mounted /etc/hosts gives its name zk-N.zk-hs, its
own TMPDIR (the pod's /tmp) and data directory. The config's addresses stay as
the ConfigMap writes them (names); the environment moves only where listeners
bind (ZABKEEPER_BIND_HOST and the member's admin_bind, on its own address)
and tells zkctl its own admin API (ZKCTL_ADMIN). Secrets hold a placeholder.

Steps: the first pods start from the ConfigMap's file; two more start
together, join with `--join` and are added as voters (the line member.sh adds
is the one zabkeeper logs), and serve a write; the leadership goes to the last
one; both preStop hooks run at once, the leader's hands leadership over, and
both members are removed, within the grace period; the hook of a first member
changes nothing; a removed pod started again on its data is added again.
"""

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import SCRIPT, clean_env, loopback_up

CLONE_NEWUTS = 0x04000000
MS_BIND = 4096
# Pods added by the scale-up.
EXTRA = 2


def check_scaling_live(report, binaries, specs):
    if not specs:
        report.fail("live scaling: no manifest set runs a ConfigMap script with a preStop hook")
        return
    spec = dict(min(specs, key=lambda s: s["replicas"]))
    spec["zabkeeper"] = str(binaries.paths["zabkeeper"])
    spec["zkctl"] = str(binaries.paths["zkctl"])
    with tempfile.TemporaryDirectory(prefix="deploy-check-scaling-") as tmp:
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        worker = [sys.executable, str(SCRIPT), "--scaling-worker", str(spec_file)]
        attempts = [["unshare", "--net", "--uts", "--mount", "--"],
                    ["unshare", "--user", "--map-root-user", "--net", "--uts", "--mount", "--"]]
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
                    report.fail(f"live scaling: the worker exited {out.returncode}: {out.stderr.strip()[-500:]}")
                return
            why.append(f"`{' '.join(prefix[:-1])}`: {(out.stderr.strip().splitlines() or ['exit %d' % out.returncode])[-1]}")
        report.skip(f"live scaling: no private network, UTS and mount namespaces here ({'; '.join(why)}); member.sh was checked statically only")


def scaling_worker(spec_file):
    """Runs inside fresh network, UTS and mount namespaces."""
    spec = json.loads(Path(spec_file).read_text())

    def result(status, message):
        print("RESULT " + json.dumps([status, message]), flush=True)

    loopback_up()
    with tempfile.TemporaryDirectory(prefix="deploy-check-scaling-") as tmp:
        tmp = Path(tmp)
        hosts = tmp / "hosts"
        names = [f"{spec['statefulset']}-{o}" for o in range(spec["replicas"] + EXTRA)]
        hosts.write_text("127.0.0.1 localhost\n::1 localhost\n"
                         + "".join(f"127.0.0.{o + 1} {n}.{spec['service']}\n" for o, n in enumerate(names)))
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mount(str(hosts).encode(), b"/etc/hosts", None, MS_BIND, None) != 0:
            result("skip", f"live scaling: cannot bind-mount a hosts file on /etc/hosts ({os.strerror(ctypes.get_errno())})")
            return 0
        ensemble = Ensemble(spec, tmp, names, libc, result)
        try:
            ensemble.run()
        finally:
            ensemble.stop_all()
    return 0


class Ensemble:
    def __init__(self, spec, tmp, names, libc, result):
        self.spec, self.tmp, self.names, self.libc, self.result = spec, tmp, names, libc, result
        self.where = f"live scaling {spec['where']}"
        self.initial = spec["replicas"]
        self.admin_port, self.grpc_port = spec["admin_port"], spec["grpc_port"]
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name in ("zabkeeper", "zkctl"):
            (bin_dir / name).symlink_to(Path(spec[name]).resolve())
        self.config_dir = tmp / "config"
        self.config_dir.mkdir()
        for key, text in spec["files"].items():
            (self.config_dir / key).write_text(text)
        self.base_env = clean_env({"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
        self.token = spec["env"].get("ZKCTL_ADMIN_TOKEN")
        self.pods = {}  # ordinal -> (process, its stdout file, its stderr file)

    # ------------------------------------------------------------ the pods

    def mapped(self, value):
        """A path in the pod, as it is under the temporary directory."""
        mount = self.spec["config_mount"].rstrip("/")
        if isinstance(value, str) and (value == mount or value.startswith(mount + "/")):
            return str(self.config_dir) + value[len(mount):]
        return value

    def address(self, ordinal):
        return f"127.0.0.{ordinal + 1}"

    def pod_env(self, ordinal):
        pod = self.tmp / self.names[ordinal]
        (pod / "tmp").mkdir(parents=True, exist_ok=True)
        ip = self.address(ordinal)
        env = dict(self.base_env)
        env.update({k: self.mapped(v) for k, v in self.spec["env"].items()})
        env.update({
            "TMPDIR": str(pod / "tmp"),
            "ZABKEEPER_DATA_DIR": str(pod / "data"),
            "ZABKEEPER_BIND_HOST": ip,
            f"ZABKEEPER_SERVER_{ordinal + 1}_ADMIN_BIND": f"{ip}:{self.admin_port}",
            "ZKCTL_ADMIN": f"{ip}:{self.admin_port}",
        })
        return env

    def spawn(self, ordinal, argv, stdout, stderr):
        host = self.names[ordinal]
        libc = self.libc

        def own_host_name():
            if libc.unshare(CLONE_NEWUTS) != 0:
                raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS)")
            socket.sethostname(host)

        return subprocess.Popen([self.mapped(a) for a in argv], stdout=stdout, stderr=stderr, env=self.pod_env(ordinal),
                                cwd=self.tmp / host, preexec_fn=own_host_name, start_new_session=True)

    def start(self, ordinal):
        host = self.names[ordinal]
        (self.tmp / host).mkdir(exist_ok=True)
        out = open(self.tmp / host / "stdout", "a+")
        err = open(self.tmp / host / "stderr", "a+")
        self.pods[ordinal] = (self.spawn(ordinal, self.spec["start"], out, err), out, err)

    def ready(self, ordinals, within=60):
        """Waits for each pod's ready line; the ones that did not print it."""
        deadline = time.monotonic() + within
        waiting = set(ordinals)
        while waiting and time.monotonic() < deadline:
            for o in sorted(waiting):
                proc, out, _ = self.pods[o]
                out.seek(0)
                if "ready" in out.read():
                    waiting.discard(o)
                elif proc.poll() is not None:
                    return sorted(waiting)
            time.sleep(0.1)
        return sorted(waiting)

    def log(self, ordinal, tail=600):
        _, _, err = self.pods[ordinal]
        err.seek(0)
        return err.read()[-tail:].replace("\n", " | ")

    def hook(self, ordinal):
        """Starts the preStop hook in the pod: (process, its output file)."""
        host = self.names[ordinal]
        out = open(self.tmp / host / "prestop", "w+")
        return self.spawn(ordinal, self.spec["pre_stop"], out, subprocess.STDOUT), out

    def stop(self, ordinal):
        """SIGTERM, as the kubelet sends after the preStop hook; then the rest
        of the pod's processes (member.sh's background step)."""
        proc, out, err = self.pods.pop(ordinal)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out.close()
        err.close()
        return proc.returncode

    def stop_all(self):
        for o in sorted(self.pods, reverse=True):
            self.stop(o)

    # ------------------------------------------------------------ asking them

    def zkctl(self, *args, admin=None, timeout_ms=3000):
        env = dict(self.base_env)
        if self.token:
            env["ZKCTL_ADMIN_TOKEN"] = self.token
        cmd = [self.spec["zkctl"], "--json", "--timeout-ms", str(timeout_ms)]
        if admin is not None:
            cmd += ["--admin", f"{self.address(admin)}:{self.admin_port}"]
        out = subprocess.run(cmd + list(args), capture_output=True, text=True, env=env, timeout=60)
        if out.returncode != 0:
            return None, (out.stderr or out.stdout).strip() or f"exit {out.returncode}"
        try:
            return json.loads(out.stdout.strip().splitlines()[-1]), None
        except (ValueError, IndexError):
            return None, None

    def members(self, ordinal=0):
        """{id: role} of the configuration pod `ordinal` holds, or None while a
        change is under way or it does not answer."""
        doc, _ = self.zkctl("admin", "member", "list", admin=ordinal)
        if not doc or doc.get("joint"):
            return None
        return {m["id"]: m["role"] for m in doc["members"]}

    def status(self, ordinal):
        return self.zkctl("admin", "status", admin=ordinal)[0] or {}

    def until(self, condition, within):
        deadline = time.monotonic() + within
        while True:
            value = condition()
            if value or time.monotonic() >= deadline:
                return value
            time.sleep(0.2)

    def voters(self, ids, ordinal=0, within=60):
        want = {i: "participant" for i in ids}
        return self.until(lambda: self.members(ordinal) == want, within)

    def check(self, condition, ok, fail):
        self.result("ok" if condition else "fail", f"{self.where}: {ok if condition else fail}")
        return condition

    # ------------------------------------------------------------ the scenario

    def run(self):
        n, names = self.initial, self.names
        first, extra = list(range(n)), list(range(n, n + EXTRA))
        span = lambda ordinals: f"{names[ordinals[0]]}..{names[ordinals[-1]]}" if len(ordinals) > 1 else names[ordinals[0]]
        ids = lambda k: list(range(1, k + 1))

        for o in first:
            self.start(o)
        missing = self.ready(first)
        if not self.check(not missing, f"{span(first)} started from the ConfigMap's file",
                          f"{', '.join(names[o] for o in missing)} did not start: {' / '.join(self.log(o) for o in missing)}"):
            return
        if not self.check(self.voters(ids(n)) and self.until(lambda: self.status(0).get("serving"), 30),
                          f"members {ids(n)} vote and serve", f"no serving ensemble of {ids(n)}: {self.members()}"):
            return

        # Scale up: the new pods start together, as Parallel pod management starts them.
        for o in extra:
            self.start(o)
        missing = self.ready(extra)
        if not self.check(not missing, f"scale-up: {span(extra)} started",
                          f"scale-up: {', '.join(names[o] for o in missing)} did not start: {' / '.join(self.log(o) for o in missing)}"):
            return
        grown = self.voters(ids(n + EXTRA))
        joined = all("joining through" in self.log(o, tail=100_000) for o in extra)
        if not self.check(grown and joined,
                          f"scale {n} -> {n + EXTRA}: {span(extra)} joined with --join and member.sh added them: members {ids(n + EXTRA)} vote",
                          f"scale {n} -> {n + EXTRA}: members are {self.members()}, want {ids(n + EXTRA)} as voters "
                          f"(joined: {joined}): {' / '.join(self.log(o) for o in extra)}"):
            return
        for o in extra:
            text = self.log(o, tail=100_000)
            logged = re.findall(r"zkctl admin member add '(server\.\d+=[^']+)'", text)
            added = re.findall(r"adding (server\.\d+=\S+) through", text)
            self.check(logged and added and set(added) == {logged[0]},
                       f"{names[o]}: member.sh added the line zabkeeper logged ({logged[0] if logged else ''})",
                       f"{names[o]}: zabkeeper logged {logged}, member.sh added {added}")
        doc, error = self.zkctl("--server", f"{self.address(extra[-1])}:{self.grpc_port}", "create", "/deploy-check-scaled", "x")
        self.check(error is None, f"a write through {names[extra[-1]]} succeeds",
                   f"a write through {names[extra[-1]]} failed: {error}")

        # The last new member leads, so its preStop hook hands leadership over.
        last = n + EXTRA
        leader = self.status(0).get("leader_id")
        if leader:
            self.zkctl("admin", "leader", "transfer", "--to", str(last), admin=leader - 1, timeout_ms=15000)
        self.check(self.until(lambda: self.status(0).get("leader_id") == last, 15),
                   f"member {last} leads (zkctl admin leader transfer)", f"member {last} does not lead: {self.status(0)}")

        # Scale down: both hooks at once, then SIGTERM, as the kubelet does.
        hooks = {o: self.hook(o) for o in reversed(extra)}
        grace = self.spec["grace_seconds"]
        start = time.monotonic()
        codes = {}
        for o, (proc, out) in hooks.items():
            try:
                codes[o] = proc.wait(timeout=max(1, grace - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[o] = f"still running after {grace} s"
            out.seek(0)
            hooks[o] = out.read().strip()
            out.close()
        took = time.monotonic() - start
        self.check(all(c == 0 for c in codes.values()),
                   f"scale-down: the preStop hooks of {span(extra)} ran at once and exited 0 in {took:.1f} s (grace {grace} s)",
                   f"scale-down: preStop exits {codes}: {' / '.join(h[-400:] for h in hooks.values())}")
        self.check("handing leadership over" in hooks[extra[-1]],
                   f"{names[extra[-1]]}'s hook handed leadership over before its removal",
                   f"{names[extra[-1]]}'s hook did not hand leadership over: {hooks[extra[-1]][-400:]}")
        for o in extra:
            self.stop(o)
        shrunk = self.voters(ids(n), within=15)
        leads = self.until(lambda: (self.status(0).get("serving") and self.status(0).get("leader_id") in ids(n)), 15)
        self.check(shrunk and leads, f"scale {n + EXTRA} -> {n}: members {ids(n)} vote, one of them leads",
                   f"scale {n + EXTRA} -> {n}: members {self.members()}, status {self.status(0)}")
        doc, error = self.zkctl("--server", f"{self.address(0)}:{self.grpc_port}", "set", "/deploy-check-scaled", "y")
        self.check(error is None, "a write after the scale-down succeeds", f"a write after the scale-down failed: {error}")

        # The hook of one of the file's members changes nothing.
        proc, out = self.hook(n - 1)
        code = proc.wait(timeout=grace)
        out.seek(0)
        said = out.read().strip()
        out.close()
        self.check(code == 0 and self.members() == {i: "participant" for i in ids(n)},
                   f"{names[n - 1]}'s preStop hook leaves the membership as it is (a member of the file)",
                   f"{names[n - 1]}'s preStop hook: exit {code}, members {self.members()}: {said[-300:]}")

        # A removed pod started again on its data (a later scale-up, or a
        # restart after its hook removed it) is added again.
        again = extra[0]
        self.start(again)
        back = not self.ready([again]) and self.voters(ids(n + 1))
        self.check(back, f"{names[again]} started again on its data is added again: members {ids(n + 1)} vote",
                   f"{names[again]} started again: members {self.members()}: {self.log(again)}")
        proc, out = self.hook(again)
        code = proc.wait(timeout=grace)
        out.close()
        self.stop(again)
        self.check(code == 0 and self.voters(ids(n), within=15), f"{names[again]} removed again: members {ids(n)} vote",
                   f"{names[again]}'s hook exited {code}: members {self.members()}")
