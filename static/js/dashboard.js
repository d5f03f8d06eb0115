// The dashboard's live numbers and rate sparklines.
//
// Two feeds, one picture: frames of /ws/monitor/ (opened by htmx's ws extension on
// #monitor) carry depths and rates every <= 500 ms; while that socket is closed, this
// script has htmx re-render #queue-table every 2 s (its "poll" trigger) and the counters in
// each row's data-* attributes give the rates between two renders. Old news is shown as
// such (see "is what the page shows still true?" below). Sparklines keep the last
// two minutes per queue in memory, across re-renders.
//
// The table is one page of the queues (paged and searched on the server): whenever the
// rows it shows change, the page tells /ws/monitor/ with a "watch" frame ({queues, view}),
// and frames then carry those queues only, tagged with that view, plus totals over all.
(function () {
  "use strict";
  var KEEP = 240;
  var series = new Map(); // queue name -> [times, published, delivered, confirmed]
  var counters = new Map(); // queue name -> {time, published, delivered, confirmed}
  window.xumpLive = false;
  var socket = null; // htmx's socket wrapper while /ws/monitor/ is open
  var view = 0, watched = null; // the last watch frame sent: its number and the names

  function shownNames() {
    return Array.prototype.map.call(
      document.querySelectorAll("#queue-table tr[data-queue]"),
      function (row) { return row.dataset.queue; });
  }

  // tell the server which queues this page shows (again after the socket reopened)
  function watch(force) {
    if (!socket || !document.getElementById("queue-table")) return;
    var names = shownNames();
    var key = names.join("\n");
    if (!force && key === watched) return;
    watched = key;
    view += 1;
    socket.send(JSON.stringify({ type: "watch", queues: names, view: view }));
  }

  function seriesOf(name) {
    var s = series.get(name);
    if (!s) {
      s = [[], [], [], []];
      series.set(name, s);
    }
    return s;
  }

  function record(name, time, rates) {
    var s = seriesOf(name);
    s[0].push(time);
    s[1].push(rates.published || 0);
    s[2].push(rates.delivered || 0);
    s[3].push(rates.confirmed || 0);
    if (s[0].length > KEEP) s.forEach(function (a) { a.shift(); });
  }

  function fmt(rate) {
    if (!rate) return "0";
    return rate >= 100 ? Math.round(rate).toString() : rate.toFixed(1);
  }

  function draw(el) {
    var s = series.get(el.dataset.queue);
    if (!s || s[0].length < 2 || !window.uPlot) return;
    if (el._plot) {
      el._plot.setData(s);
      return;
    }
    el._plot = new uPlot({
      width: 140, height: 30, class: "sparkline", padding: [3, 2, 3, 2],
      legend: { show: false }, cursor: { show: false },
      // a quiet line sits just above the bottom edge, not on it (where it would be clipped)
      scales: { x: { time: false }, y: { range: function (u, min, max) {
        var top = Math.max(1, max) * 1.1;
        return [-top * 0.06, top];
      } } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: "#1f6feb", width: 1.5 }, { stroke: "#b35900", width: 1.5 },
               { stroke: "#1a7f37", width: 1.5 }],
    }, s, el);
  }

  function rowOf(name) {
    var rows = document.querySelectorAll("#queue-table tr[data-queue]");
    for (var i = 0; i < rows.length; i++) if (rows[i].dataset.queue === name) return rows[i];
    return null;
  }

  function showRates(row, rates) {
    var cell = row.querySelector('[data-field="rates"]');
    if (cell) cell.textContent = fmt(rates.published) + " / " + fmt(rates.delivered) + " / " + fmt(rates.confirmed);
  }

  function setTotal(key, value) {
    var el = document.querySelector('[data-total="' + key + '"]');
    if (el) el.textContent = value;
  }

  function totalsFromRows() {
    var sums = { depth: 0, history_size: 0, outstanding: 0 };
    var dead = 0;
    document.querySelectorAll("#queue-table tr[data-queue]").forEach(function (row) {
      Object.keys(sums).forEach(function (key) {
        var cell = row.querySelector('[data-field="' + key + '"]');
        if (cell) sums[key] += parseInt(cell.textContent, 10) || 0;
      });
      if (row.classList.contains("dlq")) {
        dead += parseInt(row.querySelector('[data-field="depth"]').textContent, 10) || 0;
      }
    });
    Object.keys(sums).forEach(function (key) { setTotal(key, sums[key]); });
    setTotal("dead", dead);
    var box = document.querySelector('[data-total-box="dead"]');
    if (box) box.classList.toggle("alert", dead > 0);
  }

  function drawAll() {
    document.querySelectorAll("#queue-table .spark").forEach(draw);
  }

  // A queue's rates in a frame: from the counters this page saw last (the rendered row or
  // an earlier frame) when the snapshot is newer, so a burst published before the server's
  // meter had a first reading still shows; the server's rates otherwise.
  function ratesOf(q, time) {
    var now = q.counters || {};
    var before = counters.get(q.name);
    if (!time || now.published === undefined) return q.rates || {};
    counters.set(q.name, {
      time: time,
      published: now.published,
      delivered: now.delivered,
      confirmed: now.confirmed,
    });
    if (!before || !(time > before.time)) return q.rates || {};
    var dt = time - before.time;
    return {
      published: Math.max(0, (now.published - before.published) / dt),
      delivered: Math.max(0, (now.delivered - before.delivered) / dt),
      confirmed: Math.max(0, (now.confirmed - before.confirmed) / dt),
    };
  }

  // a /ws/monitor/ frame
  function applyFrame(frame) {
    var missing = false, published = 0;
    var current = frame.view !== undefined && frame.view === view; // cut to the rows shown
    var seen = new Set();
    (frame.queues || []).forEach(function (q) {
      seen.add(q.name);
      var rates = ratesOf(q, frame.snapshot_time);
      published += rates.published || 0;
      record(q.name, frame.time, rates);
      var row = rowOf(q.name);
      if (!row) return; // not on this page (or a frame from before the last watch)
      ["depth", "history_size", "outstanding"].forEach(function (key) {
        var cell = row.querySelector('[data-field="' + key + '"]');
        if (cell && q[key] !== undefined) cell.textContent = q[key];
      });
      var dead = row.querySelector('[data-field="dead_lettered"]');
      var deadCount = (q.counters || {}).dead_lettered;
      if (dead && deadCount !== undefined) {
        dead.textContent = deadCount;
        dead.classList.toggle("warn", deadCount > 0);
      }
      var depth = row.querySelector('[data-field="depth"]');
      if (row.classList.contains("dlq")) depth.classList.toggle("alert", q.depth > 0);
      showRates(row, rates);
    });
    var table = document.getElementById("queue-table");
    if (table && current) { // a queue shown is gone: render the page again
      document.querySelectorAll("#queue-table tr[data-queue]").forEach(function (row) {
        if (!seen.has(row.dataset.queue)) missing = true;
      });
    }
    var totals = frame.totals;
    if (table && totals && !table.dataset.filtered) {
      // totals over every queue; a queue more or fewer than the page knows: render again
      setTotal("queues", totals.queues);
      setTotal("depth", totals.depth);
      setTotal("history_size", totals.history_size);
      setTotal("outstanding", totals.outstanding);
      setTotal("dead", totals.dead_letters);
      var box = document.querySelector('[data-total-box="dead"]');
      if (box) box.classList.toggle("alert", totals.dead_letters > 0);
      setTotal("published", fmt(Math.max(totals.published || 0, published)));
      if (totals.queues > (+table.dataset.queues || 0)) missing = true; // a new queue
    } else {
      setTotal("published", fmt(published)); // of the page shown
      if (!totals) totalsFromRows();
    }
    if (frame.inbox !== undefined) setTotal("inbox", frame.inbox);
    if (frame.recent) showRecent(frame.recent);
    drawAll();
    if (missing && table && Date.now() - lastRefreshAt > 2000) {
      lastRefreshAt = Date.now();
      htmx.trigger(table, "refresh");
    }
  }
  var lastRefreshAt = 0;

  function showRecent(recent) {
    var list = document.getElementById("recent");
    if (!list || !recent.length) return;
    var items = recent.slice(-15).reverse();
    list.replaceChildren.apply(list, items.map(function (d) {
      var li = document.createElement("li");
      var q = document.createElement("span");
      q.className = "mono";
      q.textContent = d.queue;
      var dest = document.createElement("span");
      dest.className = "mono";
      dest.textContent = d.destination;
      var address = document.createElement("span");
      address.className = "muted";
      address.textContent = d.address || "";
      li.append(q, " → ", dest, " ", address);
      return li;
    }));
  }

  // after htmx re-rendered the table (polling, filtering, a new queue)
  function fromRows() {
    var table = document.getElementById("queue-table");
    if (!table) return;
    var time = parseFloat(table.dataset.snapshotTime) || Date.now() / 1000;
    var published = 0;
    table.querySelectorAll("tr[data-queue]").forEach(function (row) {
      var name = row.dataset.queue;
      var now = {
        time: time,
        published: +row.dataset.published,
        delivered: +row.dataset.delivered,
        confirmed: +row.dataset.confirmed,
      };
      var before = counters.get(name);
      counters.set(name, now);
      if (window.xumpLive) return; // the socket's rates are better
      if (before && now.time > before.time) {
        var dt = now.time - before.time;
        var rates = {
          published: Math.max(0, (now.published - before.published) / dt),
          delivered: Math.max(0, (now.delivered - before.delivered) / dt),
          confirmed: Math.max(0, (now.confirmed - before.confirmed) / dt),
        };
        record(name, now.time, rates);
        published += rates.published;
        showRates(row, rates);
      } else if (!before) {
        record(name, now.time, {});
      }
    });
    if (!window.xumpLive) setTotal("published", fmt(published));
    drawAll();
    watch(false);
  }

  // -- is what the page shows still true? ---------------------------------------------------
  // News is a monitor frame (at least one a second while the socket is open: the server's
  // keep-alive) or a successful poll of the rows (every 2 s while it is closed). Without
  // news for STALE_AFTER, or at once when a poll fails, every pill turns "stale since" the
  // last news. Frames also carry what the server knows is down (Redis, routing) and since
  // when; when that comes back up, the rows and pills are fetched again from the server.
  var STALE_AFTER = 2000; // ms
  var POLL_CLOSED = 2000, POLL_OPEN = 10000; // ms between polls of the rows
  var socketOpen = false, socketClosedAt = null, pollFailed = false;
  var newsAt = Date.now(), lastPollAt = Date.now(), staleSince = null;
  var snapshotTime = null; // the router's time of the newest snapshot shown (s)
  var down = {}; // "redis" (since when, ms) | "routing" (true) while a frame says so

  function utc(ms) {
    return new Date(ms).toISOString().slice(11, 19) + " UTC";
  }

  function pill(name) {
    return document.querySelector('#health [data-pill="' + name + '"]');
  }

  function setPill(name, ok, text) {
    var el = pill(name);
    if (!el) return;
    el.classList.remove("ok", "bad", "stale");
    el.classList.add(ok ? "ok" : "bad");
    el.textContent = text;
  }

  function refresh() {
    var table = document.getElementById("queue-table");
    if (table) {
      lastPollAt = Date.now();
      htmx.trigger(table, "refresh");
    }
  }

  function applyStatus(frame) {
    var status = frame.status || {};
    var redis = status.redis || { ok: true }, routing = status.routing || { ok: true };
    var recovered = false;
    if (!redis.ok) {
      var since = redis.since ? " since " + utc(redis.since * 1000) : "";
      setPill("redis", false, "Redis down" + since + ": " + (redis.detail || "unreachable"));
      var durable = pill("durability"); // unknown while Redis does not answer
      if (durable && !durable.classList.contains("stale")) {
        durable.classList.remove("ok", "warn");
        durable.classList.add("stale");
        durable.textContent = "Durability unknown: Redis does not answer";
      }
      down.redis = redis.since ? redis.since * 1000 : Date.now();
    } else if (down.redis) {
      setPill("redis", true, "Redis up");
      down.redis = false;
      showFeed();
      recovered = true;
    }
    if (!routing.ok) {
      var last = frame.snapshot_time ? " since " + utc(frame.snapshot_time * 1000) : "";
      setPill("routing", false, "Routing stalled" + last + ": " + (routing.detail || ""));
      down.routing = true;
    } else if (down.routing) {
      down.routing = false;
      recovered = true;
    }
    if (recovered) refresh(); // the server renders the pills (and rows) afresh
  }

  function news() {
    newsAt = Date.now();
    if (staleSince !== null) {
      staleSince = null;
      refresh(); // stale pills and rows replaced by what the server says now
    }
    showFeed();
  }

  function showFeed() {
    var state = document.getElementById("live-state");
    if (!state) return;
    var text;
    if (staleSince !== null) {
      text = socketOpen
        ? "stale: no live frame since " + utc(staleSince)
        : "live feed lost since " + utc(socketClosedAt || staleSince) +
          ": the web server does not answer";
    } else if (socketOpen && down.redis) {
      text = "live: Redis down since " + utc(down.redis) + ", the numbers are from before";
    } else if (socketOpen) {
      text = "live";
    } else {
      text = socketClosedAt ? "live feed lost since " + utc(socketClosedAt) +
        ", updating every 2 s" : "updating every 2 s";
    }
    if (state.textContent !== text) state.textContent = text;
    state.classList.toggle("on", socketOpen && staleSince === null && !down.redis);
    state.classList.toggle("lost", staleSince !== null || !!down.redis);
  }

  function markStale() {
    if (staleSince === null) staleSince = newsAt;
    document.querySelectorAll("#health .pill").forEach(function (el) {
      if (el.dataset.stale) return;
      el.dataset.stale = "1";
      el.classList.remove("ok", "bad", "warn");
      el.classList.add("stale");
      var note = document.createElement("span");
      note.className = "stale-note";
      note.textContent = " (stale since " + utc(staleSince) + ")";
      el.append(note);
    });
    showFeed();
  }

  function showSnapshotAge() {
    var el = document.querySelector("[data-snapshot-age]");
    if (!el || !snapshotTime) return;
    var age = Math.max(0, Date.now() / 1000 - snapshotTime);
    el.textContent = age < 120 ? age.toFixed(1) + " s ago" : Math.round(age / 60) + " min ago";
  }

  function tick() {
    var now = Date.now();
    var table = document.getElementById("queue-table");
    if (table && now - lastPollAt >= (socketOpen ? POLL_OPEN : POLL_CLOSED)) {
      lastPollAt = now;
      htmx.trigger(table, "poll");
    }
    var quiet = now - newsAt > (socketOpen ? STALE_AFTER : POLL_CLOSED + STALE_AFTER);
    if (quiet || (!socketOpen && pollFailed)) markStale();
    showSnapshotAge();
  }

  function setLive(live) {
    window.xumpLive = live;
    if (socketOpen && !live) {
      socketClosedAt = Date.now();
      refresh(); // is the server still there? a failed poll says at once
    }
    if (live) socketClosedAt = null;
    socketOpen = live;
    showFeed();
  }

  function isRows(event) {
    var elt = event.detail && event.detail.elt;
    return elt && elt.id === "queue-table";
  }

  document.addEventListener("htmx:wsOpen", function (event) {
    socket = event.detail.socketWrapper;
    watch(true);
    setLive(true);
  });
  document.addEventListener("htmx:wsClose", function () { socket = null; setLive(false); });
  document.addEventListener("htmx:wsError", function () { socket = null; setLive(false); });
  document.addEventListener("htmx:wsBeforeMessage", function (event) {
    var frame;
    try {
      frame = JSON.parse(event.detail.message);
    } catch (e) {
      return; // an HTML fragment: htmx swaps it
    }
    event.preventDefault();
    if (!frame || frame.type !== "monitor") return;
    if (frame.snapshot_time) snapshotTime = frame.snapshot_time;
    if (frame.queues) applyFrame(frame);
    applyStatus(frame);
    news();
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!isRows(event)) return;
    pollFailed = !event.detail.successful;
    if (pollFailed) {
      // with frames arriving, a failed poll is the 503 of Redis being down: the frames say so
      if (!socketOpen) markStale();
    } else {
      var table = document.getElementById("queue-table");
      if (table) snapshotTime = parseFloat(table.dataset.snapshotTime) || snapshotTime;
      if (!socketOpen) news();
      down = {}; // the pills are the server's own again
    }
  });
  // the time guard in fromRows makes repeated calls for one render harmless
  document.addEventListener("htmx:afterSettle", fromRows);
  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("queue-table");
    if (table) snapshotTime = parseFloat(table.dataset.snapshotTime) || null;
    fromRows();
    setInterval(tick, 250);
  });
})();
