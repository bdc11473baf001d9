// memrl view: shared helpers. Record text is model output and user data: it reaches the page only
// through text nodes (never as HTML), and characters that are invisible or change the direction of
// text (bidi overrides, zero-width, tags) are shown as visible escapes, so no text can pose as other text.
const DATA = JSON.parse(document.getElementById("memrl-data").textContent);
const PANELS = DATA.panels || [];  // [title, [metric keys]] from memrl.view.loader.CURVE_PANELS
const MORE_PANELS = DATA.more_panels || [];  // the other numeric keys, from memrl.view.loader.more_panels
const state = { heat: "logprob", current: null };
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
const HIDDEN_SRC = "[\\p{Cf}\\p{Cs}\\p{Zl}\\p{Zp}\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f" +
  "\\u115f\\u1160\\u3164\\uffa0]";
const HIDDEN = new RegExp(HIDDEN_SRC, "u");
const HIDDEN_ALL = new RegExp(HIDDEN_SRC, "gu");
const HIDDEN_NAMES = {
  0x202a: "LRE", 0x202b: "RLE", 0x202c: "PDF", 0x202d: "LRO", 0x202e: "RLO", 0x2066: "LRI", 0x2067: "RLI",
  0x2068: "FSI", 0x2069: "PDI", 0x200e: "LRM", 0x200f: "RLM", 0x061c: "ALM", 0x200b: "ZWSP", 0x200c: "ZWNJ",
  0x200d: "ZWJ", 0x2060: "WJ", 0xfeff: "BOM", 0x00ad: "SHY",
};

function codeLabel(ch) {
  const cp = ch.codePointAt(0);
  const name = HIDDEN_NAMES[cp];
  return "[U+" + cp.toString(16).toUpperCase().padStart(4, "0") + (name ? " " + name : "") + "]";
}
function visible(s) {  // for attributes and SVG text: the escapes as plain characters
  return String(s).replace(HIDDEN_ALL, codeLabel);
}
function textNode(s) {  // a text node, or a fragment with each hidden character as a marked escape
  s = String(s);
  if (!HIDDEN.test(s)) return document.createTextNode(s);
  const frag = document.createDocumentFragment();
  let last = 0;
  for (const m of s.matchAll(HIDDEN_ALL)) {
    if (m.index > last) frag.appendChild(document.createTextNode(s.slice(last, m.index)));
    const esc = document.createElement("span");
    esc.className = "esc";
    esc.textContent = codeLabel(m[0]);
    esc.title = "an invisible or direction-changing character, shown escaped";
    frag.appendChild(esc);
    last = m.index + m[0].length;
  }
  if (last < s.length) frag.appendChild(document.createTextNode(s.slice(last)));
  return frag;
}
function el(tag, cls, ...kids) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  for (const kid of kids) {
    if (kid === null || kid === undefined || kid === false) continue;
    node.appendChild(typeof kid === "object" ? kid : textNode(kid));
  }
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}
function fmt(v, digits) {
  // numbers as people read them: "8,888.7", "0.125", "-0.0123"; null/NaN (JSON has no NaN) as "–"
  if (v === null || v === undefined) return "–";
  if (typeof v !== "number") return String(v);
  if (!Number.isFinite(v)) return "–";
  if (Number.isInteger(v)) return Math.abs(v) >= 1e9 ? v.toExponential(2) : v.toLocaleString("en-US");
  const a = Math.abs(v);
  if (a < 1e-3 || a >= 1e9) return v.toExponential(2);
  const d = digits !== undefined ? digits : a >= 1000 ? 1 : a >= 10 ? 2 : 3;
  return v.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: 0 });
}
function niceTicks(lo, hi, count) {
  // about `count` round steps (1, 2, 2.5 or 5 times a power of ten) covering [lo, hi]; never finer
  // than a thousandth of the values, so no label needs more than four significant digits
  const big = Math.max(Math.abs(lo), Math.abs(hi));
  const raw = Math.max((hi - lo) / count, big * 1e-3);
  let exp = Math.floor(Math.log10(raw));
  const f = raw / 10 ** exp;
  let m = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
  if (m === 10) { m = 1; exp += 1; }
  const step = m * 10 ** exp;
  const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
  const values = [];
  for (let i = first; i <= last; i++) values.push(Number((i * step).toPrecision(12)));
  const decimals = Math.max(0, -exp + (m === 2.5 ? 1 : 0));  // what every multiple of the step needs
  const top = Math.max(...values.map(Math.abs));
  const digits = decimals + Math.floor(Math.log10(top)) + 1;  // significant digits of the largest label
  const label = (v) => {
    // "0.25", "5.945", "0.1236", "12.5K", "2.0e-6"; never "0.123457"
    if (v === 0) return "0";
    if (Math.abs(v) >= 1e4) return new Intl.NumberFormat("en-US", { notation: "compact", maximumSignificantDigits: 4 }).format(v);
    if (decimals <= 4 && digits <= 4) return v.toFixed(decimals);
    return v.toExponential(Math.max(1, Math.min(3, digits - 1)));
  };
  return { values, step, label };
}
function num(input) {
  const v = parseFloat(input.value);
  return Number.isFinite(v) ? v : null;
}
function regexFor(q) {
  return new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "giu");
}
function highlight(root, q) {
  // wrap each match of q (any case) in <mark>; a match may span tokens, each part is marked
  if (!q) return 0;
  let hits = 0;
  for (const block of root.querySelectorAll("pre, .gen, .kv td, .tool-call, .grader li, .col-text")) {
    if (block.parentElement && block.parentElement.closest("pre, .gen, .kv td, .tool-call, .grader li, .col-text")) continue;
    const nodes = [], walker = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) nodes.push(walker.currentNode);
    const full = nodes.map((n) => n.data).join("");
    const ranges = [...full.matchAll(regexFor(q))].map((m) => [m.index, m.index + m[0].length]);
    if (!ranges.length) continue;
    hits += ranges.length;
    let offset = 0;
    for (const node of nodes) {
      const start = offset, end = offset + node.data.length;
      offset = end;
      const cuts = ranges.filter(([a, b]) => a < end && b > start).map(([a, b]) => [Math.max(a, start) - start, Math.min(b, end) - start]);
      if (!cuts.length) continue;
      const frag = document.createDocumentFragment();
      let at = 0;
      for (const [a, b] of cuts) {
        if (a > at) frag.appendChild(document.createTextNode(node.data.slice(at, a)));
        frag.appendChild(el("mark", null, node.data.slice(a, b)));
        at = b;
      }
      if (at < node.data.length) frag.appendChild(document.createTextNode(node.data.slice(at)));
      node.replaceWith(frag);
    }
    for (let d = block.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
  }
  return hits;
}
