// Xump's STOMP example page (stomp.html): @stomp/stompjs over /ws/stomp/, see docs/stomp.md.
//
// Connect with an API token as the passcode, or with an empty passcode once logged in to
// the console (same origin). Subscriptions are made in onConnect, so that they are made
// again after a reconnect: a dropped socket is opened again after reconnectDelay, and
// what was not acknowledged on the old connection comes back (redelivered: true).
// Every event is appended to window.results (the browser tests read it) and to the log.
(function () {
  "use strict";

  var results = (window.results = []);
  var wanted = []; // the subscriptions asked for, made on every (re)connect
  var count = { send: 0, subscribe: 0, settle: 0, message: 0 };

  var client = new StompJs.Client({
    brokerURL: (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/stomp/",
    reconnectDelay: 1000,
    heartbeatIncoming: 10000,
    heartbeatOutgoing: 10000,
    onConnect: function (frame) {
      record({ event: "connected", server: frame.headers.server }, "connected");
      wanted.forEach(subscribe);
    },
    onStompError: function (frame) {
      // the server closes after an ERROR: trying again would meet the same answer
      record({ event: "error", message: frame.headers.message, body: frame.body }, "error");
      client.deactivate();
    },
    onWebSocketClose: function (event) {
      record({ event: "closed", code: event.code }, client.active ? "reconnecting" : "disconnected");
    },
    onDisconnect: function () {
      record({ event: "disconnected" }, "disconnected");
    },
  });
  // for experiments in the browser's console, and for the tests
  window.stompExample = { client: client, results: results };

  function subscribe(spec) {
    var receipt = "subscribe-" + ++count.subscribe;
    var headers = { ack: spec.ack, "prefetch-count": String(spec.prefetch), receipt: receipt };
    if (spec.selector) headers.selector = spec.selector;
    var subscription = client.subscribe(spec.destination, function (message) {
      received(message, spec.ack);
    }, headers);
    client.watchForReceipt(receipt, function () {
      record({ event: "subscribed", destination: spec.destination, id: subscription.id });
    });
  }

  function send(destination, headers, body) {
    var receipt = "send-" + ++count.send;
    headers.receipt = receipt;
    // the RECEIPT comes once the message is durable (as an HTTP publish's 202)
    client.watchForReceipt(receipt, function () {
      record({ event: "receipt", receipt: receipt, destination: destination });
    });
    client.publish({ destination: destination, headers: headers, body: body });
  }

  function received(message, ack) {
    var n = ++count.message;
    var headers = Object.assign({}, message.headers);
    record({
      event: "message", n: n, destination: headers.destination, body: message.body,
      redelivered: headers.redelivered === "true", headers: headers,
    });
    var row = document.createElement("tr");
    row.id = "message-" + n;
    [String(n), headers.destination, message.body, headers.redelivered].forEach(function (text) {
      var cell = document.createElement("td");
      cell.textContent = text; // never as HTML: the body is anyone's text
      row.appendChild(cell);
    });
    var cell = document.createElement("td");
    if (ack !== "auto") {
      [["ACK", "acked"], ["NACK", "nacked"]].forEach(function (pair) {
        var button = document.createElement("button");
        button.type = "button";
        button.textContent = pair[0];
        button.addEventListener("click", function () {
          settle(message, n, pair[1]);
          cell.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
        });
        cell.appendChild(button);
      });
    }
    row.appendChild(cell);
    document.querySelector("#messages tbody").appendChild(row);
  }

  function settle(message, n, outcome) {
    // with a receipt, the RECEIPT says the server has settled it
    var receipt = "settle-" + ++count.settle;
    client.watchForReceipt(receipt, function () {
      record({ event: outcome, n: n });
    });
    if (outcome === "acked") message.ack({ receipt: receipt });
    else message.nack({ receipt: receipt });
  }

  function record(event, state) {
    results.push(event);
    var line = document.createElement("li");
    line.textContent = JSON.stringify(event);
    document.getElementById("log").appendChild(line);
    if (state) document.getElementById("state").textContent = state;
  }

  function parseHeaders(text) {
    var headers = {};
    text.split("\n").forEach(function (line) {
      var colon = line.indexOf(":");
      if (colon > 0) headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
    });
    return headers;
  }

  function value(id) {
    return document.getElementById(id).value;
  }

  document.getElementById("connect-form").addEventListener("submit", function (event) {
    event.preventDefault();
    client.connectHeaders = { login: "example", passcode: value("passcode") };
    document.getElementById("state").textContent = "connecting";
    client.activate();
  });
  document.getElementById("disconnect").addEventListener("click", function () {
    client.deactivate(); // DISCONNECT: what was not acknowledged goes back to the queue
  });
  document.getElementById("subscribe-form").addEventListener("submit", function (event) {
    event.preventDefault();
    var spec = {
      destination: value("subscribe-destination"), selector: value("selector"),
      ack: value("ack"), prefetch: Number(value("prefetch")) || 10,
    };
    wanted.push(spec);
    if (client.connected) subscribe(spec);
  });
  document.getElementById("send-form").addEventListener("submit", function (event) {
    event.preventDefault();
    send(value("send-destination"), parseHeaders(value("headers")), value("body"));
  });
})();
