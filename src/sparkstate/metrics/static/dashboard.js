// sparkstate's dashboard: the live page of a running job (polls the metrics endpoint every
// second) and the page of `sparkstate report` (its data inlined). window.SPARKSTATE holds the
// chart definitions (metrics/charts.py) and, in a report, the job, its values and its points.
(function () {
  "use strict";
  const cfg = window.SPARKSTATE;
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];
  const STATS = [
    ["numRecordsIn", "events in", "count"],
    ["numRecordsInPerSecond", "events/s (last batch)", "count"],
    ["numRecordsOut", "rows out", "count"],
    ["batches", "batches", "count"],
    ["batchDuration", "last batch", "ms"],
    ["currentInputWatermark", "watermark", "time"],
    ["eventTimeLag", "event-time lag", "ms"],
    ["stateSizeBytes", "state size", "bytes"],
    ["stateEntries", "state entries", "count"],
    ["numberOfCompletedCheckpoints", "checkpoints", "count"],
    ["numberOfFailedCheckpoints", "failed checkpoints", "count"],
    ["lastCheckpointDuration", "last checkpoint", "ms"],
    ["lastCheckpointSize", "last checkpoint delta", "bytes"],
    ["lastCheckpointFullSize", "last checkpoint full", "bytes"],
    ["deadLetters", "dead letters", "count"],
    ["lateEvents", "late events", "count"],
    ["inputRowsWaiting", "input rows waiting", "count"],
  ];

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
    if (text !== undefined) e.textContent = text;
    return e;
  };

  function bytes(v) {
    if (v === null || v === undefined || v === "") return "-";
    let n = Number(v), i = 0;
    const units = ["B", "KB", "MB", "GB", "TB"];
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n.toFixed(0)) + " " + units[i];
  }
  function count(v) {
    if (v === null || v === undefined || v === "") return "-";
    return Number(v).toLocaleString("en-US", {maximumFractionDigits: 1});
  }
  function format(v, kind) {
    if (v === null || v === undefined || v === "") return "-";
    if (kind === "bytes") return bytes(v);
    if (kind === "ms") return Number(v) >= 10000 ? (Number(v) / 1000).toFixed(1) + " s" : count(v) + " ms";
    if (kind === "time") return new Date(Number(v)).toISOString().replace("T", " ").slice(0, 19);
    return count(v);
  }

  // ---------------------------------------------------------------- the page's parts
  const statCells = {};
  STATS.forEach(([name, label]) => {
    const box = el("div", {class: "stat"});
    box.appendChild(el("div", {class: "label"}, label));
    statCells[name] = el("div", {class: "value", id: "stat-" + name}, "-");
    box.appendChild(statCells[name]);
    $("stats").appendChild(box);
  });

  function showJob(job) {
    $("job-name").textContent = job.name;
    const status = $("status");
    status.textContent = job.state;
    status.className = "status " + String(job.state).toLowerCase();
    const info = $("job-info");
    info.textContent = (job.jid ? "job " + job.jid + ", started " : "first batch ") + format(job["start-time"], "time") + " UTC";
    if (job["spark-ui"]) {
      info.appendChild(document.createTextNode(" · "));
      info.appendChild(el("a", {href: job["spark-ui"], id: "spark-ui", target: "_blank"}, "Spark UI"));
    }
    if (cfg.mode === "report") info.appendChild(document.createTextNode(" · the batches the checkpoint retains"));
    const table = $("settings");
    table.replaceChildren();
    Object.entries(job.settings || {}).forEach(([k, v]) => {
      const row = el("tr");
      row.appendChild(el("th", {}, k));
      row.appendChild(el("td", {}, typeof v === "object" ? JSON.stringify(v) : String(v)));
      table.appendChild(row);
    });
  }

  function showValues(values) {
    STATS.forEach(([name, , kind]) => { statCells[name].textContent = format(values[name], kind); });
  }

  // ---------------------------------------------------------------- charts
  const points = [];
  const charts = cfg.charts.map((spec) => {
    const box = el("div", {class: "chart", id: "chart-" + spec.id, "data-points": "0"});
    $("charts").appendChild(box);
    const axis = spec.scale === "bytes" ? (u, vals) => vals.map(bytes) : (u, vals) => vals.map(count);
    const opts = {
      title: spec.title + " (" + spec.unit + ")",
      width: Math.max(300, box.clientWidth || 560),
      height: 220,
      scales: {x: {time: true}},
      series: [{}].concat(spec.series.map(([label], i) => ({
        label: label, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: false,
        value: (u, v) => spec.scale === "bytes" ? bytes(v) : count(v),
      }))),
      axes: [{}, {values: axis, size: 76}],
    };
    return {spec, box, plot: new uPlot(opts, [[]].concat(spec.series.map(() => [])), box)};
  });

  function draw() {
    const xs = points.map((p) => p.t);
    charts.forEach((c) => {
      const ys = c.spec.series.map(([, field]) => points.map((p) => (p[field] === undefined ? null : p[field])));
      c.plot.setData([xs].concat(ys));
      c.box.setAttribute("data-points", String(xs.length));
    });
  }

  window.addEventListener("resize", () => {
    charts.forEach((c) => c.plot.setSize({width: Math.max(300, c.box.clientWidth), height: 220}));
  });

  // ---------------------------------------------------------------- data
  if (cfg.mode === "report") {
    showJob(cfg.job);
    showValues(cfg.values);
    points.push(...cfg.points);
    draw();
    document.body.setAttribute("data-ready", "true");
    return;
  }

  const names = STATS.map(([n]) => n).join(",");
  let jobId = null;
  let last = -1;
  async function get(path) {
    const r = await fetch(path, {cache: "no-store"});
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }
  async function poll() {
    let again = 1000;
    try {
      if (jobId === null) jobId = (await get("/jobs")).jobs[0].id;
      const job = await get("/jobs/" + jobId);
      showJob(job);
      const values = {};
      (await get("/jobs/" + jobId + "/metrics?get=" + names)).forEach((m) => { values[m.id] = m.value; });
      showValues(values);
      const fresh = await get("/jobs/" + jobId + "/batches?since=" + last);
      if (fresh.length) {
        points.push(...fresh);
        last = fresh[fresh.length - 1].batch_id;
        draw();
      }
      document.body.setAttribute("data-ready", "true");
      if (job.state !== "RUNNING") return; // the run ended: its last figures stay on the page
    } catch (err) {
      $("status").textContent = "unreachable";
      $("status").className = "status unreachable";
      $("job-info").textContent = "the endpoint does not answer (the run may have ended); trying again";
      again = 5000;
    }
    setTimeout(poll, again);
  }
  poll();
})();
