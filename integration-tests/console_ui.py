#!/usr/bin/env python3
"""The web console (`/ui/`) in a real browser: Debian's Chromium, headless,
driven over the DevTools protocol (a websocket on 127.0.0.1; the client is
below, stdlib only) against a 3-member zabkeeper ensemble on loopback with
an admin token.

It loads each view and checks the DOM against the admin API (`/commands`):
the leader and every member's znode count; is refused an edit without the
token (by the server: 401, and the page says so); with the token creates and
edits a node and sets its ACL through the page and reads them back with kazoo;
is refused a write without the page's header, and the log, stream and
sessions without the token; sees a change
made by another client appear in the live changes view and opens it; finds
kazoo's session in the sessions view; takes a snapshot and downloads it
(the same bytes the API streams, read by `zkctl export`); kills a member by
PID and sees it shown as down. A screenshot of each view is saved under
target/ui-screenshots/.

Usage: console_ui.py [--binary target/debug/zabkeeper] [--chromium chromium]
                     [--screenshots target/ui-screenshots]
Every process it starts is stopped by PID; every wait is bounded.
"""

import argparse
import base64
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zk_support as zk  # noqa: E402

from kazoo.client import KazooClient  # noqa: E402

TOKEN = "c0nsole-t0ken"
WAIT = 15.0


class WebSocket:
    """A minimal websocket client (RFC 6455): text frames out (masked),
    text frames in (reassembled), pings answered. Enough for DevTools."""

    def __init__(self, url, timeout=WAIT):
        assert url.startswith("ws://")
        host_port, _, path = url[len("ws://"):].partition("/")
        host, _, port = host_port.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise RuntimeError("the DevTools websocket closed during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"websocket handshake refused: {head[:200]!r}")

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise RuntimeError("the DevTools websocket closed")
            data += chunk
        return data

    def _frame(self, opcode, payload):
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, text):
        self._frame(0x1, text.encode())

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            if opcode == 0x9:
                self._frame(0xA, payload)
            elif opcode == 0x8:
                raise RuntimeError("the DevTools websocket was closed by Chromium")
            elif opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Browser:
    """Headless Chromium on a temporary profile, one page, driven over DevTools."""

    def __init__(self, chromium, screenshots):
        self.profile = tempfile.mkdtemp(prefix="zabkeeper-chromium-")
        self.screenshots = screenshots
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "--window-size=1280,860",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("Chromium did not open its DevTools port within 30 s")
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        self.ws = WebSocket(pages[0]["webSocketDebuggerUrl"])
        self.next_id = 0
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=860, deviceScaleFactor=1, mobile=False)

    def call(self, method, **params):
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            message = json.loads(self.ws.recv())
            if message.get("id") == my_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
        raise RuntimeError(f"{method}: no answer within {WAIT} s")

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails'].get('exception', {}).get('description')}")
        return r.get("result", {}).get("value")

    def open(self, url):
        self.call("Page.navigate", url=url)
        self.wait(f"location.href === {json.dumps(url)} && document.readyState === 'complete'", f"loading {url}")

    def wait(self, expression, what, timeout=WAIT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.js(f"!!({expression})")
            if last:
                return last
            time.sleep(0.1)
        self.screenshot("failed")
        raise AssertionError(f"waited {timeout} s for {what}; last: {last!r}")

    def text(self, selector):
        return self.js(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent")

    def fill(self, selector, value):
        self.js(f"document.querySelector({json.dumps(selector)}).value = {json.dumps(value)}")

    def click(self, selector):
        self.js(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, name):
        os.makedirs(self.screenshots, exist_ok=True)
        # Down to the footer: no empty page below a short view (smaller files).
        bottom = self.js("Math.ceil(document.querySelector('footer').getBoundingClientRect().bottom) + 8")
        clip = {"x": 0, "y": 0, "width": 1280, "height": max(200, min(860, bottom or 860)), "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip)["data"]
        path = os.path.join(self.screenshots, f"console-{name}.png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        print(f"  screenshot {path}")

    def stop(self):
        self.ws.close() if hasattr(self, "ws") else None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        # Its helpers (renderer, zygote) are in the session it leads: end those left.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        shutil.rmtree(self.profile, ignore_errors=True)


def command(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/commands/{name}", timeout=5) as r:
        return json.load(r)


def request(port, method, path, body=None, token=None, page=True):
    """(status, JSON) of one API call; `page`: with the header the console's page sends."""
    headers = {"Content-Type": "application/json"}
    if page:
        headers["X-Zabkeeper-Console"] = "1"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def download_snapshot(browser, http, binary):
    """Clicks a listed snapshot's Download button and checks the file Chromium
    saves: the same bytes the API streams with the token, a snapshot the
    offline tools read (`zkctl export` turns it into ZooKeeper's format), and
    refused without the token."""
    downloads = tempfile.mkdtemp(prefix="zabkeeper-downloads-")
    try:
        browser.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=downloads)
        zxid = browser.js("document.querySelector('#snapshots tr[data-zxid]').dataset.zxid")
        browser.click(f"#snapshots tr[data-zxid='{zxid}'] button")
        saved = os.path.join(downloads, f"snapshot-{zxid}.zsnap")
        deadline = time.monotonic() + WAIT
        while not (os.path.exists(saved) and not any(n.endswith(".crdownload") for n in os.listdir(downloads))):
            if time.monotonic() > deadline:
                raise AssertionError(f"no download of the snapshot at {zxid} within {WAIT} s: {os.listdir(downloads)}")
            time.sleep(0.1)
        with open(saved, "rb") as f:
            got = f.read()
        req = urllib.request.Request(f"http://127.0.0.1:{http}/ui/api/snapshots/{zxid}",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            streamed = r.read()
        check(len(got) > 0 and got == streamed,
              f"the Download button saved snapshot-{zxid}.zsnap, {len(got)} bytes, the bytes the API streams")
        zkctl = os.path.join(os.path.dirname(os.path.abspath(binary)), "zkctl")
        out = os.path.join(downloads, "zookeeper")
        os.makedirs(out)
        done = subprocess.run([zkctl, "export", "--snapshot", saved, "--zookeeper-snapshot", out],
                              capture_output=True, text=True, timeout=60)
        check(done.returncode == 0 and os.listdir(out),
              f"zkctl export reads the downloaded snapshot: {done.stdout.strip() or done.stderr.strip()}")
        status, _ = request(http, "GET", f"/ui/api/snapshots/{zxid}")
        check(status == 401, f"a snapshot download without the token is refused ({status})")
    finally:
        shutil.rmtree(downloads, ignore_errors=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)
    print(f"  ok: {what}")


def run(ensemble, browser):
    http = ensemble.ports[1]["metrics"]
    base = f"http://127.0.0.1:{http}"
    kz = KazooClient(hosts=ensemble.hosts(), timeout=10)
    kz.start(timeout=15)
    try:
        kz.create("/app/config", b'{"replicas": 3, "name": "demo"}', makepath=True)
        for i in range(12):
            kz.create(f"/app/workers/w{i:02}", str(i).encode(), makepath=True)

        print("ensemble view")
        browser.open(base + "/ui/")
        browser.wait("document.querySelectorAll('#members tr[data-up=true]').length === 3", "3 members up")
        states = {i: command(ensemble.ports[i]["metrics"], "mntr") for i in ensemble.ports}
        leader = [i for i, m in states.items() if m["server_state"] == "leader"]
        check(len(leader) == 1, f"the admin API names one leader: {leader}")
        browser.wait(f"document.getElementById('leader-id').textContent === 'member {leader[0]}'", "the leader shown")
        check(True, f"the page shows member {leader[0]} as leader")
        for i, m in states.items():
            cell = f"#members tr[data-member='{i}'] td[data-field=znodes]"
            browser.wait(f"document.querySelector(\"{cell}\").textContent === '{m['znode_count']}'",
                         f"member {i}'s znode count {m['znode_count']}")
        check(True, "every member's znode count matches mntr")
        role = browser.text(f"#members tr[data-member='{leader[0]}'] td[data-field=role]")
        check(role.strip() == "leader", f"the leader's role cell says leader ({role!r})")
        browser.screenshot("ensemble")

        print("tree view")
        browser.open(base + "/ui/tree/app/config")
        browser.wait("document.getElementById('node-data') && document.getElementById('node-data').dataset.mode === 'json'",
                     "the data shown as JSON")
        check('"replicas": 3' in browser.text("#node-data"), "the JSON is pretty-printed")
        check(browser.text("[data-stat=version]") == "0", "the Stat's version is shown")
        check(browser.text("#acl").count("world") == 1, "the ACL is listed")
        browser.open(base + "/ui/tree/app/workers")
        browser.wait("document.getElementById('children-count').textContent === '12 children'", "12 children listed")
        browser.fill("#search-prefix", "/app/wor")
        browser.click("#search-form button")
        browser.wait("document.querySelectorAll('#search-results a').length === 13", "the search finds 13 paths")
        check(True, "search by prefix /app/wor finds /app/workers and its 12 children")
        browser.open(base + "/ui/tree/app/config")
        browser.wait("document.getElementById('set-data-text')", "the edit form")

        print("edits without the token are refused")
        browser.fill("#set-data-text", "tampered")
        browser.click("#set-data-btn")
        browser.wait("!document.getElementById('notice').hidden", "the refusal shown")
        check("Refused" in browser.text("#notice") and "NoAuth" in browser.text("#notice"),
              f"the page says the server refused: {browser.text('#notice')!r}")
        check(kz.get("/app/config")[0] == b'{"replicas": 3, "name": "demo"}', "the node is unchanged")
        status, body = request(http, "POST", "/ui/api/node", {"path": "/app/x", "data": "x"})
        check(status == 401 and body["error"] == "NoAuth", f"the API answers 401 NoAuth without the token ({status})")
        status, _ = request(http, "PUT", "/ui/api/node", {"path": "/app/config", "data": "x", "version": 0},
                            token="wrong")
        check(status == 401, "and with a wrong token")
        status, _ = request(http, "POST", "/ui/api/node", {"path": "/app/x", "data": "x"}, token=TOKEN, page=False)
        check(status == 403, f"a write not sent by the page (no console header) is refused, token or not ({status})")

        print("edits with the token")
        browser.fill("#token", TOKEN)
        browser.click("#token-set")
        browser.wait("document.getElementById('mode').textContent === 'admin token set'", "the token taken")
        browser.wait("document.getElementById('set-data-text')", "the edit form")
        browser.fill("#set-data-text", '{"replicas": 5}')
        browser.fill("#set-data-version", "0")
        browser.click("#set-data-btn")
        browser.wait("document.getElementById('notice').textContent.startsWith('Saved')", "the save confirmed")
        data, stat = kz.get("/app/config")
        check(data == b'{"replicas": 5}' and stat.version == 1, "kazoo reads the data set through the console")
        browser.wait("document.querySelector('[data-stat=version]') && "
                     "document.querySelector('[data-stat=version]').textContent === '1'", "version 1 shown")
        browser.fill("#create-name", "feature-flags")
        browser.fill("#create-data", "dark-mode=on")
        browser.click("#create-btn")
        browser.wait("location.pathname === '/ui/tree/app/config/feature-flags'", "the new node opened")
        check(kz.get("/app/config/feature-flags")[0] == b"dark-mode=on", "kazoo reads the node created in the console")
        browser.wait("document.getElementById('node-data') && document.getElementById('node-data').dataset.mode === 'text'",
                     "the text shown")
        browser.screenshot("tree")
        browser.fill("#set-data-version", "7")
        browser.click("#set-data-btn")
        browser.wait("document.getElementById('notice').textContent.includes('BadVersion')", "a wrong version refused")
        check(True, "a set with the wrong expected version is refused with BadVersion")
        browser.fill("#acl-text", "world:anyone:r\nip:127.0.0.1:cdrwa")
        browser.click("#acl-btn")
        browser.wait("document.getElementById('notice').textContent.startsWith('ACL of')", "the ACL set")
        acls, acl_stat = kz.get_acls("/app/config/feature-flags")
        check(sorted((a.id.scheme, a.id.id, a.perms) for a in acls) == [("ip", "127.0.0.1", 31), ("world", "anyone", 1)]
              and acl_stat.aversion == 1, f"kazoo reads the ACL set through the console: {acls}")
        browser.js("window.confirm = () => true")
        browser.click("#delete-btn")
        browser.wait("location.pathname === '/ui/tree/app/config'", "back at the parent after the delete")
        check(kz.exists("/app/config/feature-flags") is None, "kazoo no longer sees the deleted node")

        print("changes view")
        browser.open(base + "/ui/changes")
        browser.wait("document.getElementById('stream-state').textContent === 'live'", "the stream live")
        browser.fill("#filter-prefix", "/app/config")
        browser.js("document.querySelector('#filter-prefix').form.requestSubmit()")
        browser.wait("document.getElementById('stream-state').textContent === 'live'", "the filtered stream live")
        time.sleep(0.3)
        kz.set("/app/config", b'{"replicas": 7}')
        kz.create("/elsewhere", b"")
        zxid = hex(kz.exists("/app/config").mzxid)
        browser.wait(f"document.querySelector(\"#live tr[data-zxid='{zxid}']\")", f"the change at {zxid} streamed")
        check(browser.js("[...document.querySelectorAll('#live tr')].every(r => r.dataset.paths.startsWith('/app/config'))"),
              "the filter keeps only /app/config's changes")
        browser.click(f"#live tr[data-zxid='{zxid}']")
        browser.wait("document.getElementById('entry-description')", "the transaction opened")
        check("setData /app/config" in browser.text("#entry-description"), "the opened transaction shows its op")
        browser.wait("document.querySelector('#entry pre pre, #entry td pre') && "
                     "document.querySelector('#entry td pre').textContent.includes('\"replicas\": 7')", "its data")
        check(True, "with the token, the opened transaction shows its data")
        hidden, _ = request(http, "GET", f"/ui/api/log/{zxid}")
        _, shown = request(http, "GET", f"/ui/api/log/{zxid}", token=TOKEN)
        check(hidden == 401 and shown["ops"][0]["data_hex"] == b'{"replicas": 7}'.hex(),
              "without the token the log is refused (it names every write and bypasses the nodes' ACLs)")
        for path in ("/ui/api/sessions", "/ui/api/connections", "/ui/api/log?last=5", "/ui/api/changes"):
            status, _ = request(http, "GET", path)
            check(status == 401, f"{path} needs the token ({status})")
        browser.wait("document.querySelectorAll('#log tr').length > 0", "the log page read")
        browser.screenshot("changes")

        print("sessions view")
        kz.create("/app/leases/worker-1", b"", ephemeral=True, makepath=True)
        kz.get("/app/config", watch=lambda event: None)
        browser.open(base + "/ui/sessions")
        session = hex(kz.client_id[0])
        row = f"#sessions tr[data-session='{session}']"
        browser.wait(f"document.querySelector(\"{row}\")", f"kazoo's session {session}")
        browser.wait(f"document.querySelector(\"{row}\").textContent.includes('/app/leases/worker-1')", "its ephemeral")
        browser.wait(f"document.querySelector(\"{row}\").textContent.includes('/app/config')", "its watch")
        check(True, f"kazoo's session {session} is listed with its ephemeral and its watch, and the member it is on")
        browser.screenshot("sessions")

        print("snapshots view")
        browser.open(base + "/ui/snapshots")
        browser.click("#take-snapshot")
        browser.wait("document.querySelectorAll('#snapshots tr[data-zxid]').length >= 1", "a snapshot listed")
        check(True, "a snapshot taken through the console is listed")
        browser.screenshot("snapshots")
        download_snapshot(browser, http, ensemble.binary)

        print("a killed member is shown as down")
        victim = next(i for i in ensemble.ports if i != 1 and i != leader[0])
        pid = ensemble.pids()[victim]
        ensemble.kill(victim)
        print(f"  killed member {victim} (pid {pid})")
        browser.open(base + "/ui/")
        browser.wait(f"document.querySelector(\"#members tr[data-member='{victim}']\") && "
                     f"document.querySelector(\"#members tr[data-member='{victim}']\").dataset.up === 'false'",
                     f"member {victim} shown as down")
        check("down" in browser.text(f"#members tr[data-member='{victim}'] td[data-field=role]"),
              f"member {victim}'s role cell says down")
        browser.wait("document.querySelectorAll('#members tr[data-up=true]').length === 2", "the other two still up")
        browser.screenshot("ensemble-down")
    finally:
        kz.stop()
        kz.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="target/debug/zabkeeper")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--screenshots", default="target/ui-screenshots")
    args = parser.parse_args()
    started = time.monotonic()
    ensemble = zk.Ensemble(args.binary, 3, extra=f'admin_token = "{TOKEN}"')
    browser = None
    try:
        ensemble.start()
        browser = Browser(args.chromium, args.screenshots)
        run(ensemble, browser)
    finally:
        if browser:
            browser.stop()
        panics = ensemble.stop()
    if panics:
        raise AssertionError(f"panics in the members' logs: {panics}")
    print(f"console UI test passed in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
