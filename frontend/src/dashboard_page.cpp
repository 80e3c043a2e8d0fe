// The built-in ops page (dashboard.h): one self-contained HTML document. No external asset:
// styles, script and charts (SVG drawn by the script) are all inline. It loads
// /dashboard/snapshot at once, then follows /dashboard/events (server-sent events, one
// snapshot a second); ?static opens no stream, ?events=N closes it after N events. Element ids and data-* attributes are stable: the headless Chromium test
// (tests/integration/cluster/dashboard_test.cpp) reads them.
#include "dashboard.h"

namespace tessera::frontend {

std::string_view dashboard_html() {
  static constexpr std::string_view kPage = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Tessera dashboard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:10px 18px;display:flex;gap:18px;align-items:baseline}
header h1{font-size:18px;margin:0}
#status{font-size:12px;padding:2px 8px;border-radius:9px;background:#777}
#status.live{background:#2e8b57}#status.down{background:#b22222}
main{padding:14px 18px;display:grid;gap:14px}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(140px,1fr));gap:10px}
.tile{background:#fff;border-radius:6px;padding:8px 12px;box-shadow:0 1px 2px #0002}
.tile b{display:block;font-size:22px}.tile span{font-size:12px;color:#667}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(320px,1fr));gap:10px}
.chart{background:#fff;border-radius:6px;padding:8px 12px;box-shadow:0 1px 2px #0002}
.chart h3{margin:0 0 4px;font-size:13px}.chart svg{width:100%;height:120px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%}
th,td{padding:4px 10px;text-align:right;border-bottom:1px solid #e3e5ea}
th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}
.bar{display:inline-flex;height:10px;width:120px;background:#e3e5ea;vertical-align:middle;overflow:hidden}
.bar i{flex:none;height:10px}.held{background:#d9822b}.cached{background:#3c78d8}
.dead{color:#b22222}
</style></head>
<body data-updates="0">
<header><h1>Tessera</h1><span id="model">-</span><span id="status">connecting</span><span id="updated"></span></header>
<main>
<section class="tiles">
<div class="tile"><b id="schedulers-alive">-</b><span>schedulers alive</span></div>
<div class="tile"><b id="workers">-</b><span>live workers</span></div>
<div class="tile"><b id="running">-</b><span>running</span></div>
<div class="tile"><b id="waiting">-</b><span>waiting</span></div>
<div class="tile"><b id="finished">-</b><span>finished requests</span></div>
<div class="tile"><b id="tokens-per-s">-</b><span>generated tokens/s</span></div>
<div class="tile"><b id="ttft">-</b><span>TTFT (ms, last second)</span></div>
<div class="tile"><b id="hit-rate">-</b><span>prefix cache hit rate</span></div>
<div class="tile"><b id="kv-usage">-</b><span>K/V usage (held pages)</span></div>
<div class="tile"><b id="inflight">-</b><span>in flight at this frontend</span></div>
</section>
<section class="charts">
<div class="chart"><h3>Generated tokens/s</h3><svg id="chart-tokens" viewBox="0 0 300 100" preserveAspectRatio="none"></svg></div>
<div class="chart"><h3>TTFT, mean per second (ms)</h3><svg id="chart-ttft" viewBox="0 0 300 100" preserveAspectRatio="none"></svg></div>
<div class="chart"><h3>Running / waiting</h3><svg id="chart-load" viewBox="0 0 300 100" preserveAspectRatio="none"></svg></div>
<div class="chart"><h3>K/V usage</h3><svg id="chart-kv" viewBox="0 0 300 100" preserveAspectRatio="none"></svg></div>
</section>
<section><h2>Schedulers</h2>
<table id="schedulers"><thead><tr><th>scheduler</th><th>endpoint</th><th>state</th><th>workers</th><th>running</th><th>waiting</th><th>finished</th><th>gen tokens</th><th>hit rate</th><th>TTFT mean (ms)</th><th>preemptions</th></tr></thead><tbody></tbody></table>
</section>
<section><h2>Workers</h2>
<table id="workers-table"><thead><tr><th>worker</th><th>scheduler</th><th>pages free</th><th>held</th><th>cached</th><th>occupancy</th><th>running</th><th>waiting</th><th>hit rate</th></tr></thead><tbody></tbody></table>
</section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const fmt = (x, d) => (x === null || x === undefined) ? "-" : (typeof x === "number" ? x.toFixed(d || 0) : String(x));
const pct = (x) => (x === null || x === undefined) ? "-" : (100 * x).toFixed(1) + "%";
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function chart(svg, series, colors) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  let max = 0, n = 0;
  for (const s of series) for (const v of s) { if (v !== null && v > max) max = v; n = Math.max(n, s.length); }
  if (max <= 0) max = 1;
  series.forEach((s, k) => {
    const pts = [];
    s.forEach((v, i) => { if (v !== null) pts.push((n > 1 ? i * 300 / (n - 1) : 0).toFixed(1) + "," + (98 - v * 94 / max).toFixed(1)); });
    const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    pl.setAttribute("points", pts.join(" "));
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", colors[k]);
    pl.setAttribute("stroke-width", "2");
    pl.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(pl);
  });
  const label = document.createElementNS("http://www.w3.org/2000/svg", "text");
  label.setAttribute("x", "2"); label.setAttribute("y", "10"); label.setAttribute("font-size", "9"); label.setAttribute("fill", "#667");
  label.textContent = "max " + max.toFixed(max < 10 ? 2 : 0);
  svg.appendChild(label);
  svg.setAttribute("data-points", String(n));
  svg.setAttribute("data-max", String(max));
}
function render(s) {
  const t = s.totals;
  $("model").textContent = s.model;
  $("schedulers-alive").textContent = t.alive_schedulers + " / " + t.schedulers;
  $("workers").textContent = t.workers;
  $("running").textContent = t.running;
  $("waiting").textContent = t.waiting;
  $("finished").textContent = t.finished_requests;
  $("tokens-per-s").textContent = fmt(t.tokens_per_s, 1);
  $("ttft").textContent = fmt(t.ttft_ms, 1);
  $("hit-rate").textContent = pct(t.hit_rate);
  $("kv-usage").textContent = pct(t.kv_usage);
  $("inflight").textContent = s.frontend.inflight;
  const sb = $("schedulers").tBodies[0], wb = $("workers-table").tBodies[0];
  sb.textContent = ""; wb.textContent = "";
  for (const sc of s.schedulers) {
    const tr = sb.insertRow();
    tr.dataset.scheduler = sc.name || sc.endpoint;
    cell(tr, sc.name || "?", "name"); cell(tr, sc.endpoint, "endpoint");
    cell(tr, sc.alive ? "alive" : "dead", sc.alive ? "state" : "state dead");
    cell(tr, sc.live_workers, "live-workers"); cell(tr, sc.running, "running"); cell(tr, sc.waiting, "waiting");
    cell(tr, fmt(sc.finished_requests), "finished"); cell(tr, fmt(sc.generation_tokens), "generation-tokens");
    cell(tr, pct(sc.hit_rate), "hit-rate"); cell(tr, fmt(sc.ttft_ms_mean, 1), "ttft"); cell(tr, fmt(sc.preemptions), "preemptions");
    for (const w of sc.workers) {
      const wr = wb.insertRow();
      wr.dataset.worker = w.name; wr.dataset.scheduler = sc.name || sc.endpoint;
      cell(wr, w.name, "name"); cell(wr, sc.name || sc.endpoint, "scheduler");
      cell(wr, w.pages.free, "pages-free"); cell(wr, w.pages.held, "pages-held"); cell(wr, w.pages.cached, "pages-cached");
      const total = w.pages.free + w.pages.held + w.pages.cached || 1;
      const occ = cell(wr, "", "occupancy");
      const bar = document.createElement("span"); bar.className = "bar";
      for (const [k, v] of [["held", w.pages.held], ["cached", w.pages.cached]]) {
        const i = document.createElement("i"); i.className = k; i.style.width = (120 * v / total).toFixed(1) + "px"; bar.appendChild(i);
      }
      occ.appendChild(bar);
      cell(wr, w.running, "running"); cell(wr, w.waiting, "waiting"); cell(wr, pct(w.hit_rate), "hit-rate");
    }
  }
  const h = s.history;
  chart($("chart-tokens"), [h.map(p => p.tokens_per_s)], ["#2e8b57"]);
  chart($("chart-ttft"), [h.map(p => p.ttft_ms)], ["#d9822b"]);
  chart($("chart-load"), [h.map(p => p.running), h.map(p => p.waiting)], ["#3c78d8", "#b22222"]);
  chart($("chart-kv"), [h.map(p => p.kv_usage)], ["#6a3d9a"]);
  $("updated").textContent = new Date(s.time_ms).toLocaleTimeString();
  document.body.dataset.updates = String(Number(document.body.dataset.updates) + 1);
}
function status(text, cls) { const e = $("status"); e.textContent = text; e.className = cls; }
fetch("/dashboard/snapshot").then(r => r.json()).then(render).catch(() => status("no data", "down"));
// ?static: no events stream; ?events=N: close the stream after N events (headless browsers
// wait for open requests before they render).
const params = new URLSearchParams(location.search);
const limit = Number(params.get("events") || 0);
if (window.EventSource && !params.has("static")) {
  const es = new EventSource("/dashboard/events");
  let seen = 0;
  es.addEventListener("snapshot", (e) => {
    document.body.dataset.sseEvents = String(++seen);
    status("live", "live");
    render(JSON.parse(e.data));
    if (limit && seen >= limit) es.close();
  });
  es.onerror = () => status("reconnecting", "down");
}
</script>
</body></html>
)HTML";
  return kPage;
}

}  // namespace tessera::frontend
