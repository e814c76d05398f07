"""The dashboard's stylesheet and script, served from the package (no network, no CDN).

Both are small and written for these pages alone: the script polls (the jobs table and
the cluster pages reload their main section; a job's log follows by asking for the
lines after the last one shown; a job's telemetry charts re-read its samples) and
filters the log view as the user types.

The charts are drawn by uPlot (MIT), vendored unchanged under rbs/server/static/uplot/
with its LICENSE (`VENDORED`, served under /ui/static/).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

# name under /ui/static/ -> (file under static/uplot/, content type)
VENDORED = {
    "uPlot.iife.min.js": ("uPlot.iife.min.js", "text/javascript"),
    "uPlot.min.css": ("uPlot.min.css", "text/css"),
    "uPlot.LICENSE.txt": ("LICENSE", "text/plain"),
}


@cache
def vendored(name: str) -> bytes:
    """A vendored file's bytes (KeyError for a name not in VENDORED)."""
    return files("rbs.server").joinpath("static", "uplot", VENDORED[name][0]).read_bytes()


ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<rect width="16" height="16" rx="3" fill="#1d2330"/>'
    '<path d="M4 11h2V7H4zm3 0h2V4H7zm3 0h2V8h-2z" fill="#8fc7ff"/></svg>'
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
nav { background: #1d2330; padding: 0.5em 1em; display: flex; gap: 1.2em; align-items: center; }
nav a { color: #e6e9ef; text-decoration: none; font-weight: 600; }
nav .who { margin-left: auto; color: #aab2c0; }
nav form { display: inline; }
main { padding: 1em 1.5em; }
table { border-collapse: collapse; background: white; width: 100%; }
th, td { border-bottom: 1px solid #e2e5ea; padding: 0.3em 0.6em; text-align: left; }
th a { color: inherit; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.state { font-weight: 600; }
.PENDING { color: #8a6d00; } .RUNNING { color: #0b62c4; } .COMPLETED { color: #1d7f3a; }
.FAILED, .TIMEOUT, .OUT_OF_MEMORY, .NODE_FAIL { color: #b3261e; } .CANCELLED { color: #666; }
.error { background: #fde7e7; border: 1px solid #e3a3a3; padding: 0.6em; }
.note { color: #5a6372; }
form.filters { margin-bottom: 0.8em; display: flex; gap: 0.6em; flex-wrap: wrap; }
pre#log { background: #111; color: #ddd; padding: 0.6em; max-height: 32em; overflow: auto; }
pre#log .err { color: #ff9a8f; } pre#log .sys { color: #8fc7ff; } pre#log .hidden { display: none; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dt { font-weight: 600; }
section { margin-bottom: 1.5em; }
#charts { display: flex; flex-wrap: wrap; gap: 1em; }
#charts .chart { background: white; padding: 0.4em; }
"""

JS = """
"use strict";
function rbsLive() {
  const main = document.querySelector("main[data-live]");
  if (!main) return;
  const box = document.getElementById("live");
  setInterval(async () => {
    if (box && !box.checked) return;
    const r = await fetch(location.href, {credentials: "same-origin"});
    if (!r.ok) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    const fresh = doc.querySelector("main[data-live] .live-part");
    const old = main.querySelector(".live-part");
    if (fresh && old) old.replaceWith(fresh);
  }, 3000);
}
function rbsLog() {
  const pre = document.getElementById("log");
  if (!pre) return;
  const url = pre.dataset.src;
  const search = document.getElementById("log-search");
  const status = document.getElementById("log-status");
  let after = 0, done = false;
  function show(div) {
    const q = search ? search.value : "";
    div.classList.toggle("hidden", q !== "" && !div.textContent.includes(q));
  }
  async function poll() {
    if (done) return;
    let r;
    try { r = await fetch(url + "?after=" + after, {credentials: "same-origin"}); }
    catch (e) { setTimeout(poll, 2000); return; }
    if (!r.ok) { status.textContent = "log: HTTP " + r.status; setTimeout(poll, 2000); return; }
    const follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    for (const text of (await r.text()).split("\\n")) {
      if (!text) continue;
      const line = JSON.parse(text);
      if (line.end) {
        if (line.state !== "PENDING" && line.state !== "RUNNING") {
          done = true; status.textContent = "the job ended: " + line.state;
        }
        continue;
      }
      after = line.seq;
      const div = document.createElement("div");
      div.className = line.stream;
      div.textContent = line.text;
      show(div);
      pre.appendChild(div);
    }
    if (follow) pre.scrollTop = pre.scrollHeight;
    if (!done) { status.textContent = "following"; setTimeout(poll, 1000); }
  }
  if (search) search.addEventListener("input", () => pre.querySelectorAll("div").forEach(show));
  poll();
}
const COLOURS = ["#0b62c4", "#b3261e", "#1d7f3a", "#8a6d00", "#6a3cb3", "#00838f"];
const MIB = 1048576;
function rbsCharts() {
  const box = document.getElementById("charts");
  if (!box || typeof uPlot === "undefined") return;
  const status = document.getElementById("charts-status");
  const live = document.getElementById("live");
  const charts = {};
  function run(s) {
    return (s.task == null ? "" : "task " + s.task + " ") + "attempt " + s.attempt +
      (s.rank ? " rank " + s.rank : "");
  }
  const kinds = [
    ["cpu", "CPU (cores)", s => [["cpu", s.cpu]]],
    ["mem", "Memory (MiB)", s => [["mem", s.mem / MIB], ["peak", s.mem_peak / MIB]]],
    ["gpu-util", "GPU utilisation (%)", s => (s.gpus || []).map(g => ["gpu " + g.id, g.util])],
    ["gpu-mem", "GPU memory (MiB)", s => (s.gpus || []).map(g => ["gpu " + g.id, g.mem / MIB])],
  ];
  function draw(key, title, samples, pick) {
    const runs = new Set(samples.map(run));
    const xs = [], cols = new Map();
    samples.forEach((s, i) => {
      xs.push(s.t);
      for (const [name, v] of pick(s)) {
        if (v == null || Number.isNaN(v)) continue;
        const label = runs.size > 1 ? run(s) + " " + name : name;
        if (!cols.has(label)) cols.set(label, new Array(samples.length).fill(null));
        cols.get(label)[i] = v;
      }
    });
    const labels = [...cols.keys()];
    let c = charts[key];
    if (c && c.labels.join("|") !== labels.join("|")) { c.plot.destroy(); c.div.remove(); c = null; }
    if (!labels.length) { delete charts[key]; return; }
    const data = [xs, ...labels.map(l => cols.get(l))];
    if (c) { c.plot.setData(data); return; }
    const div = document.createElement("div");
    div.className = "chart"; div.id = "chart-" + key;
    box.appendChild(div);
    const opts = {
      title: title, width: Math.max(300, Math.min(560, box.clientWidth - 16)), height: 200,
      scales: {x: {time: true}},
      series: [{}, ...labels.map((l, i) => ({label: l, stroke: COLOURS[i % COLOURS.length],
                                              width: 1.5, spanGaps: true}))],
    };
    charts[key] = {labels: labels, div: div, plot: new uPlot(opts, data, div)};
  }
  async function poll() {
    if (!live || live.checked) {
      try {
        const r = await fetch(box.dataset.src + "?points=" + (box.dataset.points || 300),
                              {credentials: "same-origin"});
        if (!r.ok) { status.textContent = "telemetry: HTTP " + r.status; }
        else {
          const samples = (await r.json()).samples;
          for (const [key, title, pick] of kinds) draw(key, title, samples, pick);
          status.textContent = samples.length ? "" : "No telemetry sample (yet).";
        }
      } catch (e) { status.textContent = "telemetry: " + e; }
    }
    if (box.dataset.done === undefined) setTimeout(poll, 5000);
  }
  poll();
}
document.addEventListener("DOMContentLoaded", () => { rbsLive(); rbsLog(); rbsCharts(); });
"""
