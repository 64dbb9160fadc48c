// Kompakt console: pages keep themselves up to date while you watch.
// Every page is also JSON (data-json on <body>). Every few seconds we fetch that JSON; when it
// differs from the last, we fetch the page again and swap in its live sections ([data-live]),
// so forms the user is typing into (outside those sections) are left alone. Charts inside a
// live section come back with a new ?v= when their data changed: they are loaded before the
// section is swapped in (from the browser's cache then), so a chart never blinks.
(function () {
  "use strict";
  var body = document.body;
  var every = parseInt(body.dataset.refresh, 10) || 3000;
  var stamp = document.getElementById("updated");
  var last = null;
  if (!document.querySelector("[data-live]")) { return; }

  function preload(img) {
    return new Promise(function (done) {
      var probe = new Image();
      probe.onload = probe.onerror = function () { done(); };
      probe.src = img.getAttribute("src");
    });
  }

  function swap() {
    return fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var doc = new DOMParser().parseFromString(html, "text/html");
        return Promise.all(Array.prototype.map.call(document.querySelectorAll("[data-live]"), function (el) {
          var fresh = doc.getElementById(el.id);
          if (!fresh || fresh.innerHTML === el.innerHTML) { return null; }
          // load the section's new charts first, so the page never shows an empty frame
          return Promise.all(Array.prototype.map.call(fresh.querySelectorAll("img[data-chart]"), preload))
            .then(function () { el.replaceWith(document.importNode(fresh, true)); });
        }));
      });
  }

  // Poll no more often than every `every` ms, and leave at least ten times as long as the last
  // answer took between two polls: a page that is costly to compute (record counts of a big
  // topic) then costs the broker at most about a tenth of a core while it is open.
  function tick() {
    if (document.hidden) { return setTimeout(tick, every); }
    var started = Date.now();
    fetch(body.dataset.json, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (text === null) { return; }
        var changed = last !== null && text !== last;
        last = text;
        return (changed ? swap() : Promise.resolve()).then(function () {
          if (stamp) { stamp.textContent = "updated " + new Date().toLocaleTimeString(); }
        });
      })
      .catch(function () { if (stamp) { stamp.textContent = "offline?"; } })
      .then(function () { setTimeout(tick, Math.max(every, 10 * (Date.now() - started))); });
  }

  tick();
})();
