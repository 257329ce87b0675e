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
  // The job's own keys; the form's fields with a data-path (the recommendation's) are too.
  const JOB_KEYS = ["model", "config", "chart_x"];
  const MULTI = ["mw", "include", "exclude", "provider"];  // repeated in the address
  const pathed = () => [...document.querySelectorAll("#job-form [data-path]")];
  const jobKeys = () => [...JOB_KEYS, ...pathed().map((n) => n.id)];
  // Opened without a plan, the page shows this one: a Llama 3.1 8B LoRA fine-tune and
  // an A100 80GB shared by two 35 GiB services, three notebooks and an embedder.
  const EXAMPLE = {
    model: "llama-3.1-8b", mode: "finetune_lora", batch_size: "4", sequence_length: "2048",
    gradient_checkpointing: "full", gpu: "a100-sxm4-80gb", objective: "cheapest",
    training_tokens: "1000000000",
    mig_gpu: "a100-sxm4-80gb", mw: ["llm:35:2", "notebook:1g.10gb:3", "embedder:18:1"],
  };

  const page = { state: {}, fields: {}, gpus: [], names: new Map(), answers: {}, sent: {} };

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
  const sig = (x) => (x === null || x === undefined ? "—" : tickText(x));
  const nameOf = (id) => page.names.get(id) || id;
  // Chart labels drop the vendor's name; selects, tables and texts keep the full name.
  const shortName = (id) => nameOf(id).replace(/^(NVIDIA|AMD) (GeForce |Instinct )?/, "");
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
    markFields(errors);
    if (!errors.length) { box.hidden = true; box.replaceChildren(); return; }
    box.hidden = false;
    put(box, errors.map((e) => el("div", {},
      el("strong", {}, `${e.path}: `), e.message,
      e.problem && e.problem.errors ? el("ul", {}, e.problem.errors.map((f) => el("li", {}, el("code", {}, f.path), " ", f.reason))) : null,
      e.problem && e.problem.suggestions && e.problem.suggestions.length ? el("div", {}, "Did you mean: " + e.problem.suggestions.join(", ")) : null)));
    $("token-form").hidden = !errors.some((e) => e.status === 401);
  }
  // A problem's errors[].path is a field of the request the page made: its reason is shown
  // under the input that field came from (the input marked aria-invalid and described by it).
  const GROUPS = { constraints: "include", training: "training_tokens", inference: "requests_per_second", pricing: "provider", workload: "mode", model: "model" };
  function inputFor(path, request) {
    const indexed = /^\$\.workloads\[(\d+)\]\.?(\w*)/.exec(path);
    if (request === "mig" || request === "profiles") {
      if (!indexed) return path === "$.gpu" ? $("mig_gpu") : null;
      const row = document.querySelectorAll("#mig-rows tr")[Number(indexed[1])];
      return row ? row.querySelectorAll("input")[{ name: 0, count: 2 }[indexed[2]] ?? 1] : null;
    }
    const parts = path.replace(/^\$\.?/, "").replace(/\[\d+\]/g, "").split(".");
    if (parts[0] === "workload" && parts[1]) return $((request === "trace" ? TRACE : "") + parts[1]) || $(GROUPS.workload);
    if (parts[0] === "model") return $(page.state.config ? "config" : "model");
    if (parts[0] === "gpu") return $("gpu");
    for (let n = parts.length; n > 0; n--) {
      const node = document.querySelector(`#job-form [data-path="${parts.slice(0, n).join(".")}"]`);
      if (node) return node;
    }
    return GROUPS[parts[0]] ? $(GROUPS[parts[0]]) : null;
  }
  function markFields(errors) {
    for (const old of document.querySelectorAll(".field-error")) old.remove();
    for (const input of document.querySelectorAll("[aria-invalid]")) {
      input.removeAttribute("aria-invalid");
      const rest = (input.getAttribute("aria-describedby") || "").split(" ").filter((id) => id && !id.endsWith("-error")).join(" ");
      if (rest) input.setAttribute("aria-describedby", rest); else input.removeAttribute("aria-describedby");
    }
    for (const e of errors) {
      for (const f of (e.problem && e.problem.errors) || []) {
        const input = inputFor(f.path || "", e.request);
        if (!input) continue;
        const id = input.id + "-error";
        let note = $(id);
        if (!note) {
          note = el("p", { class: "field-error", id, "data-error-path": f.path });
          input.after(note);
          input.setAttribute("aria-invalid", "true");
          input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + id).trim());
        }
        const text = `${f.path}: ${f.reason}`;
        if (!note.textContent.includes(text)) note.textContent += (note.textContent ? "; " : "") + text;
        for (let box = input.closest("details"); box; box = box.parentElement.closest("details")) box.open = true;
      }
    }
  }

  // ---------------------------------------------------------------- state <-> address bar
  function readState() {
    const params = new URLSearchParams(location.search);
    const state = {};
    for (const [k, v] of params) {
      if (MULTI.includes(k)) (state[k] = state[k] || []).push(v);
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
      if (k === "view" || v === "" || v === undefined || v === null) continue;
      if (Array.isArray(v)) { for (const x of v) params.append(k, x); continue; }
      const field = page.fields[k];
      if (field && field.default !== undefined && String(field.default) === v) continue;
      params.set(k, v);
    }
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
      if (o.type === "integer" || o.type === "number") return { kind: o.type, min: o.minimum ?? o.exclusiveMinimum, max: o.maximum };
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
  // The schema of a dotted path of the recommendation's request (refs and nullables followed).
  function specAt(schemas, path) {
    const object = (spec) => {
      const options = spec.anyOf || [spec];
      const o = options.find((x) => x.$ref || x.properties) || options[0];
      return o.$ref ? schemas[o.$ref.split("/").pop()] : o;
    };
    let spec = schemas.RecommendRequest;
    for (const part of path.split(".")) {
      spec = object(spec).properties ? object(spec).properties[part] : undefined;
      if (!spec) return null;
    }
    return spec;
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
    put("model", models.map((m) => el("option", { value: m.name }, `${m.name} (${(m.parameters / 1e9).toFixed(2)} B)`)));
    // Every GPU by its full catalog name, its id the value sent.
    const byName = gpus.slice().sort((a, b) => a.name.localeCompare(b.name));
    const gpuOption = (g) => el("option", { value: g.id }, `${g.name} — ${gib(g.usable_memory_bytes)} usable`);
    put("gpu", el("option", { value: "" }, "(none)"), byName.map(gpuOption));
    put("mig_gpu", byName.filter((g) => g.mig && g.mig.supported).map(gpuOption));
    for (const id of ["include", "exclude"]) put(id, byName.map((g) => el("option", { value: g.id }, g.name)));
    // The recommendation's fields: choices, bounds and defaults from the schema.
    for (const node of pathed()) {
      const spec = specAt(schemas, node.dataset.path);
      if (!spec) continue;
      const scalar = scalarOf(spec.type === "array" ? spec.items : spec);
      node.dataset.type = spec.type === "array" ? "array" : scalar ? scalar.kind : "string";
      const fallback = spec.default === null || spec.default === undefined || Array.isArray(spec.default) ? null : spec.default;
      if (node.tagName === "INPUT" && scalar) {
        node.step = scalar.kind === "integer" ? "1" : "any";
        if (scalar.min !== undefined) node.min = scalar.min;
        if (scalar.max !== undefined) node.max = scalar.max;
        if (!node.placeholder && fallback !== null) node.placeholder = String(fallback);
      } else if (node.tagName === "SELECT" && scalar && scalar.kind === "enum" && !node.options.length) {
        const blank = node.multiple || node.id === "objective" ? [] : [el("option", { value: "" }, `(default: ${fallback})`)];
        put(node, blank, scalar.choices.map((c) => el("option", { value: c }, c.replace(/_/g, " "))));
        if (node.id === "objective") node.value = node.dataset.initial = fallback || scalar.choices[0];
      }
    }
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
    for (const name of [...Object.keys(page.fields), ...jobKeys(), "mig_gpu"]) {
      const input = $(name);
      if (!input) continue;
      if (input.multiple) for (const o of input.options) o.selected = (state[name] || []).includes(o.value);
      else if (state[name] !== undefined) input.value = state[name];
      else if (input.dataset.path) input.value = input.dataset.initial || "";
    }
    $("config-box").open = Boolean(state.config);
    $("limits-box").open = ["include", "exclude", "max_gpus_per_job"].some((k) => state[k] !== undefined);
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
    if (page.state.chart_x) state.chart_x = page.state.chart_x;  // only where the reader chose it
    for (const name of [...Object.keys(page.fields), ...jobKeys()]) {
      const input = $(name);
      if (name === "chart_x") continue;
      // Both forms make the state; only volume fields of the other mode are left out.
      if (!input || input.closest("[data-when][hidden]")) continue;
      if (input.multiple) {
        const chosen = [...input.selectedOptions].map((o) => o.value);
        if (chosen.length) state[name] = chosen;
      } else if (input.value !== "") state[name] = input.value.trim();
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
  // Each field with a data-path goes to that path, only when set, and only the volume of
  // the job's mode. The GPU of the fit is constraints.preferred_gpu: advice is for it.
  function recommendRequest(state) {
    const body = jobRequest(state);
    const inference = state.mode === "inference";
    for (const node of pathed()) {
      const value = state[node.id];
      const when = node.closest("[data-when]");
      if (value === undefined || value === "" || (when && (when.dataset.when === "inference") !== inference)) continue;
      const kind = node.dataset.type;
      const parts = node.dataset.path.split(".");
      let at = body;
      for (const part of parts.slice(0, -1)) at = at[part] = at[part] || {};
      at[parts[parts.length - 1]] = kind === "integer" || kind === "number" ? numeric(value) : value;
    }
    return body;
  }
  // A number as a number; anything else as typed, so the API names what is wrong with it.
  const numeric = (text) => (/^\s*-?[0-9.]+(e[-+]?[0-9]+)?\s*$/i.test(text) && Number.isFinite(Number(text)) ? Number(text) : text);
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
  const deviceRange = (answer) => (answer.intervals && answer.intervals.device_bytes) || null;
  function memoryParts(answer) {
    const breakdown = answer.breakdown || {};
    const aggregate = (k) => (AGGREGATES[k] || []).some((part) => part in breakdown);
    const parts = Object.entries(breakdown).filter(([k, v]) => typeof v === "number" && v > 0 && !aggregate(k)).map(([k, v]) => ({ key: k, label: words(k), bytes: v }));
    const sum = parts.reduce((s, p) => s + p.bytes, 0);
    if (typeof answer.required_bytes === "number" && answer.required_bytes > sum) {
      // Its size is the answer's: to the 90% range's high end, or the rule of thumb's share.
      const share = typeof answer.headroom_fraction === "number" ? ` +${pct(answer.headroom_fraction)}` : "";
      const why = deviceRange(answer) ? " to 95% confidence" : " (rule of thumb)";
      parts.push({ key: "headroom", label: "headroom" + share + why, bytes: answer.required_bytes - sum });
    }
    return parts;
  }
  function drawMemory(answer) {
    const parts = memoryParts(answer);
    const usable = answer.fit ? answer.fit.usable_memory_bytes : null;
    const range = deviceRange(answer);
    const total = parts.reduce((s, p) => s + p.bytes, 0);
    const max = Math.max(total, usable || 0, range ? range.high : 0) * 1.06;
    const W = 760, L = 12, R = 12, plot = W - L - R, x = (b) => L + (b / max) * plot;
    const top = 40, bottom = 84;
    const svg = sv("svg", { viewBox: `0 0 ${W} 134`, role: "img", "aria-labelledby": "memory-caption", class: "memory" });
    let at = 0;
    parts.forEach((p, i) => {
      const rect = sv("rect", { x: x(at), y: top, width: Math.max(x(at + p.bytes) - x(at), 0.5), height: bottom - top, class: `part ${partClass(p, i)}`, "data-field": p.key, "data-bytes": p.bytes },
        sv("title", {}, `${p.label}: ${gib(p.bytes)}`));
      svg.append(rect);
      at += p.bytes;
    });
    // Where nvidia-smi's figure will fall 9 times in 10: a bar above the parts, from its
    // low end to its high end (required_bytes, what "fits" is judged on).
    if (range) {
      const y = top - 9, text = `90% range of what nvidia-smi will show: ${gib(range.low)} – ${gib(range.high)}`;
      svg.append(sv("g", { class: "err range", "data-figure": "device_bytes", "data-low": range.low, "data-high": range.high },
        sv("line", { x1: x(range.low), x2: x(range.high), y1: y, y2: y, class: "err-bar" }),
        sv("line", { x1: x(range.low), x2: x(range.low), y1: y - 5, y2: y + 5, class: "err-cap" }),
        sv("line", { x1: x(range.high), x2: x(range.high), y1: y - 5, y2: y + 5, class: "err-cap" }),
        sv("title", {}, text)));
      svg.append(sv("text", { x: x(range.low) - 6, y: y + 4, class: "axis", "text-anchor": "end" }, "90% range"));
    }
    const step = niceStep(max / GIB, 8);
    for (let g = 0; g * GIB <= max; g += step) {
      svg.append(sv("line", { x1: x(g * GIB), x2: x(g * GIB), y1: bottom + 2, y2: bottom + 8, class: "tick" }),
        sv("text", { x: x(g * GIB), y: bottom + 20, class: "axis", "text-anchor": "middle" }, (g + step) * GIB > max ? `${g} GiB` : `${g}`));
    }
    // "needs" above the bar, "usable" below the axis: the two never overlap.
    svg.append(sv("text", { x: x(total), y: 16, class: "total-label", "text-anchor": x(total) > W - 140 ? "end" : "start" }, `needs ${gib(total)}`));
    if (usable) {
      svg.append(sv("line", { x1: x(usable), x2: x(usable), y1: 22, y2: bottom + 28, class: answer.fit.fits ? "limit ok" : "limit over", "data-bytes": usable }),
        sv("text", { x: x(usable), y: bottom + 42, class: "limit-label", "text-anchor": x(usable) > W - 120 ? "end" : "middle" }, `usable ${gib(usable)}`));
    }
    const legend = el("ul", { class: "legend" }, parts.map((p, i) => el("li", { "data-field": p.key, "data-bytes": p.bytes },
      svgSwatch(partClass(p, i)), `${p.label} `, el("span", { class: "num" }, gib(p.bytes)))));
    put("memory-svg", svg, legend);
    const row = (field, label, bytes) => el("tr", { "data-field": field }, el("th", { scope: "row" }, label), el("td", { class: "num" }, String(bytes)), el("td", { class: "num" }, (bytes / GIB).toFixed(2)));
    const ranges = Object.entries(answer.intervals || {});
    put("memory-table", el("table", { class: "figures parts" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "part"), el("th", { scope: "col" }, "bytes"), el("th", { scope: "col" }, "GiB"))),
      el("tbody", {}, parts.map((p) => row(p.key, p.label, p.bytes)),
        row("required_bytes", "required", total),
        usable ? row("usable_memory_bytes", "usable on " + nameOf(answer.fit.gpu), usable) : null)),
    ranges.length ? el("table", { class: "figures ranges" },
      el("caption", {}, "90% ranges: where the measured figure falls 9 times in 10"),
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "figure"), el("th", { scope: "col" }, "estimate, bytes"), el("th", { scope: "col" }, "low"), el("th", { scope: "col" }, "high"), el("th", { scope: "col" }, "GiB"))),
      el("tbody", {}, ranges.map(([k, r]) => el("tr", { "data-field": k, "data-low": r.low, "data-high": r.high },
        el("th", { scope: "row" }, words(k)), el("td", { class: "num" }, String(answer[k])), el("td", { class: "num" }, String(r.low)), el("td", { class: "num" }, String(r.high)),
        el("td", { class: "num" }, `${(r.low / GIB).toFixed(2)}–${(r.high / GIB).toFixed(2)}`))))) : null);
    const biggest = parts.slice().sort((a, b) => b.bytes - a.bytes)[0];
    $("memory-caption").textContent = `Memory at the peak (${answer.peak_phase || "peak"}): ${gib(total)} needed` +
      (usable ? ` of ${gib(usable)} usable on ${nameOf(answer.fit.gpu)}` : "") + (biggest ? `; the largest part is ${biggest.label} (${gib(biggest.bytes)}).` : ".") +
      (range ? ` The bar above is the 90% range of what nvidia-smi will show (${gib(range.low)} – ${gib(range.high)}), from the estimate's errors on published measurements; "needs" is its high end, so "fits" holds at 95% confidence, ${pct(answer.headroom_fraction)} above the middle estimate (${gib(answer.device_bytes)}).`
        : ` No range: the ${words(answer.method)} estimate keeps a flat ${pct(answer.headroom_fraction)} headroom.`);
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

  // What the GPUs chart plots. Training: cost against time. Serving: the cost of the
  // planned period against a figure the plans differ in, a latency or the throughput (every
  // serving plan's time is the period itself, so time says nothing there).
  const FIGURES = {
    time: { label: "time (hours)", value: (c) => c.time_hours, range: "time_hours" },
    cost: { label: "cost (USD)", value: (c) => c.cost_usd, range: "cost_usd" },
    tpot: { label: "time per output token (s)", value: (c) => (c.latency ? c.latency.time_per_output_token_s : null), range: "time_per_output_token_s", target: "max_time_per_output_token_s" },
    ttft: { label: "time to first token (s)", value: (c) => (c.latency ? c.latency.time_to_first_token_s : null), range: "time_to_first_token_s", target: "max_time_to_first_token_s" },
    throughput: { label: "throughput", value: (c) => (c.throughput ? c.throughput.value : null), range: "throughput" },
  };
  const SERVING_X = ["tpot", "ttft", "throughput"];
  function chartAxes(answer, fitting) {
    if (answer.workload_kind !== "inference") return { x: FIGURES.time, y: FIGURES.cost, key: "time" };
    const sent = (page.sent.ranking && page.sent.ranking.inference) || {};
    const differs = (k) => {
      const v = fitting.map(FIGURES[k].value).filter((x) => x > 0);
      return v.length > 1 && Math.max(...v) > Math.min(...v) * 1.02;
    };
    // The reader's choice, else the figure a target was set on, else one the plans differ in.
    const key = SERVING_X.includes(page.state.chart_x) ? page.state.chart_x
      : SERVING_X.find((k) => FIGURES[k].target && sent[FIGURES[k].target]) || SERVING_X.find(differs) || "tpot";
    const hours = (fitting.find((c) => c.time_hours) || {}).time_hours;
    const unit = (fitting.find((c) => c.throughput) || { throughput: { unit: "" } }).throughput.unit;
    const throughput = `throughput (${unit})`;
    const x = key === "throughput" ? { ...FIGURES.throughput, label: throughput } : FIGURES[key];
    const y = { ...FIGURES.cost, label: hours === 730 ? "cost per month, 730 h (USD)" : `cost of ${sig(hours)} h (USD)` };
    return { x, y, key, throughput, target: x.target ? sent[x.target] : undefined };
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
  const rangeOf = (c, figure) => (c.intervals && c.intervals[figure.range]) || null;
  function drawScatter(answer) {
    const fitting = answer.recommendations.map((c, i) => ({ ...c, rank: i + 1 })).filter((c) => c.fits);
    const serving = answer.workload_kind === "inference";
    const axes = chartAxes(answer, fitting);
    $("chart-x-box").hidden = !serving;
    if (serving) {
      put("chart_x", SERVING_X.map((k) => el("option", { value: k }, (k === "throughput" ? axes.throughput : FIGURES[k].label).replace(/^./, (m) => m.toUpperCase()))));
      $("chart_x").value = axes.key;
    }
    const points = fitting.filter((c) => axes.x.value(c) > 0 && axes.y.value(c) > 0);
    const unpriced = fitting.filter((c) => axes.x.value(c) > 0 && !(axes.y.value(c) > 0)).length;
    if (!points.length) {
      put("scatter-svg", el("p", { class: "help" }, `No fitting plan has both a ${axes.x.label.replace(/ \(.*/, "")} and a cost` + (unpriced ? `: ${unpriced} have no price on this basis (choose other price tables).` : ".")));
      $("scatter-caption").textContent = "";
      return;
    }
    const W = 760, H = 330, L = 70, B = 44, T = 14, R = 20;
    // The scales hold the ranges and the target too, so no bar or line is cut off.
    const spread = (figure) => points.flatMap((c) => { const r = rangeOf(c, figure); return [figure.value(c), ...(r ? [r.low, r.high] : [])]; }).filter((v) => v > 0);
    const sx = logOrLinear([...spread(axes.x), ...(axes.target ? [axes.target] : [])]), sy = logOrLinear(spread(axes.y));
    const px = (v) => L + sx.f(v) * (W - L - R), py = (v) => H - B - sy.f(v) * (H - B - T);
    const svg = sv("svg", { viewBox: `0 0 ${W} ${H}`, role: "group", "aria-labelledby": "scatter-caption", class: "scatter", "data-x-figure": axes.key });
    for (const t of sx.ticks) svg.append(sv("line", { x1: px(t), x2: px(t), y1: T, y2: H - B, class: "grid" }), sv("text", { x: px(t), y: H - B + 16, class: "axis", "text-anchor": "middle" }, tickText(t)));
    for (const t of sy.ticks) svg.append(sv("line", { x1: L, x2: W - R, y1: py(t), y2: py(t), class: "grid" }), sv("text", { x: L - 6, y: py(t) + 4, class: "axis", "text-anchor": "end" }, tickText(t)));
    svg.append(sv("text", { x: (L + W - R) / 2, y: H - 6, class: "axis-title", "text-anchor": "middle" }, axes.x.label + (sx.log ? ", log scale" : "")),
      sv("text", { x: 14, y: (T + H - B) / 2, class: "axis-title", "text-anchor": "middle", transform: `rotate(-90 14 ${(T + H - B) / 2})` }, axes.y.label + (sy.log ? ", log scale" : "")));
    if (axes.target) {
      svg.append(sv("line", { x1: px(axes.target), x2: px(axes.target), y1: T, y2: H - B, class: "limit over target", "data-x": axes.target }),
        sv("text", { x: px(axes.target) + 4, y: T + 10, class: "limit-label" }, `target ≤ ${sig(axes.target)} s`));
    }
    // The 80% ranges first, under the dots: a bar along each axis, with end caps.
    const bar = (c, axis, r, at) => {
      const [a, b] = axis === "x" ? [px(r.low), px(r.high)] : [py(r.low), py(r.high)];
      const line = (p, q, cls) => (axis === "x" ? sv("line", { x1: p, x2: q, y1: at, y2: at, class: cls }) : sv("line", { x1: at, x2: at, y1: p, y2: q, class: cls }));
      const cap = (p) => (axis === "x" ? sv("line", { x1: p, x2: p, y1: at - 4, y2: at + 4, class: "err-cap" }) : sv("line", { x1: at - 4, x2: at + 4, y1: p, y2: p, class: "err-cap" }));
      return sv("g", { class: "err", "data-axis": axis, "data-gpu": c.gpu, "data-count": c.count, "data-low": r.low, "data-high": r.high }, line(a, b, "err-bar"), cap(a), cap(b));
    };
    let ranged = 0;
    for (const c of points) {
      const rx = rangeOf(c, axes.x), ry = rangeOf(c, axes.y);
      if (rx) svg.append(bar(c, "x", rx, py(axes.y.value(c))));
      if (ry) svg.append(bar(c, "y", ry, px(axes.x.value(c))));
      if (rx || ry) ranged += 1;
    }
    const labels = [];
    for (const c of points.slice().reverse()) {
      const misses = (c.breaches || []).map((b) => b.constraint);
      const rx = rangeOf(c, axes.x), ry = rangeOf(c, axes.y);
      const label = `#${c.rank} ${c.count}× ${c.name}: ${axes.x.label} ${sig(axes.x.value(c))}` + (rx ? ` (80%: ${sig(rx.low)}–${sig(rx.high)})` : "") +
        `, ${axes.y.label} ${fixed(axes.y.value(c), 2)}` + (ry ? ` (80%: ${fixed(ry.low, 2)}–${fixed(ry.high, 2)})` : "") + (misses.length ? `; misses ${misses.join(", ")}` : "");
      const cls = (c.rank === 1 ? "dot best" : c.rank <= 3 ? "dot top" : "dot") + (misses.length ? " miss" : "");
      const dot = sv("circle", { cx: px(axes.x.value(c)), cy: py(axes.y.value(c)), r: c.rank <= 3 ? 7 : 5, class: cls, tabindex: 0, role: "img", "aria-label": label, "data-gpu": c.gpu, "data-count": c.count, "data-x": axes.x.value(c), "data-y": axes.y.value(c) }, sv("title", {}, label));
      dot.addEventListener("focus", () => highlightRow(c.gpu, c.count));
      dot.addEventListener("mouseenter", () => highlightRow(c.gpu, c.count));
      svg.append(dot);
      if (c.rank <= 5) labels.push(c);
    }
    // The first five are named beside their dot, above it or below, where no other name is
    // (a name that finds no room is left to the dot's own label and the table).
    const placed = [];
    for (const c of labels.sort((a, b) => a.rank - b.rank)) {
      const text = `${c.count}× ${shortName(c.gpu)}`, w = text.length * 6.4, cx = px(axes.x.value(c)), cy = py(axes.y.value(c));
      const right = cx > W - 170, x0 = right ? cx - 9 - w : cx + 9;
      const spot = [cy - 7, cy + 16].find((y) => !placed.some((b) => x0 < b.x1 && x0 + w > b.x0 && y > b.y - 13 && y - 13 < b.y));
      if (spot === undefined) continue;
      placed.push({ x0, x1: x0 + w, y: spot });
      svg.append(sv("text", { x: right ? cx - 9 : cx + 9, y: spot, class: "dot-label", "text-anchor": right ? "end" : "start" }, text));
    }
    put("scatter-svg", svg);
    const best = points.find((c) => c.rank === Math.min(...points.map((p) => p.rank)));
    const missing = points.filter((c) => (c.breaches || []).length).length;
    $("scatter-caption").textContent = `${axes.y.label} against ${axes.x.label} of the ${points.length} fitting plans that have both; larger dots are the API's top three for "${answer.objective}"` +
      (best ? `, first ${best.count}× ${best.name} (${sig(axes.x.value(best))} / ${fixed(axes.y.value(best), 2)}).` : ".") +
      (ranged ? ` Bars: the 80% likely range of each figure, from the speed model's cross-validated errors on published runs (${ranged} of ${points.length} plans have them).` : " No plan has a likely range (none is like a published run).") +
      (axes.target ? ` The dashed line is the target of ${sig(axes.target)} s.` : "") +
      (missing ? ` Hollow dots miss a constraint (${missing}).` : "") +
      (unpriced ? ` ${unpriced} fitting plans have no price on this basis and are not drawn.` : "");
  }
  function highlightRow(gpu, count) {
    for (const tr of document.querySelectorAll("#gpu-table tbody tr")) tr.classList.toggle("hl", tr.dataset.gpu === gpu && tr.dataset.count === String(count));
  }

  const COLUMNS = [
    { key: "rank", label: "#", value: (c) => c.rank, text: (c) => String(c.rank) },
    { key: "gpu", label: "GPU", value: (c) => c.name, text: (c) => c.name },
    { key: "count", label: "count", value: (c) => c.count, text: (c) => String(c.count) },
    { key: "fits", label: "fits", value: (c) => (c.fits ? 1 : 0), text: (c) => (c.fits ? "yes" : "no") },
    { key: "layout", label: "layout", value: (c) => (c.layout ? c.layout.tensor * c.layout.pipeline * c.layout.data : 0), text: (c) => (c.layout ? `TP${c.layout.tensor}·PP${c.layout.pipeline}·DP${c.layout.data}` + (c.layout.zero_stage ? ` ZeRO-${c.layout.zero_stage}` : "") + (c.layout.cpu_offload_optimizer ? " offload" : "") : "—") },
    { key: "required_bytes_per_gpu", label: "GiB per GPU", value: (c) => c.required_bytes_per_gpu, text: (c) => (c.required_bytes_per_gpu / GIB).toFixed(2) },
    { key: "memory_utilization", label: "memory used", value: (c) => c.memory_utilization, text: (c) => pct(c.memory_utilization) },
    { key: "throughput", label: "throughput", value: (c) => (c.throughput ? c.throughput.value : null), text: (c) => (c.throughput ? `${fixed(c.throughput.value, 0)} ${c.throughput.unit}` : "—"), range: (v) => fixed(v, 0) },
    { key: "mfu", label: "MFU", when: "training", value: (c) => c.mfu, text: (c) => (c.mfu === null || c.mfu === undefined ? "—" : pct(c.mfu)), range: pct },
    { key: "time_to_first_token_s", label: "TTFT s", when: "inference", value: (c) => (c.latency ? c.latency.time_to_first_token_s : null), text: (c) => sig(c.latency ? c.latency.time_to_first_token_s : null), range: sig },
    { key: "time_per_output_token_s", label: "TPOT s", when: "inference", value: (c) => (c.latency ? c.latency.time_per_output_token_s : null), text: (c) => sig(c.latency ? c.latency.time_per_output_token_s : null), range: sig },
    // Under a request rate: p50 / p95 / p99 of a Poisson arrival (latency.under_load); the
    // range under it is the p50's.
    { key: "ttft_p50_s", label: "TTFT p50/p95/p99 s", when: "inference", value: (c) => underLoad(c, "time_to_first_token_s", "p50"), text: (c) => percentiles(c, "time_to_first_token_s"), range: sig },
    { key: "tpot_p50_s", label: "TPOT p50/p95/p99 s", when: "inference", value: (c) => underLoad(c, "time_per_output_token_s", "p50"), text: (c) => percentiles(c, "time_per_output_token_s"), range: sig },
    { key: "time_hours", label: "hours", when: "training", value: (c) => c.time_hours, text: (c) => fixed(c.time_hours, 2), range: (v) => fixed(v, 2) },
    { key: "usd_per_hour", label: "USD/h", value: (c) => c.usd_per_hour, text: (c) => fixed(c.usd_per_hour, 2) },
    { key: "cost_usd", label: "cost USD", value: (c) => c.cost_usd, text: (c) => fixed(c.cost_usd, 2), range: (v) => fixed(v, 0) },
    { key: "price", label: "USD/GPU-h", value: (c) => (c.price ? c.price.usd_per_gpu_hour : null), text: (c) => (c.price ? `${fixed(c.price.usd_per_gpu_hour, 2)} ${c.price.provider}` : "—") },
    { key: "energy_kwh", label: "kWh", value: (c) => c.energy_kwh, text: (c) => fixed(c.energy_kwh, 1), range: (v) => fixed(v, 1) },
    { key: "score", label: "score", value: (c) => c.score, text: (c) => fixed(c.score, 3) },
  ];
  function underLoad(c, figure, q) {
    const u = c.latency ? c.latency.under_load : null;
    return u ? u[figure][q] : null;
  }
  function percentiles(c, figure) {
    const u = c.latency ? c.latency.under_load : null;
    return u ? ["p50", "p95", "p99"].map((q) => sig(u[figure][q])).join(" / ") : "—";
  }
  // The engine's command for the best fitting serving plan, as the API gave it.
  function drawLaunch(answer) {
    const top = answer.workload_kind === "inference" ? answer.recommendations.find((c) => c.fits && c.launch) : null;
    $("launch-box").hidden = !top;
    if (!top) return;
    const l = top.launch, lat = top.latency;
    const kind = lat && lat.kind === "static_batch" ? "a static batch: its TTFT is the whole batch's prefill" : "TTFT and TPOT in the table are one arriving request's (steady state; the percentiles include the queue)";
    $("launch-caption").textContent = `${l.engine} on ${top.count}× ${top.name}: ${l.replicas} replica(s) of ${l.tensor_parallel} GPU(s), each pod's limits ${Object.entries(l.resources.limits).map(([k, v]) => `${k}: ${v}`).join(", ")}; ${kind}.` +
      (lat && lat.max_requests_per_s_within_slo !== null && lat.max_requests_per_s_within_slo !== undefined ? ` One replica sustains ${sig(lat.max_requests_per_s_within_slo)} requests/s within the SLO.` : "");
    $("launch-command").textContent = l.shell;
  }
  const sorting = { key: "rank", dir: 1 };
  function drawTable(answer) {
    const rows = answer.recommendations.map((c, i) => ({ ...c, rank: i + 1 }));
    const columns = COLUMNS.filter((c) => !c.when || c.when === answer.workload_kind);
    const col = columns.find((c) => c.key === sorting.key) || columns[0];
    rows.sort((a, b) => {
      const va = col.value(a), vb = col.value(b);
      if (va === null || va === undefined) return 1;
      if (vb === null || vb === undefined) return -1;
      return (va < vb ? -1 : va > vb ? 1 : 0) * sorting.dir || a.rank - b.rank;
    });
    const table = $("gpu-table");
    put(table.tHead, el("tr", {}, columns.map((c) => {
      const button = el("button", { type: "button", "data-key": c.key }, c.label);
      button.addEventListener("click", () => {
        sorting.dir = sorting.key === c.key ? -sorting.dir : 1;
        sorting.key = c.key;
        drawTable(answer);
        table.tHead.querySelector(`button[data-key="${c.key}"]`).focus();
      });
      return el("th", { scope: "col", "aria-sort": sorting.key === c.key ? (sorting.dir > 0 ? "ascending" : "descending") : null }, button);
    })));
    // Under a predicted figure, its 80% likely range where the answer gives one.
    const cell = (c, col) => {
      const r = col.range && c.intervals ? c.intervals[col.key] : null;
      const title = col.key === "gpu" ? [c.gpu, ...c.reasons].join("; ") : col.key === "price" && c.price ? `${c.price.provider}${c.price.kind ? " " + c.price.kind : ""}${c.price.term ? " " + c.price.term : ""}${c.price.as_of ? ", as of " + c.price.as_of : ""}${c.price.source ? ": " + c.price.source : ""}` : null;
      return el(col.key === "gpu" ? "th" : "td", { scope: col.key === "gpu" ? "row" : null, "data-key": col.key, "data-value": col.value(c), class: ["gpu", "fits", "layout"].includes(col.key) ? null : "num", title },
        col.text(c), r ? el("span", { class: "range", "data-low": r.low, "data-high": r.high }, el("span", { class: "sr" }, " 80% likely "), `${col.range(r.low)}–${col.range(r.high)}`) : null);
    };
    put(table.tBodies[0], rows.map((c) => el("tr", { "data-gpu": c.gpu, "data-count": c.count, class: c.fits ? null : "nofit" }, columns.map((col) => cell(c, col)))));
  }
  function renderGpus(answer) {
    const fitting = answer.recommendations.filter((c) => c.fits).length;
    $("ranking-summary").textContent = `${answer.recommendations.length} candidates ranked "${answer.objective}" for ${answer.workload_kind === "inference" ? "an" : "a"} ${answer.workload_kind} workload; ${fitting} fit. ` +
      (answer.scenario ? `Scenario: ${answer.scenario.class.replace(/_/g, " ")} (${answer.scenario.band}). ` : "") +
      (answer.price_basis ? `Prices: ${answer.price_basis.detail}` + (answer.price_basis.unpriced.length ? `; ${answer.price_basis.unpriced.length} GPUs have no price on it and are ranked after the priced ones, unscored.` : ".") : "");
    put("ranking-warnings", (answer.warnings || []).map((w) => el("li", { class: "warn" }, w)));
    // The warning that a recipe's global batch was planned also stands under its field.
    const batch = (answer.warnings || []).find((w) => w.includes("training.global_batch_size"));
    $("global-batch-note").hidden = !batch;
    const planned = batch ? /planned at [^,;]+/.exec(batch) : null;
    $("global-batch-note").textContent = batch ? (planned ? `Empty, so the ranking ${planned[0]} (see its warnings).` : batch) : "";
    drawScatter(answer);
    drawTable(answer);
    drawLaunch(answer);
  }

  function renderMemory(answer, recommendation, trace) {
    const fit = answer.fit;
    const range = deviceRange(answer);
    const sure = range ? " (95% confidence)" : "";
    // Between the middle estimate and the high end: the job may well fit, but not surely.
    const close = fit && !fit.fits && range && answer.device_bytes <= fit.usable_memory_bytes
      ? ` The middle estimate, ${gib(answer.device_bytes)}, would fit: it may, but not with 95% confidence.` : "";
    const verdict = fit
      ? el("p", { class: fit.fits ? "fits" : "nofits", "data-fits": fit.fits },
        el("strong", {}, fit.fits ? "Fits" : "Does not fit"), `${fit.fits && range ? " with 95% confidence" : ""} on ${nameOf(fit.gpu)}: needs ${gib(fit.required_bytes)}${fit.fits ? "" : sure} of ${gib(fit.usable_memory_bytes)} usable (${pct(fit.utilization)}).${close}`)
      : el("p", {}, el("strong", {}, `Needs ${gib(answer.required_bytes)}`), `${range ? " at 95% confidence" : ""} (no GPU chosen for a fit).`);
    put("verdict", verdict, el("p", { class: "help" }, `${count(answer.parameters)} parameters (${count(answer.trainable_parameters)} trainable); peak in ${answer.peak_phase}; ${answer.method} estimate.`));
    drawMemory(answer);
    if (trace) drawTimeline(trace, fit ? fit.usable_memory_bytes : null, `Through the step, traced (peak ${gib(trace.peak_bytes)} in ${trace.peak_phase}; ${trace.runtime} allocator)`);
    const advice = recommendation && recommendation.advice ? recommendation.advice : [];
    const target = recommendation ? recommendation.advice_gpu : null;
    $("advice-for").textContent = target ? `For the ${nameOf(target)}, best first: what makes the job fit, what keeps it, then the fewest GPU-hours.` : "";
    put("advice", advice.length ? advice.map((a) => el("li", { "data-change": a.change, "data-gpu": a.gpu },
      el("strong", {}, a.change), ` on ${a.count}× ${nameOf(a.gpu)}: ${gib(a.required_bytes_before)} → ${gib(a.required_bytes_after)} per GPU, ${a.fits_after ? "then fits" : "still does not fit"}` +
      (a.time_factor ? `, time ×${a.time_factor}` : "") + (a.count > 1 && a.gpu_hours_factor ? `, GPU-hours ×${a.gpu_hours_factor}` : "") + `. ${a.detail}.`))
      : el("li", {}, target ? `No advice: the job fits one ${nameOf(target)} as it is.` : recommendation ? "No advice: the ranking found no GPU to advise for." : "No advice: the ranking failed (see the problem above)."));
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
    $("mig-summary").textContent = `${answer.gpus_used} × ${nameOf(answer.gpu)} (table ${answer.table}); lower bound ${answer.lower_bound}, ${answer.optimal ? "optimal" : "not proven optimal"}. ` +
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
    const attempt = async (path, request, make) => {
      try { return await make(); } catch (e) { errors.push({ path, request, message: e.message, status: e.status, problem: e.problem }); return null; }
    };
    page.sent = {};
    const send = (key, url, body) => { page.sent[key] = body; return api("POST", url, body); };
    const [estimate, ranking, mig, profiles, trace] = await Promise.all([
      attempt("memory", "job", () => send("estimate", "/v1/memory/estimate", { ...jobRequest(state), gpu: state.gpu || null })),
      attempt("GPUs", "job", () => send("ranking", "/v1/recommendations", recommendRequest(state))),
      attempt("MIG", "mig", () => send("mig", "/v1/mig/plan", migRequest(state))),
      attempt("MIG profiles", "profiles", () => api("GET", "/v1/mig/profiles?gpu=" + encodeURIComponent(state.mig_gpu))),
      state.trace === "1" && state.config ? attempt("trace", "trace", () => send("trace", "/v1/memory/trace", traceRequest(state))) : null,
    ]);
    page.answers = { estimate, ranking, mig, profiles, trace };
    showProblems(errors);
    // A view whose call failed is emptied: no figure of an earlier plan stays beside the problem.
    const failed = (ids) => { for (const id of ids) put(id); };
    if (estimate) renderMemory(estimate, ranking, trace); else failed(["verdict", "memory-svg", "memory-caption", "timeline", "memory-table", "advice-for", "advice", "assumptions"]);
    if (ranking) renderGpus(ranking); else failed(["ranking-summary", "ranking-warnings", "scatter-svg", "scatter-caption", $("gpu-table").tHead, $("gpu-table").tBodies[0]]);
    if (mig && profiles) renderMig(mig, profiles); else failed(["mig-summary", "mig-svg", "mig-caption", "mig-notes", "mig-yaml"]);
    if (!ranking) $("global-batch-note").hidden = $("chart-x-box").hidden = true;
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
    page.names = new Map(gpus.gpus.map((g) => [g.id, g.name]));
    buildForm(openapi, models.models, gpus.gpus);
    fillForm(page.state);
    writeState(page.state, false);
    $("job-form").addEventListener("submit", submit);
    $("mig-form").addEventListener("submit", submit);
    $("mig-add").addEventListener("click", () => { const row = migRow(""); $("mig-rows").append(row); row.querySelector("input").focus(); });
    $("copy-yaml").addEventListener("click", copyYaml);
    $("chart_x").addEventListener("change", () => {
      page.state.chart_x = $("chart_x").value;
      writeState(page.state, false);
      if (page.answers.ranking) drawScatter(page.answers.ranking);
    });
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
