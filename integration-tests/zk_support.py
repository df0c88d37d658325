"""Shared pieces of the Python compatibility checks (kazoo_smoke.py,
zk_side_by_side.py): start zabkeeper servers and Apache ZooKeeper on free
loopback ports with temporary data directories, stop them by PID, and a
small raw ZooKeeper protocol (jute) client for the opcodes kazoo never sends.

Standard library only. Every wait is bounded; only 127.0.0.1 is used.
"""

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import urllib.request
import time

# ---------------------------------------------------------------- processes


_GIVEN_PORTS = set()


def free_port():
    """A free TCP port on 127.0.0.1 (closed again before the server binds it).
    The OS may hand a closed port out again, so ports this process already
    gave out are skipped."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port
    raise RuntimeError("no fresh loopback port in 1000 tries")


def four_letter(port, word, timeout=2.0):
    """Sends a four-letter word, returns the text answer ('' if unreachable)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def stop_pid(proc, grace=10.0):
    """SIGTERM the process by its PID, then SIGKILL it after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace)


def kill_pid(proc):
    """SIGKILL the process by its PID and reap it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def srvr_mode(port):
    """The `Mode:` a server's `srvr` reports ('leader', 'follower', 'standalone'), None when it does not answer."""
    for line in four_letter(port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def read_log(path):
    """A log file's text ('' when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def default_binary():
    """The debug zabkeeper binary cargo builds for `make test`."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(root, "target")
    return os.path.join(target, "debug", "zabkeeper")


def make_certificates(directory):
    """A CA, and a certificate for 127.0.0.1 and localhost it signed (with
    Debian's openssl); returns the CA's path."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA")
    openssl("req", *ec, "-keyout", "key.pem", "-out", "cert.csr", "-subj", "/CN=localhost")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "cert.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", "cert.pem", "-days", "2", "-extfile", "san.ext")
    return os.path.join(directory, "ca.pem")


def make_client_certificate(directory, name, subject):
    """A client certificate for `subject` (openssl's form, "/O=Example/CN=app"),
    signed by the CA make_certificates made in `directory`; returns the
    paths of the certificate and its key."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", *ec, "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", subject)
    with open(os.path.join(directory, f"{name}.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}-key.pem")


class Ensemble:
    """`size` zabkeeper processes on free loopback ports, one config file,
    data under a temporary directory removed by stop()."""

    def __init__(self, binary, size=3, extra="", snapshot_every=10000, secure=False, retained=2, client_auth=False):
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no zabkeeper binary at {binary} (run `cargo build --bin zabkeeper`)")
        self.binary = binary
        self.size = size
        self.dir = tempfile.mkdtemp(prefix="zabkeeper-py-")
        self.procs = {}
        self.ports = {}
        lines = [
            "tick_ms = 50",
            "init_limit_ticks = 40",
            "sync_limit_ticks = 20",
            "min_session_timeout_ms = 1000",
            "max_session_timeout_ms = 60000",
            f"snapshot_every = {snapshot_every}",
            f"snapshots_retained = {retained}",
            'four_letter_words = ["*"]',
            extra,
        ]
        kinds = ("peer", "grpc", "client", "admin", "metrics") + (("secure",) if secure else ())
        for i in range(1, size + 1):
            ports = {k: free_port() for k in kinds}
            self.ports[i] = ports
            lines += [
                "",
                "[[server]]",
                f"id = {i}",
                f'peer_addr = "127.0.0.1:{ports["peer"]}"',
                f'grpc_addr = "127.0.0.1:{ports["grpc"]}"',
                f'client_addr = "127.0.0.1:{ports["client"]}"',
                f'admin_addr = "127.0.0.1:{ports["admin"]}"',
                f'metrics_addr = "127.0.0.1:{ports["metrics"]}"',
                f'data_dir = "{os.path.join(self.dir, f"zk{i}")}"',
            ]
            if secure:
                lines.append(f'secure_client_addr = "127.0.0.1:{ports["secure"]}"')
        if secure:
            self.ca = make_certificates(self.dir)
            d = self.dir
            lines += ["", "[tls]", f'cert_file = "{d}/cert.pem"', f'key_file = "{d}/key.pem"', f'ca_file = "{d}/ca.pem"',
                      f"client_auth = {'true' if client_auth else 'false'}"]
        self.config = os.path.join(self.dir, "ensemble.toml")
        with open(self.config, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self, timeout=30.0):
        for i in range(1, self.size + 1):
            self.spawn(i)
        self.wait_serving(list(range(1, self.size + 1)), timeout)
        return self

    def spawn(self, i):
        log = open(os.path.join(self.dir, f"zk{i}.log"), "ab")
        env = dict(os.environ, ZABKEEPER_LOG=os.environ.get("ZABKEEPER_LOG", "info"))
        self.procs[i] = subprocess.Popen(
            [self.binary, "--config", self.config, "--id", str(i)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        log.close()

    def client_port(self, i):
        return self.ports[i]["client"]

    def metric(self, i, name):
        """Member `i`'s value of the unlabelled metric `name` from /metrics, or None."""
        return self.metrics(i, [name]).get(name)

    def metrics(self, i, names):
        """Member `i`'s values of the unlabelled metrics `names`, from one
        scrape of /metrics: {name: value} for those it has."""
        url = f"http://127.0.0.1:{self.ports[i]['metrics']}/metrics"
        out = {}
        with urllib.request.urlopen(url, timeout=5) as reply:
            for line in reply.read().decode().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] in names:
                    out[parts[0]] = float(parts[1])
        return out

    def hosts(self, ids=None, secure=False):
        """A ZooKeeper connect string ("127.0.0.1:p1,127.0.0.1:p2,..."); with
        `secure`, of the TLS ports."""
        ids = ids or sorted(self.ports)
        kind = "secure" if secure else "client"
        return ",".join(f"127.0.0.1:{self.ports[i][kind]}" for i in ids)

    def mode(self, i):
        """'leader', 'follower', 'standalone' or None, from `srvr`."""
        return srvr_mode(self.client_port(i))

    def wait_serving(self, ids, timeout=30.0):
        """Waits (bounded) until each member answers a ZooKeeper session
        handshake, and one of them leads."""
        deadline = time.monotonic() + timeout
        while True:
            ready = 0
            leader = False
            for i in ids:
                proc = self.procs.get(i)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"member {i} exited with {proc.returncode}; log:\n{self.log(i)[-3000:]}")
                if handshake_ok(self.client_port(i)):
                    ready += 1
                    if self.mode(i) in ("leader", "standalone"):
                        leader = True
            if ready == len(ids) and leader:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"members {ids} not serving within {timeout}s")
            time.sleep(0.1)

    def kill(self, i):
        kill_pid(self.procs.pop(i, None))

    def pids(self):
        """The members' process ids."""
        return {i: p.pid for i, p in self.procs.items()}

    def log(self, i):
        return read_log(os.path.join(self.dir, f"zk{i}.log"))

    def panics(self):
        """Log lines of members that report a panic (a server must never
        panic on client input)."""
        return [f"member {i}: {line}" for i in sorted(self.ports)
                for line in self.log(i).splitlines() if "panicked" in line]

    def stop(self, keep_dir=False):
        """Stops every member by PID; returns the panics their logs report."""
        for i in list(self.procs):
            stop_pid(self.procs.pop(i))
        panics = self.panics()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return panics


def handshake_ok(port, timeout=2.0):
    """Whether a server on `port` grants a new session (then closes it)."""
    try:
        conn = JuteConnection("127.0.0.1", port, timeout_ms=4000, io_timeout=timeout)
    except (OSError, ProtocolError):
        return False
    try:
        conn.close_session()
    except (OSError, ProtocolError):
        pass
    conn.shutdown()
    return True


# ---------------------------------------------------------------- jute codec

OPS = {
    "notification": 0, "create": 1, "delete": 2, "exists": 3, "getData": 4, "setData": 5,
    "getACL": 6, "setACL": 7, "getChildren": 8, "sync": 9, "ping": 11, "getChildren2": 12,
    "check": 13, "multi": 14, "create2": 15, "reconfig": 16, "checkWatches": 17,
    "removeWatches": 18, "createContainer": 19, "deleteContainer": 20, "createTTL": 21,
    "multiRead": 22, "auth": 100, "setWatches": 101, "sasl": 102, "getEphemerals": 103,
    "getAllChildrenNumber": 104, "setWatches2": 105, "addWatch": 106, "whoAmI": 107,
    "closeSession": -11, "error": -1,
}

ERRORS = {
    0: "OK", -1: "SYSTEMERROR", -2: "RUNTIMEINCONSISTENCY", -3: "DATAINCONSISTENCY",
    -4: "CONNECTIONLOSS", -5: "MARSHALLINGERROR", -6: "UNIMPLEMENTED", -7: "OPERATIONTIMEOUT",
    -8: "BADARGUMENTS", -12: "UNKNOWNSESSION", -13: "NEWCONFIGNOQUORUM", -14: "RECONFIGINPROGRESS",
    -100: "APIERROR", -101: "NONODE", -102: "NOAUTH", -103: "BADVERSION",
    -108: "NOCHILDRENFOREPHEMERALS", -110: "NODEEXISTS", -111: "NOTEMPTY", -112: "SESSIONEXPIRED",
    -113: "INVALIDCALLBACK", -114: "INVALIDACL", -115: "AUTHFAILED", -118: "SESSIONMOVED",
    -119: "NOTREADONLY", -120: "EPHEMERALONLOCALSESSION", -121: "NOWATCHER",
    -122: "REQUESTTIMEOUT", -123: "RECONFIGDISABLED", -124: "SESSIONCLOSEDREQUIRESASLAUTH",
    -125: "QUOTAEXCEEDED", -127: "THROTTLEDOP",
}

EVENTS = {-1: "None", 1: "NodeCreated", 2: "NodeDeleted", 3: "NodeDataChanged",
          4: "NodeChildrenChanged", 5: "DataWatchRemoved", 6: "ChildWatchRemoved",
          7: "PersistentWatchRemoved"}

OPEN_ACL_UNSAFE = [(31, "world", "anyone")]
READ_ACL_UNSAFE = [(1, "world", "anyone")]
CREATOR_ALL_ACL = [(31, "auth", "")]


class ProtocolError(Exception):
    """The peer broke the protocol, closed the connection or did not answer in time."""


class Writer:
    def __init__(self):
        self.parts = []

    def int(self, v):
        self.parts.append(struct.pack(">i", v))
        return self

    def long(self, v):
        self.parts.append(struct.pack(">q", v))
        return self

    def bool(self, v):
        self.parts.append(b"\x01" if v else b"\x00")
        return self

    def buffer(self, b):
        if b is None:
            return self.int(-1)
        self.int(len(b))
        self.parts.append(bytes(b))
        return self

    def string(self, s):
        return self.buffer(None if s is None else s.encode("utf-8"))

    def strings(self, items):
        self.int(len(items))
        for s in items:
            self.string(s)
        return self

    def acl(self, acl):
        if acl is None:
            return self.int(-1)
        self.int(len(acl))
        for perms, scheme, ident in acl:
            self.int(perms).string(scheme).string(ident)
        return self

    def raw(self, b):
        self.parts.append(b)
        return self

    def bytes(self):
        return b"".join(self.parts)


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ProtocolError(f"short record: need {n} bytes at {self.pos} of {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self):
        return struct.unpack(">i", self.take(4))[0]

    def long(self):
        return struct.unpack(">q", self.take(8))[0]

    def bool(self):
        return self.take(1) != b"\x00"

    def buffer(self):
        n = self.int()
        return None if n < 0 else self.take(n)

    def string(self):
        b = self.buffer()
        return None if b is None else b.decode("utf-8")

    def strings(self):
        n = self.int()
        return None if n < 0 else [self.string() for _ in range(n)]

    def stat(self):
        names = ("czxid", "mzxid", "ctime", "mtime", "version", "cversion", "aversion",
                 "ephemeralOwner", "dataLength", "numChildren", "pzxid")
        kinds = "qqqqiiiqiiq"
        return {n: (self.long() if k == "q" else self.int()) for n, k in zip(names, kinds)}

    def acl(self):
        n = self.int()
        return None if n < 0 else [(self.int(), self.string(), self.string()) for _ in range(n)]

    def remaining(self):
        return len(self.data) - self.pos


# Request bodies, as zookeeper.jute declares them.

def create_body(path, data=b"", acl=OPEN_ACL_UNSAFE, flags=0, ttl=None):
    w = Writer().string(path).buffer(data).acl(acl).int(flags)
    if ttl is not None:
        w.long(ttl)
    return w.bytes()


def path_version_body(path, version):
    return Writer().string(path).int(version).bytes()


def path_watch_body(path, watch=False):
    return Writer().string(path).bool(watch).bytes()


def path_body(path):
    return Writer().string(path).bytes()


def set_data_body(path, data, version=-1):
    return Writer().string(path).buffer(data).int(version).bytes()


def set_acl_body(path, acl, version=-1):
    return Writer().string(path).acl(acl).int(version).bytes()


def path_int_body(path, value):
    return Writer().string(path).int(value).bytes()


def auth_body(scheme, auth):
    return Writer().int(0).string(scheme).buffer(auth).bytes()


def set_watches_body(relative_zxid, data=(), exist=(), child=(), persistent=None, recursive=None):
    w = Writer().long(relative_zxid).strings(list(data)).strings(list(exist)).strings(list(child))
    if persistent is not None:
        w.strings(list(persistent)).strings(list(recursive or []))
    return w.bytes()


def multi_body(ops):
    """`ops`: list of (opname, body bytes). Each op gets MultiHeader(type, false, -1)."""
    w = Writer()
    for name, body in ops:
        w.int(OPS[name]).bool(False).int(-1).raw(body)
    w.int(-1).bool(True).int(-1)
    return w.bytes()


def read_multi(r):
    """MultiResponse → list of (type name, err name, result)."""
    out = []
    while True:
        op_type, done, err = r.int(), r.bool(), r.int()
        if done:
            return out
        name = next((k for k, v in OPS.items() if v == op_type), str(op_type))
        if op_type == -1:
            result = ERRORS.get(r.int(), "?")
        elif op_type == OPS["create"]:
            result = {"path": r.string()}
        elif op_type == OPS["create2"]:
            result = {"path": r.string(), "stat": r.stat()}
        elif op_type == OPS["setData"]:
            result = {"stat": r.stat()}
        elif op_type == OPS["getData"]:
            result = {"data": r.buffer(), "stat": r.stat()}
        elif op_type == OPS["getChildren"]:
            result = {"children": r.strings()}
        else:
            result = None
        out.append((name, ERRORS.get(err, str(err)), result))


def read_result(op, r):
    """The response record of a successful standalone `op`."""
    if op == "create":
        return {"path": r.string()}
    if op in ("create2", "createContainer", "createTTL"):
        return {"path": r.string(), "stat": r.stat()}
    if op in ("exists", "setData", "setACL", "check"):
        return {"stat": r.stat()} if r.remaining() else None
    if op == "getData":
        return {"data": r.buffer(), "stat": r.stat()}
    if op == "getACL":
        return {"acl": r.acl(), "stat": r.stat()}
    if op == "getChildren":
        return {"children": r.strings()}
    if op == "getChildren2":
        return {"children": r.strings(), "stat": r.stat()}
    if op == "sync":
        return {"path": r.string()}
    if op in ("multi", "multiRead"):
        return {"results": read_multi(r)}
    if op == "getEphemerals":
        return {"paths": r.strings()}
    if op == "getAllChildrenNumber":
        return {"count": r.int()}
    if op == "addWatch":
        return {"err": r.int()} if r.remaining() else None
    if op == "whoAmI":
        n = r.int()
        return {"clients": [(r.string(), r.string()) for _ in range(max(n, 0))]}
    if op == "reconfig":
        return {"data": r.buffer(), "stat": r.stat()}
    return None


class JuteConnection:
    """One ZooKeeper session over a raw socket. Replies and notifications
    are read in stream order; `events` collects notifications not yet taken."""

    def __init__(self, host, port, timeout_ms=10000, session_id=0, passwd=b"\x00" * 16,
                 last_zxid=0, io_timeout=10.0):
        self.io_timeout = io_timeout
        try:
            self.sock = socket.create_connection((host, port), timeout=io_timeout)
        except OSError as e:
            raise ProtocolError(f"cannot connect: {e}")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.xid = 0
        self.events = []
        self.last_zxid = last_zxid
        connect = (Writer().int(0).long(last_zxid).int(timeout_ms).long(session_id)
                   .buffer(passwd).bool(False).bytes())
        self._send(connect)
        r = Reader(self._frame())
        self.protocol_version = r.int()
        self.timeout_ms = r.int()
        self.session_id = r.long()
        self.passwd = r.buffer()
        if self.session_id == 0:
            self.shutdown()
            raise ProtocolError("session expired (the server answered session id 0)")

    def _send(self, payload):
        try:
            self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        except OSError as e:
            raise ProtocolError(f"connection error: {e}")

    def _frame(self, timeout=None):
        deadline = time.monotonic() + (self.io_timeout if timeout is None else timeout)
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">i", self.buf[:4])
                if n < 0:
                    raise ProtocolError(f"negative frame length {n}")
                if len(self.buf) >= 4 + n:
                    frame, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProtocolError("timed out waiting for a frame")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise ProtocolError("timed out waiting for a frame")
            except OSError as e:
                raise ProtocolError(f"connection error: {e}")
            if not data:
                raise ProtocolError("connection closed by the server")
            self.buf += data

    def send(self, op, body=b"", xid=None):
        """Sends a request; returns its xid."""
        if xid is None:
            self.xid += 1
            xid = self.xid
        self._send(Writer().int(xid).int(OPS[op] if isinstance(op, str) else op).raw(body).bytes())
        return xid

    def receive(self, xid, op, timeout=None):
        """Reads frames until the reply to `xid`; notifications go to `events`.
        Returns (err name, zxid, result or None)."""
        while True:
            r = Reader(self._frame(timeout))
            rxid, zxid, err = r.int(), r.long(), r.int()
            if rxid == -1:
                self.events.append((EVENTS.get(r.int(), "?"), r.int(), r.string(), zxid))
                continue
            if rxid != xid and not (op == "ping" and rxid == -2):
                raise ProtocolError(f"reply xid {rxid}, expected {xid}")
            if zxid > 0:
                self.last_zxid = max(self.last_zxid, zxid)
            result = read_result(op, r) if err == 0 else None
            return ERRORS.get(err, str(err)), zxid, result

    def call(self, op, body=b"", xid=None, timeout=None):
        sent = self.send(op, body, xid)
        return self.receive(sent, op, timeout)

    def take_events(self):
        out, self.events = self.events, []
        return out

    def wait_events(self, count, timeout=5.0):
        """Reads notifications until `count` are collected or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while len(self.events) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                r = Reader(self._frame(left))
            except ProtocolError:
                break
            rxid, zxid, _err = r.int(), r.long(), r.int()
            if rxid == -1:
                self.events.append((EVENTS.get(r.int(), "?"), r.int(), r.string(), zxid))
            else:
                raise ProtocolError(f"unexpected reply xid {rxid} while waiting for events")
        return self.take_events()

    def close_session(self):
        return self.call("closeSession")

    def shutdown(self):
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------- Apache ZooKeeper


def find_zookeeper_classpath():
    """The classpath of Debian's `zookeeper` package, or (None, why)."""
    java = shutil.which("java")
    if java is None:
        return None, "no `java` on PATH"
    base = "/usr/share/java"
    jars = ["zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar",
            "metrics-core.jar", "commons-cli.jar", "snappy-java.jar", "netty-handler.jar",
            "netty-common.jar", "netty-buffer.jar", "netty-transport.jar", "netty-codec.jar",
            "netty-resolver.jar", "netty-transport-native-epoll.jar",
            "netty-transport-native-unix-common.jar"]
    missing = [j for j in jars[:3] if not os.path.exists(os.path.join(base, j))]
    if missing:
        return None, f"Debian's zookeeper package is not installed (missing {', '.join(missing)} in {base})"
    return ":".join(os.path.join(base, j) for j in jars if os.path.exists(os.path.join(base, j))), None


def zookeeper_or_skip(what, require, also=()):
    """The classpath of Debian's zookeeper package; None (after saying why
    `what` is skipped) when it, or a file in `also`, is missing, or a
    failure when `require` is set."""
    classpath, why = find_zookeeper_classpath()
    missing = [f for f in also if not os.path.exists(f)]
    if classpath is None or missing:
        msg = f"{what} SKIPPED: {why or ', '.join(missing) + ' missing'} (make zookeeper-package)"
        if require:
            fail(msg)
        print(msg)
        return None
    return classpath


def admin_server_classpath(classpath):
    """`classpath` with what ZooKeeper's AdminServer (Jetty) needs beyond the
    jar's own manifest: the servlet API (Debian's libservlet-api-java, which
    the zookeeper package brings through libjetty9-java); (None, why) when
    it is missing."""
    needed = ["/usr/share/java/servlet-api.jar", "/usr/share/java/jetty9-server.jar"]
    missing = [j for j in needed if not os.path.exists(j)]
    if missing:
        return None, f"ZooKeeper's AdminServer needs {', '.join(missing)} (make zookeeper-package)"
    return classpath + ":" + needed[0], None


def zookeeper_version(classpath):
    """The version string the jar reports, e.g. '3.8.0'."""
    try:
        out = subprocess.run(["java", "-cp", classpath, "org.apache.zookeeper.Version"],
                             capture_output=True, text=True, timeout=60)
        return (out.stdout.strip() or out.stderr.strip()).split("-")[0].split(",")[0]
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


class ApacheZooKeeper:
    """A standalone Apache ZooKeeper (ZooKeeperServerMain) on a free loopback
    port, with a generated zoo.cfg and a temporary dataDir."""

    def __init__(self, classpath, tick_ms=200):
        self.classpath = classpath
        self.dir = tempfile.mkdtemp(prefix="apache-zk-")
        self.port = free_port()
        self.proc = None
        with open(os.path.join(self.dir, "zoo.cfg"), "w") as f:
            f.write("\n".join([
                f"tickTime={tick_ms}",
                f"dataDir={os.path.join(self.dir, 'data')}",
                f"clientPort={self.port}",
                "clientPortAddress=127.0.0.1",
                "admin.enableServer=false",
                "4lw.commands.whitelist=*",
                "extendedTypesEnabled=true",
                "maxClientCnxns=0",
                "minSessionTimeout=1000",
                "maxSessionTimeout=60000",
            ]) + "\n")

    def start(self, timeout=60.0):
        log = open(os.path.join(self.dir, "zk.log"), "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m",
             "-Dzookeeper.extendedTypesEnabled=true",
             # Reap containers and TTL nodes quickly, as zabkeeper does.
             "-Dznode.container.checkIntervalMs=200",
             "-Dzookeeper.admin.enableServer=false",
             "-cp", self.classpath, "org.apache.zookeeper.server.ZooKeeperServerMain",
             os.path.join(self.dir, "zoo.cfg")],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while not handshake_ok(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"Apache ZooKeeper exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Apache ZooKeeper not serving within {timeout}s:\n{self.log()[-3000:]}")
            time.sleep(0.2)
        return self

    def log(self):
        return read_log(os.path.join(self.dir, "zk.log"))

    def stop(self):
        stop_pid(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class ApacheEnsemble:
    """`size` Apache ZooKeeper members (QuorumPeerMain), each its own JVM, on
    free loopback ports, with one generated zoo.cfg per member, a myid file
    and a temporary dataDir each; fsync on (ZooKeeper's default). Stopped by
    PID."""

    def __init__(self, classpath, size=3, tick_ms=200, heap="512m", admin_server=False):
        """With `admin_server`, each member serves ZooKeeper's AdminServer
        (Jetty, `/commands`) on a loopback port of its own (`admin_port(i)`);
        the classpath then needs the servlet API (`admin_server_classpath`)."""
        self.classpath = classpath
        self.size = size
        self.heap = heap
        self.admin_server = admin_server
        self.dir = tempfile.mkdtemp(prefix="apache-zk-ensemble-")
        self.procs = {}
        kinds = ("client", "peer", "election") + (("admin",) if admin_server else ())
        self.ports = {i: {k: free_port() for k in kinds} for i in range(1, size + 1)}
        servers = [f"server.{i}=127.0.0.1:{p['peer']}:{p['election']}" for i, p in sorted(self.ports.items())]
        for i, p in self.ports.items():
            data = os.path.join(self.dir, f"zk{i}")
            os.makedirs(data)
            with open(os.path.join(data, "myid"), "w") as f:
                f.write(f"{i}\n")
            with open(os.path.join(self.dir, f"zoo{i}.cfg"), "w") as f:
                f.write("\n".join([
                    f"tickTime={tick_ms}",
                    "initLimit=10",
                    "syncLimit=5",
                    f"dataDir={data}",
                    f"clientPort={p['client']}",
                    "clientPortAddress=127.0.0.1",
                    "4lw.commands.whitelist=*",
                    "maxClientCnxns=0",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "forceSync=yes",
                ] + self._admin_lines(p) + servers) + "\n")

    def _admin_lines(self, p):
        if not self.admin_server:
            return ["admin.enableServer=false"]
        return ["admin.enableServer=true", "admin.serverAddress=127.0.0.1", f"admin.serverPort={p['admin']}"]

    def admin_port(self, i):
        """Member `i`'s AdminServer port (with `admin_server`)."""
        return self.ports[i]["admin"]

    def start(self, timeout=90.0):
        for i in self.ports:
            self.spawn(i)
        deadline = time.monotonic() + timeout
        while True:
            modes = [self.mode(i) for i in self.ports]
            if all(m in ("leader", "follower") for m in modes) and modes.count("leader") == 1:
                return self
            for i, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"Apache ZooKeeper member {i} exited with {proc.returncode}:\n{self.log(i)[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Apache ZooKeeper ensemble not serving within {timeout}s (modes {modes})")
            time.sleep(0.3)

    def spawn(self, i):
        """Starts member `i` (again) on its ports and data."""
        log = open(os.path.join(self.dir, f"zk{i}.log"), "ab")
        self.procs[i] = subprocess.Popen(
            ["java", f"-Xmx{self.heap}", f"-Dzookeeper.admin.enableServer={str(self.admin_server).lower()}",
             "-cp", self.classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
             os.path.join(self.dir, f"zoo{i}.cfg")],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def kill(self, i):
        """kill -9 of member `i`."""
        kill_pid(self.procs.pop(i, None))

    def client_port(self, i):
        return self.ports[i]["client"]

    def mode(self, i):
        """'leader' or 'follower' once serving, from `srvr`; None before."""
        return srvr_mode(self.ports[i]["client"])

    def hosts(self, ids=None):
        """A ZooKeeper connect string."""
        ids = ids or sorted(self.ports)
        return ",".join(f"127.0.0.1:{self.ports[i]['client']}" for i in ids)

    def pids(self):
        """The members' process ids."""
        return {i: p.pid for i, p in self.procs.items()}

    def log(self, i):
        return read_log(os.path.join(self.dir, f"zk{i}.log"))

    def stop(self):
        for proc in self.procs.values():
            stop_pid(proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def rss_bytes(pid):
    """A process's resident set size, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid):
    """User plus system CPU time a process has used, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat; after the ")" of the command they are 12th and 13th.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_live_heap(pid):
    """A JVM's heap in use right after a full GC (`jcmd PID GC.run`, then
    `GC.heap_info`), in bytes; None when jcmd is missing or fails."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=120, check=True)
        out = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.stdout.splitlines():
        if "total" in line and "used" in line:
            used = line.split("used", 1)[1].strip().split()[0].rstrip(",")
            if used.endswith("K"):
                return int(used[:-1]) * 1024
    return None


def fail(message):
    """Prints a failure and exits non-zero."""
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)
