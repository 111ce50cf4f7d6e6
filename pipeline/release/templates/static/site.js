// Filters, search and sort on the index; copy buttons on entry pages. No other behaviour:
// every page reads fully without this script.
(function () {
  "use strict";

  function setupFilters(form) {
    var list = document.getElementById("api-list");
    var cards = Array.prototype.slice.call(list.children);
    var query = document.getElementById("filter-q");
    var category = document.getElementById("filter-category");
    var sort = document.getElementById("filter-sort");
    var count = document.getElementById("result-count");
    var empty = document.getElementById("no-results");

    var params = new URLSearchParams(window.location.search);
    query.value = params.get("q") || "";
    if (params.get("category")) category.value = params.get("category");
    if (params.get("sort") === "name") sort.value = "name";

    function byScore(a, b) {
      return Number(b.dataset.score) - Number(a.dataset.score) || byName(a, b);
    }
    function byName(a, b) {
      return a.dataset.name < b.dataset.name ? -1 : a.dataset.name > b.dataset.name ? 1 : 0;
    }

    function apply() {
      var terms = query.value.toLowerCase().split(/\s+/).filter(Boolean);
      var wanted = category.value;
      var shown = 0;
      cards.sort(sort.value === "name" ? byName : byScore).forEach(function (card) {
        var match = (!wanted || card.dataset.category === wanted) &&
          terms.every(function (term) { return card.dataset.search.indexOf(term) !== -1; });
        card.hidden = !match;
        if (match) shown += 1;
        list.appendChild(card);
      });
      count.textContent = shown === cards.length
        ? cards.length + " APIs"
        : "Showing " + shown + " of " + cards.length + " APIs";
      empty.hidden = shown !== 0;
      var next = new URLSearchParams();
      if (query.value) next.set("q", query.value);
      if (wanted) next.set("category", wanted);
      if (sort.value !== "score") next.set("sort", sort.value);
      var search = next.toString();
      try {
        window.history.replaceState(null, "", search ? "?" + search : window.location.pathname);
      } catch (error) {
        // Some file:// contexts refuse history changes; filtering still works.
      }
    }

    form.addEventListener("submit", function (event) { event.preventDefault(); apply(); });
    query.addEventListener("input", apply);
    category.addEventListener("change", apply);
    sort.addEventListener("change", apply);
    form.hidden = false;
    apply();
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    var done = document.execCommand("copy");
    document.body.removeChild(area);
    return done ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function setupCopy(button) {
    var source = document.getElementById(button.dataset.copy);
    var status = document.getElementById("copy-status");
    button.hidden = false;
    button.addEventListener("click", function () {
      copyText(source.textContent).then(function () {
        button.textContent = "Copied";
        if (status) status.textContent = "Copied to the clipboard.";
      }, function () {
        button.textContent = "Copy failed";
        if (status) status.textContent = "Could not copy; select the text instead.";
      }).then(function () {
        window.setTimeout(function () { button.textContent = "Copy"; }, 2000);
      });
    });
  }

  var form = document.getElementById("filters");
  if (form) setupFilters(form);
  Array.prototype.forEach.call(document.querySelectorAll("button[data-copy]"), setupCopy);
})();
