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
