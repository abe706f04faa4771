// The chains dashboard: polls the JSON of the server that served this page, nothing else.
"use strict";

const COLORS = ["#1f5fbf", "#d9622b", "#2e9d5b", "#8e44ad", "#c0392b", "#16a0a0", "#7f8c8d", "#b7950b"];
const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const state = { overview: null, colors: {}, selectedTrace: null, pinnedTrace: false, tracesSeen: "", logChainlet: null, formReady: false, selectedJob: null };

async function getJSON(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function banner(message) {
  const box = $("banner");
  box.hidden = !message;
  box.textContent = message || "";
}

function uptime(startedAt, shownState) {
  if (!startedAt || shownState !== "ready") return "-";
  const seconds = Math.max(0, Math.floor(Date.now() / 1000 - startedAt));
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.floor(seconds / 60)}m`;
  return `${Math.floor(seconds / 3600)}h`;
}

// -- graph and state ----------------------------------------------------------------------

const RANK = { failed: 5, gone: 4, stopped: 4, restarting: 3, starting: 2, ready: 1 };
const FILL = { failed: "#fdecea", gone: "#fdecea", stopped: "#fdecea", restarting: "#fdf3e1", starting: "#fdf3e1", ready: "#eaf6ee" };

function renderOverview(overview) {
  state.overview = overview;
  $("chain-name").textContent = overview.chain;
  document.title = `chains · ${overview.chain}`;
  $("chain-meta").textContent =
    `target ${overview.target} · entrypoint ${overview.entrypoint} at ${overview.entrypoint_url} · deployment ${overview.deployment}` +
    (overview.api_key ? " · API key required" : "");
  banner(overview.supervisor_alive ? "" : `the chain does not run: ${overview.not_running} (push it again)`);
  overview.chainlets.forEach((c, i) => { state.colors[c.name] = COLORS[i % COLORS.length]; });
  const graph = $("graph");
  if (graph.dataset.deployment !== overview.deployment) {
    // The SVG is drawn by the server from the chain's description (chains.graph.to_svg).
    graph.innerHTML = overview.graph_svg;
    graph.dataset.deployment = overview.deployment;
  }
  const worst = {};
  for (const p of overview.processes) {
    if (!worst[p.chainlet] || (RANK[p.state] || 0) > (RANK[worst[p.chainlet]] || 0)) worst[p.chainlet] = p.state;
  }
  for (const node of graph.querySelectorAll("g.node")) {
    const shown = worst[node.dataset.name];
    node.dataset.state = shown || "";
    const rect = node.querySelector("rect");
    if (rect && shown) rect.setAttribute("fill", FILL[shown] || "#f6f8fb");
  }
  const body = $("chainlets").tBodies[0];
  body.replaceChildren(...overview.processes.map((p) => {
    const row = el("tr", { "data-chainlet": p.chainlet, "data-replica": String(p.replica) });
    row.append(
      el("td", {}, p.chainlet),
      el("td", {}, String(p.replica)),
      el("td", { class: `state state-${p.state}` }, p.state),
      el("td", { class: "pid" }, p.pid ? String(p.pid) : "-"),
      el("td", { class: "node" }, p.node || "-"),
      el("td", { class: "restarts" }, String(p.restarts)),
      el("td", {}, uptime(p.started_at, p.state)),
      el("td", {}, p.last_exit === null || p.last_exit === undefined ? "-" : String(p.last_exit)),
    );
    return row;
  }));
  // Why each replica last went down, in the words `chains status` prints beneath its table.
  const several = (name) => overview.processes.filter((q) => q.chainlet === name).length > 1;
  $("reasons").replaceChildren(...overview.processes.filter((p) => p.reason).map((p) => {
    const item = el("li", { "data-chainlet": p.chainlet, "data-replica": String(p.replica) });
    item.append(el("b", {}, p.chainlet + (several(p.chainlet) ? `[${p.replica}]` : "")), document.createTextNode(" last went down: "), el("span", { class: "reason" }, p.reason));
    return item;
  }));
  const select = $("log-chainlet");
  const names = overview.chainlets.map((c) => c.name);
  if ([...select.options].map((o) => o.value).join() !== names.join()) {
    select.replaceChildren(...names.map((name) => el("option", { value: name }, name)));
    if (state.logChainlet && names.includes(state.logChainlet)) select.value = state.logChainlet;
    state.logChainlet = select.value;
  }
  const legend = $("legend");
  if (legend.childElementCount !== names.length) {
    legend.replaceChildren(...names.map((name) => {
      const item = el("span", {}, "");
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = state.colors[name];
      item.append(swatch, document.createTextNode(name));
      return item;
    }));
  }
}

// -- charts --------------------------------------------------------------------------------

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return 10 * power;
}

function drawChart(target, series, field, windowSec, now) {
  const width = target.clientWidth || 300;
  const height = target.clientHeight || 110;
  const left = 34, bottom = 14, top = 6, right = 6;
  target.setAttribute("viewBox", `0 0 ${width} ${height}`);
  let max = 0;
  for (const points of Object.values(series)) for (const p of points) if (p[field] !== null && p.at >= now - windowSec) max = Math.max(max, p[field]);
  max = niceMax(max);
  const x = (at) => left + ((at - (now - windowSec)) / windowSec) * (width - left - right);
  const y = (v) => top + (1 - v / max) * (height - top - bottom);
  const parts = [
    svg("line", { x1: left, y1: y(0), x2: width - right, y2: y(0), stroke: "#c9d0db" }),
    svg("line", { x1: left, y1: y(max), x2: width - right, y2: y(max), stroke: "#eceff4" }),
  ];
  const label = (text, attrs) => { const t = svg("text", attrs); t.textContent = text; return t; };
  parts.push(label(String(+max.toPrecision(3)), { x: 2, y: y(max) + 8 }), label("0", { x: 2, y: y(0) }));
  parts.push(label(windowSec < 120 ? `-${windowSec} s` : `-${windowSec / 60} min`, { x: left, y: height - 2 }), label("now", { x: width - right - 18, y: height - 2 }));
  for (const [chainlet, points] of Object.entries(series)) {
    const coords = points.filter((p) => p[field] !== null && p.at >= now - windowSec).map((p) => `${x(p.at).toFixed(1)},${y(p[field]).toFixed(1)}`);
    if (coords.length === 0) continue;
    parts.push(svg("polyline", {
      points: coords.join(" "), fill: "none", stroke: state.colors[chainlet] || "#555", "stroke-width": 1.6,
      "data-chainlet": chainlet,
    }));
  }
  target.replaceChildren(...parts);
}

async function refreshMetrics() {
  const data = await getJSON("/api/metrics");
  const now = Date.now() / 1000;
  // The last five minutes, or less while the history is shorter (at least one minute).
  const first = Math.min(now, ...Object.values(data.series).map((points) => (points.length ? points[0].at : now)));
  const windowSec = Math.min(300, Math.max(60, Math.ceil((now - first) / 30) * 30));
  $("window").textContent = windowSec < 120 ? `${windowSec} s` : `${windowSec / 60} min`;
  drawChart($("chart-rate"), data.series, "rate", windowSec, now);
  drawChart($("chart-latency"), data.series, "latency_ms", windowSec, now);
  drawChart($("chart-errors"), data.series, "errors", windowSec, now);
  drawChart($("chart-inflight"), data.series, "in_flight", windowSec, now);
}

// -- traces --------------------------------------------------------------------------------

async function refreshTraces() {
  const traces = await getJSON("/api/traces?limit=20");
  const key = traces.map((t) => t.trace_id + t.spans).join();
  if (key === state.tracesSeen) return;
  state.tracesSeen = key;
  const list = $("traces");
  list.replaceChildren(...traces.map((t) => {
    const item = el("li", { "data-trace": t.trace_id, "data-request": t.request_id },
      `${new Date(t.start_ns / 1e6).toLocaleTimeString()}  ${t.request_id.slice(0, 12) || t.trace_id.slice(0, 12)}  ` +
      `${t.duration_ms.toFixed(1)} ms  ${t.spans} spans  ${t.services.join(", ")}` + (t.errors ? `  ${t.errors} error(s)` : ""));
    if (t.errors) item.classList.add("error");
    if (t.trace_id === state.selectedTrace) item.classList.add("selected");
    item.addEventListener("click", () => { state.pinnedTrace = true; showTrace(t.trace_id); });
    return item;
  }));
  // The newest trace is drawn as it comes, until one is clicked (while it stays in the list).
  const kept = traces.some((t) => t.trace_id === state.selectedTrace);
  if (traces.length && (!kept || !state.pinnedTrace)) {
    state.pinnedTrace = false;
    await showTrace(traces[0].trace_id);
  }
}

async function showTrace(traceId) {
  state.selectedTrace = traceId;
  for (const item of $("traces").children) item.classList.toggle("selected", item.dataset.trace === traceId);
  const spans = await getJSON(`/api/traces/${encodeURIComponent(traceId)}`);
  const start = Math.min(...spans.map((s) => s.start_ns));
  const end = Math.max(...spans.map((s) => s.end_ns));
  const total = Math.max(1, end - start);
  const depth = {};
  const byId = Object.fromEntries(spans.map((s) => [s.span_id, s]));
  const depthOf = (s, seen = 0) => {
    if (depth[s.span_id] !== undefined) return depth[s.span_id];
    const parent = byId[s.parent_id];
    depth[s.span_id] = parent && seen < 64 ? depthOf(parent, seen + 1) + 1 : 0;
    return depth[s.span_id];
  };
  const rows = [el("div", { class: "muted small" }, `trace ${traceId} · request ${spans[0].attributes["chains.request_id"] || "-"} · ${(total / 1e6).toFixed(1)} ms`)];
  for (const s of spans) {
    const row = el("div", { class: "wf-row", "data-span": s.span_id, "data-service": s.service });
    const labelText = `${"  ".repeat(depthOf(s))}${s.service} ${s.name}`;
    const labelNode = el("span", { class: "wf-label", title: describeSpan(s) }, labelText);
    labelNode.style.whiteSpace = "pre";
    const track = el("div", { class: "wf-track" });
    const bar = el("div", { class: `wf-bar ${s.kind}` + (s.status === "error" ? " error" : ""), title: describeSpan(s) });
    bar.style.left = `${((s.start_ns - start) / total) * 100}%`;
    bar.style.width = `${Math.max(0.3, ((s.end_ns - s.start_ns) / total) * 100)}%`;
    track.append(bar);
    row.append(labelNode, track, el("span", { class: "wf-ms" }, `${s.duration_ms.toFixed(1)} ms`));
    rows.push(row);
    // A batched call names the batch that served it: a trace of its own, one click away.
    const batch = s.attributes["chains.batch.request_id"];
    if (batch) {
      const link = el("a", { class: "wf-batch", href: "#", "data-batch": batch },
        `${"  ".repeat(depthOf(s) + 1)}served by batch ${batch.slice(0, 12)} (${s.attributes["chains.batch.size"] || "?"} calls)`);
      link.style.whiteSpace = "pre";
      link.addEventListener("click", (event) => { event.preventDefault(); state.pinnedTrace = true; showTrace(batch); });
      rows.push(link);
    }
  }
  $("waterfall").replaceChildren(...rows);
}

function describeSpan(s) {
  const a = s.attributes;
  const parts = [`${s.kind} span, ${s.status}`];
  if (a["chains.attempt"]) parts.push(`attempt ${a["chains.attempt"]}/${(a["chains.retries"] || 0) + 1}`);
  if (a["http.response.status_code"]) parts.push(`HTTP ${a["http.response.status_code"]}`);
  if (a["chains.stream.items"] !== undefined) parts.push(`${a["chains.stream.items"]} items`);
  if (s.status_message) parts.push(s.status_message);
  return parts.join(" · ");
}

// -- async jobs ----------------------------------------------------------------------------

function clock(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleTimeString() : "-";
}

async function refreshJobs() {
  const data = await getJSON("/api/jobs?limit=20");
  $("jobs-note").textContent = !data.keeps_jobs
    ? "this chain keeps no async jobs (none submitted yet, or async calls are off for it)"
    : data.jobs.length ? "" : "no async jobs yet: submit one with `chains call --async`";
  const body = $("jobs").tBodies[0];
  body.replaceChildren(...data.jobs.map((job) => {
    const row = el("tr", { "data-job": job.request_id, "data-status": job.status });
    const result = job.streams ? `stream · ${job.events} events` : job.status === "SUCCEEDED" ? "result" : (job.errors[0] ? job.errors[0].message : "-");
    const link = el("a", { href: "#", class: "job-result" }, result);
    link.addEventListener("click", (event) => { event.preventDefault(); showJob(job.request_id); });
    row.append(
      el("td", { class: "job-id" }, job.request_id.slice(0, 12)),
      el("td", { class: `job-status status-${job.status.toLowerCase()}` }, job.status),
      el("td", {}, clock(job.created)),
      el("td", {}, clock(job.started)),
      el("td", {}, clock(job.finished)),
      el("td", {}, `${job.attempts}/${job.max_attempts}`),
      el("td", {}, ""),
    );
    row.lastChild.append(link);
    if (job.request_id === state.selectedJob) row.classList.add("selected");
    return row;
  }));
  if (state.selectedJob && data.jobs.some((j) => j.request_id === state.selectedJob && !j.finished)) await showJob(state.selectedJob);
}

async function showJob(jobId) {
  state.selectedJob = jobId;
  for (const row of $("jobs").tBodies[0].rows) row.classList.toggle("selected", row.dataset.job === jobId);
  const job = await getJSON(`/api/jobs/${encodeURIComponent(jobId)}`);
  const box = $("job-detail");
  box.hidden = false;
  box.dataset.job = jobId;
  let shown;
  if (job.stream) shown = job.stream.map((e) => e.text.trimEnd()).join("\n\n") || "(no events yet)";
  else if (job.output !== undefined) shown = JSON.stringify(job.output, null, 2);
  else if (job.output_text !== undefined) shown = job.output_text;
  else shown = job.errors.length ? job.errors.map((e) => `${e.code}: ${e.message}`).join("\n") : `(${job.status.toLowerCase()}: no result yet)`;
  box.textContent = `request ${job.request_id} · ${job.status}\n\n${shown}`;
}

// -- logs ----------------------------------------------------------------------------------

async function refreshLogs() {
  const chainlet = $("log-chainlet").value;
  if (!chainlet) return;
  const data = await getJSON(`/api/logs?chainlet=${encodeURIComponent(chainlet)}&lines=200`);
  const box = $("log-lines");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.textContent = data.lines.join("\n") || "(no log lines yet)";
  box.dataset.chainlet = chainlet;
  if (atBottom) box.scrollTop = box.scrollHeight;
}

// -- try it --------------------------------------------------------------------------------

function resolveRef(doc, schema) {
  let seen = 0;
  while (schema && schema.$ref && seen++ < 16) schema = doc.components.schemas[schema.$ref.split("/").pop()];
  return schema || {};
}

function fieldFor(name, schema, required) {
  const label = el("label", { "data-field": name });
  label.append(el("span", { class: "name" }, name + (required ? " *" : "")));
  let input;
  const type = schema.type;
  if (type === "boolean") {
    input = el("input", { type: "checkbox", name });
    input.checked = schema.default === true;
  } else if (type === "integer" || type === "number") {
    input = el("input", { type: "number", name, step: type === "integer" ? "1" : "any" });
    if (schema.minimum !== undefined) input.min = String(schema.minimum);
    if (schema.maximum !== undefined) input.max = String(schema.maximum);
    if (schema.default !== undefined) input.value = String(schema.default);
  } else if (type === "string") {
    input = el("input", { type: "text", name });
    if (schema.default !== undefined) input.value = schema.default;
  } else {
    input = el("textarea", { name, rows: "2", placeholder: "JSON" });
    if (schema.default !== undefined) input.value = JSON.stringify(schema.default);
    input.dataset.json = "1";
  }
  input.dataset.kind = type || "json";
  if (required) input.required = true;
  label.append(input);
  if (schema.description) label.append(el("span", { class: "muted small" }, " " + schema.description));
  return label;
}

async function buildForm() {
  const doc = await getJSON("/api/openapi");
  const socket = doc.paths["/run_remote"].get;
  if (socket && socket["x-websocket"]) {
    // A conversation, not a call: a form of arguments could only get 426.
    $("try-signature").textContent = socket.summary || "";
    $("try-form").hidden = true;
    $("try-status").textContent = "a WebSocket endpoint: talk to it with `chains call` and the chain's name (each line of input a message)";
    state.formReady = true;
    document.body.dataset.formReady = "1";
    return;
  }
  const post = doc.paths["/run_remote"].post;
  $("try-signature").textContent = post.summary || "";
  const schema = resolveRef(doc, post.requestBody.content["application/json"].schema);
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).map(([name, prop]) => fieldFor(name, resolveRef(doc, prop), required.has(name)));
  $("try-fields").replaceChildren(...fields);
  state.formReady = true;
  document.body.dataset.formReady = "1";
}

function formArguments() {
  const args = {};
  for (const input of $("try-fields").querySelectorAll("input, textarea")) {
    const kind = input.dataset.kind;
    if (kind === "boolean") { args[input.name] = input.checked; continue; }
    if (input.value === "") continue;
    if (kind === "integer" || kind === "number") args[input.name] = Number(input.value);
    else if (input.dataset.json) args[input.name] = JSON.parse(input.value);
    else args[input.name] = input.value;
  }
  return args;
}

// Reads an event stream as it arrives, calling onEvent(name, data) for each complete event.
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, data.join("\n"));
    }
  }
}

async function runCall(event) {
  event.preventDefault();
  const output = $("try-output");
  const status = $("try-status");
  output.textContent = "";
  let args;
  try { args = formArguments(); } catch (error) { status.textContent = `the arguments are not valid JSON: ${error.message}`; return; }
  const kind = state.overview ? state.overview.entrypoint_kind : "unary";
  const streaming = kind !== "unary";
  status.textContent = "calling…";
  status.dataset.phase = "calling";
  $("try-run").disabled = true;
  try {
    const response = await fetch("/api/call", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", accept: streaming ? "text/event-stream" : "application/json" },
      body: JSON.stringify(args),
    });
    const requestId = response.headers.get("x-chains-request-id") || "";
    const type = response.headers.get("content-type") || "";
    if (!response.ok || !type.startsWith("text/event-stream")) {
      const text = await response.text();
      let shown = text;
      try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON: shown as it is */ }
      output.textContent = shown;
      status.textContent = `HTTP ${response.status}` + (requestId ? ` · request ${requestId}` : "");
      status.dataset.phase = response.ok ? "done" : "failed";
      return;
    }
    let events = 0;
    status.textContent = "streaming…";
    status.dataset.phase = "streaming";
    let ended = false;
    await readEvents(response.body, (name, data) => {
      if (name === "end") { ended = true; return; }
      events += 1;
      if (name === "error") {
        output.append(el("span", { class: "stream-error" }, `\n[error] ${data}`));
      } else if (name !== "message") {
        output.append(document.createTextNode(`[${name}] ${data}\n`));
      } else {
        output.append(el("span", { class: "token" }, kind === "text" ? data : data + "\n"));
      }
      output.dataset.events = String(events);
    });
    status.textContent = `${ended ? "done" : "cut short"} · ${events} events` + (requestId ? ` · request ${requestId}` : "");
    status.dataset.phase = ended ? "done" : "cut";
  } catch (error) {
    status.textContent = `the call failed: ${error.message}`;
    status.dataset.phase = "failed";
  } finally {
    $("try-run").disabled = false;
  }
}

// -- polling -------------------------------------------------------------------------------

function every(ms, action) {
  const run = async () => {
    try { await action(); } catch (error) { console.warn(error); }
    setTimeout(run, ms);
  };
  run();
}

document.addEventListener("DOMContentLoaded", () => {
  $("try-form").addEventListener("submit", runCall);
  $("log-chainlet").addEventListener("change", () => { state.logChainlet = $("log-chainlet").value; refreshLogs(); });
  every(1000, async () => {
    try { renderOverview(await getJSON("/api/overview")); } catch (error) { banner(`the dashboard cannot read the chain: ${error.message}`); throw error; }
  });
  every(1000, refreshMetrics);
  every(2000, refreshTraces);
  every(2000, refreshLogs);
  every(2000, refreshJobs);
  const form = async () => { try { await buildForm(); } catch (error) { $("try-status").textContent = `no form: ${error.message}`; setTimeout(form, 2000); } };
  form();
});
