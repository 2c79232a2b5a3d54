// The champion table per GPU / op / dtype / shape bucket with speedups, and the selected
// champion's verification facts (what its certificate says) and promotion history.

import { clear, el, isNumber, score, shape, shapes, speedup, time } from "./format.js";

export const FILTERS = { gpu: "filter-gpu", op: "filter-op", dtype: "filter-dtype", shape_bucket: "filter-bucket" };

export function championKey(c) {
  return `${c.gpu}/${c.path}/${c.dtype}/${c.shape_bucket}`;
}

// Fill each filter's options from every champion, keeping the current choice.
export function renderFilterOptions(champions) {
  for (const [field, id] of Object.entries(FILTERS)) {
    const select = document.getElementById(id);
    const current = select.value;
    const values = [...new Set(champions.map((c) => c[field]).filter((v) => v))].sort();
    clear(select);
    select.append(el("option", { value: "" }, "any"));
    for (const value of values) select.append(el("option", { value, selected: value === current }, value));
  }
}

export function filterValues() {
  const out = {};
  for (const [field, id] of Object.entries(FILTERS)) out[field] = document.getElementById(id).value;
  return out;
}

function speedups(champion) {
  if (!champion.speedups.length) return "—";
  return champion.speedups.map((s) => `${shape([s.m, s.n])} ${speedup(s.speedup)}`).join(" · ");
}

// One row per champion; a click calls onSelect(key).
export function renderChampions(tbody, champions, selectedKey, onSelect) {
  clear(tbody);
  for (const c of champions) {
    const key = championKey(c);
    const row = el(
      "tr",
      { class: key === selectedKey ? "selected clickable" : "clickable", "data-key": key, tabindex: 0 },
      el("td", {}, c.gpu),
      el("td", {}, c.op || "?"),
      el("td", {}, c.path),
      el("td", {}, c.dtype),
      el("td", {}, c.shape_bucket),
      el("td", { class: "num strong" }, speedup(c.score)),
      el("td", {}, speedups(c)),
      el("td", { class: "num" }, `#${c.program_id} (job #${c.job_id})`),
      el("td", {}, time(c.promoted_at)),
      el("td", { class: "num" }, String(c.promotions.length)),
      el("td", {}, c.signed ? `signed, key ${(c.signing_key_id || "").slice(0, 12)}…` : el("span", { class: "warn" }, "unsigned")),
    );
    row.addEventListener("click", () => onSelect(key));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") onSelect(key);
    });
    tbody.append(row);
  }
  if (!champions.length) {
    tbody.append(el("tr", {}, el("td", { colspan: 11, class: "muted" }, "no champion matches")));
  }
}

function chips(values, cls) {
  const span = el("span", { class: "chips" });
  if (!values.length) span.append(el("span", { class: "muted" }, "none"));
  for (const value of values) span.append(el("span", { class: cls }, value));
  return span;
}

function version(value) {
  return value || "not recorded";
}

function factsList(c, f) {
  const list = el("dl", { class: "facts" });
  const fact = (name, ...value) => list.append(el("dt", {}, name), el("dd", {}, ...value));
  fact("certificate", f.format || "unknown format");
  fact("checks passed", chips(f.checks_passed, "chip"));
  fact("verified shapes", `${f.verified_shapes.length}: ${shapes(f.verified_shapes)}`);
  fact("held-out shapes", `${f.held_out_shapes.length}: ${shapes(f.held_out_shapes)}`);
  fact("determinism", shapes(f.determinism_shapes));
  fact(
    "compute-sanitizer",
    chips(f.sanitizer_tools, "chip ok"),
    f.sanitizer_version ? ` version ${f.sanitizer_version}` : " version not recorded",
  );
  fact("GPU", `${f.gpu_name || "?"} (${f.arch || "?"})`);
  fact(
    "versions",
    `NVIDIA driver ${version(f.nvidia_driver_version)}, CUDA driver API ${version(f.cuda_driver_api_version)}, ` +
      `runtime ${version(f.cuda_runtime_version)}, NVRTC ${version(f.nvrtc_version)}`,
  );
  fact("noise floor", isNumber(f.noise_floor) ? `${(f.noise_floor * 100).toFixed(1)} %` : "not measured");
  fact("input scales", f.input_scales.length ? f.input_scales.map((s) => s.toExponential(1)).join(", ") : "none checked");
  fact("random inputs", `${f.input_seeds} seeds, ${f.held_out_seeds} held-out seeds`);
  fact(
    "signature",
    c.signed
      ? `stored, key ${c.signing_key_id}; the loader checks it (the service does not)`
      : el("span", { class: "warn" }, "none: loaders refuse this champion"),
  );
  fact("cubin", `sha256 ${c.cubin_sha256} (${c.arch}, NVRTC ${version(c.nvrtc_version)})`);
  return list;
}

function timingsTable(f) {
  const table = el(
    "table",
    { class: "timings" },
    el("thead", {}, el("tr", {}, el("th", {}, "shape"), el("th", {}, "speedup"), el("th", {}, "interval"), el("th", {}, "beats the noise floor"))),
  );
  const body = el("tbody");
  for (const t of f.timings) {
    const interval = isNumber(t.speedup_low) && isNumber(t.speedup_high) ? `${score(t.speedup_low)} – ${score(t.speedup_high)}` : "—";
    const verdict = t.faster_than_baseline === null ? "not timed twice" : t.faster_than_baseline ? "yes" : "no";
    body.append(el("tr", {}, el("td", {}, shape([t.m, t.n])), el("td", { class: "num" }, speedup(t.speedup)), el("td", { class: "num" }, interval), el("td", {}, verdict)));
  }
  table.append(body);
  return table;
}

function historyTable(c) {
  const table = el(
    "table",
    { class: "history" },
    el("thead", {}, el("tr", {}, el("th", {}, "promoted"), el("th", {}, "program"), el("th", {}, "job"), el("th", {}, "score"), el("th", {}, "cubin"), el("th", {}, "signing key"))),
  );
  const body = el("tbody");
  for (const p of c.promotions) {
    body.append(
      el(
        "tr",
        { class: p.program_id === c.program_id ? "current" : "" },
        el("td", {}, time(p.promoted_at)),
        el("td", { class: "num" }, `#${p.program_id}`),
        el("td", { class: "num" }, p.job_id === null ? "—" : `#${p.job_id}`),
        el("td", { class: "num" }, speedup(p.score)),
        el("td", { class: "mono" }, `${p.cubin_sha256.slice(0, 12)}…`),
        el("td", { class: "mono" }, p.signing_key_id ? `${p.signing_key_id.slice(0, 12)}…` : "unsigned"),
      ),
    );
  }
  table.append(body);
  return table;
}

// The selected champion's facts and history (nothing when none is selected).
export function renderFacts(container, champion) {
  clear(container);
  if (!champion) return;
  container.append(
    el("h3", {}, `${championKey(champion)}: program #${champion.program_id}, ${speedup(champion.score)} cuBLAS`),
  );
  const f = champion.facts;
  if (!f) {
    container.append(el("p", { class: "warn" }, "no certificate: promoted before certificates; loaders refuse it"));
  } else {
    container.append(el("h4", {}, "Verification facts"), factsList(champion, f));
    if (f.timings.length) container.append(el("h4", {}, "Certified timings"), timingsTable(f));
    const unverified = el("ul", { class: "not-verified" });
    for (const line of f.not_verified) unverified.append(el("li", {}, line));
    container.append(el("h4", {}, "Not verified"), unverified);
  }
  container.append(el("h4", {}, `Promotion history (${champion.promotions.length})`), historyTable(champion));
}
