"""Scaling the StatefulSet, live: the container's command and its preStop
hook (member.sh, from the ConfigMap) run for real, as the kubelet would run
them, against the real binaries: 3 -> 5 -> 3 for the smallest manifest set,
twice: on the ConfigMap's file as it is, then with its commented [tls] block
enabled (peer = true and grpc = true; the admin port stays plain, as the block
has it), where a member's peer links admit only members of the configuration
in force. For that run the check makes a CA and a certificate per pod naming
zk-N.zk-hs with `openssl` (checks/scaling_tls.py; skipped, saying so, without
it), and rewrites the paths in the enabled block to its temporary directory.

It runs in private network, UTS and mount namespaces (root or user
namespaces needed; skipped, saying so, otherwise). Each pod zk-N is a process
tree with its own host name (its own UTS namespace), its own loopback address
127.0.0.(N+1), which a bind-mounted /etc/hosts gives its name zk-N.zk-hs, its
own TMPDIR (the pod's /tmp) and data directory. The config's addresses stay as
the ConfigMap writes them (names); the environment moves only where listeners
bind (ZABKEEPER_BIND_HOST and the member's admin_bind, on its own address)
and tells zkctl its own admin API (ZKCTL_ADMIN). Secrets hold a placeholder.

Steps: the first pods start from the ConfigMap's file; two more start
together, each has itself added as an observer before it starts (the line
zabkeeper logs, as an observer), joins with `--join` and promotes itself to a
voter once it serves, and a write goes through one; a joined pod restarted
without its hook, and made an observer meanwhile, is not added again but
promoted; the leadership goes to the last one; both preStop hooks run at
once, the leader's hands leadership over, and both members are removed,
within the grace period; the hook of a first member changes nothing; a
removed pod started again on its data is added again. Each step's time is
printed.
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
from .scaling_tls import commented_tls, enable_tls, make_certificates, openssl_missing

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
    run_scaling(report, spec)
    # The same again with the ConfigMap's [tls] block enabled.
    where = f"live scaling {spec['where']} with [tls] peer = true"
    settings, why = commented_tls(spec["files"].get(spec["config_key"], ""))
    if settings is None:
        report.fail(f"{where}: {why}")
        return
    missing = openssl_missing()
    if missing:
        report.skip(f"{where}: skipped, {missing}: member.sh was run without TLS only")
        return
    run_scaling(report, dict(spec, tls=True))


def run_scaling(report, spec):
    """One run of the scenario in fresh namespaces (a worker process)."""
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
        try:
            ensemble = Ensemble(spec, tmp, names, libc, result)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            result("fail", f"live scaling {spec['where']}{' with [tls] peer = true' if spec.get('tls') else ''}: "
                           f"cannot make the certificates: {e}")
            return 0
        try:
            ensemble.run()
        finally:
            ensemble.stop_all()
    return 0


class Ensemble:
    def __init__(self, spec, tmp, names, libc, result):
        self.spec, self.tmp, self.names, self.libc, self.result = spec, tmp, names, libc, result
        self.tls = bool(spec.get("tls"))
        self.where = f"live scaling {spec['where']}" + (" with [tls] peer = true" if self.tls else "")
        self.initial = spec["replicas"]
        self.admin_port, self.grpc_port = spec["admin_port"], spec["grpc_port"]
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        for name in ("zabkeeper", "zkctl"):
            (bin_dir / name).symlink_to(Path(spec[name]).resolve())
        self.config_dir = tmp / "config"
        self.config_dir.mkdir()
        files = dict(spec["files"])
        self.cacert = None
        if self.tls:
            # The ConfigMap's [tls] block enabled, its paths moved to where
            # the check keeps the certificates it makes.
            settings, why = commented_tls(files[spec["config_key"]])
            if settings is None:
                raise RuntimeError(why)
            files[spec["config_key"]] = enable_tls(files[spec["config_key"]], self.mapped)
            self.cacert = make_certificates(settings, self.mapped, names, spec["service"])
        for key, text in files.items():
            (self.config_dir / key).write_text(text)
        self.base_env = clean_env({"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"})
        self.token = spec["env"].get("ZKCTL_ADMIN_TOKEN")
        self.pods = {}  # ordinal -> (process, its stdout file, its stderr file, where this run's output starts)

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
        """Starts the pod's container; its output is appended to what earlier
        runs of the pod wrote, and only this run's counts (ready, log)."""
        host = self.names[ordinal]
        (self.tmp / host).mkdir(exist_ok=True)
        out = open(self.tmp / host / "stdout", "a+")
        err = open(self.tmp / host / "stderr", "a+")
        offsets = (out.seek(0, os.SEEK_END), err.seek(0, os.SEEK_END))
        self.pods[ordinal] = (self.spawn(ordinal, self.spec["start"], out, err), out, err, offsets)

    def ready(self, ordinals, within=60):
        """Waits for each pod's ready line; the ones that did not print it."""
        deadline = time.monotonic() + within
        waiting = set(ordinals)
        while waiting and time.monotonic() < deadline:
            for o in sorted(waiting):
                proc, out, _, (since, _) = self.pods[o]
                out.seek(since)
                if "ready" in out.read():
                    waiting.discard(o)
                elif proc.poll() is not None:
                    return sorted(waiting)
            time.sleep(0.1)
        return sorted(waiting)

    def log(self, ordinal, tail=600):
        """This run's stderr of the pod (member.sh's and zabkeeper's), its tail."""
        _, _, err, (_, since) = self.pods[ordinal]
        err.seek(since)
        return err.read()[-tail:].replace("\n", " | ")

    def hook(self, ordinal):
        """Starts the preStop hook in the pod: (process, its output file)."""
        host = self.names[ordinal]
        out = open(self.tmp / host / "prestop", "w+")
        return self.spawn(ordinal, self.spec["pre_stop"], out, subprocess.STDOUT), out

    def run_hook(self, ordinal):
        """Runs the preStop hook to its end, within the grace period: (exit code, what it said)."""
        proc, out = self.hook(ordinal)
        try:
            code = proc.wait(timeout=self.spec["grace_seconds"])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = f"still running after {self.spec['grace_seconds']} s"
        out.seek(0)
        said = out.read().strip()
        out.close()
        return code, said

    def stop(self, ordinal):
        """SIGTERM, as the kubelet sends after the preStop hook; then the rest
        of the pod's processes (member.sh's background step)."""
        proc, out, err, _ = self.pods.pop(ordinal)
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

    def client(self, ordinal, *args):
        """A zkctl call on pod `ordinal`'s gRPC port, by its name (over TLS,
        trusting the check's CA, when the gRPC port speaks it)."""
        tls = ["--cacert", str(self.cacert)] if self.cacert else []
        return self.zkctl(*tls, "--server", f"{self.names[ordinal]}.{self.spec['service']}:{self.grpc_port}", *args)

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

    def line(self, ordinal, role):
        """ZooKeeper's line for pod `ordinal`, as member.sh gives it."""
        host = f"{self.names[ordinal]}.{self.spec['service']}"
        peer = self.spec["peer_port"]
        return f"server.{ordinal + 1}={host}:{peer}:{peer}:{role};{host}:{self.spec['client_port']}"

    # ------------------------------------------------------------ the scenario

    def run(self):
        n, names = self.initial, self.names
        first, extra = list(range(n)), list(range(n, n + EXTRA))
        span = lambda ordinals: f"{names[ordinals[0]]}..{names[ordinals[-1]]}" if len(ordinals) > 1 else names[ordinals[0]]
        ids = lambda k: list(range(1, k + 1))
        since = lambda t0: f"{time.monotonic() - t0:.1f} s"

        t0 = time.monotonic()
        for o in first:
            self.start(o)
        missing = self.ready(first)
        if not self.check(not missing, f"{span(first)} started from the ConfigMap's file",
                          f"{', '.join(names[o] for o in missing)} did not start: {' / '.join(self.log(o) for o in missing)}"):
            return
        if not self.check(self.voters(ids(n)) and self.until(lambda: self.status(0).get("serving"), 30),
                          f"members {ids(n)} vote and serve ({since(t0)} from the start)",
                          f"no serving ensemble of {ids(n)}: {self.members()}"):
            return

        # Scale up: the new pods start together, as Parallel pod management
        # starts them; each is added as an observer before it starts, then
        # promotes itself.
        t0 = time.monotonic()
        for o in extra:
            self.start(o)
        missing = self.ready(extra)
        if not self.check(not missing, f"scale-up: {span(extra)} started ({since(t0)})",
                          f"scale-up: {', '.join(names[o] for o in missing)} did not start: {' / '.join(self.log(o) for o in missing)}"):
            return
        grown = self.voters(ids(n + EXTRA))
        logs = {o: self.log(o, tail=100_000) for o in extra}
        steps = lambda o: [f"member.sh: member {o + 1}: {s}" for s in ("adding ", "joining through", "serving: promoting itself")]
        in_order = {o: all(s in logs[o] for s in steps(o))
                    and logs[o].index(steps(o)[0]) < logs[o].index(steps(o)[1]) < logs[o].rindex(steps(o)[2]) for o in extra}
        if not self.check(grown and all(in_order.values()),
                          f"scale {n} -> {n + EXTRA} in {since(t0)}: {span(extra)} were added as observers before they started, "
                          f"joined with --join and promoted themselves: members {ids(n + EXTRA)} vote",
                          f"scale {n} -> {n + EXTRA}: members are {self.members()}, want {ids(n + EXTRA)} as voters "
                          f"(added, joined, promoted in order: {in_order}): {' / '.join(self.log(o) for o in extra)}"):
            return
        for o in extra:
            logged = re.findall(r"zkctl admin member add '(server\.\d+=[^']+)'", logs[o])
            added = re.findall(r"adding (server\.\d+=\S+) before it starts", logs[o])
            want = [re.sub(r":participant;", ":observer;", line) for line in logged[:1]]
            self.check(logged and added and set(added) == set(want) == {self.line(o, "observer")},
                       f"{names[o]}: member.sh added, as an observer, the line zabkeeper logged ({want[0] if want else ''})",
                       f"{names[o]}: zabkeeper logged {logged}, member.sh added {added}, want {self.line(o, 'observer')}")
        doc, error = self.client(extra[-1], "create", "/deploy-check-scaled", "x")
        self.check(error is None, f"a write through {names[extra[-1]]} succeeds",
                   f"a write through {names[extra[-1]]} failed: {error}")

        # A joined pod restarted without its hook (its process died) is still
        # a member: not added again. Made an observer meanwhile, it is promoted.
        again = extra[0]
        self.stop(again)
        errors = []

        def demote():
            if (self.members() or {}).get(again + 1) != "observer":
                errors.append(self.zkctl("admin", "member", "add", self.line(again, "observer"), admin=0, timeout_ms=15000)[1])
            return (self.members() or {}).get(again + 1) == "observer"

        if not self.check(self.until(demote, 30), f"{names[again]} stopped without its hook, and made an observer by hand",
                          f"{names[again]} could not be made an observer: {errors[-1:]} (members {self.members()})"):
            return
        t0 = time.monotonic()
        self.start(again)
        back = not self.ready([again]) and self.voters(ids(n + EXTRA))
        text = self.log(again, tail=100_000)
        said = lambda what: f"member.sh: member {again + 1}: {what}" in text
        self.check(back and said("already a member") and not said("adding ") and said("serving: promoting itself"),
                   f"{names[again]} restarted as an observer: not added again, promoted: members {ids(n + EXTRA)} vote ({since(t0)})",
                   f"{names[again]} restarted as an observer: members {self.members()}: {self.log(again)}")

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
        t0 = time.monotonic()
        codes = {}
        for o, (proc, out) in hooks.items():
            try:
                codes[o] = proc.wait(timeout=max(1, grace - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes[o] = f"still running after {grace} s"
            out.seek(0)
            hooks[o] = out.read().strip()
            out.close()
        self.check(all(c == 0 for c in codes.values()),
                   f"scale-down: the preStop hooks of {span(extra)} ran at once and exited 0 in {since(t0)} (grace {grace} s)",
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
        doc, error = self.client(0, "set", "/deploy-check-scaled", "y")
        self.check(error is None, "a write after the scale-down succeeds", f"a write after the scale-down failed: {error}")

        # The hook of one of the file's members changes nothing.
        code, said = self.run_hook(n - 1)
        self.check(code == 0 and self.members() == {i: "participant" for i in ids(n)},
                   f"{names[n - 1]}'s preStop hook leaves the membership as it is (a member of the file)",
                   f"{names[n - 1]}'s preStop hook: exit {code}, members {self.members()}: {said[-300:]}")

        # A removed pod started again on its data (a later scale-up, or a
        # restart after its hook removed it) is added again, and promoted.
        t0 = time.monotonic()
        self.start(again)
        back = not self.ready([again]) and self.voters(ids(n + 1))
        text = self.log(again, tail=100_000)
        self.check(back and f"adding {self.line(again, 'observer')} before it starts" in text,
                   f"{names[again]} started again on its data is added again as an observer and promoted: "
                   f"members {ids(n + 1)} vote ({since(t0)})",
                   f"{names[again]} started again: members {self.members()}: {self.log(again)}")
        t0 = time.monotonic()
        code, said = self.run_hook(again)
        self.stop(again)
        self.check(code == 0 and self.voters(ids(n), within=15), f"{names[again]} removed again: members {ids(n)} vote ({since(t0)})",
                   f"{names[again]}'s hook exited {code}: members {self.members()}: {said[-300:]}")
