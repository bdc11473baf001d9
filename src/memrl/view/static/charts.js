// ---------- training curves: one small SVG chart per panel of memrl.view.loader.CURVE_PANELS ----------
function chart(title, keys, rows) {
  // a value logged as NaN/inf reaches the page as null: kept as [step, null], where the line breaks (drawn
  // across, the gap would look like a run that never diverged); a key absent from a row is just not logged
  const logged = keys.map((k) => ({ key: k, pts: rows.filter((r) => typeof r.step === "number" && (typeof r[k] === "number" || r[k] === null)).map((r) => [r.step, r[k]]) }))
    .map((s) => ({ ...s, finite: s.pts.filter((p) => p[1] !== null) }));
  const series = logged.filter((s) => s.finite.length > 0);
  // a key logged at every step as NaN/inf has nothing to draw: said, not left out (a loss that is NaN
  // from step 1 is the one curve a user must not miss)
  const never = logged.filter((s) => s.pts.length > 0 && !s.finite.length)
    .map((s) => `${s.key.replace("time/", "")}: NaN/inf at all ${s.pts.length} logged step${s.pts.length === 1 ? "" : "s"}`);
  const note = never.length ? el("p", "never-finite", visible(never.join("; "))) : null;
  if (!series.length) return never.length ? el("figure", "panel", el("figcaption", null, title), note) : null;
  const W = 320, H = 170, L = 46, R = 10, T = 10, B = 24;
  // a loop, not Math.min(...all): spreading ~124k points (31k steps x 4 timing keys) overflowed the stack
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series) {
    for (const [x, y] of s.pts) {
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (Number.isFinite(y) && y < y0) y0 = y;
      if (Number.isFinite(y) && y > y1) y1 = y;
    }
  }
  if (!Number.isFinite(y0)) { y0 = 0; y1 = 1; }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const ticks = niceTicks(y0, y1, 3);
  y0 = Math.min(y0, ticks.values[0]);
  y1 = Math.max(y1, ticks.values[ticks.values.length - 1]);
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img" });
  box.appendChild(svg("rect", { x: L, y: T, width: W - L - R, height: H - T - B, class: "plot-bg" }));
  for (const v of ticks.values) {
    const y = Y(v);
    box.appendChild(svg("line", { x1: L, x2: W - R, y1: y, y2: y, class: "grid" }));
    const t = svg("text", { x: L - 4, y: y + 3, class: "tick", "text-anchor": "end" });
    t.textContent = ticks.label(v);
    box.appendChild(t);
  }
  for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
    const t = svg("text", { x: X(x), y: H - 8, class: "tick", "text-anchor": anchor });
    t.textContent = "step " + fmt(Math.round(x));
    box.appendChild(t);
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    let d = "", pen = "M";
    for (const p of s.pts) {
      if (p[1] === null) { pen = "M"; continue; }
      d += (d ? " " : "") + pen + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1);
      pen = "L";
    }
    const path = svg("path", { d: d, class: "series", stroke: color, "data-key": s.key });
    const tip = svg("title");
    const last = s.finite[s.finite.length - 1], gaps = s.pts.length - s.finite.length;
    tip.textContent = visible(`${s.key}: last ${fmt(last[1])} at step ${last[0]}` +
      (gaps ? `; ${gaps} step(s) not finite (NaN/inf), left as gaps` : ""));
    path.appendChild(tip);
    box.appendChild(path);
    // every point when few; else the ones no line reaches (a finite value between two NaN steps)
    const alone = (j) => s.pts[j][1] !== null && (j === 0 || s.pts[j - 1][1] === null) &&
      (j === s.pts.length - 1 || s.pts[j + 1][1] === null);
    const dots = s.finite.length <= 60 ? s.finite : s.pts.filter((p, j) => alone(j));
    for (const p of dots) {
      const c = svg("circle", { cx: X(p[0]), cy: Y(p[1]), r: 2.2, fill: color, class: "pt" });
      const ct = svg("title");
      ct.textContent = visible(`${s.key} = ${fmt(p[1])} (step ${p[0]})`);
      c.appendChild(ct);
      box.appendChild(c);
    }
  });
  const legend = el("div", "legend");
  series.forEach((s, i) => {
    const sw = el("span", "swatch");
    sw.style.background = COLORS[i % COLORS.length];
    legend.appendChild(el("span", "legend-item", sw, s.key.replace("time/", "")));
  });
  // the caption's value is the tooltip's: the last finite one, and whether NaN/inf came after it
  const caption = (s) => fmt(s.finite[s.finite.length - 1][1]) +
    (s.pts[s.pts.length - 1][1] === null ? ", then NaN" : "");
  const last = series.length === 1 ? el("span", "last", caption(series[0])) : null;
  return el("figure", "panel", el("figcaption", null, title, last), box, series.length > 1 ? legend : null, note);
}

function curves() {
  const rows = DATA.metrics || [];
  if (!rows.length) return null;
  const grid = el("div", "curves");
  for (const [title, keys] of PANELS) {
    const c = chart(title, keys, rows);
    if (c) grid.appendChild(c);
  }
  return el("section", "card", el("h2", null, "Training curves"), grid, moreCurves(rows));
}

// every other numeric metrics.jsonl key (a workflow's ep.metric, rollout corrections...), one per panel, folded
function moreCurves(rows) {
  const grid = el("div", "curves");
  for (const [title, keys] of MORE_PANELS) {
    const c = chart(title, keys, rows);
    if (c) grid.appendChild(c);
  }
  if (!grid.childNodes.length) return null;
  const n = grid.childNodes.length;
  const total = DATA.more_total || n, cut = total > MORE_PANELS.length ? ` (the first ${MORE_PANELS.length} of ${total} keys)` : "";
  const summary = el("summary", null, `${n} more curve${n === 1 ? "" : "s"}${cut}: the workflow's own metrics and the rest of metrics.jsonl`);
  return el("details", "more-curves", summary, grid);
}
