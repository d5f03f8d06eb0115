// The queue page's charts: unprocessed messages and rates per second over the last hour.
//
// GET data-series-url (xumpweb/console/charts.py) every EVERY seconds: {"every", "series":
// {time, depth, published, delivered, confirmed, dead_lettered}} (rates per second between
// samples, null for the first). Drawn with uPlot, times on a 24-hour UTC axis, as the rest
// of the console shows time. window.xumpCharts holds the two plots (for the tests).
(function () {
  "use strict";
  var EVERY = 10000; // ms between fetches
  var section = document.getElementById("queue-charts");
  if (!section) return;
  var state = section.querySelector("[data-chart-state]");
  var plots = { depth: null, rates: null };
  window.xumpCharts = plots;

  function two(n) { return (n < 10 ? "0" : "") + n; }

  // 24-hour UTC labels: "14:05" (and the seconds when ticks are closer than a minute)
  function utcTicks(u, splits, axisIdx, space, incr) {
    return splits.map(function (t) {
      var d = new Date(t * 1000);
      var text = two(d.getUTCHours()) + ":" + two(d.getUTCMinutes());
      return incr < 60 ? text + ":" + two(d.getUTCSeconds()) : text;
    });
  }

  function legendTime(u, t) {
    if (t == null) return "–";
    return new Date(t * 1000).toISOString().slice(11, 19) + " UTC";
  }

  function options(box, series, yLabel) {
    var width = Math.max(300, box.clientWidth || 420);
    return {
      width: width, height: 200,
      padding: [12, 12, 4, 4], // nothing clipped at the edges
      scales: { x: { time: true }, y: { range: function (u, min, max) {
        return [0, Math.max(1, max) * 1.1];
      } } },
      axes: [
        { values: utcTicks, size: 36 },
        { label: yLabel, size: 60 },
      ],
      legend: { show: false }, // the caption names the lines; a table here would confuse
      series: [{ value: legendTime, label: "time (UTC)" }].concat(series),
    };
  }

  function draw(name, box, data, series, yLabel) {
    if (plots[name]) {
      plots[name].setData(data);
      return;
    }
    plots[name] = new uPlot(options(box, series, yLabel), data, box);
  }

  function show(answer) {
    var s = answer.series;
    draw("depth", document.getElementById("depth-chart"), [s.time, s.depth],
      [{ label: "unprocessed", stroke: "#0550ae", width: 2, fill: "rgba(5,80,174,.08)" }],
      "messages");
    draw("rates", document.getElementById("rates-chart"),
      [s.time, s.published, s.delivered, s.confirmed, s.dead_lettered],
      [{ label: "published/s", stroke: "#0550ae", width: 1.5 },
       { label: "delivered/s", stroke: "#8a4600", width: 1.5 },
       { label: "confirmed/s", stroke: "#116329", width: 1.5 },
       { label: "dead-lettered/s", stroke: "#a40e26", width: 1.5 }],
      "per second");
    var points = s.time.length;
    state.textContent = points + " sample" + (points === 1 ? "" : "s") +
      (points ? ", the newest at " + legendTime(null, s.time[points - 1]) : "");
    section.dataset.points = points;
  }

  function load() {
    fetch(section.dataset.seriesUrl, { credentials: "same-origin",
                                       headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(show)
      .catch(function (e) { state.textContent = "charts unavailable: " + e.message; });
  }

  function start() {
    if (!window.uPlot) return;
    load();
    setInterval(load, EVERY);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
