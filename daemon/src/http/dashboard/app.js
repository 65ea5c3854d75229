// The jobstore dashboard: a page per hash route, each built from the
// daemon's HTTP API (/openapi.json) with the token kept in this tab's
// sessionStorage: never in a cookie, a URL or a log. Text from the API goes
// into the page through textContent only.
"use strict";

const TOKEN = "jobstore.token";
const COUNTS_MAX_AGE = 5; // seconds: the daemon answers counts from one snapshot this old at most
const REFRESH_MS = 5000;
const STATES = ["waiting", "scheduled", "running", "expired", "blocked", "archived"];
const CODES = ["ok", "failed", "retry", "error", "cancelled", "timeout"];

let me = null; // { admin, client }
let timer = null;
let changed = false; // after an action, the next counts are read afresh

// Counts at most COUNTS_MAX_AGE old, or fresh right after an action.
function countsAge() {
  const age = changed ? 0 : COUNTS_MAX_AGE;
  changed = false;
  return "max_age=" + age;
}

// ------------------------------------------------------------------ DOM

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined && n !== false));
}

function say(text, bad) {
  const s = document.getElementById("status");
  s.textContent = text || "";
  s.className = bad ? "status bad" : "status";
}

function when(ms) {
  if (ms === null || ms === undefined) return "";
  const d = new Date(ms);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function table(caption, head, rows, empty) {
  if (!rows.length) return h("p", { class: "empty" }, empty || "Nothing here.");
  return h("div", { class: "scroll", tabindex: 0, role: "region", "aria-label": caption },
    h("table", {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c)))))));
}

function link(href, text) {
  return h("a", { href }, text);
}

function route(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) q.set(k, v);
  const s = q.toString();
  return "#" + path + (s ? "?" + s : "");
}

// ------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super((e.message || "HTTP " + status) + (e.field ? " (" + e.field + ")" : ""));
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN);
  if (token) headers.Authorization = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "omit",
    cache: "no-store",
  });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN);
    me = null;
  }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}

const get = (path) => api("GET", path);
const post = (path, body) => { changed = true; return api("POST", path, body); };
const enc = encodeURIComponent;

// The clients this token may see: its own, or every client with jobs (admin).
async function clients() {
  if (!me.admin) return [me.client];
  const all = await get("/stats?max_age=" + COUNTS_MAX_AGE);
  return all.clients.map((c) => c.client);
}

function clientPicker(current, onChange) {
  return clients().then((list) => {
    if (current && !list.includes(current)) list.push(current);
    const sel = h("select", { id: "client", name: "client", onchange: (e) => onChange(e.target.value) },
      list.map((c) => h("option", { value: c, selected: c === current }, c)));
    return h("label", { for: "client" }, "Client ", sel);
  });
}

// --------------------------------------------------------------- sign in

function signIn(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("who").replaceChildren();
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true });
  const form = h("form", { class: "signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "A client's token shows that client's jobs; the admin token shows every client's. "
      + "The token stays in this browser tab only."),
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN, input.value.trim());
    try {
      await whoami();
      say("");
      location.hash = "#/";
      render();
    } catch (e) {
      sessionStorage.removeItem(TOKEN);
      signIn(e.status === 401 ? "That token is not accepted." : e.message);
    }
  });
  show(form);
  if (message) say(message, true);
  input.focus();
}

async function whoami() {
  me = await get("/whoami");
  document.getElementById("nav").hidden = false;
  const out = h("button", { type: "button", class: "link", onclick: () => {
    sessionStorage.removeItem(TOKEN);
    me = null;
    location.hash = "#/";
    signIn("Signed out.");
  } }, "Sign out");
  document.getElementById("who").replaceChildren(
    me.admin ? "admin" : "client " + me.client, " ", out);
  return me;
}

// -------------------------------------------------------------- overview

function countsRow(client, t, refresh) {
  const archived = Object.entries(t.archived || {}).sort();
  const failed = (t.archived.failed || 0) + (t.archived.error || 0) + (t.archived.timeout || 0);
  const pauseBtn = h("button", { type: "button", class: "small", onclick: async () => {
    const verb = t.paused ? "resume" : "pause";
    if (!confirm((t.paused ? "Resume " : "Pause ") + t.type + " on every daemon?")) return;
    try {
      await post("/" + enc(client) + "/jobtypes/" + enc(t.type) + "/" + verb);
      say((t.paused ? "Resumed " : "Paused ") + t.type + ".");
      refresh();
    } catch (e) { say(e.message, true); }
  } }, t.paused ? "Resume" : "Pause");
  return [
    link(route("/jobs", { client, type: t.type, state: "waiting" }), t.type),
    t.paused ? h("strong", {}, "paused") : "active",
    link(route("/jobs", { client, type: t.type, state: "waiting" }), t.waiting),
    link(route("/jobs", { client, type: t.type, state: "scheduled" }), t.scheduled),
    link(route("/jobs", { client, type: t.type, state: "running" }), t.running),
    link(route("/jobs", { client, type: t.type, state: "blocked" }), t.blocked || 0),
    archived.length
      ? h("span", {}, archived.map(([code, n], i) => [i ? ", " : "",
        link(route("/jobs", { client, type: t.type, state: "archived", code }), code + " " + n)]))
      : "0",
    failed ? link(route("/failures", { client, type: t.type }), failed) : "0",
    pauseBtn,
  ];
}

// A bar per minute of the last hour: runs finished (from the stats) and,
// below, failures archived (from the list of failed jobs).
function chart(label, runs, fails) {
  const max = Math.max(1, ...runs, ...fails);
  const w = 2, gap = 1, hgt = 32;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 " + runs.length * (w + gap) + " " + (hgt * 2 + 2));
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  const total = runs.reduce((a, b) => a + b, 0);
  const totalFails = fails.reduce((a, b) => a + b, 0);
  svg.setAttribute("aria-label", label + ": " + total + " runs and " + totalFails + " failures in the last hour");
  const bar = (x, y, height, cls) => {
    const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
    r.setAttribute("x", x); r.setAttribute("y", y);
    r.setAttribute("width", w); r.setAttribute("height", height);
    r.setAttribute("class", cls);
    svg.append(r);
  };
  runs.forEach((n, i) => { const v = (n / max) * hgt; if (n) bar(i * (w + gap), hgt - v, Math.max(v, 1), "runs"); });
  fails.forEach((n, i) => { const v = (n / max) * hgt; if (n) bar(i * (w + gap), hgt + 2, Math.max(v, 1), "fails"); });
  return h("figure", { class: "spark" }, svg,
    h("figcaption", {}, total + " runs, " + totalFails + " failures, last hour"));
}

async function charts(client) {
  const minute = 60000;
  const now = Date.now();
  const start = now - 60 * minute;
  const slot = (t) => Math.min(59, Math.max(0, Math.floor((t - start) / minute)));
  const byType = new Map();
  const series = (t) => {
    if (!byType.has(t)) byType.set(t, { runs: new Array(60).fill(0), fails: new Array(60).fill(0) });
    return byType.get(t);
  };
  try {
    const hist = await get("/" + enc(client) + "/stats/history?resolution=minute");
    for (const jt of hist.jobtypes) {
      const s = series(jt.type);
      for (const b of jt.buckets) if (b.start >= start - minute) s.runs[slot(b.start)] += b.run.count;
    }
  } catch (e) { if (e.status !== 501) throw e; }
  try {
    const q = new URLSearchParams({ state: "archived", code: "failed,error,timeout", archived_from: String(start), limit: "1000" });
    const page = await get("/" + enc(client) + "/jobs?" + q);
    for (const j of page.jobs) series(j.type).fails[slot(j.done)] += 1;
  } catch (e) { if (e.status !== 501) throw e; }
  return byType;
}

async function overview() {
  const [health, stats] = await Promise.all([
    get("/health").catch((e) => ({ status: "unknown: " + e.message })),
    me.admin ? get("/stats?" + countsAge())
      : get("/" + enc(me.client) + "/stats?" + countsAge()).then((s) => ({ clients: [s] })),
  ]);
  const sections = [];
  for (const c of stats.clients) {
    const series = await charts(c.client).catch(() => new Map());
    const rows = c.jobtypes.map((t) => {
      const row = countsRow(c.client, t, render);
      const s = series.get(t.type);
      row.splice(8, 0, s ? chart(t.type, s.runs, s.fails) : "");
      return row;
    });
    sections.push(h("section", { "aria-labelledby": "c-" + c.client },
      h("h2", { id: "c-" + c.client }, "Client ", c.client),
      table("Jobs of " + c.client + " by jobtype",
        ["Jobtype", "State", "Waiting", "Scheduled", "Running", "Blocked", "Archived", "Failures", "Last hour", "Action"],
        rows, "No jobs yet.")));
  }
  const workers = await Promise.all((stats.clients.length ? stats.clients.map((c) => c.client) : []).map(
    (c) => get("/" + enc(c) + "/workers").then((w) => w.workers.length).catch(() => 0)));
  const store = health.store || {};
  const journal = health.journal || {};
  const sysid = health.sysid || {};
  show(
    h("h1", {}, "Overview"),
    h("dl", { class: "health" },
      h("dt", {}, "Daemon"), h("dd", { class: health.status === "ok" ? "ok" : "bad" }, health.status),
      h("dt", {}, "Store"), h("dd", {}, store.reachable ? "reachable" : "unreachable" + (store.error ? ": " + store.error : "")),
      h("dt", {}, "Journal backlog"), h("dd", {}, (journal.backlog_records || 0) + " records"),
      h("dt", {}, "Sysid"), h("dd", {}, sysid.name || ""),
      h("dt", {}, "Remote workers"), h("dd", {}, workers.reduce((a, b) => a + b, 0))),
    stats.clients.length ? sections : h("p", { class: "empty" }, "No jobs yet."),
    h("p", { class: "note" }, "Counts refresh every " + REFRESH_MS / 1000 + " s."));
  timer = setTimeout(() => { if (location.hash === "" || location.hash === "#/") render(); }, REFRESH_MS);
}

// ------------------------------------------------------------------ jobs

function jobsForm(p, go) {
  const field = (name, label, control) => h("div", { class: "field" }, h("label", { for: "f-" + name }, label), control);
  const select = (name, options, value) => h("select", { id: "f-" + name, name },
    options.map((o) => h("option", { value: o, selected: o === value }, o || "any")));
  const text = (name, value, hint) => h("input", { id: "f-" + name, name, value: value || "", placeholder: hint || "" });
  const form = h("form", { class: "filters", role: "search" },
    field("type", "Jobtypes", text("type", p.type, "all; comma-separated")),
    field("state", "State", select("state", STATES, p.state || "archived")),
    field("code", "Result", select("code", [""].concat(CODES), p.code)),
    field("tag", "Tag", text("tag", p.tag)),
    h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const d = new FormData(form);
    go({ client: p.client, type: d.get("type"), state: d.get("state"), code: d.get("code"), tag: d.get("tag") });
  });
  return form;
}

function filterOf(p) {
  const f = { state: p.state || "archived" };
  if (p.type) f.type = p.type;
  if (p.code && f.state === "archived") f.code = p.code;
  if (p.tag) f.tag = p.tag;
  return f;
}

// Runs a bulk action over everything `filter` selects: a dry-run count,
// a confirmation, then batches until the filter is exhausted.
async function bulkByFilter(client, verb, label, filter, done) {
  try {
    const dry = await post("/" + enc(client) + "/jobs/" + verb, { filter, dry_run: true });
    if (!dry.matched) { say("No job matches."); return; }
    if (!confirm(label + " " + dry.matched + " job(s)?")) return;
    let cursor, changed = 0, skipped = 0;
    do {
      const r = await post("/" + enc(client) + "/jobs/" + verb, cursor ? { filter, cursor } : { filter });
      changed += r.done.length + (r.cancelling ? r.cancelling.length : 0);
      skipped += r.not_done.length;
      say(label + ": " + changed + " of " + dry.matched + " done…");
      cursor = r.next;
    } while (cursor);
    say(label + ": " + changed + " done" + (skipped ? ", " + skipped + " left as they were" : "") + ".");
    done();
  } catch (e) { say(e.message, true); }
}

async function bulkByIds(client, verb, label, ids, done) {
  if (!ids.length) { say("Select jobs first.", true); return; }
  if (!confirm(label + " " + ids.length + " job(s)?")) return;
  try {
    const r = await post("/" + enc(client) + "/jobs/" + verb, { ids });
    const n = r.done.length + (r.cancelling ? r.cancelling.length : 0);
    say(label + ": " + n + " done" + (r.not_done.length ? "; not done: " + r.not_done.join(", ") : "") + ".");
    done();
  } catch (e) { say(e.message, true); }
}

const ACTIONS = {
  rerun: { label: "Run again", states: ["archived"] },
  delete: { label: "Delete", states: ["waiting", "scheduled", "blocked", "archived"] },
  cancel: { label: "Cancel", states: ["waiting", "scheduled", "blocked", "running", "expired"] },
  unblock: { label: "Unblock", states: ["blocked"] },
};

async function jobs(p) {
  if (!p.client) p.client = me.admin ? (await clients())[0] : me.client;
  const go = (np) => { location.hash = route("/jobs", np); };
  const picker = await clientPicker(p.client, (c) => go({ client: c, state: p.state }));
  if (!p.client) { show(h("h1", {}, "Jobs"), picker, h("p", { class: "empty" }, "No jobs yet.")); return; }
  const f = filterOf(p);
  const q = new URLSearchParams(f);
  q.set("limit", "50");
  if (p.cursor) q.set("cursor", p.cursor);
  const page = await get("/" + enc(p.client) + "/jobs?" + q);
  const boxes = [];
  const rows = page.jobs.map((j) => {
    const box = h("input", { type: "checkbox", value: j.id, "aria-label": "Select " + j.id });
    boxes.push(box);
    return [box,
      link(route("/job", { client: p.client, id: j.id }), j.id),
      j.type, j.state,
      j.result ? j.result.code + " " + j.result.status : "",
      j.attempts,
      when(j.done || j.run_at || j.lease_expires || j.created),
      (j.tags || []).join(", ")];
  });
  const refresh = () => render();
  const actions = h("div", { class: "actions" });
  for (const [verb, a] of Object.entries(ACTIONS)) {
    if (!a.states.includes(f.state)) continue;
    actions.append(
      h("button", { type: "button", onclick: () => bulkByIds(p.client, verb, a.label,
        boxes.filter((b) => b.checked).map((b) => b.value), refresh) }, a.label + " selected"),
      h("button", { type: "button", onclick: () => bulkByFilter(p.client, verb, a.label, f, refresh) },
        a.label + " all matching…"));
  }
  const paging = h("p", { class: "paging" },
    p.cursor ? link(route("/jobs", Object.assign({}, p, { cursor: "" })), "First page") : "",
    p.cursor && page.next ? " · " : "",
    page.next ? link(route("/jobs", Object.assign({}, p, { cursor: page.next })), "Next page") : "");
  show(
    h("h1", {}, "Jobs"),
    picker,
    jobsForm(p, go),
    actions,
    table(f.state + " jobs of " + p.client + (f.state === "archived" ? ", newest first" : ""),
      ["Select", "Id", "Jobtype", "State", "Result", "Attempts", "When", "Tags"], rows, "No job matches."),
    paging);
}

// ------------------------------------------------------------------- job

function payload(text, b64) {
  if (text !== null && text !== undefined) return h("pre", {}, text);
  if (b64) {
    const bytes = atob(b64);
    let hex = "";
    for (let i = 0; i < bytes.length; i++) {
      hex += bytes.charCodeAt(i).toString(16).padStart(2, "0") + ((i + 1) % 16 ? " " : "\n");
    }
    return h("pre", {}, hex.trim());
  }
  return h("p", { class: "empty" }, "(empty)");
}

function describe(e) {
  switch (e.event) {
    case "retried": return "released for retry in " + e.delay_ms + " ms" + (e.status ? " (status " + e.status + ")" : "");
    case "archived": return "archived: " + e.code + " " + e.status;
    case "rerun": return "run again" + (e.delay_ms ? " in " + e.delay_ms + " ms" : "");
    case "handed_back": return "handed back";
    case "cancel_requested": return "cancel requested";
    case "unblocked": return "unblocked (its last dependency ended, or an operator unblocked it)";
    case "repeated": return "ran: " + e.code + " " + e.status + "; runs again " + when(e.next_ms);
    default: return e.event;
  }
}

async function job(p) {
  const base = "/" + enc(p.client) + "/jobs/";
  const j = await get(base + enc(p.id));
  const refresh = () => render();
  const act = (verb, label) => h("button", { type: "button", onclick: () => bulkByIds(p.client, verb, label, [j.id], refresh) }, label);
  const buttons = [];
  for (const [verb, a] of Object.entries(ACTIONS)) if (a.states.includes(j.state)) buttons.push(act(verb, a.label));
  let edit = null;
  if (j.state === "waiting" || j.state === "scheduled" || j.state === "blocked") {
    const prio = h("input", { id: "e-priority", name: "priority", type: "number", value: j.priority });
    const due = h("input", { id: "e-run-at", name: "run_at", value: when(j.run_at).replace(" ", "T") });
    edit = h("form", { class: "filters" },
      h("div", { class: "field" }, h("label", { for: "e-priority" }, "Priority"), prio),
      h("div", { class: "field" }, h("label", { for: "e-run-at" }, "Due (RFC 3339)"), due),
      h("button", { type: "submit" }, "Save"));
    edit.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const item = { id: j.id };
      if (String(j.priority) !== prio.value) item.priority = Number(prio.value);
      if (when(j.run_at).replace(" ", "T") !== due.value) item.run_at = due.value;
      if (Object.keys(item).length === 1) { say("Nothing changed."); return; }
      if (!confirm("Save the changes to " + j.id + "?")) return;
      try {
        const r = await post("/" + enc(p.client) + "/jobs/edit", { edits: [item] });
        say(r.edited.length ? "Saved." : "Not saved: the job is no longer waiting or scheduled.", !r.edited.length);
        refresh();
      } catch (e) { say(e.message, true); }
    });
  }
  let waits = null;
  if (j.dependencies_pending !== undefined) {
    const w = await get(base + enc(p.id) + "/waits?limit=100");
    const done = Object.entries(w.done).map(([c, n]) => c + " " + n).join(", ");
    waits = [h("h2", {}, "Waits for"),
      h("p", {}, w.pending + " pending" + (w.held ? ", " + w.held + " held (failed; run them again, or unblock)" : "") +
        (w.skipped ? ", " + w.skipped + " skipped" : "") + (done ? "; ended: " + done : "")),
      table("The jobs " + j.id + " waits for, by id", ["Job", "State", "Result"],
        w.jobs.map((d) => [link(route("/job", { client: p.client, id: d.id }), d.id), d.state,
          d.code ? d.code + " " + d.status : ""]), "None."),
      w.next ? h("p", { class: "note" }, "The first 100 are shown.") : null];
  }
  const r = j.result;
  show(
    h("h1", {}, "Job ", h("code", {}, j.id)),
    h("dl", { class: "facts" },
      h("dt", {}, "Client"), h("dd", {}, p.client),
      h("dt", {}, "Jobtype"), h("dd", {}, link(route("/jobs", { client: p.client, type: j.type, state: j.state }), j.type)),
      h("dt", {}, "State"), h("dd", {}, j.state + (j.cancelling ? " (cancelling)" : "")),
      h("dt", {}, "Priority"), h("dd", {}, j.priority),
      h("dt", {}, "Attempts"), h("dd", {}, j.attempts),
      h("dt", {}, "Created"), h("dd", {}, when(j.created)),
      j.run_at ? [h("dt", {}, "Due"), h("dd", {}, when(j.run_at))] : null,
      j.lease_expires ? [h("dt", {}, "Lease until"), h("dd", {}, when(j.lease_expires) + " (" + (j.locked_by || "") + ")")] : null,
      j.done ? [h("dt", {}, "Archived"), h("dd", {}, when(j.done))] : null,
      h("dt", {}, "Tags"), h("dd", {}, (j.tags || []).join(", ") || "none"),
      j.unique_key ? [h("dt", {}, "Unique key"), h("dd", {}, h("code", {}, j.unique_key),
        j.state === "archived" ? " (free again)" : " (held)")] : null,
      j.dependencies_pending !== undefined ? [h("dt", {}, "Dependencies"), h("dd", {},
        j.dependencies_pending + " pending; if one fails: " + (j.on_dependency_failure || "cancel"))] : null,
      j.repeat ? [h("dt", {}, "Repeats"), h("dd", {}, h("code", {}, j.repeat.rule),
        j.repeat.time_zone && j.repeat.time_zone !== "UTC" ? " in " + j.repeat.time_zone : " (UTC)",
        j.state === "archived" ? ", stopped: archived" : "")] : null),
    h("div", { class: "actions" }, buttons),
    edit,
    h("h2", {}, "Payload"),
    payload(j.data, j.data_base64),
    r ? [h("h2", {}, j.state === "archived" ? "Result" : "Last result"), h("p", {}, r.code + ", status " + r.status), h("h3", {}, "Output"), payload(r.output, r.output_base64)] : null,
    waits,
    h("h2", {}, "History"),
    table("What happened to " + j.id + ", oldest first", ["When", "Attempt", "Event", "By"],
      (j.history || []).map((e) => [when(e.at), e.attempt, describe(e), e.by || ""]), "No events."));
}

// -------------------------------------------------------------- failures

async function failures(p) {
  if (!p.client) p.client = me.admin ? (await clients())[0] : me.client;
  const picker = await clientPicker(p.client, (c) => { location.hash = route("/failures", { client: c }); });
  if (!p.client) { show(h("h1", {}, "Failures"), picker, h("p", { class: "empty" }, "No failures.")); return; }
  const q = p.type ? "?type=" + enc(p.type) : "";
  const f = await get("/" + enc(p.client) + "/failures" + q);
  const refresh = () => render();
  const rows = f.groups.map((g) => {
    const filter = { state: "archived", type: g.type, code: g.code, status: g.status, message: g.message };
    return [g.count, g.type, g.code + " " + g.status, h("code", {}, g.message || "(no output)"),
      link(route("/job", { client: p.client, id: g.example }), g.example), when(g.latest),
      h("span", { class: "actions" },
        h("button", { type: "button", class: "small", onclick: () => bulkByFilter(p.client, "rerun", "Run again", filter, refresh) }, "Run again"),
        h("button", { type: "button", class: "small", onclick: () => bulkByFilter(p.client, "delete", "Delete", filter, refresh) }, "Delete"))];
  });
  show(
    h("h1", {}, "Failures"),
    picker,
    p.type ? h("p", {}, "Jobtype ", h("strong", {}, p.type), " · ", link(route("/failures", { client: p.client }), "all jobtypes")) : null,
    table("Failed jobs of " + p.client + ", grouped by jobtype, result and first line of output",
      ["Jobs", "Jobtype", "Result", "First line", "Example", "Latest", "Actions"], rows, "No failures."),
    f.complete ? null : h("p", { class: "note" }, "Grouped the newest " + f.scanned + " failures; older ones are left out."));
}

// ------------------------------------------------------ handlers, workers

async function handlers(p) {
  if (!p.client) p.client = me.admin ? (await clients())[0] : me.client;
  const picker = await clientPicker(p.client, (c) => { location.hash = route("/handlers", { client: c }); });
  const list = p.client ? (await get("/" + enc(p.client) + "/handlers")).handlers : [];
  show(h("h1", {}, "Handlers"), picker,
    table("Handlers of " + p.client, ["Jobtype", "Method", "Version", "Set"],
      list.map((x) => [x.type, x.method, x.version, when(x.set_at)]), "No handlers."));
}

async function workers(p) {
  if (!p.client) p.client = me.admin ? (await clients())[0] : me.client;
  const picker = await clientPicker(p.client, (c) => { location.hash = route("/workers", { client: c }); });
  const list = p.client ? (await get("/" + enc(p.client) + "/workers")).workers : [];
  show(h("h1", {}, "Remote workers"), picker,
    h("p", { class: "note" }, "Workers of this daemon that fetched jobs lately."),
    table("Remote workers of " + p.client, ["Worker", "State", "Last seen", "Jobs held", "Fetched", "Finished"],
      list.map((w) => [w.worker, w.state, when(w.last_seen), w.jobs_held, w.fetched, w.finished]), "No remote workers."));
}

// -------------------------------------------------------------- schedules

async function schedules(p) {
  if (!p.client) p.client = me.admin ? (await clients())[0] : me.client;
  const picker = await clientPicker(p.client, (c) => { location.hash = route("/schedules", { client: c }); });
  const list = p.client ? (await get("/" + enc(p.client) + "/schedules")).schedules : [];
  const base = "/" + enc(p.client) + "/schedules/";
  const act = (s, verb, label, ask) => h("button", {
    type: "button",
    onclick: async () => {
      if (ask && !confirm(ask)) return;
      try {
        const r = await post(base + enc(s.name) + "/" + verb);
        await schedules(p);
        say(label + ": " + s.name + (r && r.id ? " → job " + r.id : "") + ".");
      } catch (e) { say(e.message, true); }
    },
  }, label);
  const rows = list.map((s) => [
    s.name,
    h("code", {}, s.rule),
    s.time_zone,
    link(route("/jobs", { client: p.client, type: s.type, state: "waiting" }), s.type),
    s.paused ? "paused" : (s.next_due === null ? "ended" : "active"),
    h("span", {}, s.next.slice(0, 3).map((t, i) => [i ? h("br", {}) : null, t])),
    when(s.fired_through),
    s.last_job ? link(route("/job", { client: p.client, id: s.last_job }), s.last_job) : "",
    s.fired + " / " + s.skipped,
    h("span", { class: "actions" },
      s.paused
        ? act(s, "resume", "Resume", "Resume schedule " + s.name + "? Missed slots follow its catch-up policy (" + s.catch_up + ").")
        : act(s, "pause", "Pause", "Pause schedule " + s.name + " on every daemon?"),
      act(s, "trigger", "Run now", "Add one job of " + s.name + " now?")),
  ]);
  show(h("h1", {}, "Schedules"), picker,
    h("p", { class: "note" }, "Every daemon fires due slots; each slot adds one job. Set schedules with the API or `jobstore schedule set`."),
    table("Schedules of " + p.client,
      ["Name", "Rule", "Zone", "Jobtype", "State", "Next slots", "Fired through", "Last job", "Fired / skipped", "Actions"],
      rows, "No schedules."));
}

// ---------------------------------------------------------------- router

const PAGES = { "/": overview, "/jobs": jobs, "/job": job, "/failures": failures, "/handlers": handlers, "/workers": workers, "/schedules": schedules };

async function render() {
  clearTimeout(timer);
  if (!sessionStorage.getItem(TOKEN)) { signIn(); return; }
  try {
    if (!me) await whoami();
    const hash = location.hash.replace(/^#/, "") || "/";
    const [path, query] = hash.split("?");
    const page = PAGES[path] || overview;
    const params = Object.fromEntries(new URLSearchParams(query || ""));
    await page(params);
    document.title = "jobstore · " + (path === "/" ? "overview" : path.slice(1));
  } catch (e) {
    if (e.status === 401) { signIn("Signed out: the token is not accepted."); return; }
    say(e.message, true);
  }
}

window.addEventListener("hashchange", () => { say(""); render().then(() => document.getElementById("main").focus()); });
document.addEventListener("DOMContentLoaded", render);
