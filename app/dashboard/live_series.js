// The live charts' traces from raw metrics lines, in the browser, so a new metrics line is drawn
// without the server building a figure. What to draw comes from the server: the declarations
// (charts.live_spec) and the style (charts.STYLE: palette, legend band, log ticks), written once in
// Python; the rules are charts.spec_traces / charts._figure's, and tests/test_live_series.py runs
// this file in node against them on real and edge-case lines.
"use strict";
(function (root, factory) {
  const api = factory();
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.AdmmLive = api;
})(typeof self !== "undefined" ? self : this, function () {
  const finite = v => typeof v === "number" && isFinite(v);
  function col(lines, key, scale) {  // charts._col
    return lines.map(m => (finite(m[key]) ? m[key] * (scale === undefined ? 1 : scale) : null));
  }
  const hasData = ys => ys.some(y => y !== null);
  function nBlocks(lines, key) {
    let n = 0;
    for (const m of lines) if (Array.isArray(m[key])) n = Math.max(n, m[key].length);
    return n;
  }
  function secondsPerEpoch(lines) {  // charts.seconds_per_epoch
    const xs = [], ys = [];
    for (let i = 1; i < lines.length; i++) {
      const a = lines[i - 1], b = lines[i];
      const de = (b.epoch === undefined ? 0 : b.epoch) - (a.epoch === undefined ? 0 : a.epoch);
      if (de > 0 && finite(b.wall_time_s) && finite(a.wall_time_s)) { xs.push(b.epoch); ys.push((b.wall_time_s - a.wall_time_s) / de); }
    }
    return [xs, ys];
  }
  const scatter = (x, y, name, colour) => ({type: "scatter", x, y, name, mode: "lines+markers", line: {color: colour}});

  // charts.spec_traces, unsmoothed (the page smooths): with logY values <= 0 are gaps
  function traces(chart, lines, logY, style) {
    const COLOURS = style.colours, ep = col(lines, "epoch"), out = [];
    chart.series.forEach((s, i) => {
      if (s.seconds) {
        const [xs, ys] = secondsPerEpoch(lines);
        out.push({type: "bar", x: xs, y: ys, name: "s / epoch", marker: {color: COLOURS[2]}});
      } else if (s.per) {
        const names = s.names || [];
        for (let t = 0; t < nBlocks(lines, s.key); t++) {
          const ys = lines.map(m => {
            const v = Array.isArray(m[s.key]) && t < m[s.key].length ? m[s.key][t] : null;
            return finite(v) && (!logY || v > 0) ? v : null;
          });
          out.push(scatter(ep, ys, t < names.length ? names[t] : "block " + (t + 1), COLOURS[t % COLOURS.length]));
        }
      } else {
        const ys = col(lines, s.key, s.scale).map(y => (y === null || !logY || y > 0 ? y : null));
        if (hasData(ys) || (s.keep_empty && !lines.length)) out.push(scatter(ep, ys, s.name, COLOURS[i]));
      }
    });
    return out;
  }

  function wrap(text, width) {  // charts.wrap: lines of at most `width` characters
    const out = [];
    let cur = "";
    for (const w of text.split(/\s+/).filter(Boolean)) {
      if (cur && cur.length + 1 + w.length > width) { out.push(cur); cur = w; } else cur = cur ? cur + " " + w : w;
    }
    out.push(cur);
    return out;
  }

  // charts._figure's parts that depend on the traces: the legend band under the plot, the note. With the
  // chart's `width` (px; none: as charts._figure), the title and the legend's rows fit that width.
  function layout(frame, trs, note, style, width) {
    const L = JSON.parse(JSON.stringify(frame)), band = style.legend, T = style.title;
    const room = width > 0 ? width - (L.margin.l || 0) - (L.margin.r || 0) : 0;  // the plot's width
    const title = L.title && L.title.text;
    if (room > 0 && title && T) {
      const was = title.split("<br>").length;
      const now = wrap(title.replace(/<br>/g, " "), Math.min(T.wrap, Math.floor(room / T.char_px)));
      if (now.length > was) {
        const pad = Object.assign({}, L.title.pad, {t: T.pad_px + T.shift_px * (now.length - 1)});
        L.title = Object.assign({}, L.title, {text: now.join("<br>"), pad});
        L.height += T.line_px * (now.length - was);
        L.margin = Object.assign({}, L.margin, {t: L.margin.t + T.top_px * (now.length - was)});
      }
    }
    const shown = trs.filter(t => t.showlegend !== false).map(t => t.name || "");
    if (shown.length > 1) {
      const row = room > 0 ? Math.min(band.row_px, room) : band.row_px;
      const rows = Math.ceil(shown.reduce((a, n) => a + n.length * band.char_px + band.entry_px, 0) / row);
      L.height += band.row_height * rows;
      L.margin = Object.assign({}, L.margin, {b: band.bottom + band.row_height * rows});
      delete L.showlegend;
    } else L.showlegend = false;
    if (!trs.length && note) L.annotations = [{text: note, showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}];
    return L;
  }

  const truthy = v => !(v === null || v === undefined || v === false || v === 0 || v === "" ||
    (Array.isArray(v) ? !v.length : typeof v === "object" && !Object.keys(v).length));  // Python's bool()

  // the charts a run shows now, in order: a chart with `when` once some line carries that key
  function shown(spec, order, lines) {
    return order.filter(n => !spec[n].when || lines.some(m => truthy(m[spec[n].when])));
  }

  // per line: epoch, step (the method's iteration) and wall seconds since the first line
  function xs(lines) {
    const first = lines.find(m => finite(m.time));
    const t0 = first ? first.time : null;
    return {
      epoch: lines.map(m => (m.epoch === undefined ? null : m.epoch)),
      step: lines.map(m => (m.iteration === undefined ? null : m.iteration)),
      wall: lines.map(m => (t0 !== null && finite(m.time) ? Math.round((m.time - t0) * 1000) / 1000 : null)),
    };
  }

  return {traces, layout, shown, xs, secondsPerEpoch};
});
