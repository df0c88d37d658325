// The zabkeeper console: one page that routes by location.pathname and reads
// the JSON API under /ui/api/. No framework and no network beyond this member.
"use strict";

const TOKEN_KEY = "zabkeeper-admin-token";
const view = document.getElementById("view");
let cleanups = [];

// ---- helpers ---------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super(`${body.error || status}: ${body.message || ""}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, url, body) {
  // The page's own header: the server takes writes only with it (no other site's page can send it).
  const headers = { "Accept": "application/json", "X-Zabkeeper-Console": "1" };
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let json;
  try { json = JSON.parse(text); } catch (_) { json = { message: text }; }
  if (!r.ok) throw new ApiError(r.status, json);
  return json;
}

function notice(message, kind) {
  const n = document.getElementById("notice");
  n.textContent = message;
  n.className = kind || "";
  n.hidden = !message;
}

function fmtTime(ms) {
  if (!ms) return "—";
  const d = new Date(Number(ms));
  return d.toLocaleString(undefined, { hour12: false }) + " (" + d.toISOString() + ")";
}

function shortTime(ms) {
  const d = new Date(Number(ms));
  const pad = n => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtAgo(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 1000 ? `${ms} ms ago` : `${(ms / 1000).toFixed(1)} s ago`;
}

function hexToBytes(h) {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.substr(i * 2, 2), 16);
  return out;
}

function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    const hx = row.map(b => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = row.map(b => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(i.toString(16).padStart(8, "0") + "  " + hx.padEnd(48) + "  " + ascii);
  }
  return lines.join("\n");
}

// The data as text, pretty JSON or a hex dump; "auto" picks JSON, then text, then hex.
function renderData(hex, mode) {
  if (hex === null || hex === undefined) return { mode: "null", text: "(null)" };
  const bytes = hexToBytes(hex);
  let text = null;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch (_) { text = null; }
  let pretty = null;
  if (text !== null && text.trim() !== "") {
    try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { pretty = null; }
  }
  if (mode === "auto") mode = pretty !== null ? "json" : text !== null ? "text" : "hex";
  if (mode === "json" && pretty !== null) return { mode, text: pretty };
  if (mode === "json") return { mode, text: "(not JSON)" };
  if (mode === "text" && text !== null) return { mode, text: text === "" ? "(empty)" : text };
  if (mode === "text") return { mode, text: "(not UTF-8 text: see hex)" };
  return { mode: "hex", text: bytes.length ? hexDump(bytes) : "(empty)" };
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map(h => el("th", { text: h })))),
    el("tbody", {}, rows));
}

// Runs fn now and every ms, skipping a turn while the last one is still out
// (a member that hangs makes an ensemble read take its whole timeout).
function every(ms, fn) {
  let busy = false;
  const tick = async () => {
    if (busy) return;
    busy = true;
    try { await fn(); } finally { busy = false; }
  };
  tick();
  const t = setInterval(tick, ms);
  cleanups.push(() => clearInterval(t));
}

// ---- routing ---------------------------------------------------------------

function route() {
  const p = location.pathname;
  if (p === "/ui" || p === "/ui/") return ["ensemble", null];
  if (p === "/ui/tree" || p.startsWith("/ui/tree/")) {
    const rest = p.slice("/ui/tree".length).split("/").filter(s => s !== "").map(decodeURIComponent);
    return ["tree", "/" + rest.join("/")];
  }
  for (const v of ["changes", "sessions", "snapshots"]) if (p === "/ui/" + v || p === "/ui/" + v + "/") return [v, null];
  return ["missing", p];
}

function treeUrl(path) {
  return "/ui/tree" + (path === "/" ? "/" : path.split("/").map(encodeURIComponent).join("/"));
}

function go(url) {
  history.pushState(null, "", url);
  render();
}

function render() {
  cleanups.forEach(f => f());
  cleanups = [];
  notice("");
  const [name, arg] = route();
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.view === name));
  view.replaceChildren();
  document.body.dataset.view = name;
  const views = { ensemble, tree, changes, sessions, snapshots };
  if (views[name]) views[name](arg);
  else view.append(el("h2", { text: "No such page" }), el("p", { text: `${arg} is not a console page.` }));
}

document.addEventListener("click", e => {
  const a = e.target.closest("a[data-link]");
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey) return;
  e.preventDefault();
  go(a.getAttribute("href"));
});
window.addEventListener("popstate", render);

function showMode() {
  const m = document.getElementById("mode");
  m.textContent = token() ? "admin token set" : "read-only";
  m.className = "badge" + (token() ? " admin" : "");
}

document.getElementById("token-form").addEventListener("submit", e => {
  e.preventDefault();
  const input = document.getElementById("token");
  if (input.value) sessionStorage.setItem(TOKEN_KEY, input.value);
  input.value = "";
  showMode();
  render();
});
document.getElementById("token-clear").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showMode();
  render();
});

// ---- ensemble --------------------------------------------------------------

function ensemble() {
  const summary = el("p", { id: "ensemble-summary", class: "muted", text: "Asking the members…" });
  const body = el("tbody");
  view.append(el("h2", { text: "Ensemble" }), summary,
    el("table", { id: "members" }, el("thead", {}, el("tr", {},
      ["Member", "Role", "State", "Epoch", "Last zxid", "Lag", "Sessions", "Znodes", "Connections", "Version", "HTTP"]
        .map(h => el("th", { text: h })))), body));
  every(1500, async () => {
    try {
      const e = await api("GET", "/ui/api/ensemble");
      document.getElementById("served-by").textContent = e.served_by;
      const up = e.members.filter(m => m.up).length;
      summary.replaceChildren("Leader: ",
        el("strong", { id: "leader-id", text: e.leader === null ? "none" : `member ${e.leader}` }),
        ` · ${up} of ${e.members.length} members answering · refreshed ${new Date().toLocaleTimeString(undefined, { hour12: false })}`);
      body.replaceChildren(...e.members.map(m => {
        const cell = (field, value, cls) => el("td", { "data-field": field, class: cls }, value === undefined || value === null ? "—" : value);
        const role = m.up ? el("span", { class: "badge" + (m.leading ? " leader" : "") }, m.role) : el("span", { class: "badge down", text: "down" });
        return el("tr", { "data-member": m.id, "data-up": m.up ? "true" : "false", class: m.up ? "" : "down" },
          cell("id", `${m.id}${m.is_self ? " (this)" : ""}`),
          cell("role", role),
          cell("state", m.up ? m.state : m.error),
          cell("epoch", m.current_epoch, "num"),
          cell("last_zxid", m.last_zxid, "mono"),
          cell("lag", m.lag, "num"),
          cell("sessions", m.sessions, "num"),
          cell("znodes", m.znodes, "num"),
          cell("connections", m.connections, "num"),
          cell("version", m.version),
          cell("http", m.http_addr, "mono"));
      }));
    } catch (err) {
      summary.textContent = "The ensemble could not be read: " + err.message;
    }
  });
}

// ---- tree ------------------------------------------------------------------

function crumbs(path) {
  const parts = path.split("/").filter(Boolean);
  const out = [el("a", { href: "/ui/tree/", "data-link": true, text: "/" })];
  parts.forEach((p, i) => {
    if (i > 0) out.push(" / ");
    out.push(el("a", { href: treeUrl("/" + parts.slice(0, i + 1).join("/")), "data-link": true, text: p }));
  });
  return el("div", { class: "crumbs", id: "crumbs" }, out);
}

function join(parent, name) { return parent === "/" ? "/" + name : parent + "/" + name; }

function tree(path) {
  const list = el("ul", { class: "children", id: "children" });
  const more = el("button", { id: "children-more", hidden: true, text: "more…" });
  const count = el("p", { class: "muted", id: "children-count" });
  const results = el("ul", { class: "children", id: "search-results" });
  const search = el("form", { class: "toolbar", id: "search-form" },
    el("input", { id: "search-prefix", placeholder: "search by path prefix, e.g. /app/co", size: 30, value: path === "/" ? "/" : path + "/" }),
    el("button", { type: "submit", text: "Search" }));
  const details = el("div", { class: "panel", id: "node" });
  view.append(el("h2", {}, "Tree ", el("code", { id: "node-path", text: path })),
    el("div", { class: "split" },
      el("div", { class: "panel" }, crumbs(path), search, results, count, list, more), details));

  let after = null;
  async function page() {
    try {
      const q = new URLSearchParams({ path, limit: "100" });
      if (after) q.set("after", after);
      const r = await api("GET", "/ui/api/children?" + q);
      for (const c of r.children) {
        const note = c.kind && c.kind !== "persistent" ? ` (${c.kind})` : "";
        const kids = c.num_children ? ` · ${c.num_children}` : "";
        list.append(el("li", {}, el("a", { href: treeUrl(join(path, c.name)), "data-link": true, "data-child": c.name, text: c.name }),
          el("span", { class: "muted", text: note + kids })));
      }
      after = r.next;
      more.hidden = !r.next;
      count.textContent = `${r.total} children`;
    } catch (err) {
      count.textContent = err.message;
    }
  }
  more.addEventListener("click", page);
  search.addEventListener("submit", async e => {
    e.preventDefault();
    const prefix = document.getElementById("search-prefix").value;
    try {
      const r = await api("GET", "/ui/api/search?" + new URLSearchParams({ prefix }));
      results.replaceChildren(...r.matches.map(m => el("li", {}, el("a", { href: treeUrl(m), "data-link": true, text: m }))),
        r.matches.length ? (r.truncated ? el("li", { class: "muted", text: "(more not shown)" }) : "") : el("li", { class: "muted", text: "no match" }));
    } catch (err) { notice(err.message); }
  });
  page();
  nodeDetails(path, details);
}

async function nodeDetails(path, box) {
  let n;
  try {
    n = await api("GET", "/ui/api/node?" + new URLSearchParams({ path }));
  } catch (err) {
    box.replaceChildren(el("p", { class: "error", id: "node-error", text: err.message }));
    return;
  }
  const s = n.stat;
  const pre = el("pre", { id: "node-data" });
  const modes = el("select", { id: "data-mode" }, ["auto", "text", "json", "hex"].map(m => el("option", { value: m, text: m })));
  const show = () => { const r = renderData(n.data_hex, modes.value); pre.textContent = r.text; pre.dataset.mode = r.mode; };
  modes.addEventListener("change", show);
  show();
  const owner = s.kind === "ephemeral" ? `session ${s.ephemeral_owner}` : s.kind === "ttl" ? `none (TTL node, ${s.ttl_ms} ms)` : `none (${s.kind})`;
  const stat = el("dl", { class: "stat", id: "stat" }, [
    ["Created", fmtTime(s.ctime)], ["Modified", fmtTime(s.mtime)],
    ["Data version", s.version, "version"], ["Children version", s.cversion], ["ACL version", s.aversion, "aversion"],
    ["Data length", `${s.data_length} bytes`], ["Children", s.num_children, "num_children"],
    ["Ephemeral owner", owner, "ephemeral_owner"],
    ["Created at zxid", s.czxid], ["Modified at zxid", s.mzxid], ["Children changed at zxid", s.pzxid],
  ].map(([k, v, id]) => [el("dt", { text: k }), el("dd", { "data-stat": id || null, text: String(v) })]));
  const acl = n.acl === null ? el("p", { class: "muted", text: "(the ACL is not readable with these rights)" })
    : table(["Scheme", "Id", "Permissions"], n.acl.map(a => el("tr", {}, el("td", { text: a.scheme }), el("td", { class: "mono", text: a.id }), el("td", { class: "mono", text: a.perms }))), { id: "acl" });
  box.replaceChildren(
    el("div", { class: "toolbar" }, el("strong", { text: "Data" }), modes),
    pre, el("h3", { text: "Stat" }), stat, el("h3", { text: "ACL" }), acl, editForms(path, n));
}

// The forms are shown read-only or not: without the token the server refuses (401), and the page says so.
function editForms(path, n) {
  const done = (what) => { notice(what, "info"); };
  const fail = err => notice(err.status === 401 ? `Refused: ${err.message} (type the admin token above)` : err.message);
  const text = n.data_hex ? renderData(n.data_hex, "text").text : "";
  const setText = el("textarea", { id: "set-data-text" }, text.startsWith("(") ? "" : text);
  const setVersion = el("input", { id: "set-data-version", size: 5, value: String(n.stat.version), title: "expected version (-1: any)" });
  const name = el("input", { id: "create-name", placeholder: "child name" });
  const createData = el("input", { id: "create-data", placeholder: "data (text)" });
  const mode = el("select", { id: "create-mode" }, ["persistent", "persistent_sequential", "container"].map(m => el("option", { value: m, text: m })));
  const aclText = el("textarea", { id: "acl-text" }, (n.acl || []).map(a => `${a.scheme}:${a.id}:${a.perms}`).join("\n"));
  const hint = token() ? "" : " (needs the admin token)";
  return el("div", { class: "edit", id: "edits" },
    el("h3", { text: "Edit" + hint }),
    el("form", { id: "set-data-form", onsubmit: async e => {
      e.preventDefault();
      try {
        await api("PUT", "/ui/api/node", { path, data: setText.value, version: Number(setVersion.value) });
        render(); done(`Saved ${path}`);
      } catch (err) { fail(err); }
    } }, setText, el("div", { class: "toolbar" }, "expected version ", setVersion, el("button", { id: "set-data-btn", class: "primary", type: "submit", text: "Set data" }))),
    el("form", { class: "toolbar", id: "create-form", onsubmit: async e => {
      e.preventDefault();
      try {
        const r = await api("POST", "/ui/api/node", { path: join(path, name.value), data: createData.value, mode: mode.value });
        go(treeUrl(r.path)); done(`Created ${r.path}`);
      } catch (err) { fail(err); }
    } }, "Create child ", name, createData, mode, el("button", { id: "create-btn", type: "submit", text: "Create" })),
    el("form", { id: "acl-form", onsubmit: async e => {
      e.preventDefault();
      const acl = aclText.value.split("\n").map(l => l.trim()).filter(Boolean).map(l => {
        const i = l.lastIndexOf(":"), j = l.indexOf(":");
        return { scheme: l.slice(0, j), id: l.slice(j + 1, i), perms: l.slice(i + 1) };
      });
      try {
        await api("PUT", "/ui/api/acl", { path, acl, version: n.stat.aversion });
        render(); done(`ACL of ${path} set`);
      } catch (err) { fail(err); }
    } }, el("div", { class: "muted", text: "ACL, one scheme:id:perms a line (perms from cdrwa)" }), aclText,
      el("div", { class: "toolbar" }, el("button", { id: "acl-btn", type: "submit", text: "Set ACL" }))),
    path === "/" ? null : el("div", { class: "toolbar" }, el("button", { id: "delete-btn", class: "danger", type: "button", onclick: async () => {
      if (!confirm(`Delete ${path} (version ${n.stat.version})?`)) return;
      try {
        await api("DELETE", "/ui/api/node?" + new URLSearchParams({ path, version: String(n.stat.version) }));
        go(treeUrl(path.slice(0, path.lastIndexOf("/")) || "/")); done(`Deleted ${path}`);
      } catch (err) { fail(err); }
    }, text: "Delete node" })));
}

// ---- changes ---------------------------------------------------------------

const TYPES = ["", "create", "delete", "setData", "setACL", "multi", "createSession", "closeSession", "error", "reconfig", "load"];

function entryRow(e, opened) {
  const paths = [...new Set(e.ops.flatMap(o => (o.path ? [o.path] : []).concat(o.paths || [])))].join(" ");
  return el("tr", { class: "entry", "data-zxid": e.zxid, "data-type": e.type, "data-paths": paths, onclick: () => opened(e.zxid) },
    el("td", { class: "mono", text: e.zxid }), el("td", { class: "nowrap", text: shortTime(e.time_ms) }), el("td", { text: e.type }),
    el("td", { class: "mono", text: paths }), el("td", { class: "mono", text: e.session }));
}

function changes() {
  const prefix = el("input", { id: "filter-prefix", placeholder: "path prefix" });
  const type = el("select", { id: "filter-type" }, TYPES.map(t => el("option", { value: t, text: t || "any type" })));
  const state = el("span", { id: "stream-state", class: "badge" }, "connecting");
  const live = el("tbody", { id: "live" });
  const detail = el("div", { class: "panel", id: "entry" }, el("p", { class: "muted", text: "Click a transaction to see its ops." }));
  const from = el("input", { id: "log-from", placeholder: "from zxid (0x…)", size: 14 });
  const to = el("input", { id: "log-to", placeholder: "to zxid", size: 14 });
  const logRows = el("tbody", { id: "log" });
  const head = () => el("thead", {}, el("tr", {}, ["Zxid", "Time", "Type", "Paths", "Session"].map(h => el("th", { text: h }))));
  const open = async zxid => {
    try {
      const e = await api("GET", "/ui/api/log/" + zxid);
      detail.replaceChildren(el("h3", { text: `${e.type} at ${e.zxid}` }),
        el("p", { class: "muted", text: `session ${e.session} · cxid ${e.cxid} · ${fmtTime(e.time_ms)} · ${e.size_bytes} bytes` }),
        el("pre", { id: "entry-description", text: e.description }),
        table(["Op", "Path", "Version", "Data"], e.ops.map(o => el("tr", {}, el("td", { text: o.type }), el("td", { class: "mono", text: o.path || (o.paths || []).join(" ") }),
          el("td", { text: o.version }), el("td", {}, el("pre", { text: o.data_hex === null ? `(${o.data_length} bytes, shown with the admin token)` : renderData(o.data_hex, "auto").text }))))));
    } catch (err) { notice(err.message); }
  };
  // The stream is read with fetch, not EventSource, which cannot send the token.
  let source = null;
  const connect = async () => {
    if (source) source.abort();
    const aborter = new AbortController();
    source = aborter;
    live.replaceChildren();
    const q = new URLSearchParams();
    if (prefix.value) q.set("prefix", prefix.value);
    if (type.value) q.set("type", type.value);
    const headers = { "Accept": "text/event-stream" };
    if (token()) headers["Authorization"] = "Bearer " + token();
    try {
      const r = await fetch("/ui/api/changes?" + q, { headers, signal: aborter.signal });
      if (!r.ok) {
        const body = await r.json().catch(() => ({}));
        state.textContent = r.status === 401 ? "needs the admin token" : "stopped"; state.className = "badge warn";
        if (r.status !== 401) notice(`${body.error || r.status}: ${body.message || ""}`);
        return;
      }
      state.textContent = "live"; state.className = "badge up";
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const event = (block.match(/^event: ?(.*)$/m) || [])[1];
          const data = block.split("\n").filter(l => l.startsWith("data:")).map(l => l.slice(5).replace(/^ /, "")).join("\n");
          if (event === "entry") {
            live.prepend(entryRow(JSON.parse(data), open));
            while (live.children.length > 200) live.lastChild.remove();
          } else if (event === "failed") {
            notice(JSON.parse(data).message);
          }
        }
      }
      state.textContent = "ended"; state.className = "badge warn";
    } catch (err) {
      if (!aborter.signal.aborted) { state.textContent = "disconnected"; state.className = "badge warn"; }
    }
  };
  cleanups.push(() => source && source.abort());
  const readLog = async () => {
    const q = new URLSearchParams({ limit: "100" });
    if (from.value) q.set("from", from.value); else q.set("last", "50");
    if (to.value) q.set("to", to.value);
    if (prefix.value) q.set("prefix", prefix.value);
    if (type.value) q.set("type", type.value);
    try {
      const r = await api("GET", "/ui/api/log?" + q);
      logRows.replaceChildren(...r.entries.map(e => entryRow(e, open)));
      document.getElementById("log-bounds").textContent = `log holds ${r.first_zxid} … ${r.last_zxid}, committed ${r.last_committed_zxid}` + (r.next_zxid ? `; more from ${r.next_zxid}` : "");
    } catch (err) { notice(err.message); }
  };
  view.append(el("h2", {}, "Changes ", state),
    el("form", { class: "toolbar", onsubmit: e => { e.preventDefault(); connect(); readLog(); } },
      "Filter ", prefix, type, el("button", { type: "submit", text: "Apply" })),
    el("div", { class: "split wide-left" },
      el("div", {}, el("h3", { text: "Live: committed transactions as they are applied" }), el("table", {}, head(), live),
        el("h3", { text: "Log by zxid range" }),
        el("form", { class: "toolbar", onsubmit: e => { e.preventDefault(); readLog(); } }, from, to, el("button", { type: "submit", text: "Read log" })),
        el("p", { class: "muted", id: "log-bounds" }), el("table", {}, head(), logRows)),
      detail));
  connect();
  readLog();
}

// ---- sessions --------------------------------------------------------------

function sessions() {
  const body = el("tbody");
  const note = el("p", { class: "muted", id: "sessions-summary" });
  view.append(el("h2", { text: "Sessions and watches" }), note,
    el("table", { id: "sessions" }, el("thead", {}, el("tr", {},
      ["Session", "Member", "Client", "Timeout", "Last heard", "Ephemerals", "Watches"].map(h => el("th", { text: h })))), body));
  every(3000, async () => {
    try {
      const r = await api("GET", "/ui/api/sessions");
      note.textContent = `${r.sessions.length} live sessions` + (r.members_not_answering.length ? ` · members not answering: ${r.members_not_answering.join(", ")}` : "");
      body.replaceChildren(...r.sessions.map(s => el("tr", { "data-session": s.id },
        el("td", { class: "mono" }, s.id, s.console ? el("span", { class: "badge", text: " console" }) : ""),
        el("td", { text: s.member === null ? "—" : `member ${s.member}` }),
        el("td", { class: "mono", text: s.remote || "—" }),
        el("td", { text: `${s.timeout_ms} ms` }),
        el("td", { text: fmtAgo(s.last_heard_ms_ago) }),
        el("td", { class: "mono" }, s.ephemerals.map(p => el("div", {}, el("a", { href: treeUrl(p), "data-link": true, text: p })))),
        el("td", { class: "mono" }, s.watches.map(p => el("div", { text: p }))))));
    } catch (err) { note.textContent = err.message; }
  });
}

// ---- snapshots -------------------------------------------------------------

function snapshots() {
  const body = el("tbody");
  const load = async () => {
    try {
      const r = await api("GET", "/ui/api/snapshots");
      body.replaceChildren(...r.snapshots.slice().reverse().map(s => el("tr", { "data-zxid": s.zxid },
        el("td", { class: "mono", text: s.zxid }), el("td", { text: fmtTime(s.created_ms) }), el("td", { class: "num", text: s.node_count }),
        el("td", { class: "num", text: `${s.size_bytes} bytes` }),
        el("td", {}, el("button", { type: "button", text: "Download", onclick: () => download(s.zxid) })))));
      if (!r.snapshots.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "no snapshot on this member yet" })));
    } catch (err) { notice(err.message); }
  };
  const download = async zxid => {
    const headers = token() ? { "Authorization": "Bearer " + token() } : {};
    const r = await fetch("/ui/api/snapshots/" + zxid, { headers });
    if (!r.ok) { const b = await r.json().catch(() => ({})); notice(`Refused: ${b.error || r.status}: ${b.message || ""}`); return; }
    const url = URL.createObjectURL(await r.blob());
    const a = el("a", { href: url, download: `snapshot-${zxid}.zsnap` });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  };
  view.append(el("h2", { text: "Snapshots of this member" }),
    el("div", { class: "toolbar" }, el("button", { id: "take-snapshot", class: "primary", type: "button", text: "Take a snapshot now", onclick: async () => {
      try { const r = await api("POST", "/ui/api/snapshots"); notice(`Snapshot taken at ${r.zxid}`, "info"); load(); }
      catch (err) { notice(err.status === 401 ? `Refused: ${err.message} (type the admin token above)` : err.message); }
    } })),
    el("table", { id: "snapshots" }, el("thead", {}, el("tr", {}, ["Zxid", "Taken", "Znodes", "Size", ""].map(h => el("th", { text: h })))), body));
  load();
}

showMode();
render();
api("GET", "/ui/api/member").then(m => { document.getElementById("served-by").textContent = m.id; }).catch(() => {});
