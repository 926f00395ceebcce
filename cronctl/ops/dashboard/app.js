// cronctl's dashboard. Reads only /api/*, at most one request a second; builds every
// element with createElement/textContent and never parses data as markup, so whatever a
// job is named or prints shows as text.
"use strict";

const ACTIONS = document.querySelector('meta[name="cronctl-actions"]').content === "on";
const COLORS = {success: "#1a7f37", error: "#c62828", timeout: "#c62828", lost: "#c62828", not_started: "#c62828",
  killed: "#b26a00", skipped: "#6b7280", running: "#1565c0"};
const $ = (id) => document.getElementById(id);
const view = {status: null, jobs: new Map(), timeline: null, audit: [], chains: new Map(), token: null,
  queue: [], extraLast: false, busy: false, signature: "", timelineAt: 0, jobsAt: 0, auditSince: null,
  jobPage: null, jobRunsAt: 0, drawn: [null, 0]};

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child != null) node.append(child);
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}
function pill(word) { return el("span", {class: "pill s-" + word, text: word}); }

async function getJson(path) {
  const response = await fetch(path, {cache: "no-store"});
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

// --- time words -----------------------------------------------------------------------------
function ago(seconds) {
  const s = Math.abs(seconds);
  const text = s < 60 ? Math.round(s) + "s" : s < 3600 ? Math.round(s / 60) + "m" : s < 86400 ?
    (s / 3600).toFixed(1) + "h" : (s / 86400).toFixed(1) + "d";
  return seconds >= 0 ? "in " + text : text + " ago";
}
const formats = new Map();  // one formatter per zone: making one costs more than using it
function inZone(iso, zone) {
  zone = zone || "UTC";
  try {
    if (!formats.has(zone)) {
      formats.set(zone, new Intl.DateTimeFormat("sv-SE", {timeZone: zone, year: "numeric", month: "2-digit",
        day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit"}));
    }
    return formats.get(zone).format(new Date(iso)) + " " + zone;
  } catch (e) { return iso; }
}
function duration(seconds) {
  if (seconds == null) return "";
  return seconds < 1 ? seconds.toFixed(2) + "s" : seconds < 120 ? seconds.toFixed(1) + "s" : Math.round(seconds / 60) + "m";
}

// --- polling: one request a second, the status at least every other second ------------------
function enqueue(key, run) {
  if (!view.queue.some((item) => item.key === key)) view.queue.push({key, run});
}
async function tick() {
  if (view.busy || document.hidden && view.status) return;
  view.busy = true;
  try {
    if (view.queue.length && !view.extraLast) {
      view.extraLast = true;
      await view.queue.shift().run();
    } else {
      view.extraLast = false;
      await refreshStatus();
    }
    $("message").textContent = "";
  } catch (err) {
    $("message").textContent = "cannot reach the loop: " + err.message;
  } finally {
    view.busy = false;
  }
}
async function refreshStatus() {
  const data = await getJson("/api/status");
  view.status = data;
  const signature = data.jobs.map((j) => j.name + j.state + j.last_run_at + j.running.join()).join("|");
  const now = Date.now();
  if (!view.jobsAt || now - view.jobsAt > 30000 || data.jobs.length !== view.jobs.size) enqueue("jobs", refreshJobs);
  if (signature !== view.signature || now - view.timelineAt > 15000) {
    if (now - view.timelineAt > 4000 || !view.timeline) enqueue("timeline", refreshTimeline);
    enqueue("audit", refreshAudit);
    if (chainRoots().length) enqueue("chains", refreshChains);
    if (view.jobPage) enqueue("jobruns", refreshJobRuns);
  }
  view.signature = signature;
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  render();
}
async function refreshJobs() {
  const data = await getJson("/api/jobs");
  view.jobs = new Map(data.jobs.map((job) => [job.name, job]));
  view.jobsAt = Date.now();
  render();
}
async function refreshTimeline() {
  const span = Number($("zoom").value);
  const width = Math.max(300, $("timeline").clientWidth - 160);
  const res = (span / width).toFixed(2);
  // The window's start moves in steps of ten pixels: the loop keeps the bars it built for it.
  const step = Math.max(60, res * 10) * 1000;
  const since = new Date(Math.floor((Date.now() - span * 1000) / step) * step).toISOString();
  view.timeline = await getJson("/api/history?view=timeline&since=" + encodeURIComponent(since) + "&res=" + res);
  view.timelineAt = Date.now();
  render();
}
async function refreshChains() {
  // Each root's last finished chain, with every node's outcome (skipped ones included).
  const rows = (await getJson("/api/audit?event=chain.finished&n=500")).rows;
  for (const row of rows) view.chains.set(row.root, {id: row.chain, outcome: row.outcome, statuses: row.statuses || {}});
  renderChains();
}
async function refreshAudit() {
  const data = await getJson("/api/audit?n=50");
  view.audit = data.rows;
  renderAudit();
}

// --- the overview ---------------------------------------------------------------------------
function render() {
  if (!view.status || view.loading) return;
  renderLoop();
  if (view.jobPage) { renderJobPage(); return; }
  renderJobs();
  const drawn = [view.timeline, view.status.jobs.length];
  if (drawn[0] !== view.drawn[0] || drawn[1] !== view.drawn[1]) {  // a canvas is redrawn only for new bars
    view.drawn = drawn;
    drawTimeline();
  }
  renderChains();
  renderLoops();
}
function renderLoop() {
  const loop = view.status.loop || {};
  const node = $("loop");
  node.className = "pill s-" + loop.state;
  const seconds = loop.heartbeat_age_s ?? loop.heartbeat_age;
  const age = seconds != null ? ", heartbeat " + Number(seconds).toFixed(1) + "s ago" : "";
  node.textContent = "loop: " + loop.state + age;
}
const rows = new Map();
// Only the rows scrolled into view (and a few around them) are in the table: two spacer rows
// stand for the others, so 1,000 jobs cost the DOM of about 30.
const JOB_ROW = 44, JOB_SPARE = 8;
function renderJobs() {
  const tbody = $("jobs").tBodies[0], box = $("jobs-box");
  const filter = $("filter").value.trim().toLowerCase();
  const jobs = view.status.jobs.filter((job) => !filter || job.name.toLowerCase().includes(filter) ||
    job.state.includes(filter));
  const names = new Set(view.status.jobs.map((job) => job.name));
  for (const name of rows.keys()) if (!names.has(name)) rows.delete(name);
  const first = Math.max(0, Math.floor(box.scrollTop / JOB_ROW) - JOB_SPARE);
  const last = Math.min(jobs.length, first + Math.ceil((box.clientHeight || 800) / JOB_ROW) + 2 * JOB_SPARE);
  const wanted = [padRow("top", first * JOB_ROW)];
  for (const job of jobs.slice(first, last)) {
    let row = rows.get(job.name);
    if (!row) { row = makeRow(job.name); rows.set(job.name, row); }
    fillRow(row, job);
    wanted.push(row.tr);
  }
  wanted.push(padRow("bottom", (jobs.length - last) * JOB_ROW));
  if (wanted.length !== tbody.children.length || wanted.some((tr, i) => tbody.children[i] !== tr)) {
    tbody.replaceChildren(...wanted);
  }
  $("count").textContent = "(" + view.status.jobs.length + (filter ? ", " + jobs.length + " shown" : "") + ")";
  document.querySelectorAll(".act-col").forEach((node) => { node.hidden = !view.token; });
}
const pads = {};
function padRow(where, height) {
  if (!pads[where]) pads[where] = el("tr", {class: "pad"}, el("td", {colspan: "7"}));
  pads[where].firstChild.style.height = height + "px";
  pads[where].hidden = height === 0;
  return pads[where];
}
function makeRow(name) {
  const cells = {};
  const tr = el("tr", {"data-job": name});
  for (const key of ["name", "state", "schedule", "next", "last", "recent", "acts"]) {
    cells[key] = el("td", {class: key});
    tr.append(cells[key]);
  }
  cells.name.append(el("a", {href: "/jobs/" + encodeURIComponent(name), text: name}));
  cells.acts.classList.add("act-col");
  for (const verb of ["force-run", "pause", "resume", "kill"]) {
    const button = el("button", {type: "button", "data-verb": verb, text: verb});
    button.addEventListener("click", () => act(name, verb));
    cells.acts.append(button);
  }
  return {tr, cells, key: ""};
}
function fillRow(row, job) {
  const def = view.jobs.get(job.name) || {};
  const tl = view.timeline && view.timeline.jobs[job.name];
  const last = tl && tl.last;
  const key = JSON.stringify([job, def.next_fire_at, def.schedule_words, last, tl && tl.recent,
    Math.floor(Date.now() / 5000)]);
  if (key === row.key) return;
  row.key = key;
  const c = row.cells;
  c.state.replaceChildren(pill(job.state));
  if (job.reason) c.state.title = job.reason;
  c.schedule.textContent = def.schedule_words || job.schedule || "";
  c.schedule.title = job.schedule || "";
  const next = job.next_run_at || def.next_fire_at;
  c.next.replaceChildren();
  if (next) {
    c.next.append(el("span", {text: ago((Date.parse(next) - Date.now()) / 1000)}), el("br"),
      el("span", {class: "muted", text: inZone(next, def.timezone)}));
  } else c.next.textContent = "—";
  c.last.replaceChildren();
  if (last) {
    c.last.append(pill(last.status), " " + duration(last.duration));
    const why = last.reason || (last.exit_code ? "exit " + last.exit_code : "");
    if (why) c.last.append(el("br"), el("span", {class: "muted", text: why}));
  } else if (job.last_status) c.last.append(pill(job.last_status));
  else c.last.textContent = "never ran";
  // The strip is one element painted with a gradient: 20 elements a row are 20,000 at 1,000 jobs.
  const words = ((tl && tl.recent) || []).map(([code]) => view.timeline.statuses[code]);
  const stops = words.map((word, i) => `${COLORS[word] || "#999"} ${i * 8}px ${i * 8 + 7}px, transparent ${i * 8 + 7}px ${i * 8 + 8}px`);
  c.recent.replaceChildren();
  if (words.length) {
    const strip = el("span", {class: "strip", title: "oldest first: " + words.join(", "), "data-outcomes": words.join(" ")});
    strip.style.width = words.length * 8 + "px";
    strip.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
    c.recent.append(strip);
  }
}

// --- the timeline: one canvas, one row per job ----------------------------------------------
const ROW = 18, LABEL = 150;
// The canvas is the box's height and stays in view; a spacer gives the box the height of every
// row, and only the rows scrolled into view are drawn (a canvas of 1,000 rows would be 18,000 px).
function drawTimeline() {
  const canvas = $("timeline"), box = $("timeline-box");
  const data = view.timeline;
  if (!data) return;
  const names = view.status.jobs.map((j) => j.name);
  const full = names.length * ROW + 20;
  $("timeline-spacer").style.height = Math.max(0, full - canvas.clientHeight) + "px";
  const width = canvas.clientWidth || 900;
  const height = Math.min(full, 540);
  const ratio = window.devicePixelRatio || 1;
  canvas.style.height = height + "px";
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.font = "12px system-ui, sans-serif";
  const since = Date.parse(data.since), until = Date.parse(data.until);
  const span = (until - since) / 1000;
  const scale = (width - LABEL - 8) / span;
  const first = Math.floor(box.scrollTop / ROW);
  for (let i = first; i < Math.min(names.length, first + Math.ceil(height / ROW) + 1); i++) {
    const y = (i - first) * ROW, name = names[i];
    g.fillStyle = i % 2 ? "#f3f4f6" : "#ffffff";
    g.fillRect(0, y, width, ROW);
    g.fillStyle = "#111";
    g.fillText(name.length > 20 ? name.slice(0, 19) + "…" : name, 4, y + 13);
    const job = data.jobs[name];
    if (!job) continue;
    for (const [start, end, code, , late] of job.bars) {
      g.fillStyle = COLORS[data.statuses[code]] || "#999";
      g.fillRect(LABEL + start * scale, y + 3, Math.max(1.5, (end - start) * scale), ROW - 6);
      if (late) { g.fillStyle = "#b26a00"; g.fillRect(LABEL + start * scale - 1, y, 3, 5); }
    }
    g.fillStyle = "#374151";
    for (const slot of job.ticks) g.fillRect(LABEL + slot * scale, y + ROW - 6, 1.5, 6);
  }
  g.fillStyle = "rgba(255,255,255,0.9)";  // the time axis, over the rows
  g.fillRect(LABEL, height - 16, width, 16);
  for (let h = 0; h <= 6; h++) {
    const x = LABEL + (span * h / 6) * scale;
    g.fillStyle = "rgba(107,114,128,0.5)";
    g.fillRect(x, 0, 1, height);
    g.fillStyle = "#374151";
    g.fillText(new Date(since + span * h / 6 * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"}),
      Math.min(x + 2, width - 40), height - 4);
  }
}
function timelineTip(event) {
  const data = view.timeline;
  if (!data || !view.status) return;
  const rect = event.target.getBoundingClientRect();
  const first = Math.floor($("timeline-box").scrollTop / ROW);
  const name = (view.status.jobs[first + Math.floor((event.clientY - rect.top) / ROW)] || {}).name;
  const job = name && data.jobs[name];
  const span = (Date.parse(data.until) - Date.parse(data.since)) / 1000;
  const at = (event.clientX - rect.left - LABEL) / ((rect.width - LABEL - 8) / span);
  const bar = job && job.bars.find(([s, e]) => at >= s - data.res && at <= e + data.res);
  $("tip").textContent = bar ? name + ": " + bar[3] + " run(s) " + data.statuses[bar[2]] + (bar[4] ? ", started late" : "") +
    " at " + new Date(Date.parse(data.since) + bar[0] * 1000).toLocaleTimeString() : (name || "");
}

// --- chains: one SVG per root, nodes by depth ------------------------------------------------
function chainRoots() {
  const dependants = new Set();
  for (const job of view.jobs.values()) for (const up of job.after || []) dependants.add(up);
  return [...view.jobs.values()].filter((j) => !(j.after || []).length && dependants.has(j.name)).map((j) => j.name);
}
function renderChains() {
  const box = $("chains");
  const roots = chainRoots();
  const key = JSON.stringify([roots, [...view.chains.entries()].map(([r, c]) => [r, c.id])]);
  if (box.dataset.key === key) return;
  box.dataset.key = key;
  box.replaceChildren();
  if (!roots.length) { box.append(el("p", {class: "muted", text: "no chains"})); return; }
  for (const root of roots) box.append(chainGraph(root));
}
function chainGraph(root) {
  const depth = new Map([[root, 0]]);
  const edges = [];
  let changed = true;
  while (changed) {  // longest path from the root: a node sits right of every upstream
    changed = false;
    for (const job of view.jobs.values()) {
      for (const up of job.after || []) {
        if (!depth.has(up)) continue;
        edges.push([up, job.name]);
        const d = depth.get(up) + 1;
        if ((depth.get(job.name) ?? -1) < d) { depth.set(job.name, d); changed = true; }
      }
    }
  }
  const columns = [];
  for (const [name, d] of depth) (columns[d] = columns[d] || []).push(name);
  const W = 130, H = 26, GX = 40, GY = 14;
  const pos = new Map();
  columns.forEach((names, d) => names.sort().forEach((name, i) => pos.set(name, [d * (W + GX) + 4, i * (H + GY) + 24])));
  const chain = view.chains.get(root);
  const width = columns.length * (W + GX), height = Math.max(...columns.map((c) => c.length)) * (H + GY) + 24;
  const graph = svg("svg", {width, height, role: "img", "aria-label": "chain of " + root});
  const title = svg("text", {x: 4, y: 14, class: "title"});
  title.textContent = "chain " + root + (chain ? " — last " + chain.id + ": " + chain.outcome : " — no chain finished yet");
  graph.append(title);
  const drawn = new Set();
  for (const [from, to] of edges) {
    if (drawn.has(from + "\u0000" + to)) continue;
    drawn.add(from + "\u0000" + to);
    const [x1, y1] = pos.get(from), [x2, y2] = pos.get(to);
    graph.append(svg("path", {class: "edge", d: `M${x1 + W},${y1 + H / 2} C${x1 + W + GX / 2},${y1 + H / 2} ${x2 - GX / 2},${y2 + H / 2} ${x2},${y2 + H / 2}`}));
  }
  for (const [name, [x, y]] of pos) {
    const word = (chain && chain.statuses[name]) || "not run";
    const node = svg("g", {"data-job": name, "data-status": word});
    node.append(svg("rect", {x, y, width: W, height: H, rx: 4, fill: COLORS[word] || "#9ca3af"}));
    const label = svg("text", {x: x + 6, y: y + 17});
    label.textContent = (name.length > 12 ? name.slice(0, 11) + "…" : name) + " · " + word;
    const tip = svg("title", {});
    tip.textContent = name + ": " + word;
    node.append(label, tip);
    graph.append(node);
  }
  return el("div", {class: "chain", "data-root": root}, graph);
}

// --- loops and audit ----------------------------------------------------------------------------
function renderLoops() {
  const loops = view.status.loops || [Object.assign({host: "this host"}, view.status.loop)];
  $("loops").tBodies[0].replaceChildren(...loops.map((loop) => el("tr", {},
    el("td", {text: loop.host || loop.host_id || "this host"}), el("td", {text: String(loop.pid ?? "")}),
    el("td", {}, pill(loop.state || "unknown")),
    el("td", {text: (loop.heartbeat_age_s ?? loop.heartbeat_age) != null ?
      Number(loop.heartbeat_age_s ?? loop.heartbeat_age).toFixed(1) + "s" : ""}),
    el("td", {text: loop.skew_s != null ? Number(loop.skew_s).toFixed(3) + "s" : "—"}))));
}
function renderAudit() {
  $("audit").tBodies[0].replaceChildren(...view.audit.slice().reverse().map((row) => {
    const rest = Object.entries(row).filter(([k]) => !["ts", "event", "job"].includes(k))
      .map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join(" ");
    return el("tr", {}, el("td", {text: (row.ts || "").replace("T", " ").slice(0, 23)}),
      el("td", {text: row.event}), el("td", {text: row.job || ""}), el("td", {class: "muted", text: rest}));
  }));
}

// --- a job's page ---------------------------------------------------------------------------
async function refreshJobRuns() {
  const name = view.jobPage;
  const [def, history] = [await getJson("/api/jobs/" + encodeURIComponent(name)),
    await getJson("/api/history?n=50&job=" + encodeURIComponent(name))];
  view.jobs.set(name, def);
  view.jobRuns = history.runs;
  if (!view.loading) renderJobPage(true);
}
function renderJobPage(full) {
  const name = view.jobPage;
  const job = (view.status && view.status.jobs.find((j) => j.name === name)) || {};
  $("jp-state").replaceWith(Object.assign(pill(job.state || "unknown"), {id: "jp-state"}));
  if (!full) return;
  const def = view.jobs.get(name) || {};
  const body = $("jp-def").tBodies[0];
  body.replaceChildren();
  for (const key of ["schedule_words", "schedule", "timezone", "command_text", "cwd", "timeout", "overlap", "retries",
    "after", "paused", "next_fire_at"]) {
    if (def[key] == null || def[key] === "" || (Array.isArray(def[key]) && !def[key].length)) continue;
    const value = key === "next_fire_at" ? inZone(def[key], def.timezone) : Array.isArray(def[key]) ? def[key].join(", ") : String(def[key]);
    body.append(el("tr", {}, el("th", {text: key}), el("td", {text: value})));
  }
  const runs = $("jp-runs");
  runs.replaceChildren();
  for (const run of (view.jobRuns || []).slice().reverse()) {
    const logLink = el("a", {href: "/api/logs/" + encodeURIComponent(name) + "/" + encodeURIComponent(run.run_id),
      text: "log"});
    runs.append(el("div", {class: "run", "data-run": run.run_id},
      el("div", {}, pill(run.status), " " + (run.started_at || "").replace("T", " ").slice(0, 19) + " · " +
        duration(run.duration) + " · " + run.trigger + (run.reason ? " · " + run.reason : "") + " · ", logLink),
      el("pre", {text: run.output_tail || ""})));
  }
  if (!runs.children.length) runs.append(el("p", {class: "muted", text: "no runs yet"}));
}

// --- actions --------------------------------------------------------------------------------
function askToken() {
  const token = window.prompt("Token of this loop (the contents of its --http-token file):");
  if (!token) return;
  view.token = token.trim();
  try { sessionStorage.setItem("cronctl-token", view.token); } catch (e) { /* private mode */ }
  showActions();
}
function showActions() {
  $("token").textContent = view.token ? "Forget token" : "Enter token";
  document.querySelectorAll(".act-col").forEach((node) => { node.hidden = !view.token; });
  const box = $("jp-actions");
  box.replaceChildren();
  if (view.token && view.jobPage) {
    for (const verb of ["force-run", "pause", "resume", "kill"]) {
      const button = el("button", {type: "button", "data-verb": verb, text: verb});
      button.addEventListener("click", () => act(view.jobPage, verb));
      box.append(button, " ");
    }
  }
}
async function act(name, verb) {
  $("message").textContent = verb + " " + name + "…";
  const response = await fetch("/api/jobs/" + encodeURIComponent(name) + "/" + verb,
    {method: "POST", headers: {Authorization: "Bearer " + view.token}});
  const data = await response.json().catch(() => ({}));
  $("message").textContent = response.ok ? verb + " " + name + ": done" + (data.run_id ? " (run " + data.run_id + ")" : "")
    : verb + " " + name + ": " + (data.error || "HTTP " + response.status);
  if (response.status === 403) { view.token = null; sessionStorage.removeItem("cronctl-token"); showActions(); }
  view.signature = "";
}

// --- start ----------------------------------------------------------------------------------
function start() {
  const match = location.pathname.match(/^\/jobs\/(.+)$/);
  if (match) {
    view.jobPage = decodeURIComponent(match[1]);
    $("overview").hidden = true;
    $("jobpage").hidden = false;
    $("jp-name").textContent = view.jobPage;
    document.title = view.jobPage + " — cronctl";
    enqueue("jobruns", refreshJobRuns);
  }
  for (const [word, color] of Object.entries(COLORS)) {
    const swatch = el("i", {});
    swatch.style.background = color;
    $("legend").append(swatch, word);
  }
  if (ACTIONS) {
    $("token").hidden = false;
    try { view.token = sessionStorage.getItem("cronctl-token"); } catch (e) { view.token = null; }
    $("token").addEventListener("click", () => {
      if (view.token) { view.token = null; sessionStorage.removeItem("cronctl-token"); showActions(); } else askToken();
    });
    showActions();
  }
  $("zoom").addEventListener("change", () => { view.timelineAt = 0; enqueue("timeline", refreshTimeline); });
  $("filter").addEventListener("input", () => view.status && renderJobs());
  $("jobs-box").addEventListener("scroll", () => view.status && requestAnimationFrame(renderJobs));
  $("timeline").addEventListener("mousemove", timelineTip);
  window.addEventListener("resize", () => view.timeline && drawTimeline());
  $("timeline-box").addEventListener("scroll", () => view.timeline && requestAnimationFrame(drawTimeline));
  firstLoad().finally(() => setInterval(tick, 1000));
}
async function firstLoad() {
  // The three reads a first render needs, at once; from then on one request a second.
  view.loading = true;  // one render once all three are in, not one per answer
  try {
    await Promise.all([refreshStatus(), refreshJobs(), view.jobPage ? refreshJobRuns() : refreshTimeline()]);
    view.queue = view.queue.filter((item) => !["jobs", "timeline", "jobruns"].includes(item.key));
    view.loading = false;
    render();
    if (view.jobPage) renderJobPage(true); else renderAudit();
    // What bench/dashboard.py times: once the first complete render is laid out and painted.
    requestAnimationFrame(() => setTimeout(() => performance.mark("cronctl-rendered"), 0));
  } catch (err) {
    view.loading = false;
    $("message").textContent = "cannot reach the loop: " + err.message;
  }
}
start();
