// The index's list of APIs (from the search index), with filters, search and sort; search
// and sort of the cards a category page has drawn; copy buttons on entry pages. Without this
// script every page but the index's list reads fully, and the category pages list every API.
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  // The explicit direction controls, left out of an entry's name and provider on its card as
  // the pages leave them out (`pages.directionless`).
  var DIRECTION_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;

  // One element with a class and, optionally, text (always as text, never as markup).
  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // `why`: why a provisional grade is provisional when its item does not say (`provisionalWhy`,
  // what the entry's Latency waits for, as its category page's card says): the rule alone.
  function gradeBadge(item, why) {
    if (item.grade === undefined) return element("span", "grade grade-none", "Not scored yet");
    // The band's class colours the badge: grade-b for B (and B+ or B-).
    var band = "grade-" + item.grade.charAt(0).toLowerCase();
    var badge = element("span", "grade " + band + (item.provisional ? " provisional" : ""));
    var grade = element("abbr", "", item.grade);
    grade.title = "Builder grade";
    badge.append(grade, " ", element("span", "percent", item.percent + "% builder-friendly"));
    if (item.provisional) {
      var word = element("span", "provisional-word", "provisional");
      word.title = item.provisionalWhy || why;
      badge.append(" ", word);
    }
    return badge;
  }

  // What the filters and the sort read of one search item; its card is drawn when shown.
  function record(item) {
    return {
      item: item,
      name: item.name.toLowerCase(),
      category: item.category,
      score: item.percent === undefined ? -1 : item.percent + (item.provisional ? 0 : 0.5),
      search: [item.name, item.provider, item.description]
        .concat(item.tags || []).filter(Boolean).join(" ").toLowerCase(),
      card: null
    };
  }

  // The card of one search item: the same markup as the cards of the category pages.
  function card(found, names) {
    var item = found.item;
    var li = element("li", "card");
    li.dataset.id = item.id;
    li.dataset.name = found.name;
    li.dataset.category = item.category;
    li.dataset.score = found.score;
    li.dataset.search = found.search;

    var head = element("div", "card-head");
    var dot = document.createElementNS(SVG, "svg");
    dot.setAttribute("class", "dot");
    dot.setAttribute("width", "12");
    dot.setAttribute("height", "12");
    dot.setAttribute("viewBox", "0 0 12 12");
    dot.setAttribute("aria-hidden", "true");
    dot.setAttribute("focusable", "false");
    var circle = document.createElementNS(SVG, "circle");
    circle.setAttribute("cx", "6");
    circle.setAttribute("cy", "6");
    circle.setAttribute("r", "6");
    circle.setAttribute("fill", item.color || "#888888");
    dot.appendChild(circle);
    // Text from the entry is isolated (<bdi>), so direction controls in it never reorder
    // the card's own words around it; an isolate's end of its own would close the <bdi>.
    var title = element("h3");
    var link = element("a");
    link.href = "apis/" + encodeURIComponent(item.id) + ".html";
    link.appendChild(element("bdi", "", item.name.replace(DIRECTION_CONTROLS, "")));
    title.appendChild(link);
    head.append(dot, title);
    li.appendChild(head);

    var provider = element("p", "provider");
    provider.append(element("bdi", "", item.provider.replace(DIRECTION_CONTROLS, "")), " · ");
    var category = element("a", "", names.labels[item.category] || item.category);
    category.href = "categories/" + encodeURIComponent(item.category) + ".html";
    provider.appendChild(category);
    li.appendChild(provider);
    if (item.description) {
      // Its direction from its own text (right to left for Arabic), as the category pages draw it.
      var description = element("p", "description", item.description);
      description.dir = "auto";
      li.appendChild(description);
    }

    var badges = element("p", "badges");
    badges.append(element("span", "badge state-" + item.state, names.states[item.state]));
    if (item.lifecycle && item.lifecycle !== "active") {
      badges.append(" ", element("span", "badge lifecycle-" + item.lifecycle,
        names.lifecycle[item.lifecycle]));
    }
    badges.append(" ", gradeBadge(item, names.provisional));
    if (item.https !== undefined) {
      badges.append(" ", item.https ? element("span", "badge https-yes", "HTTPS")
        : element("span", "badge https-no", "No HTTPS"));
    }
    if (item.cors) badges.append(" ", element("span", "badge cors-" + item.cors, "CORS: " + item.cors));
    if (item.authType) {
      badges.append(" ", element("span", "badge auth", "Auth: " + names.auth[item.authType]));
    }
    // A free API is "Free": "Free tier" would suggest a paid product past it.
    if (item.freeOnly || item.hasFreeTier) {
      badges.append(" ", element("span", "badge free", item.freeOnly ? "Free" : "Free tier"));
    }
    li.appendChild(badges);
    if (item.successor) {
      // What replaces a deprecated entry, by its name in the index (its id if not there).
      var successor = element("p", "successor");
      var replacement = element("a");
      replacement.href = "apis/" + encodeURIComponent(item.successor) + ".html";
      replacement.appendChild(element("bdi", "",
        (names.byId[item.successor] || item.successor).replace(DIRECTION_CONTROLS, "")));
      successor.append("Use ", replacement, " instead.");
      li.appendChild(successor);
    }
    if (item.tags && item.tags.length) {
      var tags = element("ul", "tags");
      tags.setAttribute("aria-label", "Tags");
      item.tags.forEach(function (tag) { tags.appendChild(element("li", "", tag)); });
      li.appendChild(tags);
    }
    return li;
  }

  // What the filters and the sort read of a card a category page has drawn.
  function drawn(li) {
    return {
      name: li.dataset.name,
      category: li.dataset.category,
      score: Number(li.dataset.score),
      search: li.dataset.search,
      card: li
    };
  }

  function countOf(n) {
    return n === 1 ? "1 API" : n + " APIs";
  }

  // Search and sort, and on the index the category filter; the filters live in the address.
  // The index builds its cards from the search index (api/search.json), a page of cards at a
  // time, then "Show more"; a category page has drawn every card and the script hides and
  // orders them in place.
  function setupFilters(form) {
    var list = document.getElementById("api-list");
    var query = document.getElementById("filter-q");
    var category = document.getElementById("filter-category");
    var sort = document.getElementById("filter-sort");
    var count = document.getElementById("result-count");
    var empty = document.getElementById("no-results");
    var more = document.getElementById("show-more");
    var moreStatus = document.getElementById("more-status");
    var fromIndex = Boolean(list.dataset.source);
    var pageSize = fromIndex ? Number(list.dataset.pageSize) || 100 : Infinity;
    var names = fromIndex ? {
      labels: JSON.parse(list.dataset.labels),
      states: JSON.parse(list.dataset.states),
      auth: JSON.parse(list.dataset.auth),
      lifecycle: JSON.parse(list.dataset.lifecycle),
      provisional: list.dataset.provisional
    } : null;
    var records = [];
    var matches = [];
    var limit = pageSize;

    var params = new URLSearchParams(window.location.search);
    query.value = params.get("q") || "";
    if (category && params.get("category")) category.value = params.get("category");
    if (params.get("sort") === "name") sort.value = "name";

    function byScore(a, b) {
      return b.score - a.score || byName(a, b);
    }
    function byName(a, b) {
      return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    }

    // The cards up to the limit; `from`, after "Show more", is the first new card, whose link
    // takes the focus before the button may hide (a hidden button would drop it to the page).
    function show(from) {
      var shown = matches.slice(0, limit).map(function (found) {
        if (!found.card) found.card = card(found, names);
        return found.card;
      });
      if (!fromIndex) {
        records.forEach(function (found) { found.card.hidden = true; });
        shown.forEach(function (li) {
          li.hidden = false;
          list.appendChild(li);
        });
        return;
      }
      list.replaceChildren.apply(list, shown);
      if (from !== undefined && from < shown.length) {
        shown[from].querySelector("h3 a").focus();
        moreStatus.textContent = (shown.length - from) + " more shown: " + shown.length +
          " of " + countOf(matches.length) + ".";
      }
      var left = matches.length - shown.length;
      more.hidden = left <= 0;
      more.textContent = "Show " + Math.min(left, pageSize) + " more (" + left + " not shown)";
    }

    function apply() {
      var terms = query.value.toLowerCase().split(/\s+/).filter(Boolean);
      var wanted = category ? category.value : "";
      matches = records.filter(function (found) {
        return (!wanted || found.category === wanted) &&
          terms.every(function (term) { return found.search.indexOf(term) !== -1; });
      }).sort(sort.value === "name" ? byName : byScore);
      limit = pageSize;
      show();
      count.textContent = matches.length === records.length
        ? countOf(records.length)
        : "Showing " + matches.length + " of " + countOf(records.length);
      empty.hidden = matches.length !== 0;
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

    function start(found) {
      records = found;
      form.addEventListener("submit", function (event) { event.preventDefault(); apply(); });
      query.addEventListener("input", apply);
      if (category) category.addEventListener("change", apply);
      sort.addEventListener("change", apply);
      form.hidden = false;
      apply();
    }

    if (!fromIndex) {
      start(Array.prototype.map.call(list.children, drawn));
      return;
    }
    more.addEventListener("click", function () {
      var from = limit;
      limit += pageSize;
      show(from);
    });
    fetch(list.dataset.source).then(function (response) {
      if (!response.ok) throw new Error("HTTP " + response.status);
      return response.json();
    }).then(function (index) {
      names.byId = {};
      index.apis.forEach(function (item) { names.byId[item.id] = item.name; });
      start(index.apis.map(record));
    }).catch(function () {
      document.getElementById("load-error").hidden = false;
    });
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
      // A sample shown otherwise than stored (indented) has its stored text on the button.
      var text = button.dataset.text !== undefined ? button.dataset.text : source.textContent;
      copyText(text).then(function () {
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
