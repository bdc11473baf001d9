// ---------- episode list: filters, text search, rows ----------
function sampleLabel(e) {
  // "sample S" unless the id already says it (an eval episode "S/0"); a run's "1-0" never does
  const s = e.sample_id === null || e.sample_id === undefined ? "" : String(e.sample_id);
  const id = String(e.id);
  return s === "" || id === s || id.startsWith(s + "/") ? null : "sample " + s;
}

const PICK_SHOWN = (() => {
  // best/worst mean something only where a step's saved episodes differ in reward
  const byStep = new Map();
  for (const e of DATA.episodes) {
    if (!e.pick) continue;
    const k = String(e.step);
    if (!byStep.has(k)) byStep.set(k, new Set());
    byStep.get(k).add(typeof e.reward === "number" ? e.reward : "none");
  }
  return (e) => Boolean(e.pick) && (e.pick === "random" || (byStep.get(String(e.step)) || new Set()).size > 1);
})();

const TEXTS = new Map();
function episodeText(e) {
  // what a person reads in an opened episode, for the page's own search (a served page asks the server)
  if (TEXTS.has(e.id)) return TEXTS.get(e.id);
  const parts = [String(e.sample_id), JSON.stringify(e.summary || {})];
  for (const c of e.conversations || []) {
    for (const s of c.spans || []) parts.push(s.tokens ? s.tokens.join("") : s.text || "");
  }
  for (const m of e.messages || []) parts.push(m.content || "", JSON.stringify(m.tool_calls || []));
  if (e.transcript) parts.push(e.transcript);
  TEXTS.set(e.id, parts.join("\n").toLowerCase());
  return TEXTS.get(e.id);
}

function filters(onChange) {
  const steps = [...new Set(DATA.episodes.map((e) => e.step).filter((s) => s !== null && s !== undefined))];
  const stepSel = el("select", null, el("option", null, "all"));
  stepSel.firstChild.value = "";
  for (const s of steps) {
    const o = el("option", null, String(s));
    o.value = String(s);
    stepSel.appendChild(o);
  }
  const box = (ph) => { const i = el("input"); i.type = "number"; i.step = "any"; i.placeholder = ph; return i; };
  const rmin = box("min"), rmax = box("max"), lmin = box("min"), lmax = box("max");
  const sample = el("input");
  sample.type = "search";
  sample.placeholder = "contains…";
  const text = el("input", "text-search");
  text.type = "search";
  text.placeholder = "prompts, answers, tool calls…";
  const status = el("span", "search-status muted");
  const lazy = DATA.episodes.some((e) => e.lazy);
  const found = { q: "", ids: null };  // a served page: ids the server matched for q
  let timer = null;
  text.addEventListener("input", () => {
    const q = text.value.trim();
    if (!lazy || !q) { found.q = q; found.ids = null; status.textContent = ""; onChange(); return; }
    clearTimeout(timer);
    status.textContent = "searching…";
    timer = setTimeout(() => {
      fetch("search?q=" + encodeURIComponent(q)).then((r) => (r.ok ? r.json() : Promise.reject(new Error(r.status))))
        .then((res) => { if (text.value.trim() === res.q) { found.q = res.q; found.ids = new Set(res.ids); status.textContent = ""; onChange(); } })
        .catch((err) => { status.textContent = "search failed (" + err.message + ")"; });
    }, 250);
  });
  const stepLabel = DATA.kind === "run" ? "step" : "docs";
  const form = el("div", "filters",
    steps.length ? el("label", null, stepLabel, stepSel) : null, el("label", null, "sample", sample),
    el("label", null, "reward", el("span", "range", rmin, "–", rmax)),
    el("label", null, "length", el("span", "range", lmin, "–", lmax)),
    el("label", "wide", el("span", null, "search in text ", status), text));
  for (const i of [stepSel, rmin, rmax, lmin, lmax, sample]) i.addEventListener("input", onChange);
  return {
    form,
    query: () => (lazy ? found.q : text.value.trim()),
    search(q) { text.value = q; text.dispatchEvent(new Event("input")); },
    keep(e) {
      if (stepSel.value !== "" && String(e.step) !== stepSel.value) return false;
      const q = sample.value.trim().toLowerCase();
      if (q && !String(e.sample_id).toLowerCase().includes(q)) return false;
      const t = text.value.trim();
      if (t && lazy && found.ids && found.q === t && !found.ids.has(e.id)) return false;
      if (t && !lazy && !episodeText(e).includes(t.toLowerCase())) return false;
      const r = e.reward, n = e.length;
      if (num(rmin) !== null && !(r >= num(rmin))) return false;
      if (num(rmax) !== null && !(r <= num(rmax))) return false;
      if (num(lmin) !== null && !(n >= num(lmin))) return false;
      if (num(lmax) !== null && !(n <= num(lmax))) return false;
      return true;
    },
  };
}

function listPane(onFilter) {
  const list = el("ol", "ep-list");
  const count = el("div", "count");
  const f = filters(update);
  const rows = DATA.episodes.map((e) => {
    const a = el("a", "ep-row",
      el("span", "ep-id", e.id),
      PICK_SHOWN(e) ? el("span", "pill pick-" + e.pick, e.pick) : null,
      el("span", "ep-sample", sampleLabel(e)),
      el("span", "ep-len", fmt(e.length) + " tok"),
      el("span", "reward " + (e.reward > 0 ? "pos" : "zero"), fmt(e.reward, 2)));
    a.href = "#episode=" + encodeURIComponent(e.id);
    a.dataset.id = e.id;
    list.appendChild(el("li", null, a));
    return [e, a];
  });
  function update() {
    let shown = 0;
    for (const [e, a] of rows) {
      const keep = f.keep(e);
      a.parentNode.hidden = !keep;
      shown += keep ? 1 : 0;
    }
    count.textContent = `${shown} of ${rows.length} episodes · j / k to step through`;
    if (onFilter) onFilter();
  }
  update();
  return { node: el("aside", "card list-pane", el("h2", null, "Episodes"), f.form, count, list), rows, query: f.query,
    search: f.search };
}
