// The best score over iterations as an inline SVG: every program with a score as a dot (by
// state), the best score so far as a step line, and cuBLAS parity (score 1) dashed. The legend
// counts the dots by the class that colours them (the program's state), so "failed (2)" is
// the two red dots plotted (a failed program, whatever its error kind, is plotted at score 0).

import { clear, el, isNumber, score } from "./format.js";

const NS = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const HEIGHT = 260;
const MARGIN = { left: 56, right: 16, top: 14, bottom: 42 };

function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function maximum(values, floor) {
  let best = floor;
  for (const value of values) if (value > best) best = value;
  return best;
}

// About `count` round tick values from 0 to `top` (steps of 1, 2 or 5 times a power of ten).
function ticks(top, count) {
  const raw = top / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((f) => f * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let value = 0; value <= top + step * 1e-9; value += step) out.push(value);
  return out;
}

// The legend's states, in order, and what each means; a state outside these (none today) is
// added after them, so every dot is counted under its own colour.
const LEGEND = {
  verified: "passed the champion checks",
  scored: "passed the checks and was timed (score 0: compile-only)",
  failed: "a check failed (its error kind in the lineage): score 0",
};

// [state, number of dots] for the legend, counted from the plotted nodes by node.state, the
// key of each dot's class `state-${node.state}`.
function legendCounts(plotted) {
  const counts = new Map(Object.keys(LEGEND).map((state) => [state, 0]));
  for (const node of plotted) counts.set(node.state, (counts.get(node.state) || 0) + 1);
  return [...counts];
}

function label(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(Math.abs(value) < 1 ? 2 : 1);
}

// Draw the lineage's scores into container; a click on a dot calls onSelect(program id).
export function renderPlot(container, lineage, selectedId, onSelect) {
  clear(container);
  const scored = lineage.nodes.filter((node) => isNumber(node.score));
  if (!scored.length) {
    container.append(el("p", { class: "muted" }, "no scored program yet"));
    return;
  }
  const lastIteration = maximum(scored.map((node) => node.iteration), 1);
  const top = maximum(scored.map((node) => node.score), 1) * 1.08;
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const x = (iteration) => MARGIN.left + (iteration / lastIteration) * plotWidth;
  const y = (value) => MARGIN.top + plotHeight - (value / top) * plotHeight;

  const chart = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    role: "img",
    "aria-label": "best combined score over iterations",
    class: "plot",
  });
  const axes = svg("g", { class: "axes" });
  for (const value of ticks(top, 5)) {
    axes.append(
      svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(value), y2: y(value), class: "grid" }),
      svg("text", { x: MARGIN.left - 6, y: y(value) + 4, class: "tick", "text-anchor": "end" }, label(value)),
    );
  }
  for (const value of ticks(lastIteration, 8)) {
    if (!Number.isInteger(value)) continue;
    axes.append(
      svg("line", { x1: x(value), x2: x(value), y1: MARGIN.top + plotHeight, y2: MARGIN.top + plotHeight + 4, class: "axis" }),
      svg("text", { x: x(value), y: MARGIN.top + plotHeight + 16, class: "tick", "text-anchor": "middle" }, label(value)),
    );
  }
  axes.append(
    svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: MARGIN.top + plotHeight, y2: MARGIN.top + plotHeight, class: "axis" }),
    svg("line", { x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: MARGIN.top + plotHeight, class: "axis" }),
    svg("text", { x: MARGIN.left + plotWidth / 2, y: HEIGHT - 6, class: "axis-label", "text-anchor": "middle" }, "iteration"),
    svg("text", { x: 14, y: MARGIN.top + plotHeight / 2, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 14 ${MARGIN.top + plotHeight / 2})` }, "combined score (× cuBLAS)"),
  );
  chart.append(axes);

  // cuBLAS parity: a champion must score above 1.
  chart.append(
    svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y(1), y2: y(1), class: "parity" }),
    svg("text", { x: WIDTH - MARGIN.right - 4, y: y(1) - 4, class: "tick", "text-anchor": "end" }, "cuBLAS = 1"),
  );

  const points = svg("g", { class: "points" });
  for (const node of scored) {
    const dot = svg(
      "circle",
      {
        cx: x(node.iteration),
        cy: y(node.score),
        r: node.id === selectedId ? 5.5 : 3.5,
        class: `point state-${node.state}${node.id === selectedId ? " selected" : ""}`,
        "data-program-id": node.id,
      },
      svg("title", {}, `program #${node.id}, iteration ${node.iteration}, island ${node.island}: ${score(node.score)} (${node.state})`),
    );
    dot.addEventListener("click", () => onSelect(node.id));
    points.append(dot);
  }

  const best = lineage.best_by_iteration;
  if (best.length) {
    let path = `M ${x(best[0].iteration)} ${y(best[0].best_score)}`;
    for (const point of best.slice(1)) path += ` H ${x(point.iteration)} V ${y(point.best_score)}`;
    path += ` H ${x(lastIteration)}`;
    chart.append(svg("path", { d: path, class: "best-line" }));
  }
  chart.append(points);

  const legend = svg("g", { class: "legend", transform: `translate(${MARGIN.left + 8} ${MARGIN.top + 4})` });
  legend.append(
    svg("line", { x1: 0, x2: 14, y1: 6, y2: 6, class: "best-line" }),
    svg("text", { x: 18, y: 10, class: "tick" }, "best so far"),
  );
  legendCounts(scored).forEach(([state, count], index) => {
    const offset = (index + 1) * 100;
    legend.append(
      svg(
        "g",
        { class: "legend-entry", "data-state": state, "data-count": count },
        svg("title", {}, LEGEND[state] || state),
        svg("circle", { cx: offset + 7, cy: 6, r: 3.5, class: `point state-${state}` }),
        svg("text", { x: offset + 18, y: 10, class: "tick" }, `${state} (${count})`),
      ),
    );
  });
  chart.append(legend);
  container.append(chart);
  const last = best.length ? best[best.length - 1] : null;
  container.append(
    el("p", { class: "muted caption", id: "plot-caption" },
      last
        ? `best ${score(last.best_score)} (program #${last.program_id}) after iteration ${last.iteration}; ${scored.length} programs plotted`
        : ""),
  );
}
