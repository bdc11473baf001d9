// ---------- one episode: conversations per token, messages and tool calls, the grader's checks ----------
function heatColor(lp, tlp) {
  if (state.heat === "mismatch") {
    if (tlp === null || tlp === undefined) return "";
    const d = Math.min(Math.abs(lp - tlp), 1);
    return `rgba(234, 88, 12, ${(0.08 + 0.72 * d).toFixed(3)})`;
  }
  if (state.heat === "logprob") {
    const surprise = 1 - Math.exp(Math.min(lp, 0));
    return `rgba(37, 99, 235, ${(0.06 + 0.6 * surprise).toFixed(3)})`;
  }
  return "";
}

function genSpan(span) {
  const box = el("div", "gen");
  if (!span.tokens) {
    box.appendChild(el("span", "tok plain", span.text));
    return box;
  }
  span.tokens.forEach((t, i) => {
    const lp = span.lp ? span.lp[i] : null, tlp = span.tlp ? span.tlp[i] : null;
    const tok = el("span", "tok" + (/^<\|.*\|>$/.test(t) ? " special" : ""), t);
    let tip = "token " + visible(JSON.stringify(t));
    if (lp !== null) tip += ` · engine log-prob ${fmt(lp, 4)} (p ${fmt(Math.exp(lp), 3)})`;
    if (tlp !== null) tip += ` · trainer ${fmt(tlp, 4)} · |Δ| ${fmt(Math.abs(lp - tlp), 4)}`;
    tok.title = tip;
    if (lp !== null) tok.style.backgroundColor = heatColor(lp, tlp);
    box.appendChild(tok);
  });
  return box;
}

// an agent program's own messages (OpenAI format, recorded by the gateway) in the shape messages() shows
function sentMessages(msgs) {
  return msgs.map((m) => ({
    role: String(m.role || "?"),
    content: typeof m.content === "string" ? m.content : m.content == null ? "" : JSON.stringify(m.content),
    tool_calls: (m.tool_calls || []).map((t) => (t && t.function ? { name: t.function.name, arguments: t.function.arguments } : t)),
  }));
}

function given(v) {
  return v !== null && v !== undefined;
}

// the turn's anchor state (ep.generate(..., state=)): GiGPO compares the turns of a group that share it
function anchorPill(c) {
  if (!given(c.state)) return null;
  const shared = given(c.anchor_shared) ? c.anchor_shared : null;
  const pill = el("span", "pill anchor" + (shared > 1 ? " shared" : ""),
    "anchor " + c.state.slice(0, 8) + (shared > 1 ? " ×" + shared : shared === 1 ? " (alone)" : ""));
  pill.title = visible("anchor state " + c.state + (shared === null ? "" : ` · ${shared} saved turn${shared === 1 ? "" : "s"} ` +
    "of this group at this step share it (the trainer compares all of the group's turns that do)"));
  return pill;
}

function conversation(c, n) {
  const { messages: sent, tools, state: _anchor, ...rest } = c.meta || {};
  const meta = Object.entries(rest).filter(([, v]) => v === null || typeof v !== "object")
    .map(([k, v]) => `${k} ${v}`).join(" · ");
  const head = el("div", "conv-head",
    el("strong", null, `conversation ${c.index + 1}/${n}`), meta ? el("span", "muted", meta) : null,
    el("span", "muted", `${fmt(c.tokens)} tokens, ${fmt(c.generated)} generated`),
    c.mean_logprob !== undefined ? el("span", "muted", "mean log-prob " + fmt(c.mean_logprob)) : null,
    c.max_mismatch !== undefined ? el("span", "muted", "max |Δ| " + fmt(c.max_mismatch)) : null,
    anchorPill(c),
    given(c.advantage) ? el("span", "pill adv", "advantage " + fmt(c.advantage)) : null,
    given(c.reward) ? el("span", "pill turn-reward", "turn reward " + fmt(c.reward)) : null);
  head.id = "conv-" + c.index;
  const body = el("div", "conv-body");
  if (Array.isArray(sent) && sent.length) {
    const what = `messages as the program sent them (${fmt(sent.length)})` + (Array.isArray(tools) && tools.length ? ` · ${fmt(tools.length)} tools` : "");
    body.appendChild(el("details", "sent", el("summary", null, what), messages(sentMessages(sent))));
  }
  for (const s of c.spans) {
    if (s.kind === "prompt") {
      const lines = s.text.split("\n").length;
      body.appendChild(el("details", "prompt", el("summary", null, `prompt (${fmt(lines)} lines)`), el("pre", null, s.text)));
    } else if (s.kind === "ctx") {
      body.appendChild(el("pre", "ctx", s.text));
    } else {
      body.appendChild(genSpan(s));
    }
  }
  return el("div", "conv", head, body);
}

function toolCall(call) {
  return el("div", "tool-call", el("span", "fn", call.name || "?"), "(" + JSON.stringify(call.arguments || {}) + ")");
}

function messages(msgs) {
  const box = el("div", "messages");
  for (const m of msgs) {
    const who = m.role === "assistant" ? "agent" : m.role;
    const node = el("div", "msg role-" + m.role + (m.error ? " error" : ""), el("div", "who", who + (m.error ? " (error)" : "")));
    if (m.content) node.appendChild(el("pre", null, m.content));
    for (const call of m.tool_calls || []) node.appendChild(toolCall(call));
    box.appendChild(node);
  }
  return box;
}

function kv(obj, cls) {
  const t = el("table", "kv " + (cls || ""));
  for (const [k, v] of Object.entries(obj)) {
    t.appendChild(el("tr", null, el("th", null, k), el("td", null, v !== null && typeof v === "object" ? JSON.stringify(v) : fmt(v))));
  }
  return t;
}

function verdict(ok, yes, no) {
  // ✓ / ✗ / – (not checked: an early ending, or an NL assertion without a judge)
  return ok === true ? el("span", "check ok", "✓ " + yes) : ok === false ? el("span", "check bad", "✗ " + no)
    : el("span", "check unk", "– not checked");
}

function graderView(g) {
  const box = el("div", "grader", el("h3", null, "Gold actions and grader checks"));
  box.appendChild(el("div", "badges", el("span", "muted", "reward basis: "), ...g.basis.map((b) => el("span", "pill", b)),
    g.db_match !== null && g.db_match !== undefined ? verdict(g.db_match, "database matches the gold run", "database differs from the gold run") : null));
  const section = (title, items, row) => {
    if (!items.length) return;
    box.appendChild(el("div", "grader-part", el("h4", null, title), el("ul", null, ...items.map((it) => el("li", null, ...row(it))))));
  };
  section("Gold actions (each must appear among the calls)", g.actions, (a) => [verdict(a.matched, "called", "missing"),
    toolCall(a), a.requestor !== "assistant" ? el("span", "muted", " by the " + a.requestor) : null,
    a.compare_args ? el("span", "muted", " compared on: " + (a.compare_args.join(", ") || "name only")) : null]);
  section("Information to communicate", g.communicate, (c) => [verdict(c.found, "said", "not said"), el("q", null, c.text)]);
  section("Environment assertions", g.env_assertions, (a) => [verdict(a.ok, "holds", "fails"), el("code", null, a.call + " is " + a.expected)]);
  section("NL assertions (judged by a model)", g.nl_assertions, (a) => [verdict(a.ok, "met", "not met"), el("q", null, a.text)]);
  if (g.note) box.appendChild(el("div", "muted", g.note));
  box.appendChild(el("div", "muted small", "Re-checked by the viewer from the recorded messages and the task's evaluation criteria."));
  return box;
}

// an episode's advantage: one value, or the range of its turns' where a per-turn estimator gave them apart
function advantagePill(e) {
  if (Array.isArray(e.advantages)) {
    const xs = e.advantages.filter((v) => typeof v === "number");
    const pill = el("span", "pill adv", `advantage per turn ${fmt(Math.min(...xs))} … ${fmt(Math.max(...xs))}`);
    pill.title = "each conversation was trained with its own advantage: " + e.advantages.map((v) => fmt(v)).join(", ");
    return pill;
  }
  return given(e.advantage) ? el("span", "pill adv", "advantage " + fmt(e.advantage)) : null;
}

// one row per conversation where any has a turn reward, an advantage of its own or an anchor state
function turnTable(e) {
  const convs = e.conversations || [];
  const any = (f) => convs.some((c) => given(c[f]));
  if (!convs.length || !(any("state") || any("reward") || Array.isArray(e.advantages))) return null;
  const t = el("table", "kv turn-table");
  const heads = el("tr", null, ...["turn", "kind", "turn reward", "advantage", "anchor", "shared"].map((h) => el("th", null, h)));
  heads.lastChild.title = "saved conversations of this group at this step with the same anchor state";
  t.appendChild(heads);
  for (const c of convs) {
    const link = el("a", null, String(c.index + 1));
    link.href = "#conv-" + c.index;
    link.addEventListener("click", (ev) => { ev.preventDefault(); const n = document.getElementById("conv-" + c.index); if (n) n.scrollIntoView(); });
    const anchor = given(c.state) ? el("code", null, c.state.slice(0, 12)) : el("span", "muted", "–");
    if (given(c.state)) anchor.title = visible(c.state);
    t.appendChild(el("tr", "turn-row", el("td", null, link), el("td", null, (c.meta && c.meta.kind) || ""),
      el("td", null, given(c.reward) ? fmt(c.reward) : "–"), el("td", "turn-adv", given(c.advantage) ? fmt(c.advantage) : "–"),
      el("td", null, anchor), el("td", null, given(c.anchor_shared) ? fmt(c.anchor_shared) : "–")));
  }
  return t;
}

function episodeView(e, onHeat) {
  const n = e.conversations.length;
  const toggle = el("div", "heat-toggle", "heat map: ");
  for (const [mode, label] of [["logprob", "log-prob"], ["mismatch", "engine vs trainer"], ["none", "off"]]) {
    const b = el("button", state.heat === mode ? "on" : "", label);
    b.type = "button";
    b.dataset.mode = mode;
    b.addEventListener("click", () => { state.heat = mode; onHeat(); });
    toggle.appendChild(b);
  }
  const group = groupOf(e);
  const head = el("div", "ep-head",
    el("h2", null, "Episode " + e.id),
    el("div", "badges",
      el("span", "pill reward " + (e.reward > 0 ? "pos" : "zero"), "reward " + fmt(e.reward)),
      advantagePill(e),
      e.step !== null && e.step !== undefined ? el("span", "pill", (DATA.kind === "run" ? "step " : "docs ") + e.step) : null,
      PICK_SHOWN(e) ? el("span", "pill pick-" + e.pick, e.pick) : null,
      el("span", "pill", "sample " + e.sample_id),
      e.trial !== undefined && e.trial !== null ? el("span", "pill", "trial " + e.trial) : null,
      n ? el("span", "pill", n + " conversation" + (n === 1 ? "" : "s")) : null,
      el("span", "pill", fmt(e.length) + " generated tokens"),
      group.length > 1 ? groupLink(e, group.length) : null));
  const out = el("section", "card episode", head);
  out.dataset.id = e.id;
  const side = el("div", "facts");
  if (Object.keys(e.breakdown).length) side.appendChild(el("div", null, el("h3", null, "Reward breakdown"), kv(e.breakdown, "breakdown")));
  if (Object.keys(e.summary).length) side.appendChild(el("div", null, el("h3", null, "Summary"), kv(e.summary)));
  if (Object.keys(e.metrics).length) side.appendChild(el("details", "metrics", el("summary", null, "metrics"), kv(e.metrics)));
  const turns = turnTable(e);
  if (turns) side.appendChild(el("div", "turns", el("h3", null, "Turns: reward, advantage, anchor state"), turns));
  out.appendChild(side);
  if (e.grader) out.appendChild(graderView(e.grader));
  if (e.messages.length) out.appendChild(el("div", null, el("h3", null, "Messages and tool calls"), messages(e.messages)));
  if (n) {
    const perToken = DATA.per_token && e.conversations.some((c) => c.spans.some((s) => s.tokens));
    out.appendChild(el("div", "conv-bar", el("h3", null, "Conversations"), perToken ? toggle : null));
    if (perToken) {
      out.appendChild(el("div", "heat-note muted", state.heat === "logprob"
        ? "Shade: how unlikely the engine found each sampled token (1 − p). Hover a token for its numbers."
        : state.heat === "mismatch" ? "Shade: |engine − trainer| log-prob of each token (full at 1 nat or more). Hover for numbers."
          : "Hover a token for its engine and trainer log-probs."));
    }
    e.conversations.forEach((c) => out.appendChild(conversation(c, n)));
  }
  if (e.transcript) out.appendChild(el("div", null, el("h3", null, "Transcript"), el("pre", "transcript", e.transcript)));
  return out;
}
