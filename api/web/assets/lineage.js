// A job's lineage as an indented tree (parents above their children, depth-first), and one
// edge's diff with its score change.

import { clear, delta, deltaClass, el, isNumber, score } from "./format.js";

// Indentation stops growing past this depth (a deep lineage stays readable; each row names
// its generation).
const MAX_INDENT = 24;

function bestPath(lineage, byId) {
  const onPath = new Set();
  let node = byId.get(lineage.best_program_id);
  while (node && !onPath.has(node.id)) {
    onPath.add(node.id);
    node = node.parent_id === null ? undefined : byId.get(node.parent_id);
  }
  return onPath;
}

function row(node, depth, selectedId, onBest, bestId, onSelect) {
  const classes = ["node", "clickable"];
  if (node.id === selectedId) classes.push("selected");
  if (onBest.has(node.id)) classes.push("best-path");
  const item = el(
    "li",
    { class: classes.join(" "), "data-program-id": node.id, tabindex: 0 },
    depth > 0 ? el("span", { class: "edge" }, "└─ ") : null,
    el("span", { class: "id" }, `#${node.id}`),
    el("span", { class: `badge state-${node.state}` }, node.state),
    el("span", { class: "score" }, score(node.score)),
    node.parent_id !== null ? el("span", { class: deltaClass(node.score_delta) }, delta(node.score_delta)) : null,
    el("span", { class: "muted" }, `it ${node.iteration} · island ${node.island} · gen ${node.generation}`),
    node.error_kind ? el("span", { class: "error-kind" }, node.error_kind) : null,
    node.rerun ? el("span", { class: "tag" }, "re-run") : null,
    node.id === bestId ? el("span", { class: "tag best" }, "best") : null,
  );
  item.style.paddingLeft = `${Math.min(depth, MAX_INDENT) * 14 + 4}px`;
  item.addEventListener("click", () => onSelect(node.id));
  item.addEventListener("keydown", (event) => {
    if (event.key === "Enter") onSelect(node.id);
  });
  return item;
}

// Draw the tree into container; a click on a program calls onSelect(program id).
export function renderTree(container, lineage, selectedId, onSelect) {
  const scrolled = container.scrollTop; // a refresh keeps the reader's place
  clear(container);
  if (!lineage.nodes.length) {
    container.append(el("p", { class: "muted" }, "no programs recorded yet"));
    return;
  }
  const byId = new Map(lineage.nodes.map((node) => [node.id, node]));
  const onBest = bestPath(lineage, byId);
  const list = el("ul", { class: "tree-list" });
  // Depth-first without recursion: a lineage may be thousands of generations deep.
  const stack = [...lineage.roots].reverse().map((id) => [id, 0]);
  while (stack.length) {
    const [id, depth] = stack.pop();
    const node = byId.get(id);
    if (!node) continue;
    list.append(row(node, depth, selectedId, onBest, lineage.best_program_id, onSelect));
    for (let i = node.children.length - 1; i >= 0; i -= 1) stack.push([node.children[i], depth + 1]);
  }
  container.append(list);
  container.scrollTop = scrolled;
  if (lineage.truncated) {
    container.append(
      el("p", { class: "muted" }, `showing the first ${lineage.nodes.length} of ${lineage.programs} programs`),
    );
  }
}

function diffLines(text) {
  const pre = el("pre", { class: "diff" });
  for (const line of text.replace(/\n$/, "").split("\n")) {
    let cls = "ctx";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "meta";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.append(el("span", { class: cls }, `${line}\n`));
  }
  return pre;
}

// The edge from the program's parent to it (GET /v1/programs/{id}/diff).
export function renderDiff(container, title, edge) {
  clear(container);
  title.textContent = edge.parent_id === null
    ? `program #${edge.program_id} (a seed)`
    : `#${edge.parent_id} → #${edge.program_id}`;
  const facts = el("dl", { class: "edge-facts" });
  const fact = (name, ...value) => facts.append(el("dt", {}, name), el("dd", {}, ...value));
  fact("iteration", String(edge.iteration));
  fact(
    "score",
    edge.parent_id === null ? "" : `${score(edge.parent_score)} (${edge.parent_state}) → `,
    el("strong", {}, score(edge.score)),
    ` (${edge.state})`,
  );
  if (isNumber(edge.score_delta)) {
    fact("change", el("span", { class: deltaClass(edge.score_delta) }, delta(edge.score_delta)));
  }
  if (edge.parent_id !== null) fact("lines", `+${edge.lines_added} −${edge.lines_removed}`);
  container.append(facts);
  if (typeof edge.diff === "string") {
    container.append(edge.diff ? diffLines(edge.diff) : el("p", { class: "muted" }, "same source as its parent"));
  } else if (edge.diff_note) {
    container.append(el("p", { class: "muted" }, edge.diff_note));
  }
  if (edge.mutation_diff) {
    container.append(
      el("details", { class: "mutation" }, el("summary", {}, "the mutator's proposed edit"), el("pre", {}, edge.mutation_diff)),
    );
  }
}
