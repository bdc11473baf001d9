// memrl view: the episodes and curves of a run or eval folder, from the JSON embedded in the page.
// Episode text is model output: it only ever reaches the page through textContent, never as HTML.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("memrl-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
  const PANELS = DATA.panels || [];  // [title, [metric keys]] from memrl.view.loader.CURVE_PANELS
  const state = { heat: "logprob", current: null };

  function el(tag, cls, ...kids) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.appendChild(typeof kid === "object" ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }
  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    return node;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 3 : digits);
  }
  function tick(v, range) {
    // enough digits to tell the ticks apart, none more
    const digits = Math.max(0, Math.ceil(-Math.log10(range / 3)) + 1);
    const a = Math.abs(v);
    if (a >= 1e5 || (a !== 0 && a < 1e-3 && range < 1e-3)) return v.toExponential(2);
    return v.toFixed(Math.min(digits, 6));
  }
  function num(input) {
    const v = parseFloat(input.value);
    return Number.isFinite(v) ? v : null;
  }

  // ---------- curves ----------
  function chart(title, keys, rows) {
    const series = keys.map((k) => ({ key: k, pts: rows.filter((r) => typeof r[k] === "number").map((r) => [r.step, r[k]]) }))
      .filter((s) => s.pts.length > 0);
    if (!series.length) return null;
    const W = 320, H = 170, L = 54, R = 10, T = 10, B = 24;
    const all = series.flatMap((s) => s.pts);
    let x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]));
    let y0 = Math.min(...all.map((p) => p[1])), y1 = Math.max(...all.map((p) => p[1]));
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
    const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
    box.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-bg" }));
    for (let i = 0; i <= 3; i++) {
      const v = y0 + ((y1 - y0) * i) / 3, y = Y(v);
      box.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
      const t = svg("text", { x: L - 4, y: y + 3, class: "tick", "text-anchor": "end" });
      t.textContent = tick(v, y1 - y0);
      box.appendChild(t);
    }
    for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
      const t = svg("text", { x: X(x), y: H - 8, class: "tick", "text-anchor": anchor });
      t.textContent = "step " + fmt(Math.round(x));
      box.appendChild(t);
    }
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const d = s.pts.map((p, j) => (j ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1)).join(" ");
      const path = svg("path", { d: d, class: "series", stroke: color, "data-key": s.key });
      const tip = svg("title");
      tip.textContent = `${s.key}: last ${fmt(s.pts[s.pts.length - 1][1])} at step ${s.pts[s.pts.length - 1][0]}`;
      path.appendChild(tip);
      box.appendChild(path);
      if (s.pts.length <= 60) {
        for (const p of s.pts) {
          const c = svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.2, fill: color, class: "pt" });
          const ct = svg("title");
          ct.textContent = `${s.key} = ${fmt(p[1])} (step ${p[0]})`;
          c.appendChild(ct);
          box.appendChild(c);
        }
      }
    });
    const legend = el("div", "legend");
    series.forEach((s, i) => {
      const sw = el("span", "swatch");
      sw.style.background = COLORS[i % COLORS.length];
      legend.appendChild(el("span", "legend-item", sw, s.key.replace("time/", "")));
    });
    const last = series.length === 1 ? el("span", "last", fmt(series[0].pts[series[0].pts.length - 1][1])) : null;
    return el("figure", "panel", el("figcaption", null, title, last), box, series.length > 1 ? legend : null);
  }

  function curves() {
    const rows = DATA.metrics || [];
    if (!rows.length) return null;
    const grid = el("div", "curves");
    for (const [title, keys] of PANELS) {
      const c = chart(title, keys, rows);
      if (c) grid.appendChild(c);
    }
    return el("section", "card", el("h2", null, "Training curves"), grid);
  }

  // ---------- episode list ----------
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
    const stepLabel = DATA.kind === "run" ? "step" : "docs";
    const form = el("div", "filters",
      steps.length ? el("label", null, stepLabel, stepSel) : null, el("label", null, "sample", sample),
      el("label", null, "reward", el("span", "range", rmin, "–", rmax)),
      el("label", null, "length", el("span", "range", lmin, "–", lmax)));
    for (const i of [stepSel, rmin, rmax, lmin, lmax, sample]) i.addEventListener("input", onChange);
    return {
      form,
      keep(e) {
        if (stepSel.value !== "" && String(e.step) !== stepSel.value) return false;
        const q = sample.value.trim().toLowerCase();
        if (q && !String(e.sample_id).toLowerCase().includes(q)) return false;
        const r = e.reward, n = e.length;
        if (num(rmin) !== null && !(r >= num(rmin))) return false;
        if (num(rmax) !== null && !(r <= num(rmax))) return false;
        if (num(lmin) !== null && !(n >= num(lmin))) return false;
        if (num(lmax) !== null && !(n <= num(lmax))) return false;
        return true;
      },
    };
  }

  function listPane() {
    const list = el("ol", "ep-list");
    const count = el("div", "count");
    const f = filters(update);
    const rows = DATA.episodes.map((e) => {
      const a = el("a", "ep-row",
        el("span", "ep-id", e.id),
        e.pick ? el("span", "pill pick-" + e.pick, e.pick) : null,
        String(e.id).startsWith(e.sample_id) ? el("span", "ep-sample") : el("span", "ep-sample", "sample " + e.sample_id),
        el("span", "ep-len", e.length + " tok"),
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
    }
    update();
    return { node: el("aside", "card list-pane", el("h2", null, "Episodes"), f.form, count, list), rows };
  }

  // ---------- one episode ----------
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
      const tok = el("span", "tok" + (/^<\|.*\|>$/.test(t) ? " special" : ""), t === "" ? "\u200b" : t);
      let tip = "token " + JSON.stringify(t);
      if (lp !== null) tip += ` · engine log-prob ${fmt(lp, 4)} (p ${fmt(Math.exp(lp), 3)})`;
      if (tlp !== null) tip += ` · trainer ${fmt(tlp, 4)} · |Δ| ${fmt(Math.abs(lp - tlp), 4)}`;
      tok.title = tip;
      if (lp !== null) tok.style.backgroundColor = heatColor(lp, tlp);
      box.appendChild(tok);
    });
    return box;
  }

  function conversation(c, n) {
    const meta = Object.entries(c.meta || {}).map(([k, v]) => `${k} ${v}`).join(" · ");
    const head = el("div", "conv-head",
      el("strong", null, `conversation ${c.index + 1}/${n}`), meta ? el("span", "muted", meta) : null,
      el("span", "muted", `${c.tokens} tokens, ${c.generated} generated`),
      c.mean_logprob !== undefined ? el("span", "muted", "mean log-prob " + fmt(c.mean_logprob)) : null,
      c.max_mismatch !== undefined ? el("span", "muted", "max |Δ| " + fmt(c.max_mismatch)) : null,
      c.advantage !== null && c.advantage !== undefined ? el("span", "pill adv", "advantage " + fmt(c.advantage)) : null,
      c.reward !== null && c.reward !== undefined ? el("span", "pill", "reward " + fmt(c.reward)) : null);
    const body = el("div", "conv-body");
    for (const s of c.spans) {
      if (s.kind === "prompt") {
        const lines = s.text.split("\n").length;
        const d = el("details", "prompt", el("summary", null, `prompt (${lines} lines)`), el("pre", null, s.text));
        body.appendChild(d);
      } else if (s.kind === "ctx") {
        body.appendChild(el("pre", "ctx", s.text));
      } else {
        body.appendChild(genSpan(s));
      }
    }
    return el("div", "conv", head, body);
  }

  function messages(msgs) {
    const box = el("div", "messages");
    for (const m of msgs) {
      const who = m.role === "assistant" ? "agent" : m.role;
      const node = el("div", "msg role-" + m.role + (m.error ? " error" : ""), el("div", "who", who + (m.error ? " (error)" : "")));
      if (m.content) node.appendChild(el("pre", null, m.content));
      for (const call of m.tool_calls || []) {
        node.appendChild(el("div", "tool-call", el("span", "fn", call.name || "?"),
          "(" + JSON.stringify(call.arguments || {}) + ")"));
      }
      box.appendChild(node);
    }
    return box;
  }

  function kv(obj, cls) {
    const t = el("table", "kv " + (cls || ""));
    for (const [k, v] of Object.entries(obj)) {
      t.appendChild(el("tr", null, el("th", null, k), el("td", null, typeof v === "object" ? JSON.stringify(v) : fmt(v))));
    }
    return t;
  }

  function episodeView(e) {
    const n = e.conversations.length;
    const toggle = el("div", "heat-toggle", "heat map: ");
    for (const [mode, label] of [["logprob", "log-prob"], ["mismatch", "engine vs trainer"], ["none", "off"]]) {
      const b = el("button", state.heat === mode ? "on" : "", label);
      b.type = "button";
      b.dataset.mode = mode;
      b.addEventListener("click", () => { state.heat = mode; show(e.id); });
      toggle.appendChild(b);
    }
    const head = el("div", "ep-head",
      el("h2", null, "Episode " + e.id),
      el("div", "badges",
        el("span", "pill reward " + (e.reward > 0 ? "pos" : "zero"), "reward " + fmt(e.reward)),
        e.advantage !== null ? el("span", "pill adv", "advantage " + fmt(e.advantage)) : null,
        e.step !== null && e.step !== undefined ? el("span", "pill", (DATA.kind === "run" ? "step " : "docs ") + e.step) : null,
        e.pick ? el("span", "pill pick-" + e.pick, e.pick) : null,
        el("span", "pill", "sample " + e.sample_id),
        e.trial !== undefined && e.trial !== null ? el("span", "pill", "trial " + e.trial) : null,
        n ? el("span", "pill", n + " conversation" + (n === 1 ? "" : "s")) : null,
        el("span", "pill", e.length + " generated tokens")));
    const out = el("section", "card episode", head);
    out.dataset.id = e.id;
    const side = el("div", "facts");
    if (Object.keys(e.breakdown).length) side.appendChild(el("div", null, el("h3", null, "Reward breakdown"), kv(e.breakdown, "breakdown")));
    if (Object.keys(e.summary).length) side.appendChild(el("div", null, el("h3", null, "Summary"), kv(e.summary)));
    if (Object.keys(e.metrics).length) {
      side.appendChild(el("details", "metrics", el("summary", null, "metrics"), kv(e.metrics)));
    }
    out.appendChild(side);
    if (e.messages.length) out.appendChild(el("div", null, el("h3", null, "Messages and tool calls"), messages(e.messages)));
    if (n) {
      out.appendChild(el("div", "conv-bar", el("h3", null, "Conversations"),
        DATA.per_token && DATA.kind === "run" ? toggle : null));
      if (DATA.per_token && DATA.kind === "run") {
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

  // ---------- page ----------
  const byId = new Map(DATA.episodes.map((e) => [e.id, e]));
  let detail, list;

  function show(id) {
    const e = byId.get(id);
    if (e && e.lazy) {  // served page: fetch the whole episode once
      fetch("episode?id=" + encodeURIComponent(id))
        .then((r) => (r.ok ? r.json() : r.text().then((t) => Promise.reject(new Error(t)))))
        .then((full) => { byId.set(id, full); if (state.current === id) show(id); })
        .catch((err) => { if (state.current === id) replaceDetail(el("section", "card episode empty", "could not load episode " + id + ": " + err.message)); });
      state.current = id;
      replaceDetail(el("section", "card episode empty", "loading episode " + id + "…"));
      markActive(id);
      return;
    }
    const node = e ? episodeView(e) : el("section", "card episode empty",
      DATA.episodes.length ? (id ? `no episode ${id}` : "Pick an episode from the list.")
        : (DATA.kind === "run" ? "This run saved no rollouts (trainer.rollouts_every)." : "No episodes in this folder."));
    replaceDetail(node);
    markActive(id);
    state.current = id;
  }

  function replaceDetail(node) {
    detail.replaceWith(node);
    detail = node;
  }

  function markActive(id) {
    for (const [ep, a] of list.rows) a.classList.toggle("active", ep.id === id);
  }

  function fromHash() {
    const m = /(?:^#|&)episode=([^&]*)/.exec(location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }

  function header() {
    const bits = [el("h1", null, DATA.title), el("span", "pill kind", DATA.kind === "run" ? "training run" : "eval")];
    const sub = el("div", "muted source", DATA.source);
    if (DATA.kind === "run") {
      sub.appendChild(document.createTextNode(DATA.per_token ? ` · tokens decoded with ${DATA.tokenizer}`
        : " · tokenizer not loaded: responses shown as text"));
    }
    const head = el("header", null, el("div", "title", ...bits), sub);
    const shown = {};
    if (DATA.results) {
      const r = DATA.results;
      for (const [k, v] of Object.entries(r)) if (v !== null && typeof v !== "object") shown[k.replace(/_/g, " ")] = v;
      for (const [k, v] of Object.entries(r.pass_hat_k || {})) shown["pass^" + k] = v;
      for (const [docs, s] of Object.entries(r.by_docs || {})) {
        for (const [k, v] of Object.entries(s)) if (typeof v === "number") shown[`${docs} docs · ${k}`] = v;
      }
    } else if (DATA.kind === "run") {
      const rows = DATA.metrics || [], last = rows.length ? rows[rows.length - 1] : {};
      shown["steps logged"] = rows.length;
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
    return head;
  }

  const app = document.getElementById("app");
  app.appendChild(header());
  const c = curves();
  if (c) app.appendChild(c);
  list = listPane();
  detail = el("section", "card episode");
  app.appendChild(el("main", "split", list.node, detail));
  const heat = /(?:^#|&)heat=(logprob|mismatch|none)/.exec(location.hash);  // e.g. #episode=ID&heat=mismatch
  if (heat) state.heat = heat[1];
  window.addEventListener("hashchange", () => show(fromHash()));
  document.addEventListener("keydown", (ev) => {  // j / k (or arrows) step through the listed episodes
    if (/^(INPUT|SELECT|TEXTAREA)$/.test(ev.target.tagName) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const step = { j: 1, ArrowDown: 1, k: -1, ArrowUp: -1 }[ev.key];
    const shown = list.rows.filter(([, a]) => !a.parentNode.hidden).map(([e]) => e.id);
    if (!step || !shown.length) return;
    ev.preventDefault();
    const i = shown.indexOf(state.current);
    location.hash = "episode=" + encodeURIComponent(shown[Math.max(0, Math.min(shown.length - 1, i + step))]);
  });
  show(fromHash() || (DATA.episodes.length ? DATA.episodes[0].id : null));
})();
