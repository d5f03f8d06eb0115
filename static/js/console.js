// Console-wide settings. htmx never runs <script> found in swapped fragments: fragments
// carry data (message fields among them), never code.
(function () {
  "use strict";
  if (window.htmx) {
    htmx.config.allowScriptTags = false;
    htmx.config.historyCacheSize = 0;
  }
})();

// A form with data-confirm asks before it submits (no inline onsubmit: the CSP forbids it).
document.addEventListener("submit", function (event) {
  "use strict";
  var question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

// The selector builder's further conditions (SPEC §12): add a row from the page's
// <template>, remove a row (no inline handlers: the CSP forbids them).
document.addEventListener("click", function (event) {
  "use strict";
  var target = event.target;
  if (!(target instanceof Element)) return;
  if (target.matches("[data-add-condition]")) {
    var template = document.getElementById("condition-template");
    var rows = document.getElementById("more-conditions");
    if (template && rows) rows.appendChild(template.content.cloneNode(true));
  } else if (target.matches("[data-remove-condition]")) {
    var row = target.closest(".condition");
    if (row) row.remove();
  }
});
