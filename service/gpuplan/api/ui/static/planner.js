// gpuplan's planner page: reads the plan from the address bar, asks the API, draws the
// answers as SVG. It computes nothing the API answers; figures are shown as they come.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const GIB = 1024 ** 3;
  const TOKEN_KEY = "gpuplan-token";
  const PRIMARY = ["mode", "batch_size", "sequence_length", "precision", "gradient_checkpointing", "optimizer"];
  const TRACE = "t.";  // state keys and ids of the traced step's fields
  const JOB_KEYS = ["model", "config", "gpu", "objective", "provider", "training_tokens", "global_batch_size", "requests_per_second", "prompt_tokens", "output_tokens"];
  // Opened without a plan, the page shows this one: a Llama 3.1 8B LoRA fine-tune and
  // an A100 80GB shared by two 35 GiB services, three notebooks and an embedder.
  const EXAMPLE = {
    model: "llama-3.1-8b", mode: "finetune_lora", batch_size: "4", sequence_length: "2048",
    gradient_checkpointing: "full", gpu: "a100-sxm4-80gb", objective: "cheapest",
    training_tokens: "1000000000",
    mig_gpu: "a100-sxm4-80gb", mw: ["llm:35:2", "notebook:1g.10gb:3", "embedder:18:1"],
  };

  const page = { state: {}, fields: {}, gpus: [], answers: {} };

  // ---------------------------------------------------------------- small helpers
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  function sv(tag, attrs, ...children) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) node.setAttribute(k, String(v));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }
  const gib = (bytes) => (bytes / GIB).toFixed(2) + " GiB";
  const pct = (x) => (x * 100).toFixed(1) + "%";
  const words = (field) => field.replace(/_bytes$/, "").replace(/_/g, " ");
  const fixed = (x, digits) => (x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits }));
  const slicesText = (i) => (i.size === 1 ? `slice ${i.start}` : `slices ${i.start}–${i.start + i.size - 1}`);
  const count = (n) => (n >= 1e9 ? (n / 1e9).toFixed(2) + " B" : n >= 1e6 ? (n / 1e6).toFixed(1) + " M" : String(n));
  const tickText = (t) => Number(t.toPrecision(3)).toLocaleString("en-US", { maximumFractionDigits: 6 });
  function put(target, ...children) {
    const node = typeof target === "string" ? $(target) : target;
    node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
    return node;
  }
  function say(text) { $("status").textContent = text; }

  // ---------------------------------------------------------------- the API
  class ApiError extends Error {
    constructor(status, problem, path) {
      super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
      this.status = status; this.problem = problem; this.path = path;
    }
  }
  async function api(method, path, body) {
    const headers = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.authorization = "Bearer " + token;
    const answer = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const data = await answer.json().catch(() => null);
    if (!answer.ok) throw new ApiError(answer.status, data, path);
    return data;
  }
  function showProblems(errors) {
    const box = $("problem");
    if (!errors.length) { box.hidden = true; box.replaceChildren(); return; }
    box.hidden = false;
    put(box, errors.map((e) => el("div", {},
      el("strong", {}, `${e.path}: `), e.message,
      e.problem && e.problem.errors ? el("ul", {}, e.problem.errors.map((f) => el("li", {}, el("code", {}, f.path), " ", f.reason))) : null,
      e.problem && e.problem.suggestions && e.problem.suggestions.length ? el("div", {}, "Did you mean: " + e.problem.suggestions.join(", ")) : null)));
    $("token-form").hidden = !errors.some((e) => e.status === 401);
  }

  // ---------------------------------------------------------------- state <-> address bar
  function readState() {
    const params = new URLSearchParams(location.search);
    const state = {};
    for (const [k, v] of params) {
      if (k === "mw") (state.mw = state.mw || []).push(v);
      else state[k] = v;
    }
    const hasJob = "model" in state || "config" in state;
    if (!hasJob) for (const [k, v] of Object.entries(EXAMPLE)) if (!k.startsWith("mig") && k !== "mw" && !(k in state)) state[k] = v;
    if (!state.mw) { state.mw = EXAMPLE.mw.slice(); state.mig_gpu = state.mig_gpu || EXAMPLE.mig_gpu; }
    state.view = ["memory", "gpus", "mig"].includes(state.view) ? state.view : (location.hash.slice(1) || "memory");
    if (!["memory", "gpus", "mig"].includes(state.view)) state.view = "memory";
    return state;
  }
  function writeState(state, push) {
    const params = new URLSearchParams();
    params.set("view", state.view);
    for (const [k, v] of Object.entries(state)) {
      if (k === "view" || k === "mw" || v === "" || v === undefined || v === null) continue;
      const field = page.fields[k];
      if (field && field.default !== undefined && String(field.default) === v) continue;
      params.set(k, v);
    }
    for (const w of state.mw || []) params.append("mw", w);
    const url = location.pathname + "?" + params.toString();
    if (push) history.pushState(null, "", url); else history.replaceState(null, "", url);
  }

  // ---------------------------------------------------------------- form from the schema
  // Workload inputs come from the API's own OpenAPI document, so a field added to the
  // API appears here with its choices, bounds, default and description.
  function scalarOf(spec) {
    const options = spec.anyOf ? spec.anyOf : [spec];
    for (const o of options) {
      if (o.enum) return { kind: "enum", choices: o.enum };
      if (o.type === "integer" || o.type === "number") return { kind: o.type, min: o.minimum, max: o.maximum };
      if (o.type === "boolean") return { kind: "boolean" };
    }
    return null;
  }
  function fieldInput(field, spec, required, group = "") {
    const scalar = scalarOf(spec);
    if (!scalar) return null;
    const name = group + field, id = name;
    const nullable = Boolean(spec.anyOf && spec.anyOf.some((o) => o.type === "null"));
    page.fields[name] = { kind: scalar.kind, default: spec.default === null ? undefined : spec.default, nullable, group, field };
    let input;
    if (scalar.kind === "enum") {
      input = el("select", { id, name });
      if (!required && nullable) input.append(el("option", { value: "" }, "(default)"));
      for (const c of scalar.choices) input.append(el("option", { value: c }, c));
      if (spec.default !== undefined && spec.default !== null) input.value = spec.default;
    } else if (scalar.kind === "boolean") {
      input = el("select", { id, name }, el("option", { value: "false" }, "no"), el("option", { value: "true" }, "yes"));
      input.value = String(Boolean(spec.default));
    } else {
      input = el("input", { id, name, type: "number", step: scalar.kind === "integer" ? "1" : "any", min: scalar.min, max: scalar.max, placeholder: spec.default === null || spec.default === undefined ? "(default)" : String(spec.default) });
    }
    const help = spec.description ? el("p", { class: "help", id: id + "-help" }, spec.description.split(/(?<=\.)\s/)[0].replace(/``/g, "")) : null;
    if (help) input.setAttribute("aria-describedby", help.id);
    if (required) input.required = true;
    const prefix = group === TRACE ? el("span", { class: "sr" }, "trace ") : null;
    return el("div", { class: "field" }, el("label", { for: id }, prefix, words(field)), input, help);
  }
  function buildForm(openapi, models, gpus) {
    const schemas = openapi.components.schemas;
    const workload = schemas.Workload;
    const primary = [], more = [];
    for (const [name, spec] of Object.entries(workload.properties)) {
      const node = fieldInput(name, spec, (workload.required || []).includes(name));
      if (node) (PRIMARY.includes(name) ? primary : more).push([PRIMARY.indexOf(name), node]);
    }
    put("workload-fields", primary.sort((a, b) => a[0] - b[0]).map((p) => p[1]));
    put("workload-more", more.map((p) => p[1]));
    const traced = schemas.TraceWorkload;
    put("trace-more", Object.entries(traced.properties).map(([name, spec]) => fieldInput(name, spec, false, TRACE)).filter(Boolean));
    $("config").addEventListener("input", showTraceFields);
    const objective = scalarOf(schemas.RecommendRequest.properties.objective);
    put("objective", objective.choices.map((c) => el("option", { value: c }, c)));
    $("objective").value = schemas.RecommendRequest.properties.objective.default || objective.choices[0];
    // One price table for the whole ranking (the API's default basis when none is chosen).
    const providers = scalarOf(schemas.Pricing.properties.providers.items);
    put("provider", el("option", { value: "" }, "default basis (AWS on-demand)"), providers.choices.map((p) => el("option", { value: p }, p)));
    put("model", models.map((m) => el("option", { value: m.name }, `${m.name} (${(m.parameters / 1e9).toFixed(2)} B)`)));
    const gpuOption = (g) => el("option", { value: g.id }, `${g.name} — ${gib(g.usable_memory_bytes)} usable`);
    put("gpu", el("option", { value: "" }, "(none)"), gpus.map(gpuOption));
    put("mig_gpu", gpus.filter((g) => g.mig && g.mig.supported).map(gpuOption));
    $("mode").addEventListener("change", showVolumeFields);
  }
  function showVolumeFields() {
    const inference = $("mode").value === "inference";
    for (const node of document.querySelectorAll("[data-when]")) {
      node.hidden = (node.dataset.when === "inference") !== inference;
    }
  }
  function showTraceFields() {
    $("trace-fields").hidden = !$("config").value.trim();
  }
  function fillForm(state) {
    for (const name of [...Object.keys(page.fields), ...JOB_KEYS, "mig_gpu"]) {
      const input = $(name);
      if (!input) continue;
      if (state[name] !== undefined) input.value = state[name];
    }
    $("config-box").open = Boolean(state.config);
    $("trace").checked = state.trace === "1";
    showVolumeFields();
    showTraceFields();
    put("mig-rows", (state.mw || []).map(migRow));
  }
  function migRow(text) {
    const [name = "", spec = "", count = "1"] = (text || "").split(":");
    const n = document.querySelectorAll("#mig-rows tr").length + Math.random().toString(36).slice(2, 6);
    const cell = (label, input) => el("td", {}, el("label", { class: "sr", for: input.id }, label), input);
    const remove = el("button", { type: "button", class: "remove", "aria-label": `Remove workload ${name || "row"}` }, "×");
    const row = el("tr", {},
      cell("Workload name", el("input", { id: "mw-name-" + n, value: name, required: true, maxlength: 128, autocomplete: "off" })),
      cell("Profile (like 1g.10gb) or memory in GiB", el("input", { id: "mw-spec-" + n, value: spec, required: true, autocomplete: "off" })),
      cell("Count", el("input", { id: "mw-count-" + n, value: count, type: "number", min: 1, step: 1, required: true })),
      el("td", {}, remove));
    remove.addEventListener("click", () => { row.remove(); });
    return row;
  }
  function formState() {
    const state = { view: page.state.view };
    for (const name of [...Object.keys(page.fields), ...JOB_KEYS]) {
      const input = $(name);
      // Both forms make the state; only volume fields of the other mode are left out.
      if (input && input.value !== "" && !input.closest("[data-when][hidden]")) state[name] = input.value.trim();
    }
    if (state.config) delete state.model;
    if (state.config && $("trace").checked) state.trace = "1";
    state.mig_gpu = $("mig_gpu").value;
    state.mw = [...document.querySelectorAll("#mig-rows tr")].map((tr) => [...tr.querySelectorAll("input")].map((i) => i.value.trim().replace(/:/g, "")).join(":"));
    return state;
  }

  // ---------------------------------------------------------------- requests from the state
  function typed(name, text) {
    const f = page.fields[name];
    if (!f) return text;
    if (f.kind === "integer") return parseInt(text, 10);
    if (f.kind === "number") return parseFloat(text);
    if (f.kind === "boolean") return text === "true";
    return text;
  }
  function jobRequest(state) {
    let model;
    if (state.config) {
      try { model = { hf_config: JSON.parse(state.config) }; } catch (e) { throw new ApiError(400, { detail: "config.json is not valid JSON: " + e.message }, "config.json"); }
    } else model = { name: state.model };
    return { model, workload: fieldsOf(state, "") };
  }
  function fieldsOf(state, group) {
    const values = {};
    for (const [name, f] of Object.entries(page.fields)) {
      if (f.group === group && state[name] !== undefined && state[name] !== "") values[f.field] = typed(name, state[name]);
    }
    return values;
  }
  function traceRequest(state) {
    return { model: jobRequest(state).model, workload: fieldsOf(state, TRACE) };
  }
  function recommendRequest(state) {
    const body = { ...jobRequest(state), objective: state.objective };
    // Advice is for the GPU the page shows the fit on (else the top recommendation's).
    if (state.gpu) body.constraints = { preferred_gpu: state.gpu };
    if (state.provider) body.pricing = { providers: [state.provider] };
    if (state.mode === "inference") {
      const inference = {};
      for (const k of ["requests_per_second", "prompt_tokens", "output_tokens"]) if (state[k]) inference[k] = Number(state[k]);
      if (Object.keys(inference).length) body.inference = inference;
    } else if (state.training_tokens || state.global_batch_size) {
      const training = {};
      for (const k of ["training_tokens", "global_batch_size"]) if (state[k]) training[k] = Number(state[k]);
      body.training = training;
    }
    return body;
  }
  function migRequest(state) {
    const workloads = (state.mw || []).filter(Boolean).map((text) => {
      const [name, spec, count] = text.split(":");
      const w = { name, count: parseInt(count || "1", 10) };
      if (/^[0-9.]+$/.test(spec || "")) w.memory_gib = parseFloat(spec); else w.profile = spec;
      return w;
    });
    return { gpu: state.mig_gpu, workloads };
  }

  // ---------------------------------------------------------------- charts
  function niceStep(max, target) {
    const raw = max / target, mag = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 5, 10].map((m) => m * mag).find((s) => raw <= s) || 10 * mag;
  }
  // A breakdown field that is the sum of others (the estimate's framework overhead is its
  // workspaces, allocator cache, context and communication buffers) is not a bar of its own.
  const AGGREGATES = { framework_overhead_bytes: ["workspace_bytes", "allocator_cache_bytes", "context_bytes", "communication_buffers_bytes"] };
  function memoryParts(answer) {
    const breakdown = answer.breakdown || {};
    const aggregate = (k) => (AGGREGATES[k] || []).some((part) => part in breakdown);
    const parts = Object.entries(breakdown).filter(([k, v]) => typeof v === "number" && v > 0 && !aggregate(k)).map(([k, v]) => ({ key: k, label: words(k), bytes: v }));
    const sum = parts.reduce((s, p) => s + p.bytes, 0);
    if (typeof answer.required_bytes === "number" && answer.required_bytes > sum) {
      const share = typeof answer.headroom_fraction === "number" ? ` (${pct(answer.headroom_fraction)})` : "";
      parts.push({ key: "headroom", label: "headroom" + share, bytes: answer.required_bytes - sum });
    }
    return parts;
  }
  function drawMemory(answer) {
    const parts = memoryParts(answer);
    const usable = answer.fit ? answer.fit.usable_memory_bytes : null;
    const total = parts.reduce((s, p) => s + p.bytes, 0);
    const max = Math.max(total, usable || 0) * 1.06;
    const W = 760, L = 12, R = 12, plot = W - L - R, x = (b) => L + (b / max) * plot;
    const svg = sv("svg", { viewBox: `0 0 ${W} 118`, role: "img", "aria-labelledby": "memory-caption", class: "memory" });
    let at = 0;
    parts.forEach((p, i) => {
      const rect = sv("rect", { x: x(at), y: 28, width: Math.max(x(at + p.bytes) - x(at), 0.5), height: 44, class: `part ${partClass(p, i)}`, "data-field": p.key, "data-bytes": p.bytes },
        sv("title", {}, `${p.label}: ${gib(p.bytes)}`));
      svg.append(rect);
      at += p.bytes;
    });
    const step = niceStep(max / GIB, 8);
    for (let g = 0; g * GIB <= max; g += step) {
      svg.append(sv("line", { x1: x(g * GIB), x2: x(g * GIB), y1: 74, y2: 80, class: "tick" }),
        sv("text", { x: x(g * GIB), y: 92, class: "axis", "text-anchor": "middle" }, (g + step) * GIB > max ? `${g} GiB` : `${g}`));
    }
    // "needs" above the bar, "usable" below the axis: the two never overlap.
    svg.append(sv("text", { x: x(total), y: 21, class: "total-label", "text-anchor": x(total) > W - 140 ? "end" : "start" }, `needs ${gib(total)}`));
    if (usable) {
      svg.append(sv("line", { x1: x(usable), x2: x(usable), y1: 24, y2: 100, class: answer.fit.fits ? "limit ok" : "limit over", "data-bytes": usable }),
        sv("text", { x: x(usable), y: 113, class: "limit-label", "text-anchor": x(usable) > W - 120 ? "end" : "middle" }, `usable ${gib(usable)}`));
    }
    const legend = el("ul", { class: "legend" }, parts.map((p, i) => el("li", { "data-field": p.key, "data-bytes": p.bytes },
      svgSwatch(partClass(p, i)), `${p.label} `, el("span", { class: "num" }, gib(p.bytes)))));
    put("memory-svg", svg, legend);
    put("memory-table", el("table", { class: "figures" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "part"), el("th", { scope: "col" }, "bytes"), el("th", { scope: "col" }, "GiB"))),
      el("tbody", {}, parts.map((p) => el("tr", { "data-field": p.key }, el("th", { scope: "row" }, p.label), el("td", { class: "num" }, String(p.bytes)), el("td", { class: "num" }, (p.bytes / GIB).toFixed(2)))),
        el("tr", { "data-field": "required_bytes" }, el("th", { scope: "row" }, "required"), el("td", { class: "num" }, String(total)), el("td", { class: "num" }, (total / GIB).toFixed(2))),
        usable ? el("tr", { "data-field": "usable_memory_bytes" }, el("th", { scope: "row" }, "usable on " + answer.fit.gpu), el("td", { class: "num" }, String(usable)), el("td", { class: "num" }, (usable / GIB).toFixed(2))) : null)));
    const biggest = parts.slice().sort((a, b) => b.bytes - a.bytes)[0];
    $("memory-caption").textContent = `Memory at the peak (${answer.peak_phase || "peak"}): ${gib(total)} needed` +
      (usable ? ` of ${gib(usable)} usable on ${answer.fit.gpu}` : "") + (biggest ? `; the largest part is ${biggest.label} (${gib(biggest.bytes)}).` : ".");
    drawTimeline(answer, usable, "Through the step");
  }
  const partClass = (p, i) => (p.key === "headroom" ? "c-headroom" : `c${i % 10}`);
  function svgSwatch(cls) {
    return sv("svg", { class: "swatch", viewBox: "0 0 10 10", "aria-hidden": "true" }, sv("rect", { width: 10, height: 10, class: cls }));
  }
  // Live bytes through the step, where the answer gives phases (the tracer does; an
  // estimate that gains them is drawn the same way).
  function phasesOf(answer) {
    if (Array.isArray(answer.timeline)) return answer.timeline.map((p) => ({ key: p.phase || p.name, label: p.phase || p.name, bytes: p.bytes ?? p.live_bytes }));
    if (answer.phases && typeof answer.phases === "object") {
      return Object.entries(answer.phases).filter(([, v]) => typeof v === "number" && v > 0).map(([k, v]) => ({ key: k, label: words(k), bytes: v }));
    }
    return [];
  }
  function drawTimeline(answer, usable, title) {
    const phases = phasesOf(answer);
    if (!phases.length) {
      put("timeline", el("p", { class: "help" }, `The estimate names the phase of the peak (${answer.peak_phase || "unknown"}) but gives no per-phase figures; paste a config.json and trace its step for a timeline.`));
      return;
    }
    const W = 760, H = 150, L = 60, B = 24, T = 16;
    const peak = Math.max(...phases.map((p) => p.bytes));
    if (usable && usable > 3 * peak) usable = null;  // off the scale: the caption says so
    const max = Math.max(peak, usable || 0) * 1.15;
    const y = (b) => H - B - (b / max) * (H - B - T), band = (W - L - 10) / phases.length;
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Live memory by phase: " + phases.map((p) => `${p.label} ${gib(p.bytes)}`).join(", "), class: "timeline" });
    let path = `M ${L} ${y(0)}`;
    phases.forEach((p, i) => {
      path += ` L ${L + i * band} ${y(p.bytes)} L ${L + (i + 1) * band} ${y(p.bytes)}`;
      svg.append(sv("text", { x: L + (i + 0.5) * band, y: H - 6, class: "axis", "text-anchor": "middle" }, p.label),
        sv("text", { x: L + (i + 0.5) * band, y: y(p.bytes) - 4, class: "axis phase-bytes", "text-anchor": "middle", "data-phase": p.key, "data-bytes": p.bytes }, gib(p.bytes)));
    });
    svg.prepend(sv("path", { d: path + ` L ${L + phases.length * band} ${y(0)} Z`, class: "area" }));
    if (usable) svg.append(sv("line", { x1: L, x2: W - 10, y1: y(usable), y2: y(usable), class: "limit ok" }));
    put("timeline", el("h3", {}, title), svg);
    if (!usable) svg.setAttribute("aria-label", svg.getAttribute("aria-label") + " (the GPU's usable memory is far above, off this scale)");
  }

  function scatterAxes(fitting) {
    const pairs = [
      { x: (c) => c.time_hours, y: (c) => c.cost_usd, xl: "time (hours)", yl: "cost (USD)" },
      { x: (c) => (c.throughput ? c.throughput.value : null), y: (c) => c.usd_per_hour, xl: "throughput", yl: "USD per hour" },
    ];
    return pairs.find((p) => fitting.some((c) => p.x(c) > 0 && p.y(c) > 0));
  }
  function logOrLinear(values) {
    const lo = Math.min(...values), hi = Math.max(...values);
    if (hi / lo > 20) {
      const a = Math.log10(lo) - 0.1, b = Math.log10(hi) + 0.1;
      const ticks = [];
      const mantissas = b - a > 3 ? [1] : [1, 2, 5];
      for (let e = Math.floor(a); e <= Math.ceil(b); e++) for (const m of mantissas) { const t = m * 10 ** e; if (Math.log10(t) >= a && Math.log10(t) <= b) ticks.push(t); }
      return { f: (v) => (Math.log10(v) - a) / (b - a), ticks, log: true };
    }
    const span = hi - lo || hi || 1, a = Math.max(0, lo - span * 0.1), b = hi + span * 0.1, step = niceStep(b - a, 6);
    const ticks = [];
    for (let t = Math.ceil(a / step) * step; t <= b; t += step) ticks.push(t);
    return { f: (v) => (v - a) / (b - a), ticks, log: false };
  }
  function drawScatter(answer) {
    const fitting = answer.recommendations.map((c, i) => ({ ...c, rank: i + 1 })).filter((c) => c.fits);
    const axes = scatterAxes(fitting);
    if (!axes) {
      put("scatter-svg", el("p", { class: "help" }, "No fitting plan has both a time and a cost (give a training or inference volume)."));
      $("scatter-caption").textContent = "";
      return;
    }
    const points = fitting.filter((c) => axes.x(c) > 0 && axes.y(c) > 0);
    const W = 760, H = 330, L = 70, B = 44, T = 14, R = 20;
    const sx = logOrLinear(points.map(axes.x)), sy = logOrLinear(points.map(axes.y));
    const px = (v) => L + sx.f(v) * (W - L - R), py = (v) => H - B - sy.f(v) * (H - B - T);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "group", "aria-labelledby": "scatter-caption", class: "scatter" });
    for (const t of sx.ticks) svg.append(sv("line", { x1: px(t), x2: px(t), y1: T, y2: H - B, class: "grid" }), sv("text", { x: px(t), y: H - B + 16, class: "axis", "text-anchor": "middle" }, tickText(t)));
    for (const t of sy.ticks) svg.append(sv("line", { x1: L, x2: W - R, y1: py(t), y2: py(t), class: "grid" }), sv("text", { x: L - 6, y: py(t) + 4, class: "axis", "text-anchor": "end" }, tickText(t)));
    svg.append(sv("text", { x: (L + W - R) / 2, y: H - 6, class: "axis-title", "text-anchor": "middle" }, axes.xl + (sx.log ? ", log scale" : "")),
      sv("text", { x: 14, y: (T + H - B) / 2, class: "axis-title", "text-anchor": "middle", transform: `rotate(-90 14 ${(T + H - B) / 2})` }, axes.yl + (sy.log ? ", log scale" : "")));
    for (const c of points.slice().reverse()) {
      const label = `#${c.rank} ${c.count}× ${c.name}: ${axes.xl} ${fixed(axes.x(c), 2)}, ${axes.yl} ${fixed(axes.y(c), 2)}`;
      const dot = sv("circle", { cx: px(axes.x(c)), cy: py(axes.y(c)), r: c.rank <= 3 ? 7 : 5, class: c.rank === 1 ? "dot best" : c.rank <= 3 ? "dot top" : "dot", tabindex: 0, role: "img", "aria-label": label, "data-gpu": c.gpu, "data-count": c.count, "data-x": axes.x(c), "data-y": axes.y(c) }, sv("title", {}, label));
      dot.addEventListener("focus", () => highlightRow(c.gpu, c.count));
      dot.addEventListener("mouseenter", () => highlightRow(c.gpu, c.count));
      svg.append(dot);
      const right = px(axes.x(c)) > W - 170;
      if (c.rank <= 5) svg.append(sv("text", { x: px(axes.x(c)) + (right ? -9 : 9), y: py(axes.y(c)) - 7, class: "dot-label", "text-anchor": right ? "end" : "start" }, `${c.count}× ${c.gpu}`));
    }
    put("scatter-svg", svg);
    const best = points.find((c) => c.rank === Math.min(...points.map((p) => p.rank)));
    $("scatter-caption").textContent = `${axes.yl} against ${axes.xl} of the ${points.length} fitting plans that have both; larger dots are the API's top three for "${answer.objective}"` +
      (best ? `, first ${best.count}× ${best.name} (${fixed(axes.x(best), 2)} / ${fixed(axes.y(best), 2)}).` : ".");
  }
  function highlightRow(gpu, count) {
    for (const tr of document.querySelectorAll("#gpu-table tbody tr")) tr.classList.toggle("hl", tr.dataset.gpu === gpu && tr.dataset.count === String(count));
  }

  const COLUMNS = [
    { key: "rank", label: "#", value: (c) => c.rank, text: (c) => String(c.rank) },
    { key: "gpu", label: "GPU", value: (c) => c.gpu, text: (c) => c.gpu },
    { key: "count", label: "count", value: (c) => c.count, text: (c) => String(c.count) },
    { key: "fits", label: "fits", value: (c) => (c.fits ? 1 : 0), text: (c) => (c.fits ? "yes" : "no") },
    { key: "layout", label: "layout", value: (c) => (c.layout ? c.layout.tensor * c.layout.pipeline * c.layout.data : 0), text: (c) => (c.layout ? `TP${c.layout.tensor}·PP${c.layout.pipeline}·DP${c.layout.data}` + (c.layout.zero_stage ? ` ZeRO-${c.layout.zero_stage}` : "") + (c.layout.cpu_offload_optimizer ? " offload" : "") : "—") },
    { key: "required_bytes_per_gpu", label: "GiB per GPU", value: (c) => c.required_bytes_per_gpu, text: (c) => (c.required_bytes_per_gpu / GIB).toFixed(2) },
    { key: "memory_utilization", label: "memory used", value: (c) => c.memory_utilization, text: (c) => pct(c.memory_utilization) },
    { key: "throughput", label: "throughput", value: (c) => (c.throughput ? c.throughput.value : null), text: (c) => (c.throughput ? `${fixed(c.throughput.value, 0)} ${c.throughput.unit}` : "—") },
    { key: "time_hours", label: "hours", value: (c) => c.time_hours, text: (c) => fixed(c.time_hours, 2) },
    { key: "usd_per_hour", label: "USD/h", value: (c) => c.usd_per_hour, text: (c) => fixed(c.usd_per_hour, 2) },
    { key: "cost_usd", label: "cost USD", value: (c) => c.cost_usd, text: (c) => fixed(c.cost_usd, 2) },
    { key: "price", label: "USD/GPU-h", value: (c) => (c.price ? c.price.usd_per_gpu_hour : null), text: (c) => (c.price ? `${fixed(c.price.usd_per_gpu_hour, 2)} ${c.price.provider}` : "—") },
    { key: "energy_kwh", label: "kWh", value: (c) => c.energy_kwh, text: (c) => fixed(c.energy_kwh, 1) },
    { key: "score", label: "score", value: (c) => c.score, text: (c) => fixed(c.score, 3) },
  ];
  const sorting = { key: "rank", dir: 1 };
  function drawTable(answer) {
    const rows = answer.recommendations.map((c, i) => ({ ...c, rank: i + 1 }));
    const col = COLUMNS.find((c) => c.key === sorting.key) || COLUMNS[0];
    rows.sort((a, b) => {
      const va = col.value(a), vb = col.value(b);
      if (va === null || va === undefined) return 1;
      if (vb === null || vb === undefined) return -1;
      return (va < vb ? -1 : va > vb ? 1 : 0) * sorting.dir || a.rank - b.rank;
    });
    const table = $("gpu-table");
    put(table.tHead, el("tr", {}, COLUMNS.map((c) => {
      const button = el("button", { type: "button", "data-key": c.key }, c.label);
      button.addEventListener("click", () => {
        sorting.dir = sorting.key === c.key ? -sorting.dir : 1;
        sorting.key = c.key;
        drawTable(answer);
        table.tHead.querySelector(`button[data-key="${c.key}"]`).focus();
      });
      return el("th", { scope: "col", "aria-sort": sorting.key === c.key ? (sorting.dir > 0 ? "ascending" : "descending") : null }, button);
    })));
    put(table.tBodies[0], rows.map((c) => el("tr", { "data-gpu": c.gpu, "data-count": c.count, class: c.fits ? null : "nofit" },
      COLUMNS.map((col) => el(col.key === "gpu" ? "th" : "td", { scope: col.key === "gpu" ? "row" : null, "data-key": col.key, "data-value": col.value(c), class: ["gpu", "fits", "layout"].includes(col.key) ? null : "num", title: col.key === "gpu" ? [c.name, ...c.reasons].join("; ") : col.key === "price" && c.price ? `${c.price.provider}${c.price.kind ? " " + c.price.kind : ""}${c.price.term ? " " + c.price.term : ""}${c.price.as_of ? ", as of " + c.price.as_of : ""}${c.price.source ? ": " + c.price.source : ""}` : null }, col.text(c))))));
  }
  function renderGpus(answer) {
    const fitting = answer.recommendations.filter((c) => c.fits).length;
    $("ranking-summary").textContent = `${answer.recommendations.length} candidates ranked "${answer.objective}" for a ${answer.workload_kind} workload; ${fitting} fit. ` +
      (answer.scenario ? `Scenario: ${answer.scenario.class.replace(/_/g, " ")} (${answer.scenario.band}). ` : "") +
      (answer.price_basis ? `Prices: ${answer.price_basis.detail}` + (answer.price_basis.unpriced.length ? `; ${answer.price_basis.unpriced.length} GPUs have no price on it and are ranked after the priced ones, unscored.` : ".") : "");
    put("ranking-warnings", (answer.warnings || []).map((w) => el("li", { class: "warn" }, w)));
    drawScatter(answer);
    drawTable(answer);
  }

  function renderMemory(answer, recommendation, trace) {
    const fit = answer.fit;
    const verdict = fit
      ? el("p", { class: fit.fits ? "fits" : "nofits", "data-fits": fit.fits },
        el("strong", {}, fit.fits ? "Fits" : "Does not fit"), ` on ${fit.gpu}: needs ${gib(fit.required_bytes)} of ${gib(fit.usable_memory_bytes)} usable (${pct(fit.utilization)}).`)
      : el("p", {}, el("strong", {}, `Needs ${gib(answer.required_bytes)}`), " (no GPU chosen for a fit).");
    put("verdict", verdict, el("p", { class: "help" }, `${count(answer.parameters)} parameters (${count(answer.trainable_parameters)} trainable); peak in ${answer.peak_phase}; ${answer.method} estimate.`));
    drawMemory(answer);
    if (trace) drawTimeline(trace, fit ? fit.usable_memory_bytes : null, `Through the step, traced (peak ${gib(trace.peak_bytes)} in ${trace.peak_phase}; ${trace.runtime} allocator)`);
    const advice = recommendation && recommendation.advice ? recommendation.advice : [];
    const target = recommendation ? recommendation.advice_gpu : null;
    $("advice-for").textContent = target ? `For ${target}, best first: what makes the job fit, what keeps it, then the fewest GPU-hours.` : "";
    put("advice", advice.length ? advice.map((a) => el("li", { "data-change": a.change, "data-gpu": a.gpu },
      el("strong", {}, a.change), ` on ${a.count}× ${a.gpu}: ${gib(a.required_bytes_before)} → ${gib(a.required_bytes_after)} per GPU, ${a.fits_after ? "then fits" : "still does not fit"}` +
      (a.time_factor ? `, time ×${a.time_factor}` : "") + (a.count > 1 && a.gpu_hours_factor ? `, GPU-hours ×${a.gpu_hours_factor}` : "") + `. ${a.detail}.`))
      : el("li", {}, target ? `No advice: the job fits one ${target} as it is.` : "No advice: the ranking found no GPU to advise for."));
    put("assumptions", [...(answer.warnings || []).map((w) => el("li", { class: "warn" }, w)), ...(answer.assumptions || []).map((a) => el("li", {}, a))]);
  }

  function renderMig(answer, profiles) {
    const slices = profiles.memory_slices;
    const W = 760, rowH = 78, L = 120, cell = (W - L - 10) / slices;
    const svg = sv("svg", { viewBox: `0 0 ${W} ${answer.gpus.length * rowH + 24}`, role: "img", "aria-labelledby": "mig-caption", class: "mig" });
    for (let s = 0; s < slices; s++) svg.append(sv("text", { x: L + (s + 0.5) * cell, y: 12, class: "axis", "text-anchor": "middle" }, `slice ${s}`));
    const names = [...new Set(answer.gpus.flatMap((g) => g.instances.map((i) => i.workload || "(free)")))];
    answer.gpus.forEach((g, row) => {
      const top = 20 + row * rowH;
      const group = sv("g", { "data-gpu-index": g.index, "data-layout": g.layout });
      group.append(sv("text", { x: 0, y: top + 28, class: "gpu-label" }, `GPU ${g.index}`), sv("text", { x: 0, y: top + 46, class: "axis" }, g.layout));
      for (let s = 0; s < slices; s++) group.append(sv("rect", { x: L + s * cell + 1, y: top, width: cell - 2, height: rowH - 10, class: "slot" }));
      for (const inst of g.instances) {
        const who = inst.workload || "(free)";
        const k = names.indexOf(who);
        const box = sv("g", { class: "instance", "data-workload": who, "data-profile": inst.profile, "data-start": inst.start, "data-size": inst.size },
          sv("rect", { x: L + inst.start * cell + 3, y: top + 2, width: inst.size * cell - 6, height: rowH - 14, rx: 5, class: `c${k % 10}` + (inst.in_use ? " in-use" : "") }),
          sv("text", { x: L + (inst.start + inst.size / 2) * cell, y: top + 23, class: "inst-name", "text-anchor": "middle" }, who),
          sv("text", { x: L + (inst.start + inst.size / 2) * cell, y: top + 40, class: "inst-profile", "text-anchor": "middle" }, inst.profile),
          sv("text", { x: L + (inst.start + inst.size / 2) * cell, y: top + 55, class: "inst-profile", "text-anchor": "middle" }, gib(inst.memory_bytes)),
          sv("title", {}, `${who}: ${inst.profile}, ${slicesText(inst)}, ${gib(inst.memory_bytes)}, ${inst.compute_slices} compute slices`));
        group.append(box);
      }
      svg.append(group);
    });
    put("mig-svg", svg);
    $("mig-caption").textContent = `${profiles.name}: ${answer.gpus.length} GPU(s) of ${slices} memory slices. ` + answer.gpus.map((g) =>
      `GPU ${g.index}: ` + (g.instances.length ? g.instances.map((i) => `${i.workload || "free"} ${i.profile} at ${slicesText(i)}`).join(", ") : "empty")).join("; ") + ".";
    const u = answer.utilization;
    $("mig-summary").textContent = `${answer.gpus_used} × ${answer.gpu} (table ${answer.table}); lower bound ${answer.lower_bound}, ${answer.optimal ? "optimal" : "not proven optimal"}. ` +
      `Memory slices ${u.memory_slices_used}/${u.memory_slices_total}, compute slices ${u.compute_slices_used}/${u.compute_slices_total}, stranded ${u.compute_slices_stranded}.`;
    put("mig-notes", [
      ...answer.unplaced.map((x) => el("li", { class: "warn" }, `${x.count}× ${x.workload} not placed: ${x.reason}`)),
      answer.single_strategy ? el("li", {}, `migStrategy single: ${answer.single_strategy.possible ? "possible" : answer.single_strategy.reason}`) : null,
      ...(answer.resources || []).map((r) => el("li", {}, `${r.workload}: ${r.count}× ${r.resource}`)),
      ...(answer.unverified || []).map((x) => el("li", { class: "warn" }, "unverified: " + x)),
    ]);
    $("mig-yaml").textContent = answer.mig_parted_config;
  }

  // ---------------------------------------------------------------- views
  function show(view) {
    page.state.view = view;
    for (const tab of document.querySelectorAll("[role=tab]")) {
      const on = tab.dataset.view === view;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      $("view-" + tab.dataset.view).hidden = !on;
    }
    $("job-form").hidden = view === "mig";
    $("mig-form").hidden = view !== "mig";
    for (const input of document.querySelectorAll("input[name=view]")) input.value = view;
  }
  function wireTabs() {
    const tabs = [...document.querySelectorAll("[role=tab]")];
    tabs.forEach((tab, i) => {
      tab.addEventListener("click", (e) => { e.preventDefault(); show(tab.dataset.view); writeState(page.state, false); });
      tab.addEventListener("keydown", (e) => {
        const j = e.key === "ArrowRight" ? (i + 1) % tabs.length : e.key === "ArrowLeft" ? (i + tabs.length - 1) % tabs.length : e.key === "Home" ? 0 : e.key === "End" ? tabs.length - 1 : -1;
        if (j < 0) return;
        e.preventDefault();
        tabs[j].focus();
        show(tabs[j].dataset.view);
        writeState(page.state, false);
      });
    });
  }

  // ---------------------------------------------------------------- run
  async function run() {
    const state = page.state;
    say("Planning…");
    document.body.dataset.ready = "false";
    const errors = [];
    const attempt = async (path, make) => {
      try { return await make(); } catch (e) { errors.push({ path, message: e.message, status: e.status, problem: e.problem }); return null; }
    };
    const [estimate, ranking, mig, profiles, trace] = await Promise.all([
      attempt("memory", () => api("POST", "/v1/memory/estimate", { ...jobRequest(state), gpu: state.gpu || null })),
      attempt("GPUs", () => api("POST", "/v1/recommendations", recommendRequest(state))),
      attempt("MIG", () => api("POST", "/v1/mig/plan", migRequest(state))),
      attempt("MIG profiles", () => api("GET", "/v1/mig/profiles?gpu=" + encodeURIComponent(state.mig_gpu))),
      state.trace === "1" && state.config ? attempt("trace", () => api("POST", "/v1/memory/trace", traceRequest(state))) : null,
    ]);
    page.answers = { estimate, ranking, mig, profiles, trace };
    showProblems(errors);
    if (estimate) renderMemory(estimate, ranking, trace);
    if (ranking) renderGpus(ranking);
    if (mig && profiles) renderMig(mig, profiles);
    say(errors.length ? "Planned, with problems (see above)." : "Planned.");
    document.body.dataset.ready = "true";
  }
  function submit(event) {
    event.preventDefault();
    page.state = formState();
    writeState(page.state, true);
    run();
  }

  async function start() {
    // First, before any call can fail: the token goes to this tab's storage, never the URL.
    $("token-form").addEventListener("submit", (e) => { e.preventDefault(); sessionStorage.setItem(TOKEN_KEY, $("token").value); location.reload(); });
    wireTabs();
    page.state = readState();
    show(page.state.view);
    say("Loading…");
    let openapi, models, gpus;
    try {
      [openapi, models, gpus] = await Promise.all([api("GET", "/schema/openapi.json"), api("GET", "/v1/models"), api("GET", "/v1/gpus")]);
    } catch (e) {
      showProblems([{ path: e.path, message: e.message, status: e.status, problem: e.problem }]);
      say("The service did not answer; nothing to draw.");
      return;
    }
    page.gpus = gpus.gpus;
    buildForm(openapi, models.models, gpus.gpus);
    fillForm(page.state);
    writeState(page.state, false);
    $("job-form").addEventListener("submit", submit);
    $("mig-form").addEventListener("submit", submit);
    $("mig-add").addEventListener("click", () => { const row = migRow(""); $("mig-rows").append(row); row.querySelector("input").focus(); });
    $("copy-yaml").addEventListener("click", copyYaml);
    window.addEventListener("popstate", () => { page.state = readState(); show(page.state.view); fillForm(page.state); run(); });
    await run();
  }
  async function copyYaml() {
    const text = $("mig-yaml").textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch {
      const range = document.createRange();
      range.selectNodeContents($("mig-yaml"));
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      document.execCommand("copy");
    }
    say("The mig-parted YAML is copied.");
  }

  start();
})();
