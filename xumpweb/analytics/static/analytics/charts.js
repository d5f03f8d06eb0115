// The run page's charts: each .chart element names a json_script block holding
// {type: "lines" | "bars", x: [...], series: [{label, values}], categories?: [...]}
// (xumpweb/analytics/charts.py). Lines have times in seconds on x; bars have category
// indexes on x, their series drawn as nested bars (widest first), so percentiles read as
// p99 behind p90 behind p50. The numbers are also in the table under each chart.
(function () {
  "use strict";
  var COLORS = ["#1f6feb", "#b35900", "#1a7f37", "#8250df", "#cf222e", "#0a7b83", "#6e7781", "#bf8700"];

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
    };
    if (!bars) {
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
      opts.axes = [
        { splits: function () { return spec.x; },
          values: function (u, splits) { return splits.map(function (i) { return cats[i] === undefined ? "" : cats[i]; }); } },
        {},
      ];
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
