// The jobs table: state, progress against the configured iterations, best scores, heartbeat.

import { age, clear, el, isNumber, score, speedup } from "./format.js";

function progress(job) {
  const total = job.config && Number.isInteger(job.config.iterations) ? job.config.iterations : null;
  const label = total ? `${job.iteration} / ${total}` : `${job.iteration}`;
  const cell = el("td", { class: "progress" });
  if (total) {
    cell.append(el("progress", { max: total, value: Math.min(job.iteration, total) }));
  }
  cell.append(el("span", {}, label));
  return cell;
}

function heartbeat(job) {
  if (job.stale) return el("td", { class: "stale" }, `stale (${age(job.heartbeat_age_s)})`);
  return el("td", { class: "muted" }, job.state === "running" ? age(job.heartbeat_age_s) : "");
}

// Fill tbody with one row per job; a click on a row calls onSelect(job id).
export function renderJobs(tbody, jobs, selectedId, onSelect) {
  clear(tbody);
  for (const job of jobs) {
    const row = el(
      "tr",
      {
        "data-job-id": job.id,
        class: job.id === selectedId ? "selected clickable" : "clickable",
        tabindex: 0,
      },
      el("td", { class: "num" }, `#${job.id}`),
      el("td", {}, job.path),
      el("td", {}, job.dtype),
      el("td", {}, job.gpu),
      el("td", {}, el("span", { class: `badge state-${job.state}` }, job.state)),
      progress(job),
      el("td", { class: "num" }, score(job.best_score)),
      el("td", { class: "num" }, speedup(job.best_speedup)),
      el("td", { class: "num" }, isNumber(job.programs) ? job.programs : "—"),
      heartbeat(job),
    );
    row.addEventListener("click", () => onSelect(job.id));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter") onSelect(job.id);
    });
    tbody.append(row);
  }
  if (!jobs.length) {
    tbody.append(el("tr", {}, el("td", { colspan: 10, class: "muted" }, "no jobs yet")));
  }
}
