// compass budget dashboard: renders the embedded data, refreshes every 30 s.
// Every URL is relative to the page, so the dashboard works behind a reverse
// proxy under a path prefix (https://host/compass/): never a leading "/".
"use strict";
const SVG = "http://www.w3.org/2000/svg";
// The queue is shown one page at a time (the page's own query string
// chooses: ?queue_page_size=50&queue_page=1); page 1 is embedded in the page,
// the others come from api/v1/queue?limit=&offset=.
const PARAMS = new URLSearchParams(location.search);
const PAGE_SIZE = Math.min(1000, Math.max(1, parseInt(PARAMS.get("queue_page_size"), 10) || 50));
let queuePage = Math.max(1, parseInt(PARAMS.get("queue_page"), 10) || 1);
const fmt = (x, d) => (x === null || x === undefined) ? "-" : Number(x).toFixed(d);
function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function row(tbody, cells, id) {
  const tr = document.createElement("tr");
  if (id) tr.id = id;
  for (const c of cells) { const td = document.createElement("td"); td.textContent = c; tr.appendChild(td); }
  tbody.appendChild(tr);
  return tr;
}
function bars(svg, items, series) {
  // items: [{label, values: [..]}]; series: [{color}]
  svg.innerHTML = "";
  const h = 18, left = 220, width = 640;
  const max = Math.max(1e-9, ...items.flatMap(i => i.values));
  svg.setAttribute("height", items.length * (h * series.length + 8) + 10);
  items.forEach((it, i) => {
    const y0 = 5 + i * (h * series.length + 8);
    svg.appendChild(el("text", { x: 0, y: y0 + h - 4, "font-size": 12 }, it.label));
    it.values.forEach((v, s) => {
      const w = Math.max(0, v / max * width);
      svg.appendChild(el("rect", { x: left, y: y0 + s * h, width: w, height: h - 3, fill: series[s].color }));
      svg.appendChild(el("text", { x: left + w + 4, y: y0 + s * h + h - 6, "font-size": 11 }, fmt(v, 1)));
    });
  });
}
// days: [{from, to, nodes: [{node, charged_gpu_hours, budget_gpu_hours}]}],
// oldest first. One row per team: a bar per day (charged), a dashed tick
// per day (budget); rect ids usage-TEAM-DAY carry the exact GPU-hours.
function renderUsage(days) {
  const svg = document.getElementById("usage-chart");
  svg.innerHTML = "";
  const teams = [...new Set(days.flatMap(d => d.nodes.map(n => n.node)))];
  const h = 34, left = 220, slot = 80, barW = 56;
  const max = Math.max(1e-9, ...days.flatMap(d => d.nodes.flatMap(n => [n.charged_gpu_hours, n.budget_gpu_hours])));
  svg.setAttribute("height", teams.length * (h + 6) + 24);
  days.forEach((d, k) => {
    svg.appendChild(el("text", { x: left + k * slot, y: 12, "font-size": 11 }, String(d.to).slice(5, 10)));
  });
  teams.forEach((t, i) => {
    const y0 = 20 + i * (h + 6);
    svg.appendChild(el("text", { x: 0, y: y0 + h - 8, "font-size": 12 }, t));
    days.forEach((d, k) => {
      const n = d.nodes.find(n => n.node === t) || { charged_gpu_hours: 0, budget_gpu_hours: 0 };
      const x = left + k * slot;
      const bh = n.charged_gpu_hours / max * h;
      const r = el("rect", { id: `usage-${t}-${k}`, x: x, y: y0 + h - bh, width: barW, height: bh, fill: "#d62",
        "data-gpu-hours": String(n.charged_gpu_hours) });
      r.appendChild(el("title", {}, `${t}, day to ${d.to}: ${fmt(n.charged_gpu_hours, 1)} GPU-h charged, budget ${fmt(n.budget_gpu_hours, 1)}`));
      svg.appendChild(r);
      const by = y0 + h - n.budget_gpu_hours / max * h;
      svg.appendChild(el("line", { x1: x - 4, x2: x + barW + 4, y1: by, y2: by, stroke: "#36c", "stroke-width": 2, "stroke-dasharray": "4 3" }));
    });
  });
}
// A line chart of one series of the cycle history over [from, to]:
// points [{at, value}] (null values left out). The path's id is `id`-line;
// data-points / data-values carry what it draws (the tests read them).
// The y axis runs from 0 to `topValue` when given, else to the largest value.
function lineChart(id, from, to, points, unit, color, topValue) {
  const svg = document.getElementById(id);
  svg.innerHTML = "";
  const left = 60, width = 780, top = 10, h = 100;
  svg.setAttribute("height", top + h + 24);
  const t0 = Date.parse(from), t1 = Math.max(t0 + 1, Date.parse(to));
  const pts = points.filter(p => p.value !== null && p.value !== undefined);
  const max = topValue || Math.max(1e-9, ...pts.map(p => p.value));
  const x = t => left + (Date.parse(t) - t0) / (t1 - t0) * width;
  const y = v => top + h - v / max * h;
  svg.appendChild(el("line", { x1: left, x2: left + width, y1: top + h, y2: top + h, stroke: "#999" }));
  svg.appendChild(el("line", { x1: left, x2: left, y1: top, y2: top + h, stroke: "#999" }));
  svg.appendChild(el("text", { x: 0, y: top + 10, "font-size": 11 }, `${fmt(max, 1)} ${unit}`));
  svg.appendChild(el("text", { x: 0, y: top + h, "font-size": 11 }, `0 ${unit}`));
  svg.appendChild(el("text", { x: left, y: top + h + 16, "font-size": 11 }, String(from).replace("T", " ").slice(0, 16)));
  svg.appendChild(el("text", { x: left + width - 110, y: top + h + 16, "font-size": 11 }, String(to).replace("T", " ").slice(0, 16)));
  if (!pts.length) {
    svg.appendChild(el("text", { id: id + "-empty", x: left + 10, y: top + h / 2, "font-size": 12 }, "no samples in this window"));
    return;
  }
  const dpath = pts.map((p, i) => `${i ? "L" : "M"}${x(p.at).toFixed(1)},${y(p.value).toFixed(1)}`).join(" ");
  const path = el("path", { id: id + "-line", d: dpath, fill: "none", stroke: color, "stroke-width": 1.5,
    "data-points": String(pts.length), "data-values": pts.map(p => Number(p.value.toFixed(3))).join(",") });
  svg.appendChild(path);
  if (pts.length === 1) svg.appendChild(el("circle", { cx: x(pts[0].at), cy: y(pts[0].value), r: 2, fill: color }));
}
// h: {from, to, points: [{at, gpus_allocated, capacity_gpus, pending_jobs,
// longest_wait_s, median_wait_s, n_sif, partial_nodes}]} (GET api/v1/history).
function renderHistory(h) {
  const pts = h.points || [];
  const s = f => pts.map(p => ({ at: p.at, value: f(p) }));
  lineChart("history-occupancy", h.from, h.to,
    s(p => p.capacity_gpus > 0 ? 100 * p.gpus_allocated / p.capacity_gpus : null), "%", "#d62", 100);
  lineChart("history-pending", h.from, h.to, s(p => p.pending_jobs), "jobs", "#36c");
  lineChart("history-wait", h.from, h.to,
    s(p => p.longest_wait_s === null ? null : p.longest_wait_s / 3600), "h", "#a3a");
  lineChart("history-median-wait", h.from, h.to,
    s(p => p.median_wait_s === null ? null : p.median_wait_s / 3600), "h", "#2a6");
  const frag = pts.some(p => p.n_sif !== null);
  document.getElementById("history-frag").style.display = frag ? "" : "none";
  if (frag) lineChart("history-nsif", h.from, h.to, s(p => p.n_sif), "N*SIF", "#c80");
}
// rows: the jobs of page `queuePage`; total: the whole queue's length.
function renderQueue(rows, total) {
  const qb = document.querySelector("#queue-table tbody"); qb.innerHTML = "";
  for (const j of rows) {
    row(qb, [j.rank + 1, j.job, j.team || `(${j.account}, unbudgeted)`, j.kind, j.gpus, j.priority, fmt(j.team_ratio, 3),
      fmt(j.weight ?? 1, 2)], "job-" + j.job);
  }
  const first = (queuePage - 1) * PAGE_SIZE;
  document.getElementById("queue-range").textContent = rows.length
    ? `page ${queuePage}: jobs ${first + 1}\u2013${first + rows.length} of ${total}`
    : `page ${queuePage}: no jobs (${total} pending)`;
  document.getElementById("queue-prev").disabled = queuePage <= 1;
  document.getElementById("queue-next").disabled = first + rows.length >= total;
}
// One page of the queue from the API.
async function fetchQueue() {
  const r = await fetch(`api/v1/queue?limit=${PAGE_SIZE}&offset=${(queuePage - 1) * PAGE_SIZE}`);
  const q = await r.json();
  renderQueue(q.jobs, q.total);
  document.body.dataset.queuePage = String(queuePage);
  return q;
}
function goToPage(p) {
  queuePage = Math.max(1, p);
  PARAMS.set("queue_page", String(queuePage));
  if (PAGE_SIZE !== 50) PARAMS.set("queue_page_size", String(PAGE_SIZE));
  history.replaceState(null, "", "?" + PARAMS.toString() + location.hash);
  fetchQueue().catch(e => console.log("queue page failed", e));
}
function render(d) {
  const hours = d.window_s / 3600;
  const w = Object.entries(d.gpu_weights || {});
  const cap = w.length
    ? `capacity ${fmt(d.capacity_gpus, 1)} weighted GPUs (GPU weights: ${w.map(([t, x]) => `${t} x${x}`).join(", ")}; other GPUs x1)`
    : `capacity ${d.capacity_gpus} GPUs`;
  document.getElementById("meta").textContent =
    `${cap}; window ${fmt(hours / 24, 1)} days; ${d.queue_total ?? d.queue.length} pending jobs`;
  const tb = document.querySelector("#tree-table tbody"); tb.innerHTML = "";
  for (const n of d.tree) {
    const name = "\u00a0\u00a0".repeat(n.depth) + n.name + (n.account ? ` (${n.account})` : "");
    const tr = row(tb, [name, fmt(n.share, 3), fmt(n.abs_share * 100, 1) + "%", fmt(n.allocation_gpus, 2),
      fmt(n.charged_gpu_hours, 1), fmt(n.free_gpu_hours, 1), fmt(n.ratio, 3)], "node-" + n.name);
    if (n.ratio !== null) tr.lastChild.className = n.ratio > 1 ? "over" : "under";
  }
  bars(document.getElementById("tree-chart"),
    d.tree.map(n => ({ label: "\u00a0".repeat(2 * n.depth) + n.name,
      values: [n.allocation_gpus * hours, n.charged_gpu_hours, n.free_gpu_hours] })),
    [{ color: "#9bc" }, { color: "#d62" }, { color: "#ec9" }]);
  renderUsage(d.usage_days || []);
  renderHistory(d.history || { points: [] });
  renderQueue(d.queue, d.queue_total);
  const ob = document.querySelector("#owed-table tbody"); ob.innerHTML = "";
  for (const t of d.owed) {
    row(ob, [t.team, fmt(t.owed_gpu_hours, 1), fmt(t.delivered_gpu_hours, 1), fmt(t.delivered_fraction * 100, 1) + "%"], "owed-" + t.team);
  }
  bars(document.getElementById("owed-chart"),
    d.owed.map(t => ({ label: t.team, values: [t.owed_gpu_hours, t.delivered_gpu_hours] })),
    [{ color: "#9bc" }, { color: "#2a6" }]);
  const ab = document.querySelector("#actions-table tbody"); ab.innerHTML = "";
  for (const a of (d.actions || [])) {
    const tr = row(ab, [String(a.at).replace("T", " ").slice(0, 19), a.action,
      a.job ?? "-", a.node ?? "-", a.cause_job ?? "-", a.rule ?? "-", fmt(a.lost_gpu_s, 0), a.ok ? "yes" : "FAILED"], "action-" + a.id);
    tr.title = a.detail;
  }
}
async function refresh() {
  try {
    const [tree, owed, actions] = await Promise.all(
      ["api/v1/tree", "api/v1/reports/owed?days=30", "api/v1/actions?limit=20"]
        .map(u => fetch(u).then(r => r.json())));
    const queue = await fetchQueue();
    // The usage chart: one /api/v1/usage window per day, ending at the tree's `to`.
    const end = Math.floor(Date.parse(tree.to) / 1000);
    const days = [];
    for (let k = 6; k >= 0; k--) days.push([end - (k + 1) * 86400, end - k * 86400]);
    const usage = await Promise.all(days.map(([f, t]) =>
      fetch(`api/v1/usage?from=${f}&to=${t}`).then(r => r.json())));
    // The cycle history over the same 7 days (to: exclusive, so + 1 s).
    const history = await fetch(`api/v1/history?from=${end - 7 * 86400}&to=${end + 1}`).then(r => r.json());
    const d = JSON.parse(document.getElementById("data").textContent);
    d.history = history;
    d.usage_days = usage.map(u => ({ from: u.from, to: u.to,
      nodes: u.nodes.filter(n => tree.nodes.some(t => t.name === n.node && t.account)) }));
    d.tree = tree.nodes; d.window_s = tree.window_s; d.capacity_gpus = tree.capacity_gpus;
    d.gpu_weights = tree.gpu_weights;
    d.queue = queue.jobs; d.queue_total = queue.total; d.owed = owed.teams; d.actions = actions.rows;
    render(d);
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (e) { console.log("refresh failed", e); }
}
document.getElementById("queue-prev").onclick = () => goToPage(queuePage - 1);
document.getElementById("queue-next").onclick = () => goToPage(queuePage + 1);
{
  const d = JSON.parse(document.getElementById("data").textContent);
  // The embedded rows are page 1 of the default size; else ask the API.
  const embedded = queuePage === 1 && (PAGE_SIZE <= d.queue.length || d.queue.length === d.queue_total);
  if (!embedded) d.queue = [];
  else d.queue = d.queue.slice(0, PAGE_SIZE);
  render(d);
  if (location.hash === "#refresh") refresh();
  else if (!embedded) fetchQueue().catch(e => console.log("queue page failed", e));
}
setInterval(refresh, 30000);
