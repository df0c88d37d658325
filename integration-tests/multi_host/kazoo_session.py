"""A kazoo session that must outlive membership changes (make test-multi-host,
`membership`): connects over TLS to the hosts given, creates an ephemeral
node, then reads and writes through kazoo's retry every 100 ms until its
stdin closes. At the end it checks the session is the one it started with
and its ephemeral node is still there, and prints one line:

    OK <session id> <operations> <disconnections>
    FAIL <why>

A SessionExpired (LOST) or any error other than a connection loss, which
kazoo's retry repeats, is a failure. Bounded: 10 minutes at most.
"""

import sys
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry


def main():
    hosts, ca, label = sys.argv[1], sys.argv[2], sys.argv[3]
    states = []
    client = KazooClient(hosts=hosts, timeout=15.0, use_ssl=True, ca=ca, verify_certs=True,
                         connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1},
                         command_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1, "deadline": 60})
    client.add_listener(states.append)
    client.start(timeout=30)
    session = client.client_id[0]
    ephemeral = f"/mh/{label}-ephemeral"
    client.ensure_path("/mh")
    client.create(ephemeral, b"held", ephemeral=True)
    print("READY", flush=True)
    stopped = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stopped.set()), daemon=True).start()
    retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=1, deadline=60)
    ops = 0
    started = time.monotonic()
    try:
        while not stopped.is_set() and time.monotonic() - started < 600:
            retry(client.set, ephemeral, str(ops).encode())
            data, _ = retry(client.get, ephemeral)
            if data != str(ops).encode():
                raise RuntimeError(f"read {data!r} after writing {ops}")
            ops += 1
            time.sleep(0.1)
        if KazooState.LOST in states:
            raise RuntimeError("the session was lost (expired)")
        if client.client_id[0] != session:
            raise RuntimeError(f"the session changed from {session:x} to {client.client_id[0]:x}")
        if retry(client.exists, ephemeral) is None:
            raise RuntimeError("the ephemeral node is gone")
        drops = states.count(KazooState.SUSPENDED)
        print(f"OK {session:x} {ops} {drops}", flush=True)
    except Exception as e:  # reported, not raised: the test reads this line
        print(f"FAIL {type(e).__name__}: {e} (states {states})", flush=True)
    finally:
        client.stop()
        client.close()


if __name__ == "__main__":
    main()
