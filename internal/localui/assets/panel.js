// The confirmation panel's countdown. The server enforces the two minutes
// whatever this shows; without JavaScript the panel works the same.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".panel[data-expires-in]").forEach(function (panel) {
    var left = parseInt(panel.getAttribute("data-expires-in"), 10);
    var out = panel.querySelector(".countdown");
    var button = panel.querySelector(".confirm-button");
    panel.scrollIntoView({ block: "center" });
    if (button) { button.focus(); }
    function tick() {
      if (left <= 0) {
        if (button) { button.disabled = true; }
        if (out) { out.textContent = "Expired: click Share agent conversations with Hub again."; }
        return;
      }
      if (out) { out.textContent = left + " s left."; }
      left -= 1;
      setTimeout(tick, 1000);
    }
    tick();
  });
});
