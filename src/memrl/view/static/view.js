// ---------- page: header, routing (#episode=ID, #group=KEY), keyboard ----------
const byId = new Map(DATA.episodes.map((e) => [e.id, e]));
const pending = new Map();
let detail, list;

function loadFull(id) {
  // a served page lists episodes only; the whole one is fetched once, when first needed
  const e = byId.get(id);
  if (!e || !e.lazy) return Promise.resolve(e);
  if (!pending.has(id)) {
    pending.set(id, fetch("episode?id=" + encodeURIComponent(id))
      .then((r) => (r.ok ? r.json() : r.text().then((t) => Promise.reject(new Error(t.trim())))))
      .then((full) => { byId.set(id, full); return full; })
      .finally(() => pending.delete(id)));
  }
  return pending.get(id);
}

function empty(text) {
  return el("section", "card episode empty", text);
}

function render(route) {
  // route: {kind: "episode" | "group", id}; draws it, fetching what a served page lacks
  const current = JSON.stringify(route);
  state.current = current;
  const ids = route.kind === "group" ? GROUPS.get(route.id) || [] : [route.id];
  const wanted = ids.map((id) => byId.get(id)).filter(Boolean);
  if (route.kind === "group" && wanted.length) {
    replaceDetail(groupView(route.id, wanted));
  } else if (!wanted.length) {
    replaceDetail(empty(DATA.episodes.length ? (route.id ? `no ${route.kind} ${route.id}` : "Pick an episode from the list.")
      : (DATA.kind === "run" ? "This run saved no rollouts (trainer.rollouts_every)." : "No episodes in this folder.")));
  } else if (wanted[0].lazy) {
    replaceDetail(empty("loading episode " + route.id + "…"));
  } else {
    replaceDetail(episodeView(wanted[0], () => render(route)));
  }
  markActive(route.kind === "episode" ? route.id : null);
  const q = list.query();
  if (q) highlight(detail, q);
  if (wanted.some((e) => e.lazy)) {
    Promise.all(ids.map(loadFull))
      .then(() => { if (state.current === current) render(route); })
      .catch((err) => { if (state.current === current) replaceDetail(empty("could not load " + route.id + ": " + err.message)); });
  }
}

function replaceDetail(node) {
  detail.replaceWith(node);
  detail = node;
}

function markActive(id) {
  for (const [ep, a] of list.rows) a.classList.toggle("active", ep.id === id);
}

function route() {
  const m = /(?:^#|&)(episode|group)=([^&]*)/.exec(location.hash);
  if (m) return { kind: m[1], id: decodeURIComponent(m[2]) };
  return { kind: "episode", id: DATA.episodes.length ? DATA.episodes[0].id : null };
}

function resultFacts(r) {
  // results.json split in two: numbers as cards (pass^k of a tool eval too), words as one line
  const cards = {}, words = [];
  const skip = new Set(["by_docs", "config", "sampling", "pass_hat_k", "per_task", "metric"]);
  for (const [k, v] of Object.entries(r)) {
    if (skip.has(k) || v === null || typeof v === "object") continue;
    if (typeof v === "number") cards[k.replace(/_/g, " ")] = v;
    else words.push(`${k.replace(/_/g, " ")} ${v}`);
  }
  for (const [k, v] of Object.entries(r.pass_hat_k || {})) cards["pass^" + k] = v;
  if (r.sampling) words.push(`temperature ${fmt(r.sampling.temperature)}`);
  const line = el("div", "muted facts-line", words.join(" · "));
  return { cards, lines: r.metric ? [line, el("div", "muted facts-line", "metric: " + r.metric)] : [line] };
}

function sizeTable(byDocs) {
  // one row per document count, as results.md has it
  const rows = Object.keys(byDocs).sort((a, b) => Number(a) - Number(b));
  if (!rows.length) return null;
  const cols = [["context_tokens", "context tokens"], ["finished", "finished"], ["failed", "failed"], ["sub_em", "sub-EM %"],
    ["em", "EM %"], ["f1", "F1 %"], ["pass_at_k", "pass@k %"], ["answered", "answered %"], ["conversations", "conversations"],
    ["seconds_per_episode", "s / episode"]].filter(([k]) => rows.some((n) => byDocs[n][k] !== undefined));
  const table = el("table", "sizes", el("tr", null, el("th", null, "docs"), ...cols.map(([, label]) => el("th", null, label))));
  for (const n of rows) {
    const row = el("tr", null, el("td", null, n), ...cols.map(([k]) => el("td", null, fmt(byDocs[n][k], k === "context_tokens" ? 0 : undefined))));
    row.dataset.docs = n;
    table.appendChild(row);
  }
  return el("div", "size-table", el("h3", null, "Per size"), table);
}

function header() {
  const bits = [el("h1", null, DATA.title), el("span", "pill kind", DATA.kind === "run" ? "training run" : "eval")];
  const sub = el("div", "muted source", DATA.source);
  if (DATA.kind === "run") {
    sub.appendChild(textNode(DATA.per_token ? ` · tokens decoded with ${DATA.tokenizer}` : " · tokenizer not loaded: responses shown as text"));
  }
  const head = el("header", null, el("div", "title", ...bits), sub);
  let shown = {};
  if (DATA.results) {
    const facts = resultFacts(DATA.results);
    shown = facts.cards;
    for (const line of facts.lines) head.appendChild(line);
  } else if (DATA.kind === "run") {
    const rows = DATA.metrics || [], last = rows.length ? rows[rows.length - 1] : {};
    shown["steps logged"] = new Set(rows.filter((r) => r.step > 0).map((r) => r.step)).size;  // a step-0 eval row is none
    shown["episodes shown"] = DATA.episodes.length;
    if (DATA.saved_steps !== undefined) shown["rollout steps shown"] = `${DATA.shown_steps} of ${DATA.saved_steps}`;
    for (const k of ["reward", "eval/accuracy", "response_tokens", "num_conversations"]) {
      const hit = [...rows].reverse().find((r) => typeof r[k] === "number");
      if (hit) shown[`${k} (step ${hit.step})`] = hit[k];
    }
    if (last.step !== undefined) shown["last step"] = last.step;
  }
  if (Object.keys(shown).length) {
    const box = el("div", "stats");
    for (const [k, v] of Object.entries(shown)) box.appendChild(el("div", "stat", el("div", "v", fmt(v)), el("div", "k", k)));
    head.appendChild(box);
  }
  const extra = el("div", "results-extra");
  if (DATA.results && DATA.results.by_docs) {
    const t = sizeTable(DATA.results.by_docs);
    if (t) extra.appendChild(t);
  }
  if (DATA.plot && /^data:image\/png;base64,[A-Za-z0-9+/=]+$/.test(DATA.plot)) {
    const img = el("img", "plot");
    img.src = DATA.plot;
    img.alt = "accuracy against context length (accuracy.png)";
    extra.appendChild(el("figure", "plot-fig", img, el("figcaption", "muted", "accuracy.png")));
  }
  if (extra.childNodes.length) head.appendChild(extra);
  return head;
}

const app = document.getElementById("app");
app.appendChild(header());
let c = null;
try { c = curves(); } catch (err) { console.error("training curves:", err); }  // never takes the episode list down
if (c) app.appendChild(c);
detail = el("section", "card episode");
list = listPane(() => { if (detail.isConnected) render(route()); });
app.appendChild(el("main", "split", list.node, detail));
const heat = /(?:^#|&)heat=(logprob|mismatch|none)/.exec(location.hash);  // e.g. #episode=ID&heat=mismatch
if (heat) state.heat = heat[1];
const asked = /(?:^#|&)q=([^&]*)/.exec(location.hash);  // e.g. #episode=ID&q=boxed: the text search, filled in
if (asked) list.search(decodeURIComponent(asked[1]));
window.addEventListener("hashchange", () => render(route()));
document.addEventListener("keydown", (ev) => {  // j / k (or arrows) step through the listed episodes
  if (/^(INPUT|SELECT|TEXTAREA)$/.test(ev.target.tagName) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const step = { j: 1, ArrowDown: 1, k: -1, ArrowUp: -1 }[ev.key];
  const shown = list.rows.filter(([, a]) => !a.parentNode.hidden).map(([e]) => e.id);
  if (!step || !shown.length) return;
  ev.preventDefault();
  const r = route();
  const i = r.kind === "episode" ? shown.indexOf(r.id) : -1;
  location.hash = "episode=" + encodeURIComponent(shown[Math.max(0, Math.min(shown.length - 1, i + step))]);
});
render(route());
