// The operators' page of fencekit (package dashboard). Two things, no framework, no build:
// a confirmation before a form with data-confirm is posted (force release), and, when the
// body has data-refresh-ms, the page's #live part read again every so often: the page's own
// URL fetched and its #live put in place of this one's.
(function () {
  "use strict";

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      e.preventDefault();
    }
  });

  // The notice of a release is for this visit: leave it out of the URL that refreshes read,
  // and that a reload or a bookmark would show again.
  var url = new URL(window.location.href);
  if (url.searchParams.has("released")) {
    url.searchParams.delete("released");
    window.history.replaceState(null, "", url.toString());
  }

  var every = Number(document.body.dataset.refreshMs || 0);
  if (!every) {
    return;
  }
  var status = document.getElementById("refresh-status");
  var say = function (text) {
    if (status) {
      status.textContent = text;
    }
  };
  var again = function () {
    window.setTimeout(refresh, every);
  };
  var refresh = function () {
    if (document.hidden) {
      again();
      return;
    }
    window.fetch(window.location.href, { cache: "no-store", credentials: "same-origin" })
      .then(function (res) {
        if (!res.ok) {
          throw new Error(res.status + " " + res.statusText);
        }
        return res.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var live = document.getElementById("live");
        if (fresh && live) {
          live.replaceWith(document.adoptNode(fresh));
        }
        say("");
      })
      .catch(function (err) {
        say("Refresh failed: " + err.message + "; trying again.");
      })
      .finally(again);
  };
  again();
})();
