// The run page's charts: each .chart element names a json_script block holding
// {type: "lines" | "bars", x: [...], series: [{label, values}], categories?: [...]}
// (xumpweb/analytics/charts.py). Lines have times in seconds on x; bars have category
// indexes on x, their series drawn as nested bars (widest first), so percentiles read as
// p99 behind p90 behind p50. The numbers are also in the table under each chart.
// Times read in 24-hour UTC, as everywhere in the console; each axis is as wide as its
// longest label, and category labels too long for their bar are cut short with "…".
(function () {
  "use strict";
  var COLORS = ["#1f6feb", "#b35900", "#1a7f37", "#8250df", "#cf222e", "#0a7b83", "#6e7781", "#bf8700"];

  function utc(seconds) { return new Date(seconds * 1000).toISOString(); }

  // tick labels of a time axis: HH:MM (HH:MM:SS below a minute, MM-DD from a day)
  function timeValues(u, splits, axisIdx, space, incr) {
    return splits.map(function (s) {
      var text = utc(s);
      if (incr >= 86400) return text.slice(5, 10);
      return incr < 60 ? text.slice(11, 19) : text.slice(11, 16);
    });
  }

  function textWidth(u, axis, text) {
    u.ctx.font = axis.font[0];
    return u.ctx.measureText(text).width / (window.devicePixelRatio || 1);
  }

  // a y axis as wide as its longest label (uPlot's default 50 px cuts "12,000" short)
  function ySize(u, values, axisIdx, cycleNum) {
    var axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    var longest = (values || []).reduce(function (a, v) { return String(v).length > a.length ? String(v) : a; }, "");
    return Math.ceil(axis.ticks.size + axis.gap + textWidth(u, axis, longest) + 8);
  }

  // a category label cut to the width its bar group has
  function fitted(u, axis, text, room) {
    if (textWidth(u, axis, text) <= room) return text;
    var cut = text;
    while (cut.length > 1 && textWidth(u, axis, cut + "…") > room) cut = cut.slice(0, -1);
    return cut + "…";
  }

  function options(spec, width) {
    var bars = spec.type === "bars";
    var n = spec.series.length;
    var series = [{ label: bars ? "category" : "time" }];
    spec.series.forEach(function (s, i) {
      var color = COLORS[i % COLORS.length];
      var one = { label: s.label, stroke: color, width: bars ? 1 : 1.5 };
      if (bars) {
        one.fill = color + "cc";
        one.paths = uPlot.paths.bars({ size: [0.8 * (1 - i / (n + 1)), 80] });
        one.points = { show: false };
      }
      series.push(one);
    });
    var opts = {
      width: width, height: 260, series: series,
      scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max) * 1.05]; } } },
      axes: [{}, { size: ySize }],
    };
    if (!bars) {
      series[0].value = function (u, v) { return v == null ? "" : utc(v).slice(0, 16).replace("T", " ") + " UTC"; };
      opts.axes[0] = { values: timeValues };
      // ticks on whole UTC minutes and hours, wherever the browser is
      opts.tzDate = function (ts) { return uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"); };
      var few = spec.x.length < 3;
      series.forEach(function (one, i) { if (i) one.points = { show: few }; });
      if (spec.x.length === 1) {
        var pad = spec.step || 60;
        opts.scales.x = { time: true, range: function () { return [spec.x[0] - pad, spec.x[0] + pad]; } };
      }
    }
    if (bars) {
      var cats = spec.categories || [];
      opts.scales.x = { time: false, range: function () { return [-0.5, cats.length - 0.5]; } };
      opts.axes[0] = {
        splits: function () { return spec.x; },
        values: function (u, splits) {
          var room = u.bbox.width / (window.devicePixelRatio || 1) / Math.max(1, cats.length) - 6;
          return splits.map(function (i) { return cats[i] === undefined ? "" : fitted(u, u.axes[0], cats[i], room); });
        },
      };
      series[0].value = function (u, v) { return cats[v] === undefined ? "" : cats[v]; };
    }
    return opts;
  }

  function draw(el) {
    var source = document.getElementById(el.dataset.source);
    if (!source || !window.uPlot) return;
    var spec = JSON.parse(source.textContent);
    var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
    var width = Math.max(320, el.clientWidth || 640);
    el._plot = new uPlot(options(spec, width), data, el);
  }

  function drawAll() { document.querySelectorAll(".chart[data-source]").forEach(draw); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", drawAll);
  else drawAll();
})();
