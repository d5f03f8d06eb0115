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
      label: label(n), dead: n.dead ? "yes" : "no", traced: n.traced ? "yes" : "no" } });
  });
  data.edges.forEach(function (e) {
    elements.push({ group: "edges", data: { id: e.id, source: e.source, target: e.target,
      action: e.action, enabled: e.enabled ? "yes" : "no", traced: e.traced ? "yes" : "no",
      crosses: e.crosses ? "yes" : "no",
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
      { selector: 'node[kind = "fan"]', style: { "shape": "round-tag", "border-style": "dotted", "background-color": "#fff8c5" } },
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
      // between queues on different shards (SPEC §10): an orange halo under the line, which
      // keeps its own dash and colour, and a square at its middle
      { selector: 'edge[crosses = "yes"]', style: { "underlay-color": "#fb8f44", "underlay-opacity": 0.45,
        "underlay-padding": 4, "mid-target-arrow-shape": "square", "mid-target-arrow-color": "#bc4c00" } },
      // live traffic: an edge leaving a busy queue is drawn thicker (w set from its rate)
      { selector: 'edge[w][action != "dead-letter"]', style: { "width": "data(w)" } },
      { selector: "edge:selected", style: { "label": "data(label)" } },
      // the path of one message (?mid=, SPEC §12): drawn over the wiring
      { selector: 'node[traced = "yes"]', style: { "border-width": 3, "border-color": "#bf8700", "background-color": "#fff8c5" } },
      { selector: 'edge[traced = "yes"]', style: { "width": 5, "line-color": "#bf8700", "target-arrow-color": "#bf8700", "opacity": 1, "z-index": 10 } },
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

  // The layout: each connected part of the wiring left to right with dagre, the queues
  // nothing connects in one grid block about the shape of the screen, and the parts and the
  // block packed in rows (tallest first, shelf by shelf) rather than stacked in one long
  // column, the rows about as wide as the screen's shape asks. Synchronous (no animation).
  // A rank dagre made taller than the part needs (a fan-out to 190 queues is one column of
  // 190) is wrapped into side-by-side columns of at most `most` nodes, in dagre's order; the
  // ranks after it move right to make room.
  function wrapRanks(part) {
    var nodes = part.nodes();
    var most = Math.max(12, Math.ceil(Math.sqrt(nodes.length * 3)));
    var ranks = {};
    nodes.forEach(function (n) {
      var key = Math.round(n.position("x"));
      (ranks[key] = ranks[key] || []).push(n);
    });
    var keys = Object.keys(ranks).map(Number).sort(function (a, b) { return a - b; });
    if (!keys.some(function (k) { return ranks[k].length > most; })) return;
    var middle = part.boundingBox({ includeLabels: false });
    middle = (middle.y1 + middle.y2) / 2;
    var shift = 0, height = 0, kept = [];
    keys.forEach(function (key) {
      var rank = ranks[key];
      if (rank.length <= most) {
        rank.forEach(function (n) { n.position("x", n.position("x") + shift); });
        kept.push(rank);
        return;
      }
      rank.sort(function (a, b) { return a.position("y") - b.position("y"); });
      var columnW = 0, rowH = 0;
      rank.forEach(function (n) {
        var b = n.boundingBox({ includeLabels: true });
        columnW = Math.max(columnW, b.w);
        rowH = Math.max(rowH, b.h);
      });
      columnW += 30;
      rowH += 12;
      var columns = Math.ceil(rank.length / most);
      var perColumn = Math.ceil(rank.length / columns);
      var top = middle - (perColumn * rowH) / 2;
      rank.forEach(function (n, i) {
        n.position({ x: key + shift + Math.floor(i / perColumn) * columnW,
                     y: top + (i % perColumn) * rowH + rowH / 2 });
      });
      shift += (columns - 1) * columnW;
      height = Math.max(height, perColumn * rowH);
    });
    // the ranks left as they were spread over the new height, not the old one
    kept.forEach(function (rank) {
      var ys = rank.map(function (n) { return n.position("y"); });
      if (Math.max.apply(null, ys) - Math.min.apply(null, ys) <= height) return;
      rank.sort(function (a, b) { return a.position("y") - b.position("y"); });
      rank.forEach(function (n, i) {
        n.position("y", middle - height / 2 + (i + 0.5) * (height / rank.length));
      });
    });
  }

  function layOut(cy, aspect) {
    var GAP = 40;
    var isolated = cy.nodes().filter(function (n) { return n.degree(false) === 0; });
    var connected = cy.elements().not(isolated);
    var items = []; // {w, h, place(x, y)}: what is packed
    if (connected.length) {
      connected.layout({ name: "dagre", rankDir: "LR", nodeSep: 12, rankSep: 90, edgeSep: 6,
        fit: false }).run();
      connected.components().forEach(function (part) {
        wrapRanks(part);
        var b = part.boundingBox({ includeLabels: true });
        items.push({ w: b.w, h: b.h, place: function (x, y) {
          part.nodes().shift({ x: x - b.x1, y: y - b.y1 });
        } });
      });
    }
    if (isolated.length) {
      var cellW = 0, cellH = 0;
      isolated.forEach(function (n) {
        var b = n.boundingBox({ includeLabels: true });
        cellW = Math.max(cellW, b.w + 16);
        cellH = Math.max(cellH, b.h + 16);
      });
      var cols = Math.min(isolated.length,
        Math.max(1, Math.ceil(Math.sqrt(isolated.length * aspect * cellH / cellW))));
      var ordered = isolated.sort(function (a, b) {
        return a.data("name") < b.data("name") ? -1 : a.data("name") > b.data("name") ? 1 : 0;
      });
      items.push({ w: cols * cellW, h: Math.ceil(isolated.length / cols) * cellH,
        place: function (x, y) {
          ordered.forEach(function (n, i) {
            n.position({ x: x + (i % cols) * cellW + cellW / 2,
                         y: y + Math.floor(i / cols) * cellH + cellH / 2 });
          });
        } });
    }
    var area = 0, widest = 0;
    items.forEach(function (it) { area += (it.w + GAP) * (it.h + GAP); widest = Math.max(widest, it.w); });
    var width = Math.max(widest, Math.sqrt(area * aspect));
    items.sort(function (a, b) { return b.h - a.h; });
    var x = 0, y = 0, rowHeight = 0;
    items.forEach(function (it) {
      if (x > 0 && x + it.w > width) {
        x = 0;
        y += rowHeight + GAP;
        rowHeight = 0;
      }
      it.place(x, y);
      x += it.w + GAP;
      rowHeight = Math.max(rowHeight, it.h);
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
