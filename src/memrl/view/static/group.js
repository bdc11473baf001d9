// ---------- a GRPO group: the episodes of one prompt side by side, with rewards and advantages ----------
function groupKey(e) {
  // a run samples a group per prompt per step; an eval's trials/repeats of one question (at one size) share it
  return (e.step === null || e.step === undefined ? "" : e.step) + "|" + (DATA.kind === "run" ? e.group_id : e.sample_id);
}
const GROUPS = new Map();
for (const e of DATA.episodes) {
  const k = groupKey(e);
  if (!GROUPS.has(k)) GROUPS.set(k, []);
  GROUPS.get(k).push(e.id);
}
function groupOf(e) {
  return GROUPS.get(groupKey(e)) || [];
}
function groupLink(e, n) {
  const a = el("a", "pill group-link", `group: ${n} episodes side by side`);
  a.href = "#group=" + encodeURIComponent(groupKey(e));
  return a;
}

function responseText(e) {
  // what the policy wrote: each conversation's generated spans, else the agent's messages
  const parts = [];
  for (const c of e.conversations || []) {
    const gen = (c.spans || []).filter((s) => s.kind === "gen").map((s) => (s.tokens ? s.tokens.join("") : s.text)).join("");
    if (gen) parts.push((e.conversations.length > 1 ? `— conversation ${c.index + 1} —\n` : "") + gen);
  }
  if (!parts.length) {
    for (const m of e.messages || []) {
      if (m.role !== "assistant") continue;
      parts.push([m.content || "", ...(m.tool_calls || []).map((c) => `${c.name}(${JSON.stringify(c.arguments || {})})`)].filter(Boolean).join("\n"));
    }
  }
  if (!parts.length && e.transcript) parts.push(e.transcript);
  return parts.join("\n\n");
}

function stats(values) {
  const xs = values.filter((v) => typeof v === "number");
  if (!xs.length) return { mean: null, std: null };
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return { mean, std: Math.sqrt(xs.reduce((a, b) => a + (b - mean) ** 2, 0) / xs.length) };
}

function groupView(key, episodes) {
  // `episodes`: the members, whole where loaded (a served page fetches them first)
  const first = episodes[0];
  const { mean, std } = stats(episodes.map((e) => e.reward));
  const sampled = DATA.kind === "run" && DATA.group_size ? DATA.group_size : null;
  const head = el("div", "ep-head",
    el("h2", null, "Group " + (DATA.kind === "run" ? first.group_id : first.sample_id)),
    el("div", "badges",
      first.step !== null && first.step !== undefined ? el("span", "pill", (DATA.kind === "run" ? "step " : "docs ") + first.step) : null,
      el("span", "pill", "sample " + first.sample_id),
      el("span", "pill", episodes.length + " episodes" + (sampled ? ` shown of ${sampled} sampled` : "")),
      el("span", "pill", "mean reward " + fmt(mean)), el("span", "pill", "std " + fmt(std))));
  const out = el("section", "card episode group", head);
  out.dataset.group = key;
  if (sampled && episodes.length < sampled) {
    out.appendChild(el("div", "muted small", `The run saved ${episodes.length} of this group's ${sampled} episodes ` +
      "(trainer.rollouts_per_step picks the best, the worst and random ones of each step)."));
  }
  if (DATA.kind !== "run") {
    out.appendChild(el("div", "muted small", "An eval trains nothing: “vs mean” is each reward minus the group's mean, " +
      "the advantage GRPO would give it (before dividing by the std)."));
  }
  const cols = el("div", "group-cols");
  cols.style.gridTemplateColumns = `repeat(${episodes.length}, minmax(240px, 1fr))`;
  for (const e of episodes) {
    const vsMean = typeof e.reward === "number" && mean !== null ? e.reward - mean : null;
    const link = el("a", "ep-id", e.id);
    link.href = "#episode=" + encodeURIComponent(e.id);
    const col = el("div", "group-col",
      el("div", "col-head", link,
        el("span", "pill reward " + (e.reward > 0 ? "pos" : "zero"), "reward " + fmt(e.reward)),
        DATA.kind === "run" ? (Array.isArray(e.advantages) ? advantagePill(e) : el("span", "pill adv", "advantage " + fmt(e.advantage)))
          : el("span", "pill adv", "vs mean " + fmt(vsMean)),
        PICK_SHOWN(e) ? el("span", "pill pick-" + e.pick, e.pick) : null,
        el("span", "muted", fmt(e.length) + " tok")),
      Array.isArray(e.advantages) ? el("div", "col-turns muted small", "per turn: " + e.advantages.map((v) => fmt(v)).join(" · ")) : null,
      e.summary && (e.summary.answer || e.summary.final_text)
        ? el("div", "col-answer", el("span", "muted", "answer "), String(e.summary.answer || e.summary.final_text)) : null,
      e.lazy ? el("div", "muted", "loading…") : el("pre", "col-text", responseText(e)));
    col.dataset.id = e.id;
    cols.appendChild(col);
  }
  out.appendChild(cols);
  return out;
}
