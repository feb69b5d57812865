// The console refreshes its live part by fetching it as server-rendered HTML: no client templates, no
// framework. Forms marked data-confirm ask first (the page's CSP forbids inline handlers).
(function () {
  "use strict";
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  });
  // A preview that loaded hides its ThumbHash placeholder (which would show through a transparent
  // picture); one that failed hides itself, leaving the placeholder. Load and error do not bubble: caught
  // on the way down, for the previews of every refresh.
  document.addEventListener("load", function (e) {
    var t = e.target, ph = t.previousElementSibling;
    if (t.tagName === "IMG" && !t.classList.contains("ph") && ph && ph.classList.contains("ph")) ph.hidden = true;
  }, true);
  document.addEventListener("error", function (e) {
    var t = e.target;
    if (t.tagName === "IMG" && !t.classList.contains("ph") && t.parentNode.classList.contains("preview")) t.hidden = true;
  }, true);
  var live = document.getElementById("live");
  var ms = parseInt(document.body.getAttribute("data-refresh-ms"), 10);
  if (!live || !(ms > 0)) return;
  document.body.setAttribute("data-live", "on");
  var busy = false, last = new Date(), refreshed = 0;
  function pad(n) { return n < 10 ? "0" + n : "" + n; }
  function hhmmss(d) { return pad(d.getUTCHours()) + ":" + pad(d.getUTCMinutes()) + ":" + pad(d.getUTCSeconds()); }
  function stamp(ok) {
    var u = document.getElementById("updated");
    if (ok) last = new Date();
    if (!u) return;
    u.textContent = (ok ? "updated " : "not updated since ") + hhmmss(last) + " UTC";
    u.classList.toggle("stale", !ok);
  }
  function tick() {
    if (busy || document.hidden) return;
    busy = true;
    fetch("/console/live", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401 || r.status === 403) { window.location.reload(); throw new Error("auth"); }
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        stamp(true);
        document.body.setAttribute("data-refreshed", String(++refreshed)); // how many times, for tests
      })
      .catch(function () { stamp(false); })
      .then(function () { busy = false; });
  }
  window.setInterval(tick, ms);
  document.addEventListener("visibilitychange", tick);
})();
