// The live charts' rules: traces and layout from a chart's declaration (charts.live_spec), its
// empty layout (charts.spec_frame), the style (charts.STYLE) and the raw metrics lines. The only
// copy: the server sends declarations and lines, never figures. Tested in node
// (tests/test_live_series.py); live_charts.html only draws what this returns.
"use strict";
(function (root, factory) {
  const api = factory();
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.AdmmLive = api;
})(typeof self !== "undefined" ? self : this, function () {
  const finite = v => typeof v === "number" && isFinite(v);
  const col = (lines, key, scale = 1) => lines.map(m => (finite(m[key]) ? m[key] * scale : null));
  const scatter = (x, y, name, colour) => ({type: "scatter", x, y, name, mode: "lines+markers", line: {color: colour}});

  function secondsPerEpoch(lines) {
    const xs = [], ys = [];
    for (let i = 1; i < lines.length; i++) {
      const a = lines[i - 1], b = lines[i], de = (b.epoch || 0) - (a.epoch || 0);
      if (de > 0 && finite(b.wall_time_s) && finite(a.wall_time_s)) {
        xs.push(b.epoch);
        ys.push((b.wall_time_s - a.wall_time_s) / de);
      }
    }
    return [xs, ys];
  }

  // Series: {key, name, scale}: one value per line, left out without data unless keep_empty and no
  // line yet; {key, per, names}: one trace per entry of a per-block list; {seconds}: bars of training
  // seconds per epoch. With logY values <= 0 are gaps.
  function traces(chart, lines, logY, style) {
    const C = style.colours, ep = col(lines, "epoch"), out = [];
    const gap = y => (y === null || !logY || y > 0 ? y : null);
    chart.series.forEach((s, i) => {
      if (s.seconds) {
        const [xs, ys] = secondsPerEpoch(lines);
        out.push({type: "bar", x: xs, y: ys, name: "s / epoch", marker: {color: C[2]}});
      } else if (s.per) {
        const lists = lines.map(m => (Array.isArray(m[s.key]) ? m[s.key] : []));
        const n = lists.reduce((a, l) => Math.max(a, l.length), 0), names = s.names || [];
        for (let t = 0; t < n; t++) {
          const ys = lists.map(l => gap(finite(l[t]) ? l[t] : null));
          out.push(scatter(ep, ys, t < names.length ? names[t] : "block " + (t + 1), C[t % C.length]));
        }
      } else {
        const ys = col(lines, s.key, s.scale).map(gap);
        if (ys.some(y => y !== null) || (s.keep_empty && !lines.length)) out.push(scatter(ep, ys, s.name, C[i]));
      }
    });
    return out;
  }

  function wrap(text, width) {  // lines of at most `width` characters
    const out = [];
    let cur = "";
    for (const w of text.split(/\s+/).filter(Boolean)) {
      if (cur && cur.length + 1 + w.length > width) {
        out.push(cur);
        cur = w;
      } else cur = cur ? cur + " " + w : w;
    }
    out.push(cur);
    return out;
  }

  // The frame with what depends on the traces: the legend's band of rows under the plot, the note of
  // an empty chart; with the chart's `width` (px) the title and the legend rows fit that width.
  function layout(frame, trs, note, style, width) {
    const L = JSON.parse(JSON.stringify(frame)), band = style.legend, T = style.title;
    const room = width > 0 ? width - (L.margin.l || 0) - (L.margin.r || 0) : 0;
    const title = L.title && L.title.text;
    if (room > 0 && title) {
      const was = title.split("<br>").length;
      const now = wrap(title.replace(/<br>/g, " "), Math.min(T.wrap, Math.floor(room / T.char_px)));
      if (now.length > was) {
        L.title = {...L.title, text: now.join("<br>"), pad: {...L.title.pad, t: T.pad_px + T.shift_px * (now.length - 1)}};
        L.height += T.line_px * (now.length - was);
        L.margin = {...L.margin, t: L.margin.t + T.top_px * (now.length - was)};
      }
    }
    const shown = trs.filter(t => t.showlegend !== false).map(t => t.name || "");
    L.showlegend = shown.length > 1;
    if (L.showlegend) {
      const row = room > 0 ? Math.min(band.row_px, room) : band.row_px;
      const rows = Math.ceil(shown.reduce((a, n) => a + n.length * band.char_px + band.entry_px, 0) / row);
      L.height += band.row_height * rows;
      L.margin = {...L.margin, b: band.bottom + band.row_height * rows};
    }
    if (!trs.length && note) L.annotations = [{text: note, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}];
    return L;
  }

  const truthy = v => !(v === null || v === undefined || v === false || v === 0 || v === "" ||
    (Array.isArray(v) ? !v.length : typeof v === "object" && !Object.keys(v).length));  // Python's bool()

  // the charts a run shows now, in order: a chart with `when` once some line carries that key
  const shown = (spec, order, lines) => order.filter(n => !spec[n].when || lines.some(m => truthy(m[spec[n].when])));

  // per line: epoch, step (the method's iteration) and wall seconds since the first timed line
  function xs(lines) {
    const first = lines.find(m => finite(m.time)), t0 = first ? first.time : null;
    return {
      epoch: lines.map(m => (m.epoch === undefined ? null : m.epoch)),
      step: lines.map(m => (m.iteration === undefined ? null : m.iteration)),
      wall: lines.map(m => (t0 !== null && finite(m.time) ? Math.round((m.time - t0) * 1000) / 1000 : null)),
    };
  }

  // exponential moving average (TensorBoard's smoothing); gaps stay gaps
  function ema(ys, w) {
    if (!(w > 0)) return ys;
    let last = null;
    return ys.map(y => (y === null || y === undefined ? null : (last = last === null ? y : w * last + (1 - w) * y)));
  }

  // log-axis ticks: 1-2-5 per decade, decades only past `max`, finer ladders under a decade, whole labels
  function logTicks(vals, ticks) {
    vals = vals.filter(v => finite(v) && v > 0);
    if (!vals.length) return null;
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (hi / lo < 1.0001) [lo, hi] = [lo / 1.5, hi * 1.5];
    const ladder = ms => {
      const out = [];
      for (let k = Math.floor(Math.log10(lo)) - 1; k <= Math.ceil(Math.log10(hi)); k++)
        for (const m of ms) {
          const v = +(m * Math.pow(10, k)).toPrecision(6);
          if (v >= lo / 1.05 && v <= hi * 1.05) out.push(v);
        }
      return out;
    };
    let t = ladder(ticks.ladder);
    if (t.length > ticks.max) {
      t = ladder([1]);
      const s = Math.ceil(t.length / ticks.max);
      t = t.filter((_, i) => i % s === 0);
    }
    for (const f of ticks.finer) if (t.length < 3) t = ladder(f);
    if (t.length < 2) t = [...new Set([+lo.toPrecision(3), +hi.toPrecision(3)])].sort((a, b) => a - b);
    const label = v => (v >= 1e-4 && v < 1e6 ? String(+v.toPrecision(6))
      : v.toExponential(0).replace("e-0", "e-").replace(/e\+0?/, "e"));
    return {tickvals: t, ticktext: t.map(label)};
  }

  return {traces, layout, shown, xs, ema, logTicks, secondsPerEpoch};
});
