// The dead-letter inspector: a group's "choose all" box ticks every letter of its group.
(function () {
  "use strict";
  document.querySelectorAll(".choose-all").forEach(function (box) {
    box.addEventListener("change", function () {
      document.querySelectorAll('input[name="letter"][data-group="' + box.dataset.group + '"]')
        .forEach(function (one) { one.checked = box.checked; });
    });
  });
})();
