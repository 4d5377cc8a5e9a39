// The console's own script: deadline countdowns, htmx's CSRF header, and confirmations. No inline script
// anywhere (the Content-Security-Policy allows scripts from the console itself only).
(function () {
  "use strict";

  function span(seconds) {
    seconds = Math.floor(Math.abs(seconds));
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + String(seconds % 60).padStart(2, "0") + "s";
    if (seconds < 86400) return Math.floor(seconds / 3600) + "h " + String(Math.floor((seconds % 3600) / 60)).padStart(2, "0") + "m";
    return Math.floor(seconds / 86400) + "d " + Math.floor((seconds % 86400) / 3600) + "h";
  }

  function tick() {
    var now = Date.now() / 1000;
    document.querySelectorAll("[data-deadline]").forEach(function (el) {
      var left = parseFloat(el.getAttribute("data-deadline")) - now;
      el.textContent = left > 0 ? "in " + span(left) : "expired " + span(left) + " ago";
      el.classList.toggle("urgent", left < 600);
    });
    document.querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = span(now - parseFloat(el.getAttribute("data-since"))) + " ago";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
  });
  document.addEventListener("htmx:afterSwap", tick);
  // A form that cannot be undone asks first (data-confirm: the question).
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) event.detail.headers["X-CSRF-Token"] = meta.getAttribute("content");
  });
})();
