// The jobs table: state, progress against the configured iterations, best scores, heartbeat;
// and a failed job's reason, in `kernevo jobs`'s words.

import { age, clear, el, isNumber, NOTHING_TIMED, score, speedup } from "./format.js";

// "job N failed: <reason>" for a failed job with a stored reason (job.failure_reason, the bare
// reason), null otherwise: the line `kernevo jobs` prints under its table, by the same rule.
export function failureLine(job) {
  if (!job || job.state !== "failed" || !job.failure_reason) return null;
  return `job ${job.id} failed: ${job.failure_reason}`;
}

// The best speedup; none while the job has a best score (nothing timed: the service sends null)
// reads "—" and says why on hover; a job without a best yet reads "—" alone.
function bestSpeedup(job) {
  const nothingTimed = isNumber(job.best_score) && !(isNumber(job.best_speedup) && job.best_speedup > 0);
  return el("td", { class: "num", title: nothingTimed ? NOTHING_TIMED : null }, speedup(job.best_speedup));
}

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

// Fill tbody with one row per job; a click on a row calls onSelect(job id). `unread`: the jobs
// could not be read (no token, the service down), so an empty list says nothing about the
// database and the table must not claim "no jobs yet".
export function renderJobs(tbody, jobs, selectedId, onSelect, unread = false) {
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
      el("td", {}, el("span", { class: `badge state-${job.state}`, title: failureLine(job) }, job.state)),
      progress(job),
      el("td", { class: "num" }, score(job.best_score)),
      bestSpeedup(job),
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
    const text = unread ? "jobs not read: see the line above" : "no jobs yet";
    tbody.append(el("tr", {}, el("td", { colspan: 10, class: "muted" }, text)));
  }
}
