// dsh-orchestra view: every page is built here from the JSON API, with textContent only.
(function () {
  "use strict";
  var boot = JSON.parse(document.getElementById("boot").textContent);
  var TOKEN = boot.token;
  var main = document.getElementById("main");
  var crumbs = document.getElementById("crumbs");
  var POLL_MS = 500;

  function el(name, attrs, text) {
    var node = document.createElement(name);
    if (attrs) Object.keys(attrs).forEach(function (k) { if (attrs[k] !== null && attrs[k] !== undefined && attrs[k] !== false) node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent) { for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]); return parent; }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function url(path, params) {
    var q = new URLSearchParams(params || {});
    q.set("token", TOKEN);
    return path + "?" + q.toString();
  }
  function api(path, params, options) {
    return fetch(url(path, params), options).then(function (r) {
      return r.json().then(function (body) { if (!r.ok) { var e = new Error(body.error || r.statusText); e.body = body; throw e; } return body; });
    });
  }
  function num(v, digits) {
    if (v === null || v === undefined || (typeof v === "number" && !isFinite(v))) return "—";
    if (typeof v !== "number") return String(v);
    if (Number.isInteger(v)) return v.toLocaleString("en");
    return v.toFixed(digits === undefined ? 3 : digits);
  }
  function secs(v) {
    if (v === null || v === undefined) return "—";
    return v < 1 ? (v * 1000).toFixed(0) + " ms" : v < 120 ? v.toFixed(2) + " s" : (v / 60).toFixed(1) + " min";
  }
  function text(v) { return v === null || v === undefined ? "" : Array.isArray(v) ? v.join(" | ") : String(v); }
  function card(label, value, id, cls) {
    return add(el("div", { "class": "card " + (cls || ""), id: id }), el("div", { "class": "k" }, label), el("div", { "class": "v" }, value));
  }
  function crumb(parts) {
    clear(crumbs);
    parts.forEach(function (p) {
      crumbs.appendChild(document.createTextNode(" / "));
      crumbs.appendChild(p[1] ? el("a", { href: p[1] }, p[0]) : el("span", null, p[0]));
    });
  }
  function problem(message) { return el("p", { "class": "problem", role: "alert" }, message); }
  function badge(status) { return el("span", { "class": "badge s-" + String(status).replace(/[^a-z0-9-]/gi, "") }, status); }
  function fixed(v) { return v === null || v === undefined || !isFinite(v) ? "—" : Number(v).toFixed(4); }
  function interval(s) {
    if (!s || s.mean === null || s.mean === undefined) return "—";
    return fixed(s.mean) + (s.ci95 ? " [" + fixed(s.ci95[0]) + ", " + fixed(s.ci95[1]) + "]" : "");
  }

  // ---- runs ---------------------------------------------------------------------------------
  function runsPage() {
    crumb([]);
    var box = el("section", { id: "runs" });
    add(box, el("h2", null, "Runs"));
    var table = el("table", { "class": "plain", id: "runs-table" });
    var tbody = el("tbody");
    add(table, add(el("thead"), add(el("tr"), el("th", null, "compare"), el("th", null, "run"), el("th", null, "state"),
      el("th", { "class": "num" }, "items"), el("th", { "class": "num" }, "ok"), el("th", { "class": "num" }, "error"),
      el("th", null, "scores (mean [95% interval])"), el("th", { "class": "num" }, "cost (USD)"), el("th", null, "started"))), tbody);
    var button = el("button", { type: "button", id: "compare-button", disabled: "" }, "Compare the two checked runs");
    add(box, table, add(el("p"), button));
    clear(main);
    add(main, box);
    button.addEventListener("click", function () {
      var chosen = Array.prototype.map.call(document.querySelectorAll("input.pick:checked"), function (i) { return i.value; });
      if (chosen.length === 2) location.href = url("/compare", { a: chosen[0], b: chosen[1] });
    });
    function draw(data) {
      var picked = {};
      document.querySelectorAll("input.pick:checked").forEach(function (i) { picked[i.value] = true; });
      clear(tbody);
      data.runs.forEach(function (run) {
        var tr = el("tr", { "data-run": run.n });
        var pick = el("input", { type: "checkbox", "class": "pick", value: run.n, "aria-label": "pick " + run.name });
        if (picked[run.n]) pick.checked = true;
        var scores = el("td", { "class": "scores" });
        Object.keys(run.scores || {}).forEach(function (name) {
          add(scores, el("div", { "data-scorer": name }, name + ": " + interval(run.scores[name])));
        });
        add(tr, add(el("td"), pick), add(el("td"), el("a", { href: url("/run/" + run.n), "class": "run-link" }, run.name),
          el("div", { "class": "muted small" }, run.results)),
          add(el("td", { "class": "state" }, run.live ? "live" : "finished"), run.problem ? problem(run.problem) : null),
          el("td", { "class": "num items" }, num(run.items)), el("td", { "class": "num ok" }, num(run.ok)),
          el("td", { "class": "num error" }, num(run.error)), scores, el("td", { "class": "num" }, num(run.cost_usd, 6)),
          el("td", null, run.start_time || "—"));
        tbody.appendChild(tr);
      });
      document.querySelectorAll("input.pick").forEach(function (i) {
        i.addEventListener("change", function () { button.disabled = document.querySelectorAll("input.pick:checked").length !== 2; });
      });
      button.disabled = document.querySelectorAll("input.pick:checked").length !== 2;
      drawWorkflows(data.workflows || []);
      document.body.dataset.ready = "1";
      return data.runs.some(function (r) { return r.live || r.parsed < r.lines || r.unread_bytes; });
    }
    var flows = el("section", { id: "workflows", hidden: "" });
    add(main, flows);
    function drawWorkflows(list) {
      flows.hidden = !list.length;
      clear(flows);
      if (!list.length) return;
      var tb = el("tbody");
      list.forEach(function (w) {
        add(tb, add(el("tr", { "data-workflow": w.n }),
          add(el("td"), el("a", { href: url("/workflow/" + w.n), "class": "workflow-link" }, w.name), el("div", { "class": "muted small" }, w.file)),
          add(el("td", { "class": "state" }), w.problem ? problem(w.problem) : badge(w.status)),
          el("td", { "class": "num steps" }, w.problem ? "—" : num(w.ok_steps) + " / " + num(w.steps)),
          el("td", { "class": "num" }, w.problem ? "—" : num(w.pending)), el("td", { "class": "num" }, secs(w.duration_s)),
          el("td", null, w.first_failure || "")));
      });
      add(flows, el("h2", null, "Workflow runs"), add(el("table", { "class": "plain", id: "workflows-table" }),
        add(el("thead"), add(el("tr"), el("th", null, "workflow"), el("th", null, "status"), el("th", { "class": "num" }, "steps ok"),
          el("th", { "class": "num" }, "waiting for answers"), el("th", { "class": "num" }, "duration"), el("th", null, "first failure"))), tb),
        el("p", { "class": "muted small" }, "Workflow results: the JSON of `dsh-orchestra run --json` (WorkflowResult.to_json())."));
    }
    function tick() {
      api("/api/runs").then(function (data) { if (draw(data)) setTimeout(tick, POLL_MS); })
        .catch(function (e) { add(main, problem(e.message)); });
    }
    tick();
  }

  // ---- run ----------------------------------------------------------------------------------
  function runPage() {
    var n = boot.n;
    var state = { offset: 0, limit: 50, sort: "file", order: "asc" };
    var filters = {};
    var seen = null, scorers = [], expanded = {};
    clear(main);
    var head = el("section", { id: "run-summary" });
    var controls = el("section", { id: "control", hidden: "" });
    var items = el("section", { id: "items" });
    add(main, head, controls, items);
    var form = el("div", { "class": "controls", id: "filters" });
    var table = el("table", { "class": "items", id: "items-table" });
    var info = el("span", { id: "items-info", "class": "muted" });
    var pager = add(el("div", { "class": "pager" }), el("button", { type: "button", id: "page-prev" }, "‹ Prev"),
      el("button", { type: "button", id: "page-next" }, "Next ›"), info);
    add(items, el("h2", null, "Items"), form, add(el("div", { "class": "table-box" }, null), table), pager);
    pager.querySelector("#page-prev").addEventListener("click", function () { state.offset = Math.max(0, state.offset - state.limit); loadItems(); });
    pager.querySelector("#page-next").addEventListener("click", function () { state.offset += state.limit; loadItems(); });

    function select(id, label, values, key) {
      var s = el("select", { id: id, "aria-label": label });
      add(s, el("option", { value: "" }, "any " + label));
      values.forEach(function (v) { add(s, el("option", { value: v }, v)); });
      if (filters[key]) s.value = filters[key];
      s.addEventListener("change", function () { filters[key] = s.value; state.offset = 0; loadItems(); });
      return s;
    }
    function drawFilters(stats) {
      clear(form);
      var search = el("input", { type: "search", id: "search", placeholder: "Search id, prompt, response…", "aria-label": "search" });
      search.value = filters.q || "";
      var timer = null;
      search.addEventListener("input", function () {
        clearTimeout(timer);
        timer = setTimeout(function () { filters.q = search.value; state.offset = 0; loadItems(); }, 250);
      });
      add(form, search,
        select("filter-status", "status", Object.keys(stats.status), "status"),
        select("filter-error", "error", Object.keys(stats.errors).concat(["none"]), "error"),
        select("filter-finish", "finish reason", Object.keys(stats.finish_reasons), "finish_reason"),
        stats.epochs.length ? select("filter-epoch", "epoch", stats.epochs.map(String), "epoch") : null);
      Object.keys(stats.scores).forEach(function (name) {
        var input = el("input", { type: "text", "class": "score-filter", "data-scorer": name, placeholder: name + " (<1, 1, none)", size: 12, "aria-label": "score " + name });
        input.value = filters["score." + name] || "";
        input.addEventListener("change", function () { filters["score." + name] = input.value; state.offset = 0; loadItems(); });
        add(form, input);
      });
      if (stats.metadata_keys.length) {
        var key = el("select", { id: "meta-key", "aria-label": "metadata field" });
        stats.metadata_keys.forEach(function (k) { add(key, el("option", { value: k }, "metadata." + k)); });
        var value = el("input", { type: "text", id: "meta-value", placeholder: "value", size: 10, "aria-label": "metadata value" });
        var apply = function () {
          Object.keys(filters).forEach(function (k) { if (k.indexOf("meta.") === 0) delete filters[k]; });
          if (value.value) filters["meta." + key.value] = value.value;
          state.offset = 0; loadItems();
        };
        value.addEventListener("change", apply);
        key.addEventListener("change", apply);
        add(form, key, value);
      }
      var reset = el("button", { type: "button", id: "reset" }, "Reset");
      reset.addEventListener("click", function () { filters = {}; state.offset = 0; drawFilters(stats); loadItems(); });
      add(form, reset);
    }
    function drawHead(run) {
      clear(head);
      crumb([[run.name, null]]);
      var s = run.stats;
      var summary = run.summary_data || {};
      var cards = add(el("div", { "class": "cards" }),
        card("lines", num(run.lines), "card-lines"), card("items", num(run.items), "card-items"),
        card("ok", num(run.ok), "card-ok", "ok"), card("error", num(run.error), "card-error", run.error ? "bad" : ""),
        card("p50", secs(s.p50_s), "card-p50"), card("p95", secs(s.p95_s), "card-p95"),
        card("tokens", num(s.tokens), "card-tokens"), card("cost (USD)", num(run.cost_usd, 6), "card-cost"));
      var p = run.progress;
      if (p && p.total) {
        add(cards, card("progress", num(p.done) + " / " + num(p.total), "card-progress"),
          card("ETA", p.eta_s === null || p.eta_s === undefined ? "—" : secs(p.eta_s), "card-eta"));
      }
      add(head, add(el("h2", null, run.name + " "), el("span", { "class": "badge " + (run.live ? "s-live" : "s-ok"), id: "run-state" }, run.live ? "live" : "finished")),
        el("p", { "class": "muted small" }, run.results), cards);
      if (run.problem) add(head, problem(run.problem));
      if (run.pending_bytes) add(head, el("p", { "class": "muted small", id: "pending" }, "a last line of " + run.pending_bytes + " bytes is still being written"));
      var names = Object.keys(run.scores || {});
      if (names.length) {
        var t = add(el("table", { "class": "plain", id: "scores" }), add(el("thead"), add(el("tr"), el("th", null, "scorer"),
          el("th", { "class": "num" }, "mean"), el("th", null, "95% interval"), el("th", { "class": "num" }, "n"))));
        var tb = el("tbody");
        names.forEach(function (name) {
          var sc = run.scores[name];
          add(tb, add(el("tr", { "data-scorer": name }), el("td", null, name), el("td", { "class": "num mean" }, fixed(sc.mean)),
            el("td", { "class": "ci" }, sc.ci95 ? "[" + fixed(sc.ci95[0]) + ", " + fixed(sc.ci95[1]) + "]" : "—"), el("td", { "class": "num" }, num(sc.n))));
        });
        add(head, add(t, tb), el("p", { "class": "muted small" }, run.scores_source === "summary" ?
          "From the run's summary (" + (summary.run && summary.run.reducer || "mean") + " over epochs, bootstrap intervals)." :
          "Running means over the items so far (epochs averaged), normal 95% intervals."));
      }
      var counts = el("div", { "class": "grid" });
      [["status", s.status], ["finish reasons", s.finish_reasons], ["errors", s.errors]].forEach(function (pair) {
        var t = el("table", { "class": "plain counts", "data-counts": pair[0] });
        add(t, add(el("tr"), el("th", null, pair[0]), el("th", { "class": "num" }, "lines")));
        Object.keys(pair[1]).forEach(function (k) { add(t, add(el("tr"), el("td", null, k), el("td", { "class": "num" }, num(pair[1][k])))); });
        add(counts, t);
      });
      add(head, counts);
      var files = el("dl", { "class": "files" });
      [["summary", run.summary], ["dataset", run.dataset], ["transcripts", run.transcripts], ["audit log", run.audit]].forEach(function (pair) {
        add(files, el("dt", null, pair[0]), el("dd", null, pair[1] || "—"));
      });
      add(head, files);
      drawControl(run);
    }
    var controlBuilt = false;
    function drawControl(run) {
      if (!run.control) { controls.hidden = true; controlBuilt = false; return; }
      controls.hidden = false;
      var p = run.progress || {};
      if (!controlBuilt) {  // built once: a poll only updates the state line (a typed limit stays)
        clear(controls);
        add(controls, el("h2", null, "Control"), el("p", { id: "control-state", "class": "muted" }));
        var row = el("div", { "class": "controls" });
        [["pause", "Pause"], ["resume", "Resume"], ["stop", "Stop"]].forEach(function (pair) {
          var b = el("button", { type: "button", id: "ctl-" + pair[0] }, pair[1]);
          b.addEventListener("click", function () { send(pair[0]); });
          add(row, b);
        });
        var limit = el("input", { type: "number", id: "ctl-limit", min: 1, max: p.capacity || null, value: p.concurrency || 1, "class": "limit", "aria-label": "concurrency" });
        var set = el("button", { type: "button", id: "ctl-concurrency" }, "Set concurrency");
        set.addEventListener("click", function () { send("concurrency", parseInt(limit.value, 10)); });
        add(controls, add(row, limit, set));
        controlBuilt = true;
      }
      controls.querySelector("#control-state").textContent = (p.state || "running") + " · limit " + (p.concurrency === undefined ? "—" : p.concurrency) +
        " of " + (p.capacity === undefined ? "—" : p.capacity) + " · in flight " + (p.in_flight === undefined ? "—" : p.in_flight);
    }
    function send(command, value) {
      if (command === "stop" && !confirm("Stop the run? It ends as Ctrl-C does; --resume finishes it later.")) return;
      api("/api/run/" + n + "/control", {}, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ command: command, value: value }) })
        .then(function () { poll(true); }).catch(function (e) { add(controls, problem(e.message)); });
    }
    function header(cols) {
      var tr = el("tr");
      cols.forEach(function (c) {
        var th = el("th", { "data-col": c[0], "class": c[2] || "", scope: "col" }, c[1]);
        if (c[0] && state.sort === c[0]) th.setAttribute("aria-sort", state.order === "asc" ? "ascending" : "descending");
        if (c[0]) th.addEventListener("click", function () {
          if (state.sort === c[0]) state.order = state.order === "asc" ? "desc" : "asc"; else { state.sort = c[0]; state.order = "asc"; }
          state.offset = 0; loadItems();
        });
        tr.appendChild(th);
      });
      return add(el("thead"), tr);
    }
    function drawItems(page) {
      scorers = page.scorers;
      clear(table);
      var cols = [["", ""], ["id", "id", "c-id"], ["status", "status", "c-status"], ["epochs", "epochs", "num c-epochs"]];
      scorers.forEach(function (s) { cols.push(["score:" + s, s, "num c-score"]); });
      cols = cols.concat([["", "prompt", "c-prompt"], ["", "target", "c-target"], ["", "choices", "c-choices"], ["", "response", "c-response"],
        ["duration_s", "duration", "num c-duration"], ["tokens", "tokens", "num c-tokens"], ["cost_usd", "cost", "num c-cost"],
        ["finish_reason", "finish", "c-finish"], ["error", "error", "c-error"]]);
      add(table, header(cols));
      var tbody = el("tbody", { id: "items-body" });
      page.items.forEach(function (row) {
        var tr = el("tr", { "data-id": row.id, "class": "item-row" });
        var toggle = el("button", { type: "button", "class": "toggle linkish", "aria-label": "epochs of " + row.id }, expanded[row.id] ? "▾" : "▸");
        var link = el("a", { href: url("/run/" + n + "/item", { id: row.id }), "class": "item-link" }, row.id);
        add(tr, add(el("td"), row.epochs.length > 1 ? toggle : null), add(el("td", { "class": "c-id", title: row.id }), link),
          add(el("td", { "class": "c-status" }), badge(row.status)), el("td", { "class": "num c-epochs" }, row.epochs.length));
        scorers.forEach(function (s) {
          var v = row.scores[s];
          add(tr, el("td", { "class": "num c-score" + (v === null || v === undefined || v < 1 ? " failed" : ""), "data-scorer": s }, num(v, 3)));
        });
        add(tr, el("td", { "class": "c-prompt", title: text(row.prompt) }, text(row.prompt)),
          el("td", { "class": "c-target", title: text(row.target) }, text(row.target)),
          el("td", { "class": "c-choices", title: text(row.choices) }, text(row.choices)),
          el("td", { "class": "c-response", title: text(row.response) }, text(row.response)),
          el("td", { "class": "num c-duration" }, secs(row.duration_s)), el("td", { "class": "num c-tokens" }, num(row.tokens)),
          el("td", { "class": "num c-cost" }, num(row.cost_usd, 6)), el("td", { "class": "c-finish" }, text(row.finish_reason)),
          el("td", { "class": "c-error" }, text(row.error)));
        tbody.appendChild(tr);
        toggle.addEventListener("click", function () { expanded[row.id] = !expanded[row.id]; drawItems(page); });
        if (expanded[row.id] && row.epochs.length > 1) {
          row.epochs.forEach(function (e) {
            var sub = el("tr", { "class": "epoch-row", "data-epoch": e.epoch });
            add(sub, el("td"), el("td", { "class": "muted" }, "epoch " + e.epoch), add(el("td"), badge(e.status)), el("td", { "class": "num" }, "line " + e.line));
            scorers.forEach(function (s) { add(sub, el("td", { "class": "num c-score" }, num(e.scores[s], 3))); });
            add(sub, el("td"), el("td"), el("td"), el("td", { "class": "c-response", title: text(e.response) }, text(e.response)),
              el("td", { "class": "num" }, secs(e.duration_s)), el("td", { "class": "num" }, num(e.tokens)), el("td", { "class": "num" }, num(e.cost_usd, 6)),
              el("td", null, text(e.finish_reason)), el("td", null, text(e.error)));
            tbody.appendChild(sub);
          });
        }
      });
      add(table, tbody);
      var end = Math.min(page.total, page.offset + page.items.length);
      info.textContent = page.total ? "Items " + (page.offset + 1) + "–" + end + " of " + page.total : "No items match";
      if (page.parsed < page.lines || page.unread_bytes) info.textContent += " (reading lines: " + page.parsed + " of " + page.lines + (page.unread_bytes ? "+" : "") + ")";
      pager.querySelector("#page-prev").disabled = page.offset === 0;
      pager.querySelector("#page-next").disabled = end >= page.total;
      document.body.dataset.items = String(page.total);
    }
    var loading = 0;
    function loadItems() {
      var params = { offset: state.offset, limit: state.limit, sort: state.sort, order: state.order };
      Object.keys(filters).forEach(function (k) { if (filters[k]) params[k] = filters[k]; });
      var mine = ++loading;
      document.body.dataset.loading = "1";
      return api("/api/run/" + n + "/items", params).then(function (page) {
        if (mine !== loading) return;
        drawItems(page);
        document.body.dataset.loading = "";
        document.body.dataset.ready = "1";
      }).catch(function (e) {
        if (mine !== loading) return;
        document.body.dataset.loading = "";
        info.textContent = e.message;
        if (e.body && e.body.retry) setTimeout(loadItems, 200);
      });
    }
    var filtersDrawn = false;
    function poll(once) {
      return api("/api/run/" + n).then(function (run) {
        var mark = [run.lines, run.parsed, run.unread_bytes, run.generation, run.live, run.summary, run.pending_bytes, run.problem, JSON.stringify(run.progress)].join("/");
        if (mark !== seen) {
          var first = seen === null;
          seen = mark;
          drawHead(run);
          if (!filtersDrawn || (run.stats && Object.keys(run.stats.scores).length !== scorers.length)) { drawFilters(run.stats); filtersDrawn = true; }
          if (!first) loadItems();  // the first page was asked for at once, beside the summary
        }
        if (!once && (run.live || run.parsed < run.lines || run.unread_bytes || run.pending_bytes)) setTimeout(poll, POLL_MS);
        else if (!once) document.body.dataset.finished = "1";
      }).catch(function (e) { clear(head); add(head, problem(e.message)); });
    }
    loadItems();
    poll();
  }

  // ---- item ---------------------------------------------------------------------------------
  function renderEntries(box, entries) {
    (entries || []).forEach(function (e) {
      var node;
      if (e.k === "user") node = add(el("div", { "class": "entry user", "data-kind": "user" }), el("div", { "class": "who" }, "user"), el("pre", null, e.text));
      else if (e.k === "text") node = add(el("div", { "class": "entry text", "data-kind": "text" }), el("div", { "class": "who" }, "assistant"), el("pre", null, e.text));
      else if (e.k === "reasoning") node = add(el("details", { "class": "entry reasoning", "data-kind": "reasoning" }), el("summary", null, "reasoning"), el("pre", null, e.text));
      else if (e.k === "tool") {
        node = el("div", { "class": "entry tool" + (e.is_error ? " tool-error" : ""), "data-kind": "tool" });
        add(node, el("div", { "class": "who" }, "tool call: " + (e.name || "?")), el("pre", { "class": "args" }, typeof e.args === "string" ? e.args : JSON.stringify(e.args, null, 2)));
        (e.approvals || []).forEach(function (a) { add(node, approval(a)); });
        if (e.questions && e.questions.length) renderEntries(node, e.questions);
        if (e.children && e.children.length) { var kids = el("div", { "class": "children" }); renderEntries(kids, e.children); add(node, kids); }
        if (e.result !== undefined && e.result !== null) add(node, el("div", { "class": "who" }, e.is_error ? "result (error)" : "result"), el("pre", { "class": "result" }, e.result));
      } else if (e.k === "subagent") {
        node = el("div", { "class": "entry subagent", "data-kind": "subagent" });
        add(node, el("div", { "class": "who" }, "subagent " + (e.label || e.session || "") + (e.status ? " · " + e.status : "") + (e.stop_reason ? " · " + e.stop_reason : "")));
        var inner = el("div", { "class": "children" });
        renderEntries(inner, e.entries);
        add(node, inner);
      } else if (e.k === "approval") node = approval(e);
      else if (e.k === "question") {
        node = add(el("div", { "class": "entry question", "data-kind": "question" }), el("div", { "class": "who" }, "question"), el("pre", { "class": "q" }, e.text),
          e.options && e.options.length ? el("div", { "class": "muted options" }, "options: " + e.options.join(" | ")) : null,
          el("div", { "class": "who" }, "answer" + (e.outcome ? " · " + e.outcome : "") + (e.answered_by ? " · by " + e.answered_by : "")),
          el("pre", { "class": "a" }, e.answer === undefined || e.answer === null ? "—" : e.answer), e.error ? problem(e.error) : null);
      } else node = el("div", { "class": "entry notice", "data-kind": e.k || "notice" }, e.text);
      box.appendChild(node);
    });
  }
  function approval(a) {
    return el("div", { "class": "entry approval o-" + String(a.outcome || "").replace(/[^a-z0-9-]/gi, ""), "data-kind": "approval" },
      "approval " + (a.tool || a.tool_name || "") + ": " + (a.outcome || "?") + (a.rule ? " (rule " + a.rule + ")" : "") + (a.reason ? " — " + a.reason : ""));
  }
  function conversationBox(epoch) {
    var conv = epoch.conversation || {};
    var box = el("div", { "class": "conversation", "data-source": conv.source || "" });
    renderEntries(box, conv.entries);
    if (conv.cut) add(box, el("div", { "class": "note" }, "The conversation is longer than shown; the rest is in the transcript file."));
    if (conv.problem) add(box, problem(conv.problem));
    return box;
  }
  function epochSection(epoch, withConversation) {
    var s = el("section", { "class": "epoch", "data-epoch": epoch.epoch === null || epoch.epoch === undefined ? "" : epoch.epoch });
    add(s, add(el("h3", null, (epoch.epoch ? "Epoch " + epoch.epoch + " " : "Result ")), badge(epoch.status)));
    var dl = el("dl", { "class": "facts" });
    [["finish reason", epoch.finish_reason], ["duration", secs(epoch.duration_s)], ["attempts", epoch.attempts], ["session", epoch.session_id],
     ["tokens", epoch.usage ? (epoch.usage.input_tokens || 0) + " in, " + (epoch.usage.output_tokens || 0) + " out, " + (epoch.usage.total_tokens || 0) + " total" : "—"],
     ["cost (USD)", num(epoch.cost_usd, 6)], ["line", epoch.line]].forEach(function (p) { add(dl, el("dt", null, p[0]), el("dd", { "data-field": p[0] }, p[1] === null || p[1] === undefined ? "—" : p[1])); });
    Object.keys(epoch.timings || {}).forEach(function (k) { if (k !== "duration_s") add(dl, el("dt", null, k), el("dd", null, epoch.timings[k])); });
    add(s, dl);
    if (epoch.error_detail) add(s, el("h4", null, "Error"), el("pre", { "class": "error-detail" }, (epoch.error_detail.type || "") + ": " + (epoch.error_detail.message || "")));
    if (withConversation) add(s, el("h4", null, "Conversation"), conversationBox(epoch));
    var names = Object.keys(epoch.score_details || {});
    if (names.length) {
      var t = add(el("table", { "class": "plain scores" }), add(el("thead"), add(el("tr"), el("th", null, "scorer"), el("th", null, "value"), el("th", null, "answer"), el("th", null, "explanation"))));
      var tb = el("tbody");
      names.forEach(function (name) {
        var d = epoch.score_details[name];
        add(tb, add(el("tr", { "data-scorer": name }), el("td", null, name), el("td", { "class": "num" }, num(d.value, 4)), el("td", null, text(d.answer)), el("td", null, text(d.explanation))));
      });
      add(s, el("h4", null, "Scores"), add(t, tb));
    }
    return s;
  }
  function itemHead(item) {
    var s = el("section", { id: "item-head" });
    add(s, el("h2", { id: "item-id" }, item.id));
    if (item.target !== null && item.target !== undefined) add(s, el("h4", null, "Target"), el("pre", { id: "item-target" }, text(item.target)));
    if (item.choices) {
      var ol = el("ol", { "class": "choices", id: "item-choices", type: "A" });
      item.choices.forEach(function (c) { add(ol, el("li", null, c)); });
      add(s, el("h4", null, "Choices"), ol);
    }
    if (item.metadata && Object.keys(item.metadata).length) add(s, el("h4", null, "Metadata"), el("pre", { id: "item-metadata" }, JSON.stringify(item.metadata, null, 2)));
    return s;
  }
  function itemPage() {
    var n = boot.n, id = new URLSearchParams(location.search).get("id");
    api("/api/run/" + n + "/item", { id: id }).then(function (item) {
      crumb([[item.name, url("/run/" + n)], [item.id, null]]);
      clear(main);
      add(main, itemHead(item));
      if (!item.has_transcripts) add(main, el("p", { "class": "note" }, "No transcripts for this run: the conversation is what the result line holds (run the batch with --transcripts DIR for every step)."));
      item.epochs.forEach(function (e) { add(main, epochSection(e, true)); });
      document.body.dataset.ready = "1";
    }).catch(function (e) { clear(main); add(main, problem(e.message)); document.body.dataset.ready = "1"; });
  }

  // ---- workflow -----------------------------------------------------------------------------
  function workflowPage() {
    var n = boot.n;
    api("/api/workflow/" + n).then(function (w) {
      crumb([["workflow " + w.name, null]]);
      clear(main);
      var head = el("section", { id: "workflow-summary" });
      var okSteps = w.steps.filter(function (s) { return s.status === "ok"; }).length;
      add(head, add(el("h2", null, "workflow " + w.name + " "), add(el("span", { id: "workflow-status" }, null), badge(w.status))),
        el("p", { "class": "muted small" }, w.file),
        add(el("div", { "class": "cards" }), card("steps", num(w.steps.length), "card-steps"), card("ok", num(okSteps), "card-steps-ok", "ok"),
          card("not ok", num(w.steps.length - okSteps), "card-steps-bad", w.steps.length - okSteps ? "bad" : ""),
          card("duration", secs(w.duration_s), "card-duration"), card("failure policy", w.failure_policy, "card-policy")));
      if (w.first_failure) add(head, problem("first failure: " + w.first_failure));
      add(main, head);
      if (w.pending.length) {
        var pend = add(el("section", { id: "pending" }), el("h2", null, "Waiting for answers"));
        w.pending.forEach(function (q) {
          add(pend, add(el("div", { "class": "entry question", "data-interrupt": q.id }), el("div", { "class": "who" }, q.id),
            el("pre", null, q.question), q.choices && q.choices.length ? el("div", { "class": "muted" }, "choices: " + q.choices.join(" | ")) : null));
        });
        add(pend, el("p", { "class": "muted small" }, "Answer with: dsh-orchestra run RECIPE --checkpoint PATH --resume --answer ID=VALUE"));
        add(main, pend);
      }
      var steps = add(el("section", { id: "steps" }), el("h2", null, "Steps"));
      var tb = el("tbody");
      w.steps.forEach(function (s) {
        add(tb, add(el("tr", { "data-step": s.name }), el("td", { "class": "c-step" }, s.name), add(el("td"), badge(s.status)),
          el("td", { "class": "num" }, s.started_s === null ? "—" : secs(s.started_s)), el("td", { "class": "num" }, secs(s.duration_s)),
          el("td", { "class": "num" }, num(s.attempts)), el("td", { "class": "num items" }, num(s.ok_items) + " / " + num(s.items.length)),
          el("td", { "class": "num" }, num(s.subagents)), el("td", { "class": "num" }, num(s.approvals)),
          el("td", null, s.errors.length ? s.errors[0].type + ": " + s.errors[0].message : (s.reason || ""))));
      });
      add(steps, add(el("div", { "class": "table-box" }), add(el("table", { "class": "plain", id: "steps-table" }),
        add(el("thead"), add(el("tr"), el("th", null, "step"), el("th", null, "status"), el("th", { "class": "num" }, "started"),
          el("th", { "class": "num" }, "duration"), el("th", { "class": "num" }, "attempts"), el("th", { "class": "num" }, "items ok"),
          el("th", { "class": "num" }, "subagents"), el("th", { "class": "num" }, "approvals"), el("th", null, "error or reason"))), tb)));
      add(main, steps);
      w.steps.forEach(function (s) {
        var box = add(el("details", { "class": "step", "data-step": s.name }), el("summary", null, s.name + " · " + s.status + " · " + s.items.length + " item(s)"));
        if (s.output !== null && s.output !== undefined) add(box, el("h4", null, "output"), el("pre", { "class": "output" }, s.output));
        s.items.forEach(function (it) {
          var row = add(el("div", { "class": "entry", "data-item": it.index === null ? "" : it.index }),
            add(el("div", { "class": "who" }, (it.index === null ? "item" : "item " + it.index) + " · " + it.status + " · " + secs(it.duration_s) +
              " · attempts " + num(it.attempts) + (it.finish_reason ? " · " + it.finish_reason : "") + (it.session_id ? " · session " + it.session_id : ""))));
          if (it.final_response) add(row, el("pre", null, it.final_response));
          if (it.error) add(row, problem(it.error.type + ": " + it.error.message));
          (it.approvals || []).forEach(function (a) { add(row, approval({ tool: a.tool_name, outcome: a.outcome, rule: a.rule })); });
          add(box, row);
        });
        add(main, add(el("section", { "class": "step-box" }), box));
      });
      document.body.dataset.ready = "1";
    }).catch(function (e) { clear(main); add(main, problem(e.message)); document.body.dataset.ready = "1"; });
  }

  // ---- compare ------------------------------------------------------------------------------
  function comparePage() {
    var q = new URLSearchParams(location.search), a = q.get("a"), b = q.get("b");
    api("/api/compare", { a: a, b: b }).then(function (data) {
      crumb([["compare " + data.base.name + " → " + data.candidate.name, null]]);
      clear(main);
      var doc = data.doc;
      var top = el("section", { id: "compare-summary" });
      add(top, el("h2", null, "Base " + data.base.name + " → candidate " + data.candidate.name),
        el("p", { "class": "muted" }, doc.pairs + " items in both runs · " + doc.only_in_base.length + " only in base · " + doc.only_in_candidate.length + " only in candidate"));
      var t = add(el("table", { "class": "plain", id: "compare-scores" }), add(el("thead"), add(el("tr"), el("th", null, "scorer"), el("th", { "class": "num" }, "n"),
        el("th", { "class": "num" }, "base"), el("th", { "class": "num" }, "candidate"), el("th", { "class": "num" }, "difference"), el("th", null, "95% interval"), el("th", { "class": "num" }, "p"),
        el("th", { "class": "num" }, "regressions"), el("th", { "class": "num" }, "improvements"))));
      var tb = el("tbody");
      Object.keys(doc.scorers).forEach(function (name) {
        var s = doc.scorers[name];
        add(tb, add(el("tr", { "data-scorer": name }), el("td", null, name), el("td", { "class": "num" }, num(s.n)), el("td", { "class": "num" }, fixed(s.mean_base)),
          el("td", { "class": "num" }, fixed(s.mean_candidate)), el("td", { "class": "num" }, fixed(s.diff)),
          el("td", null, s.ci95 ? "[" + fixed(s.ci95[0]) + ", " + fixed(s.ci95[1]) + "]" : "—"), el("td", { "class": "num" }, fixed(s.p_value)),
          el("td", { "class": "num" }, (s.regressions || []).length), el("td", { "class": "num" }, (s.improvements || []).length)));
      });
      add(top, add(t, tb));
      var flips = el("section", { id: "flipped" });
      add(flips, el("h2", null, "Flipped items (" + data.flipped.length + ")"));
      var list = el("table", { "class": "plain", id: "flipped-table" });
      var lb = el("tbody");
      data.flipped.forEach(function (f) {
        var open = el("button", { type: "button", "class": "linkish open-pair", "data-id": f.id }, f.id);
        add(lb, add(el("tr", { "data-id": f.id }), add(el("td"), open), el("td", null, f.why.join("; "))));
        open.addEventListener("click", function () { pair(f.id); });
      });
      add(flips, add(list, lb));
      var panes = el("section", { id: "pair", hidden: "" });
      add(main, top, flips, panes);
      function pair(itemId) {
        panes.hidden = false;
        clear(panes);
        add(panes, el("h2", { id: "pair-title" }, itemId));
        var grid = el("div", { "class": "side-by-side" });
        add(panes, grid);
        [[a, "base", data.base.name], [b, "candidate", data.candidate.name]].forEach(function (side) {
          var col = add(el("div", { "class": "side", id: "side-" + side[1] }), el("h3", null, side[1] + ": " + side[2]));
          add(grid, col);
          api("/api/run/" + side[0] + "/item", { id: itemId }).then(function (item) {
            item.epochs.forEach(function (e) { add(col, epochSection(e, true)); });
            col.dataset.ready = "1";
          }).catch(function (e) { add(col, problem(e.message)); col.dataset.ready = "1"; });
        });
        panes.scrollIntoView();
      }
      document.body.dataset.ready = "1";
    }).catch(function (e) { clear(main); add(main, problem(e.message)); document.body.dataset.ready = "1"; });
  }

  ({ runs: runsPage, run: runPage, item: itemPage, compare: comparePage, workflow: workflowPage })[boot.page]();
})();
