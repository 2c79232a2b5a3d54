// The page: wires the token form, the jobs table, the selected job's plot, lineage and edge
// diff, and the champion table with its facts. The selection lives in the URL's fragment
// (#job=3&program=17&champion=gpu/path/dtype/bucket), so a view can be linked or reloaded.

import { ApiError, getJson, setToken, token } from "./api.js";
import { championKey, FILTERS, filterValues, renderChampions, renderFacts, renderFilterOptions } from "./champions.js";
import { clear } from "./format.js";
import { failureLine, renderJobs } from "./jobs.js";
import { renderDiff, renderTree } from "./lineage.js";
import { renderPlot } from "./plot.js";

// Jobs are polled this often while one is waiting or running, and this rarely otherwise.
const ACTIVE_REFRESH_MS = 10000;
const IDLE_REFRESH_MS = 60000;

const state = {
  jobs: [],
  jobsUnread: false, // the last read of the jobs failed: their table says so, not "no jobs yet"
  jobId: null,
  lineage: null,
  programId: null,
  champions: [],
  championKey: null,
};

function byId(id) {
  return document.getElementById(id);
}

function explain(error) {
  return error instanceof ApiError ? error.explain() : String(error);
}

function setStatus(id, text, kind = "") {
  const node = byId(id);
  node.textContent = text;
  node.className = `status ${kind}`;
}

function positiveInt(text) {
  const value = Number.parseInt(text || "", 10);
  return Number.isInteger(value) && value > 0 ? value : null;
}

function readFragment() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  state.jobId = positiveInt(params.get("job"));
  state.programId = positiveInt(params.get("program"));
  state.championKey = params.get("champion") || null;
}

function writeFragment() {
  const params = new URLSearchParams();
  if (state.jobId !== null) params.set("job", String(state.jobId));
  if (state.programId !== null) params.set("program", String(state.programId));
  if (state.championKey) params.set("champion", state.championKey);
  window.history.replaceState(null, "", `#${params.toString()}`);
}

// --- token ---------------------------------------------------------------------------------

function showTokenState() {
  byId("token-state").textContent = token() ? "a token is set for this tab" : "no token";
}

function wireToken() {
  byId("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(byId("token-input").value);
    byId("token-input").value = "";
    showTokenState();
    refreshAll();
  });
  byId("token-forget").addEventListener("click", () => {
    setToken("");
    showTokenState();
    refreshAll();
  });
  showTokenState();
}

// --- jobs, plot, lineage, diff ---------------------------------------------------------------

function selectedJob() {
  return state.jobs.find((job) => job.id === state.jobId) || null;
}

// The selected job's title and, for a failed job, why it failed (redrawn with the jobs, so a
// job that fails while selected says so at the next poll).
function drawJobHeader() {
  byId("job-title").textContent = jobTitle();
  byId("job-failure").textContent = failureLine(selectedJob()) || "";
}

function drawJobs() {
  renderJobs(byId("jobs").querySelector("tbody"), state.jobs, state.jobId, selectJob, state.jobsUnread);
  drawJobHeader();
}

async function loadJobs() {
  try {
    state.jobs = await getJson("v1/jobs", { limit: 100 });
    state.jobsUnread = false;
    setStatus("jobs-status", "");
  } catch (error) {
    state.jobs = [];
    state.jobsUnread = true;
    setStatus("jobs-status", explain(error), "error");
  }
  if (state.jobId === null && state.jobs.length) {
    const withPrograms = state.jobs.find((job) => job.programs > 0);
    state.jobId = (withPrograms || state.jobs[0]).id;
  }
  drawJobs();
}

function jobTitle() {
  const job = selectedJob();
  if (!job) return state.jobId === null ? "Job" : `Job #${state.jobId}`;
  return `Job #${job.id}: ${job.path} ${job.dtype} on ${job.gpu} (${job.state})`;
}

async function loadLineage() {
  const jobId = state.jobId;
  if (jobId === null) return;
  let lineage;
  try {
    lineage = await getJson(`v1/jobs/${jobId}/lineage`);
  } catch (error) {
    if (jobId !== state.jobId) return;
    state.lineage = null;
    setStatus("job-status", explain(error), "error");
    clear(byId("plot"));
    clear(byId("lineage"));
    clear(byId("diff"));
    return;
  }
  if (jobId !== state.jobId) return; // another job was selected meanwhile
  state.lineage = lineage;
  setStatus("job-status", "");
  const known = lineage.nodes.some((node) => node.id === state.programId);
  if (!known) state.programId = lineage.best_program_id ?? (lineage.nodes[0] ? lineage.nodes[0].id : null);
  byId("lineage-count").textContent = `(${lineage.programs} programs)`;
  renderPlot(byId("plot"), lineage, state.programId, selectProgram);
  renderTree(byId("lineage"), lineage, state.programId, selectProgram);
  writeFragment();
  await loadDiff();
}

async function loadDiff() {
  const programId = state.programId;
  if (programId === null) {
    clear(byId("diff"));
    return;
  }
  try {
    const edge = await getJson(`v1/programs/${programId}/diff`);
    if (programId !== state.programId) return;
    renderDiff(byId("diff"), byId("diff-title"), edge);
  } catch (error) {
    if (programId !== state.programId) return;
    clear(byId("diff")).textContent = explain(error);
  }
}

function markSelected(programId) {
  for (const node of document.querySelectorAll("#lineage .selected, #plot .selected")) {
    node.classList.remove("selected");
    if (node.tagName === "circle") node.setAttribute("r", "3.5");
  }
  for (const node of document.querySelectorAll(`[data-program-id="${programId}"]`)) {
    node.classList.add("selected");
    if (node.tagName === "circle") node.setAttribute("r", "5.5");
  }
}

function selectProgram(programId) {
  state.programId = programId;
  writeFragment();
  markSelected(programId);
  loadDiff();
}

function selectJob(jobId) {
  if (jobId === state.jobId) return;
  state.jobId = jobId;
  state.programId = null;
  state.lineage = null;
  writeFragment();
  drawJobs();
  loadLineage();
}

// --- champions -----------------------------------------------------------------------------

function drawChampions() {
  renderChampions(byId("champions").querySelector("tbody"), state.champions, state.championKey, selectChampion);
  renderFacts(byId("facts"), state.champions.find((c) => championKey(c) === state.championKey) || null);
}

async function loadChampions() {
  try {
    const all = await getJson("v1/champions");
    renderFilterOptions(all);
    const filters = filterValues();
    const filtered = Object.values(filters).some((value) => value);
    state.champions = filtered ? await getJson("v1/champions", filters) : all;
    setStatus("champions-status", "");
  } catch (error) {
    state.champions = [];
    setStatus("champions-status", explain(error), "error");
  }
  if (!state.champions.some((c) => championKey(c) === state.championKey)) {
    state.championKey = state.champions.length ? championKey(state.champions[0]) : null;
  }
  drawChampions();
  writeFragment();
}

function selectChampion(key) {
  state.championKey = key;
  writeFragment();
  drawChampions();
}

// --- start ---------------------------------------------------------------------------------

async function loadVersion() {
  try {
    const v = await getJson("v1/version");
    byId("version").textContent = `${v.service} ${v.version}, API ${v.api}`;
  } catch {
    byId("version").textContent = "";
  }
}

// Counts the page's complete loads (data-loads on <body>), for a browser test to wait on.
async function refreshAll() {
  await Promise.all([loadJobs().then(loadLineage), loadChampions()]);
  document.body.dataset.loads = String(Number(document.body.dataset.loads || 0) + 1);
}

function scheduleRefresh() {
  const active = state.jobs.some((job) => job.state === "running" || job.state === "waiting");
  window.setTimeout(async () => {
    await loadJobs();
    const job = selectedJob();
    if (job && job.state === "running") await loadLineage();
    scheduleRefresh();
  }, active ? ACTIVE_REFRESH_MS : IDLE_REFRESH_MS);
}

function start() {
  readFragment();
  wireToken();
  byId("jobs-refresh").addEventListener("click", () => refreshAll());
  for (const id of Object.values(FILTERS)) byId(id).addEventListener("change", () => loadChampions());
  loadVersion();
  refreshAll().then(scheduleRefresh);
}

start();
