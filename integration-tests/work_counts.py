"""What a server's processes cost over a window, counted: CPU, context
switches, syscalls (perf stat, or /proc without it), fsync-family calls and
the data device's flush requests; and the floor of one durable write (an
fdatasync plus two loopback round trips). Used by zk_bench.py.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from zk_support import cpu_seconds, kill_pid, read_log, stop_pid


def block_device_of(path):
    """The whole block device that holds `path`, as its /proc/diskstats name
    (e.g. 'vda'), or (None, why) when the filesystem has none (tmpfs,
    overlay and the like)."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    sys_path = f"/sys/dev/block/{major}:{minor}"
    if not os.path.exists(sys_path):
        return None, f"{path} is on device {major}:{minor}, not a block device"
    real = os.path.realpath(sys_path)
    # A partition's flushes reach its disk; /proc/diskstats counts them there.
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real), None


def disk_flushes(device):
    """Flush requests the device completed (/proc/diskstats, field 16: "flush
    requests completed successfully", Linux 5.5 and later), or None."""
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 19 and fields[2] == device:
                    return int(fields[18])
    except OSError:
        pass
    return None


def proc_counts(pids):
    """What /proc says the processes `pids` have done so far, summed: CPU
    seconds (/proc/PID/stat, every thread, exited ones too), voluntary and
    involuntary context switches (/proc/PID/task/*/status: live threads
    only, a thread that has exited takes its counts with it), and read and
    write syscalls (/proc/PID/io syscr + syscw: the read- and write-family
    only, so a lower bound on all syscalls). "ctx_by_thread" splits the
    context switches by thread name, numbers dropped (a pool's threads
    together: "sled-io-3" and "sled-io-4" count as "sled-io")."""
    out = {"cpu_s": 0.0, "ctx_vol": 0, "ctx_invol": 0, "rw_syscalls": 0, "ctx_by_thread": {}}
    for pid in pids:
        try:
            out["cpu_s"] += cpu_seconds(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{task}/comm") as f:
                        name = f.read().strip().rstrip("0123456789-:_/ ") or "?"
                    with open(f"/proc/{pid}/task/{task}/status") as f:
                        for line in f:
                            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                                n = int(line.split()[1])
                                out["ctx_vol" if line[0] == "v" else "ctx_invol"] += n
                                out["ctx_by_thread"][name] = out["ctx_by_thread"].get(name, 0) + n
                except OSError:
                    pass  # the thread has exited
            with open(f"/proc/{pid}/io") as f:
                for line in f:
                    if line.startswith(("syscr:", "syscw:")):
                        out["rw_syscalls"] += int(line.split()[1])
        except OSError:
            pass  # the process has exited
    return out


# The events `perf stat` counts for a window: CPU time, context switches
# (voluntary and involuntary), every syscall entered, and the syscalls that
# ask for data to reach the disk.
PERF_EVENTS = ["task-clock", "context-switches", "raw_syscalls:sys_enter", "syscalls:sys_enter_fsync",
               "syscalls:sys_enter_fdatasync", "syscalls:sys_enter_sync_file_range"]
_PERF = {}


def perf_usable():
    """(True, None) when `perf stat` can count PERF_EVENTS here (it needs the
    `perf` binary, Debian's linux-perf, and root or CAP_PERFMON, or
    kernel.perf_event_paranoid at -1 for the syscall tracepoints); else
    (False, why). Checked once."""
    if "usable" not in _PERF:
        perf = shutil.which("perf")
        if perf is None:
            _PERF["usable"] = (False, "no `perf` on PATH (Debian's linux-perf)")
        else:
            try:
                out = subprocess.run([perf, "stat", "-x,", "-e", ",".join(PERF_EVENTS), "--", "true"],
                                     capture_output=True, text=True, timeout=30)
                bad = [l for l in out.stderr.splitlines() if "<not supported>" in l]
                if out.returncode != 0 or bad:
                    why = (bad or out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
                    _PERF["usable"] = (False, f"`perf stat` cannot count here: {why}")
                else:
                    _PERF["usable"] = (True, None)
            except (OSError, subprocess.SubprocessError) as e:
                _PERF["usable"] = (False, f"`perf stat` failed: {e}")
    return _PERF["usable"]


class PerfWindow:
    """`perf stat` attached to every thread of `pids` (threads they start
    later too), its counters off until start() and off again at stop(), so
    they count exactly the window between (through perf's control FIFOs).
    The perf process is stopped by its PID."""

    def __init__(self, pids, timeout=30.0, events=None):
        self.events = list(events or PERF_EVENTS)
        self.dir = tempfile.mkdtemp(prefix="zk-perf-")
        self.timeout = timeout
        ctl, ack = os.path.join(self.dir, "ctl"), os.path.join(self.dir, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        self.out = os.path.join(self.dir, "stat.csv")
        # Opened read-write, a FIFO never blocks its opener.
        self.ctl = os.open(ctl, os.O_RDWR)
        self.ack = os.open(ack, os.O_RDWR | os.O_NONBLOCK)
        self.err = open(os.path.join(self.dir, "stderr"), "wb")
        self.proc = subprocess.Popen(
            ["perf", "stat", "-x,", "-o", self.out, "-D", "-1", "--control", f"fifo:{ctl},{ack}",
             "-e", ",".join(self.events), "-p", ",".join(str(p) for p in pids)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err)

    def _command(self, word):
        os.write(self.ctl, (word + "\n").encode())
        deadline = time.monotonic() + self.timeout
        got = b""
        while b"ack" not in got:
            if self.proc.poll() is not None:
                raise RuntimeError(f"perf stat exited with {self.proc.returncode}: {self._stderr()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"perf stat did not acknowledge {word!r} within {self.timeout}s")
            try:
                got += os.read(self.ack, 64)
            except BlockingIOError:
                time.sleep(0.002)

    def _stderr(self):
        self.err.flush()
        return read_log(os.path.join(self.dir, "stderr")).strip()[-500:]

    def start(self):
        self._command("enable")

    def disable(self):
        """Counters off."""
        self._command("disable")

    def collect(self):
        """Ends perf (by its PID); returns {event: count} (task-clock in seconds)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            # perf notices the signal late (up to seconds) while it waits on its
            # control FIFO with counters off; a command wakes it.
            os.write(self.ctl, b"ping\n")
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            kill_pid(self.proc)
        counts = {}
        for line in read_log(self.out).splitlines():
            fields = line.split(",")
            if line.startswith("#") or len(fields) < 3 or fields[2] not in self.events:
                continue
            try:
                value = float(fields[0])
            except ValueError:  # <not counted>
                value = 0.0
            counts[fields[2]] = value / 1000 if fields[2] == "task-clock" else value  # msec to s
        return counts

    def close(self):
        if self.proc.poll() is None:
            kill_pid(self.proc)
        for fd in (self.ctl, self.ack):
            try:
                os.close(fd)
            except OSError:
                pass
        self.err.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class WorkCounter:
    """Counts what the processes `pids` do over a window, summed over them
    and all their threads: CPU seconds, context switches, syscalls, the
    fsync-family syscalls, and the flushes `device` completed (the whole
    device: other processes' flushes count too). From `perf stat` when
    `use_perf`, else from /proc (context switches of live threads only,
    read/write syscalls only). Use start() then stop() -> dict."""

    def __init__(self, pids, device=None, use_perf=True):
        self.pids = list(pids)
        self.device = device
        self.use_perf = use_perf
        self.perf = None

    def start(self):
        if self.use_perf:
            self.perf = PerfWindow(self.pids)
        self.flush0 = disk_flushes(self.device) if self.device else None
        self.proc0 = proc_counts(self.pids)
        if self.perf:
            try:
                self.perf.start()
            except BaseException:
                self.perf.close()
                self.perf = None
                raise

    def abort(self):
        """Ends a window that will not be read (a failed phase)."""
        if self.perf:
            self.perf.close()
            self.perf = None

    def stop(self):
        counted = None
        try:
            if self.perf:
                self.perf.disable()
            flush1 = disk_flushes(self.device) if self.device else None
            proc1 = proc_counts(self.pids)
            if self.perf:
                counted = self.perf.collect()
        finally:
            if self.perf:
                self.perf.close()
                self.perf = None
        out = {k: proc1[k] - self.proc0[k] for k in proc1 if k != "ctx_by_thread"}
        before = self.proc0["ctx_by_thread"]
        out["ctx_by_thread"] = {name: n - before.get(name, 0) for name, n in proc1["ctx_by_thread"].items()}
        out["ctx"] = out["ctx_vol"] + out["ctx_invol"]
        out["source"] = "proc"
        if self.flush0 is not None and flush1 is not None:
            out["flushes"] = flush1 - self.flush0
        if counted is not None:
            out["source"] = "perf"
            out["proc_cpu_s"], out["proc_ctx"] = out["cpu_s"], out["ctx"]
            out["cpu_s"] = counted.get("task-clock", 0.0)
            out["ctx"] = counted.get("context-switches", 0.0)
            out["syscalls"] = counted.get("raw_syscalls:sys_enter", 0.0)
            out["fsyncs"] = sum(counted.get(e, 0.0) for e in PERF_EVENTS[3:])
        return out


# ---------------------------------------------------------------- the floor of a write


def fdatasync_probe(directory, count=300, limit=5.0, size=100):
    """Latencies (seconds, sorted) of a `size`-byte write then fdatasync to a
    file in `directory`, at most `count` of them or `limit` seconds: the
    cheapest durable write, a block overwritten in a file written out
    beforehand (so no allocation or metadata to commit) and the device's
    flush. The file is removed after."""
    path = os.path.join(directory, "fdatasync-probe")
    span = 4096 * 256
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"\0" * span)
        os.fsync(fd)
        data = b"p" * size
        times = []
        deadline = time.monotonic() + limit
        for i in range(count):
            if time.monotonic() > deadline:
                break
            started = time.perf_counter()
            os.pwrite(fd, data, (i * 4096) % span)
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return sorted(times)


_ECHO_SERVER = r"""
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); s.settimeout(30)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.settimeout(30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = c.recv(4096)
    if not data:
        break
    c.sendall(data)
"""


def loopback_rtt_probe(count=1000, limit=5.0, size=64):
    """Latencies (seconds, sorted) of a `size`-byte TCP round trip on
    127.0.0.1 to an echo server in a process of its own (so each trip
    wakes another process, as a peer's would), at most `count` of them or
    `limit` seconds. The echo process is stopped by its PID."""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO_SERVER], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        port = int(echo.stdout.readline())
        times = []
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = b"r" * size
            deadline = time.monotonic() + limit
            for _ in range(count):
                if time.monotonic() > deadline:
                    break
                started = time.perf_counter()
                s.sendall(data)
                got = 0
                while got < size:
                    chunk = s.recv(4096)
                    if not chunk:
                        raise RuntimeError("the echo server closed the connection")
                    got += len(chunk)
                times.append(time.perf_counter() - started)
        return sorted(times)
    finally:
        stop_pid(echo)
        echo.stdout.close()


def write_floor(directory, syncs=300, trips=1000):
    """The floor of one replicated write here: the p50 of an fdatasync
    (fdatasync_probe in `directory`) plus two loopback round trips'
    (loopback_rtt_probe): a client's request to the leader and its answer,
    a proposal to a follower and its ack. At most `syncs` fdatasyncs and
    `trips` round trips (and 5 s each). Returns a dict of microseconds."""
    sync = fdatasync_probe(directory, count=syncs)
    rtt = loopback_rtt_probe(count=trips)
    p50 = lambda xs: xs[(len(xs) - 1) // 2] * 1e6 if xs else float("nan")
    return {"fdatasync_us": p50(sync), "fdatasync_p10_us": sync[(len(sync) - 1) // 10] * 1e6 if sync else float("nan"),
            "fdatasync_n": len(sync), "rtt_us": p50(rtt), "rtt_n": len(rtt),
            "floor_us": p50(sync) + 2 * p50(rtt)}
