// dsh-orchestra comparison: the table of every pair ("only different", search, pages) and the
// side-by-side panel of one pair. Data comes from the application/json block "compare-data";
// everything taken from it is put on the page with textContent or setAttribute, never as markup.
(function () {
  "use strict";

  var source = document.getElementById("compare-data");
  var data = source ? JSON.parse(source.textContent) : null;
  if (!data) return;
  var $ = function (id) { return document.getElementById(id); };
  var names = data.names, pairs = data.pairs, byId = new Map();  // ids such as "__proto__" are ids like any other
  pairs.forEach(function (p, i) { byId.set(p.id, i); });
  var PAGE = 200, state = { only: false, query: "", page: 0 }, view = [];

  function el(name, attrs, text) {
    var node = document.createElement(name);
    if (attrs) Object.keys(attrs).forEach(function (k) { if (attrs[k] !== null && attrs[k] !== undefined && attrs[k] !== false) node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function value(v) { return v === null || v === undefined ? "—" : Number.isInteger(v) ? String(v) : v.toFixed(3); }
  function preview(text) { return text === null || text === undefined ? "" : text.length > 120 ? text.slice(0, 120) : text; }

  function refilter() {
    var q = state.query.trim().toLowerCase();
    view = [];
    for (var i = 0; i < pairs.length; i++) {
      var p = pairs[i];
      if (state.only && !p.different) continue;
      if (q && (p.id + "\u0000" + (p.base.response || "").slice(0, 2000) + "\u0000" + (p.candidate.response || "").slice(0, 2000)).toLowerCase().indexOf(q) < 0) continue;
      view.push(i);
    }
    state.page = 0;
    render();
  }

  function render() {
    var body = $("pairs-body"), pages = Math.max(1, Math.ceil(view.length / PAGE));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * PAGE, end = Math.min(view.length, start + PAGE), fragment = document.createDocumentFragment();
    for (var k = start; k < end; k++) {
      var p = pairs[view[k]], tr = el("tr", { "class": "diff-row", "data-pair": p.id, tabindex: 0 });
      tr.appendChild(el("td", { "class": "c-id" }, p.id));
      tr.appendChild(el("td", null, p.base.status));
      tr.appendChild(el("td", null, p.candidate.status));
      names.forEach(function (n) {
        var v = p.values[n], td = el("td", { "class": "num" }, value(v[0]) + " → " + value(v[1]));
        if (v[0] !== null && v[1] !== null && v[0] !== v[1]) td.className += v[1] > v[0] ? " pos" : " neg";
        tr.appendChild(td);
      });
      tr.appendChild(el("td", { "class": "preview" }, preview(p.base.response)));
      tr.appendChild(el("td", { "class": "preview" }, preview(p.candidate.response)));
      fragment.appendChild(tr);
    }
    clear(body);
    body.appendChild(fragment);
    $("pairs-info").textContent = view.length + " of " + pairs.length + " pairs";
    $("pairs-page").textContent = "page " + (state.page + 1) + " of " + pages;
    $("pairs-prev").disabled = state.page === 0;
    $("pairs-next").disabled = state.page >= pages - 1;
  }

  var panel = $("pair"), panelBody = $("pair-body");

  function side(title, s, cls) {
    var box = el("div", { "class": "side " + cls });
    box.appendChild(el("h3", null, title + " · " + s.status + (s.error ? " (" + s.error + ")" : "")));
    if (s.response === null || s.response === undefined || s.response === "") box.appendChild(el("p", { "class": "muted response" }, s.response === "" ? "Empty response." : "No response."));
    else box.appendChild(el("pre", { "class": "text response" }, s.response));
    return box;
  }

  function openPair(id) {
    var i = byId.get(id);
    if (i === undefined) return;
    var p = pairs[i];
    clear(panelBody);
    $("pair-title").textContent = p.id;
    if (data.has_prompts) {
      panelBody.appendChild(el("h3", null, "Prompt"));
      panelBody.appendChild(el("pre", { "class": "text", id: "pair-prompt" }, p.prompt === null ? "Not in the dataset." : p.prompt));
    }
    var grid = el("div", { "class": "side-by-side" });
    grid.appendChild(side("Base", p.base, "base"));
    grid.appendChild(side("Candidate", p.candidate, "candidate"));
    panelBody.appendChild(grid);
    panelBody.appendChild(el("h3", null, "Scores"));
    var table = el("table", { "class": "plain", id: "pair-scores" }), head = el("tr");
    ["scorer", "base", "candidate", "base answer / explanation", "candidate answer / explanation"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    var tb = el("tbody");
    names.forEach(function (n) {
      var tr = el("tr", { "data-scorer": n }), b = p.base.scores[n] || {}, c = p.candidate.scores[n] || {};
      tr.appendChild(el("td", null, n));
      tr.appendChild(el("td", { "class": "num" }, value(p.values[n][0])));
      tr.appendChild(el("td", { "class": "num" }, value(p.values[n][1])));
      [b, c].forEach(function (s) { tr.appendChild(el("td", null, [s.answer, s.explanation].filter(function (x) { return x; }).join(" · "))); });
      tb.appendChild(tr);
    });
    table.appendChild(tb);
    panelBody.appendChild(table);
    panel.hidden = false;
    panel.setAttribute("data-pair", p.id);
    $("pair-close").focus();
  }

  function closePair() { panel.hidden = true; panel.removeAttribute("data-pair"); }

  document.addEventListener("click", function (event) {
    var row = event.target.closest && event.target.closest("#comparison tr[data-pair]");
    if (row) openPair(row.getAttribute("data-pair"));
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && !panel.hidden) { closePair(); return; }
    var row = event.target.closest && event.target.closest("#comparison tr[data-pair]");
    if (row && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); openPair(row.getAttribute("data-pair")); }
  });
  $("pair-close").addEventListener("click", closePair);
  $("only-different").addEventListener("change", function (event) { state.only = event.target.checked; refilter(); });
  var timer = null;
  $("pair-search").addEventListener("input", function (event) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.query = event.target.value; refilter(); }, 120);
  });
  $("pairs-prev").addEventListener("click", function () { state.page--; render(); });
  $("pairs-next").addEventListener("click", function () { state.page++; render(); });
  refilter();
  document.body.setAttribute("data-compare-ready", "1");
})();
