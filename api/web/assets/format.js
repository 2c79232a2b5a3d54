// Small helpers: building elements from text (never markup) and formatting numbers and times.

// el("td", {class: "num", title: "..."}, "text", childNode, ...): an element whose children
// are text nodes or elements; attributes are set as attributes, data through textContent only.
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

// A combined score or speedup: 3 decimals, "—" when absent.
export function score(value) {
  return isNumber(value) ? value.toFixed(3) : "—";
}

// A speedup: 2 decimals, "—" when absent or 0. A speedup of 0 means nothing was timed (a
// compile-only job, or no candidate passed): `kernevo jobs` shows "-" there and the job lines
// "speedup n/a" (docs/CONTRACTS.md), never "0.00×".
export function speedup(value) {
  return isNumber(value) && value > 0 ? `${value.toFixed(2)}×` : "—";
}

export const NOTHING_TIMED = "n/a: nothing timed (a compile-only job, or no candidate passed)";

// A score change with its sign; "" when absent.
export function delta(value) {
  if (!isNumber(value)) return "";
  const sign = value > 0 ? "+" : value < 0 ? "−" : "±";
  return `${sign}${Math.abs(value).toFixed(3)}`;
}

export function deltaClass(value) {
  if (!isNumber(value) || value === 0) return "delta";
  return value > 0 ? "delta up" : "delta down";
}

// An ISO 8601 time as "2026-12-02 10:31:05 UTC".
export function time(iso) {
  if (typeof iso !== "string") return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  return `${date.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

export function age(seconds) {
  if (!isNumber(seconds)) return "never";
  if (seconds < 90) return `${Math.round(seconds)} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

export function shape(pair) {
  return Array.isArray(pair) ? `${pair[0]}×${pair[1]}` : "?";
}

export function shapes(list) {
  return Array.isArray(list) && list.length ? list.map(shape).join(", ") : "none";
}
