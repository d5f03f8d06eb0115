// The topology graph: cytoscape with the dagre layout (left to right), data from the
// json_script the page carries; node labels follow live numbers (frames of /ws/monitor/,
// or the snapshot polled every 2 s while that socket is closed), and edges leaving a queue
// grow thicker with its publish rate. A tap on a queue opens it.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("topology-data").textContent);
  var frameUrl = document.getElementById("topology-script").dataset.frameUrl;
  var COLORS = { copy: "#1f6feb", move: "#24292f", deliver: "#1a7f37", bounce: "#8250df", delete: "#cf222e" };

  function label(node, rate) {
    if (node.kind !== "queue") return node.name;
    var text = node.name + "\n" + node.depth + " waiting";
    if (rate !== undefined) text += " · " + (rate >= 10 ? Math.round(rate) : rate.toFixed(1)) + "/s";
    return text;
  }

  var elements = [];
  data.nodes.forEach(function (n) {
    elements.push({ group: "nodes", data: { id: n.id, name: n.name, kind: n.kind, url: n.url,
      label: label(n), dead: n.dead ? "yes" : "no" } });
  });
  data.edges.forEach(function (e) {
    elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target,
      action: e.action, enabled: e.enabled ? "yes" : "no",
      label: e.number ? "#" + e.number + " " + e.action : e.label } });
  });

  cytoscape.use(cytoscapeDagre);
  var cy = cytoscape({
    container: document.getElementById("cy"),
    elements: elements,
    wheelSensitivity: 0.3,
    textureOnViewport: data.nodes.length > 150,
    style: [
      { selector: "node", style: {
        "label": "data(label)", "text-wrap": "wrap", "text-valign": "center", "font-size": 11,
        "shape": "round-rectangle", "width": "label", "height": "label", "padding": "8px",
        "background-color": "#f6f8fa", "border-width": 1, "border-color": "#57606a",
        "color": "#24292f", "min-zoomed-font-size": 6 } },
      { selector: 'node[dead = "yes"]', style: { "border-color": "#cf222e", "border-width": 2, "background-color": "#fff0ee" } },
      { selector: 'node[kind = "destination"]', style: { "shape": "ellipse", "background-color": "#dafbe1", "border-color": "#1a7f37" } },
      { selector: 'node[kind = "sink"]', style: { "shape": "diamond", "background-color": "#ffebe9", "padding": "12px" } },
      { selector: 'node[kind = "missing"]', style: { "border-style": "dashed", "color": "#57606a" } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": "#bf8700" } },
      { selector: "edge", style: {
        "curve-style": "bezier", "target-arrow-shape": "triangle", "width": 1.5,
        "line-color": "#57606a", "target-arrow-color": "#57606a",
        "label": data.edges.length > 150 ? "" : "data(label)", "font-size": 9, "text-rotation": "autorotate",
        "text-background-color": "#fff", "text-background-opacity": 0.8, "min-zoomed-font-size": 9 } },
      { selector: 'edge[action = "copy"]', style: { "line-style": "dashed", "line-color": COLORS.copy, "target-arrow-color": COLORS.copy } },
      { selector: 'edge[action = "move"]', style: { "width": 2.5, "line-color": COLORS.move, "target-arrow-color": COLORS.move } },
      { selector: 'edge[action = "deliver"]', style: { "width": 2, "line-color": COLORS.deliver, "target-arrow-color": COLORS.deliver, "target-arrow-shape": "triangle-backcurve" } },
      { selector: 'edge[action = "bounce"]', style: { "line-style": "dotted", "width": 2, "line-color": COLORS.bounce, "target-arrow-color": COLORS.bounce } },
      { selector: 'edge[action = "delete"]', style: { "line-color": COLORS.delete, "target-arrow-color": COLORS.delete, "target-arrow-shape": "tee" } },
      { selector: 'edge[action = "dead-letter"]', style: { "line-style": "dotted", "width": 1, "line-color": COLORS.delete, "target-arrow-color": COLORS.delete, "target-arrow-shape": "vee", "label": "", "opacity": 0.7 } },
      { selector: 'edge[enabled = "no"]', style: { "opacity": 0.35 } },
      // live traffic: an edge leaving a busy queue is drawn thicker (w set from its rate)
      { selector: 'edge[w][action != "dead-letter"]', style: { "width": "data(w)" } },
      { selector: "edge:selected", style: { "label": "data(label)" } },
    ],
  });
  window.xumpTopology = cy;
  // the layout runs once the graph is in; the container says when it is done (and how long
  // it took) so people and tests can wait for it
  var container = document.getElementById("cy");
  var started = performance.now();
  layOut(cy, container.clientWidth / Math.max(1, container.clientHeight));
  cy.fit(undefined, 20);
  container.dataset.layoutMs = Math.round(performance.now() - started);
  container.dataset.ready = "yes";

  // The layout: each connected part of the wiring left to right with dagre, the parts
  // packed in rows (biggest first) rather than stacked in one long column, and the queues
  // that nothing connects in a grid below them, as wide as the parts (or, alone, about as
  // wide as the screen's shape asks). Everything runs synchronously (no animation).
  function layOut(cy, aspect) {
    var GAP = 40;
    var isolated = cy.nodes().filter(function (n) { return n.degree(false) === 0; });
    var connected = cy.elements().not(isolated);
    var parts = [];
    if (connected.length) {
      connected.layout({ name: "dagre", rankDir: "LR", nodeSep: 12, rankSep: 90, edgeSep: 6,
        fit: false }).run();
      parts = connected.components().sort(function (a, b) { return b.length - a.length; });
    }
    var boxes = parts.map(function (part) { return part.boundingBox({ includeLabels: true }); });
    var area = 0, widest = 0;
    boxes.forEach(function (b) { area += (b.w + GAP) * (b.h + GAP); widest = Math.max(widest, b.w); });
    var width = Math.max(widest, Math.sqrt(area * aspect));
    // shelves: left to right until the row is full, then the next row below
    var x = 0, y = 0, rowHeight = 0, right = 0;
    parts.forEach(function (part, i) {
      var b = boxes[i];
      if (x > 0 && x + b.w > width) {
        x = 0;
        y += rowHeight + GAP;
        rowHeight = 0;
      }
      part.nodes().shift({ x: x - b.x1, y: y - b.y1 });
      x += b.w + GAP;
      right = Math.max(right, x - GAP);
      rowHeight = Math.max(rowHeight, b.h);
    });
    if (!isolated.length) return;
    var top = parts.length ? y + rowHeight + GAP * 2 : 0;
    var cellW = 0, cellH = 0;
    isolated.forEach(function (n) {
      var b = n.boundingBox({ includeLabels: true });
      cellW = Math.max(cellW, b.w + 16);
      cellH = Math.max(cellH, b.h + 16);
    });
    var cols = parts.length
      ? Math.max(1, Math.floor(Math.max(right, cellW) / cellW))
      : Math.max(1, Math.ceil(Math.sqrt(isolated.length * aspect * cellH / cellW)));
    cols = Math.min(cols, isolated.length);
    var ordered = isolated.sort(function (a, b) {
      return a.data("name") < b.data("name") ? -1 : a.data("name") > b.data("name") ? 1 : 0;
    });
    ordered.forEach(function (n, i) {
      n.position({ x: (i % cols) * cellW + cellW / 2, y: top + Math.floor(i / cols) * cellH + cellH / 2 });
    });
  }

  cy.on("tap", "node", function (event) {
    var url = event.target.data("url");
    if (url) window.location.href = url;
  });

  document.getElementById("topology-find").addEventListener("submit", function (event) {
    event.preventDefault();
    var name = document.getElementById("find-queue").value;
    var node = cy.getElementById("q:" + name);
    if (!node.length) return;
    cy.$(":selected").unselect();
    node.select();
    cy.animate({ center: { eles: node }, zoom: Math.max(cy.zoom(), 1.2) }, { duration: 300 });
  });
  document.getElementById("fit").addEventListener("click", function () { cy.fit(undefined, 20); });

  // live numbers
  var nodes = {};
  data.nodes.forEach(function (n) { nodes[n.id] = n; });
  var counters = {};
  function show(name, depth, rate) {
    var node = nodes["q:" + name];
    if (!node) return;
    node.depth = depth;
    var shown = cy.getElementById("q:" + name);
    shown.data("label", label(node, rate));
    var width = rate > 0 ? Math.min(8, 2 + Math.log10(1 + rate) * 2) : undefined;
    shown.outgoers("edge").forEach(function (edge) {
      if (width === undefined) edge.removeData("w"); else edge.data("w", width);
    });
  }
  function fromSnapshot(frame) {
    (frame.queues || []).forEach(function (q) {
      var before = counters[q.name];
      var now = { time: frame.time, published: (q.stats || {}).published || 0 };
      counters[q.name] = now;
      var rate;
      if (before && now.time > before.time) rate = Math.max(0, (now.published - before.published) / (now.time - before.time));
      show(q.name, q.depth, rate);
    });
  }
  var live = false;
  function poll() {
    if (live) return;
    fetch(frameUrl, { credentials: "same-origin" }).then(function (r) { return r.json(); })
      .then(fromSnapshot).catch(function () {});
  }
  setInterval(poll, 2000);
  poll();
  try {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/monitor/");
    socket.onopen = function () { live = true; };
    socket.onclose = function () { live = false; };
    socket.onmessage = function (event) {
      var frame = JSON.parse(event.data);
      if (frame.type !== "monitor") return;
      (frame.queues || []).forEach(function (q) { show(q.name, q.depth, (q.rates || {}).published || 0); });
    };
  } catch (e) { /* polling goes on */ }
})();
