#!/usr/bin/env python3
"""kazoo (python-zk/kazoo, from PyPI) against a 3-member zabkeeper ensemble
that this script starts from the built binary on free loopback ports, with
temporary data directories, and stops by PID at the end.

Checks: basic CRUD with versions and error classes, one-shot and
DataWatch/ChildrenWatch watches, the leader-election recipe (client.Election:
exactly one leader at a time, and another takes over when the leader's client
stops), and the lock recipe (client.Lock: mutual exclusion under contention,
checked with a shared counter updated only under the lock), a session
over TLS (use_ssl, the server's certificate verified), a client
certificate as an x509 identity (certfile/keyfile, x509: ACLs, the x509
superuser), and reconfiguration
(client.reconfig: refused without the super user, BadVersion on a stale
version, NewConfigNoQuorum toward members that do not run, a member removed
and added back with its line read from /zookeeper/config, whose watch
fires). Every wait is bounded; exits non-zero with a clear message on the
first failure.

Usage: kazoo_smoke.py [--binary target/debug/zabkeeper] [--clients N] [--rounds N]
"""

import argparse
import base64
import hashlib
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zk_support  # noqa: E402

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import (BadVersionError, NewConfigNoQuorumError, NoAuthError, NoNodeError,
                                  NodeExistsError, NotEmptyError)
    from kazoo.protocol.states import EventType
    from kazoo.security import ACL, Id, Permissions
except ImportError as e:  # the one external package this check needs
    print(f"kazoo smoke test cannot run: {e} (pip install kazoo; .ci/python-env does it)", file=sys.stderr)
    sys.exit(2)


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise Failure(f"{what}: not within {timeout}s")


def client(hosts, timeout=10.0):
    c = KazooClient(hosts=hosts, timeout=timeout, connection_retry={"max_tries": 20, "delay": 0.05})
    c.start(timeout=15)
    return c


def crud_and_watches(hosts):
    a = client(hosts)
    b = client(hosts)
    try:
        a.create("/smoke", b"v0")
        data, stat = a.get("/smoke")
        check(data == b"v0" and stat.version == 0, f"get after create: {data!r} {stat}")
        try:
            a.create("/smoke", b"again")
            raise Failure("create of an existing node succeeded")
        except NodeExistsError:
            pass
        stat = a.set("/smoke", b"v1", version=0)
        check(stat.version == 1 and stat.mzxid > stat.czxid, f"set: {stat}")
        try:
            a.set("/smoke", b"v2", version=0)
            raise Failure("set with a stale version succeeded")
        except BadVersionError:
            pass
        path = a.create("/smoke/seq-", b"", sequence=True)
        check(path == "/smoke/seq-0000000000", f"sequential name {path}")
        a.create("/smoke/eph", b"", ephemeral=True)
        check(a.exists("/smoke/eph").ephemeralOwner == a.client_id[0], "ephemeral owner")
        try:
            a.delete("/smoke")
            raise Failure("delete of a node with children succeeded")
        except NotEmptyError:
            pass
        try:
            a.get("/smoke/none")
            raise Failure("get of a missing node succeeded")
        except NoNodeError:
            pass
        a.ensure_path("/smoke/deep/er/path")
        check(a.exists("/smoke/deep/er/path") is not None, "ensure_path")
        tx = a.transaction()
        tx.create("/smoke/tx", b"t")
        tx.set_data("/smoke", b"tx", version=1)
        tx.check("/smoke", 2)
        results = tx.commit()
        check(results[0] == "/smoke/tx" and results[1].version == 2 and results[2] is True, f"transaction {results}")

        # One-shot watch: fires once, before the read that sees the change.
        events = []
        fired = threading.Event()

        def on_event(event):
            events.append((event.type, event.path))
            fired.set()

        b.sync("/smoke")
        b.get("/smoke", watch=on_event)
        a.set("/smoke", b"w1")
        check(fired.wait(10), "the data watch did not fire")
        a.set("/smoke", b"w2")
        b.sync("/smoke")
        data, _ = b.get("/smoke")
        check(data == b"w2", f"b reads {data!r} after sync")
        check(events == [(EventType.CHANGED, "/smoke")], f"one-shot watch fired {events}")

        # DataWatch and ChildrenWatch recipes (they re-arm on every event).
        seen_data = []
        seen_children = []
        b.DataWatch("/smoke/tx", lambda data, stat: seen_data.append(data))
        b.ChildrenWatch("/smoke/deep", lambda children: seen_children.append(sorted(children)))
        a.set("/smoke/tx", b"t2")
        a.create("/smoke/deep/x")
        wait_for(lambda: b"t2" in seen_data, 10, "DataWatch saw the new data")
        wait_for(lambda: ["er", "x"] in seen_children, 10, "ChildrenWatch saw the new child")

        # The ephemeral goes with a's session.
        a.stop()
        b.sync("/smoke")
        check(b.exists("/smoke/eph") is None, "ephemeral still there after its session closed")
        b.delete("/smoke", recursive=True)
        check(b.exists("/smoke") is None, "recursive delete")
    finally:
        for c in (a, b):
            c.stop()
            c.close()


def election(hosts, n):
    """n clients run client.Election; exactly one leads at a time; when the
    leader's client stops, another takes over."""
    clients = [client(hosts) for _ in range(n)]
    leading = []  # clients that lead now: entered their leader function, not yet deposed
    history = []  # clients in the order they led
    lock = threading.Lock()
    violations = []
    release = {i: threading.Event() for i in range(n)}

    def lead(i):
        with lock:
            if leading:
                violations.append(f"c{i} leads while {['c%d' % j for j in leading]} lead")
            leading.append(i)
            history.append(i)
        # Lead until deposed: the test stops this client (its session closes,
        # its election node goes) and only then releases this function.
        release[i].wait(60)

    def run(i, e):
        try:
            e.run(lead, i)
        except Exception:  # noqa: BLE001
            # A stopped client cannot delete its election node on the way out;
            # its session's close already removed it.
            if i not in stopped:
                raise

    elections = [c.Election("/election", identifier=f"c{i}") for i, c in enumerate(clients)]
    stopped = set()
    threads = []
    for i, e in enumerate(elections):
        t = threading.Thread(target=run, args=(i, e), daemon=True)
        t.start()
        threads.append(t)
    try:
        wait_for(lambda: len(history) == 1, 15, "a first leader")
        everyone = {f"c{i}" for i in range(n)}
        wait_for(lambda: set(elections[0].contenders()) == everyone, 15, f"all of {sorted(everyone)} contending")
        check(elections[0].contenders()[0] == f"c{history[0]}", "the first contender is the leader")
        for round_ in range(n - 1):
            leader = history[-1]
            # The leader's client stops (its session closes): it is deposed,
            # and another takes over.
            stopped.add(leader)
            with lock:
                leading.remove(leader)
            clients[leader].stop()
            release[leader].set()
            wait_for(lambda: len(history) == round_ + 2, 20, f"a new leader after c{leader} stopped")
            check(history[-1] not in stopped, f"a stopped client leads: {history}")
        check(not violations, f"two leaders at once: {violations}")
        check(len(set(history)) == n, f"each client led once: {history}")
        print(f"  election: leaders in order {['c%d' % i for i in history]}, never two at once")
    finally:
        stopped.update(range(n))
        for c in clients:
            c.stop()
        for i in range(n):
            release[i].set()
        for c in clients:
            c.close()
        for t in threads:
            t.join(5)


def locking(hosts, n, rounds):
    """n clients in threads increment a counter node under client.Lock; the
    read-modify-write is only correct with mutual exclusion, which is also
    checked directly with an in-process holder count."""
    clients = [client(hosts) for _ in range(n)]
    setup = clients[0]
    setup.ensure_path("/counter")
    setup.set("/counter", b"0")
    holders = [0]
    max_holders = [0]
    guard = threading.Lock()
    errors = []

    def work(i):
        c = clients[i]
        lk = c.Lock("/locks/counter", identifier=f"w{i}")
        for _ in range(rounds):
            if not lk.acquire(timeout=30):
                errors.append(f"w{i} could not get the lock within 30 s")
                return
            try:
                with guard:
                    holders[0] += 1
                    max_holders[0] = max(max_holders[0], holders[0])
                c.sync("/counter")
                data, stat = c.get("/counter")
                time.sleep(0.001)  # widen the window a missing lock would expose
                # No version check: only the lock keeps increments from being lost.
                c.set("/counter", str(int(data) + 1).encode())
                with guard:
                    holders[0] -= 1
            finally:
                lk.release()

    started = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    try:
        check(not any(t.is_alive() for t in threads), "lock workers still running after 120 s")
        check(not errors, "; ".join(errors))
        setup.sync("/counter")
        value = int(setup.get("/counter")[0])
        check(max_holders[0] == 1, f"{max_holders[0]} holders of the lock at once")
        check(value == n * rounds, f"counter {value}, expected {n * rounds}: increments were lost")
        print(f"  lock: {n} clients x {rounds} increments = {value}, one holder at a time "
              f"({n * rounds / elapsed:.0f} lock-protected increments/s)")
    finally:
        for c in clients:
            c.stop()
            c.close()


def tls(ensemble):
    """kazoo with use_ssl against the TLS port (ZooKeeper's secureClientPort),
    verifying the server's certificate; what it writes reads back on the
    plain port."""
    secure = KazooClient(hosts=ensemble.hosts(secure=True), timeout=10.0, use_ssl=True, ca=ensemble.ca,
                         verify_certs=True, connection_retry={"max_tries": 20, "delay": 0.05})
    secure.start(timeout=15)
    plain = client(ensemble.hosts())
    try:
        secure.create("/tls", b"over tls")
        data, _ = secure.get("/tls")
        check(data == b"over tls", f"read over TLS: {data!r}")
        plain.sync("/tls")
        check(plain.get("/tls")[0] == b"over tls", "the plain port sees what was written over TLS")
        print(f"  tls: kazoo use_ssl=True to {ensemble.hosts(secure=True)}, server certificate verified")
    finally:
        for c in (secure, plain):
            c.stop()
            c.close()


def x509(binary):
    """kazoo with a client certificate (certfile, keyfile) on a member with
    client_auth: the certificate's subject is its x509 identity, so an
    x509: ACL admits that client, refuses another, and x509_superuser
    passes it; a session resumes over TLS with the same identity."""
    su = 'x509_superuser = "CN=admin,O=kazoo test"'
    member = zk_support.Ensemble(binary, size=1, secure=True, client_auth=True, extra=su)
    clients = []
    try:
        member.start()

        def as_subject(name):
            cert, key = zk_support.make_client_certificate(member.dir, name, f"/O=kazoo test/CN={name}")
            c = KazooClient(hosts=member.hosts(secure=True), timeout=10.0, use_ssl=True, ca=member.ca,
                            certfile=cert, keyfile=key, verify_certs=True,
                            connection_retry={"max_tries": 20, "delay": 0.05})
            c.start(timeout=15)
            clients.append(c)
            return c

        app, other, admin = as_subject("app"), as_subject("other"), as_subject("admin")
        only_app = [ACL(Permissions.ALL, Id("x509", "CN=app,O=kazoo test"))]
        app.create("/x509", b"for app", acl=only_app)
        check(app.get("/x509")[0] == b"for app", "app reads what its ACL grants it")
        check([(a.id.scheme, a.id.id) for a in app.get_acls("/x509")[0]] == [("x509", "CN=app,O=kazoo test")],
              "the ACL reads back as written")
        try:
            other.get("/x509")
            check(False, "another subject read a node only app may read")
        except NoAuthError:
            pass
        check(admin.get("/x509")[0] == b"for app", "the x509 superuser reads everything")
        print("  x509: kazoo certfile/keyfile; x509:CN=app,O=kazoo test admits app only; CN=admin is superuser")
    finally:
        for c in clients:
            c.stop()
            c.close()
        panics = member.stop()
        check(not panics, f"a member panicked: {panics}")


SUPER_PASSWORD = "kazoo-smoke"


def super_digest():
    """The super_digest line for user `super` with SUPER_PASSWORD."""
    digest = base64.b64encode(hashlib.sha1(f"super:{SUPER_PASSWORD}".encode()).digest()).decode()
    return f'super_digest = "super:{digest}"'


def reconfig_retrying(client, **kwargs):
    """client.reconfig, retried on ConnectionLoss (bounded). When the member
    removed just before was the leader, its hand-over is a leader change, and
    every member closes its client connections until it follows the new one
    (as ZooKeeper's learners do), so a call sent then fails with ConnectionLoss
    and the session lives on. Re-adding a member that is back is accepted."""
    from kazoo.exceptions import ConnectionLoss
    for attempt in range(5):
        try:
            return client.reconfig(**kwargs)
        except ConnectionLoss:
            if attempt == 4:
                raise
            time.sleep(0.5)


def reconfiguration(hosts):
    plain = client(hosts)
    try:
        try:
            plain.reconfig(joining=None, leaving="3", new_members=None)
            raise Failure("reconfig without the super user was accepted")
        except NoAuthError:
            pass
    finally:
        plain.stop()
        plain.close()
    admin = KazooClient(hosts=hosts, timeout=10.0, auth_data=[("digest", f"super:{SUPER_PASSWORD}")],
                        connection_retry={"max_tries": 20, "delay": 0.05})
    admin.start(timeout=15)
    try:
        fired = threading.Event()
        data, _ = admin.get("/zookeeper/config", watch=lambda event: fired.set())
        text = data.decode()
        line3 = next((l for l in text.splitlines() if l.startswith("server.3=")), None)
        check(line3 is not None and ":participant;" in line3, f"/zookeeper/config lists member 3: {text!r}")
        version = int(text.rsplit("version=", 1)[1], 16)
        try:
            admin.reconfig(joining=None, leaving="3", new_members=None, from_config=version + 1)
            raise Failure("reconfig from a stale version was accepted")
        except BadVersionError:
            pass
        lines = [l for l in text.splitlines() if l.startswith("server.1=")]
        lines += ["server.8=127.0.0.1:1:1:participant;1", "server.9=127.0.0.1:2:2:participant;2"]
        try:
            admin.reconfig(joining=None, leaving=None, new_members=",".join(lines))
            raise Failure("reconfig toward members that do not run was accepted")
        except NewConfigNoQuorumError:
            pass
        data, _ = admin.reconfig(joining=None, leaving="3", new_members=None, from_config=version)
        check("server.3=" not in data.decode(), f"member 3 removed: {data!r}")
        wait_for(fired.is_set, 10, "the watch on /zookeeper/config fires")
        # The line read from /zookeeper/config is handed back unchanged.
        data, _ = reconfig_retrying(admin, joining=line3, leaving=None, new_members=None)
        check(line3 in data.decode(), f"member 3 added back: {data!r}")
        now, _ = admin.get("/zookeeper/config")
        check(now == data, "the reply is /zookeeper/config")
    finally:
        admin.stop()
        admin.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=zk_support.default_binary())
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    ensemble = zk_support.Ensemble(args.binary, size=3, secure=True, extra=f"reconfig_enabled = true\n{super_digest()}")
    try:
        ensemble.start()
        hosts = ensemble.hosts()
        print(f"kazoo smoke: 3 zabkeeper members at {hosts}")
        for name, run in [("CRUD and watches", lambda: crud_and_watches(hosts)),
                          ("leader election", lambda: election(hosts, args.clients)),
                          ("lock", lambda: locking(hosts, args.clients, args.rounds)),
                          ("TLS", lambda: tls(ensemble)),
                          ("x509 identity", lambda: x509(args.binary)),
                          ("reconfig", lambda: reconfiguration(hosts))]:
            started = time.monotonic()
            run()
            print(f"ok: {name} ({time.monotonic() - started:.1f}s)")
    except (Failure, RuntimeError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        for i in sorted(ensemble.ports):
            print(f"--- member {i} log (tail) ---\n{ensemble.log(i)[-2000:]}", file=sys.stderr)
        ensemble.stop()
        return 1
    panics = ensemble.stop()
    if panics:
        print("FAIL: a zabkeeper member panicked:\n  " + "\n  ".join(panics), file=sys.stderr)
        return 1
    print("kazoo smoke: 6 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
