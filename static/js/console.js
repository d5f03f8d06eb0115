// Console-wide settings. htmx never runs <script> found in swapped fragments: fragments
// carry data (message fields among them), never code.
(function () {
  "use strict";
  if (window.htmx) {
    htmx.config.allowScriptTags = false;
    htmx.config.historyCacheSize = 0;
  }
})();
