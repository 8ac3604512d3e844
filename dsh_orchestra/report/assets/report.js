// dsh-orchestra report: the item table (search, filters, sort, pages) and the item details.
// Data comes from the application/json block "report-data"; everything taken from it
// is put on the page with textContent or setAttribute, never as markup.
(function () {
  "use strict";

  var source = document.getElementById("report-data");
  var data = source ? JSON.parse(source.textContent) : null;
  var batch = data && data.batch;

  function el(name, attrs, text) {
    var node = document.createElement(name);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        if (attrs[key] !== null && attrs[key] !== undefined && attrs[key] !== false) node.setAttribute(key, String(attrs[key]));
      });
    }
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function seconds(value) {
    if (value === null || value === undefined || !isFinite(value)) return "—";
    if (value < 0.001) return (value * 1e6).toFixed(0) + " µs";
    if (value < 1) return (value * 1e3).toFixed(1) + " ms";
    if (value < 60) return value.toFixed(2) + " s";
    var m = Math.floor(value / 60), s = Math.round(value - m * 60);
    return m + " m " + (s < 10 ? "0" : "") + s + " s";
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  if (!batch) { document.body.setAttribute("data-ready", "1"); return; }

  var COL = {};
  batch.columns.forEach(function (name, i) { COL[name] = i; });
  var rows = batch.rows, details = batch.details;
  var NOT_EMBEDDED = { attempts: "—", not_embedded: true };  // a row past the report's cap of embedded details
  for (var di = 0; di < details.length; di++) if (details[di] === null) details[di] = NOT_EMBEDDED;
  var byId = new Map();  // not an object: ids such as "__proto__" or "toString" are ids like any other
  rows.forEach(function (row, i) { if (!byId.has(row[COL.id])) byId.set(row[COL.id], i); });

  var state = { query: "", status: "", finish: "", error: "", scored: "", sort: null, dir: 1, page: 0, size: 100 };
  var scorers = batch.scorers || [];
  var SCORE_COLS = scorers.map(function (name) { return COL["score:" + name]; });

  function failedScore(r, which) {
    // "failed" = a value below 1, or null (the scorer or the item failed)
    for (var k = 0; k < scorers.length; k++) {
      if (which !== "*" && scorers[k] !== which) continue;
      var v = r[SCORE_COLS[k]];
      if (v === null || v === undefined || v < 1) return true;
    }
    return false;
  }
  var view = [];
  var haystack = null;

  var $ = function (id) { return document.getElementById(id); };
  var tbody = $("items-body"), info = $("items-info"), pageInput = $("page-number");

  function hay(i) {
    if (haystack === null) haystack = new Array(rows.length);
    var h = haystack[i];
    if (h === undefined) {
      var r = rows[i], d = details[i];
      h = [r[COL.id], r[COL.status], r[COL.finish_reason] || "", r[COL.error] || "",
           d.error ? d.error.message || "" : "", d.session_id || "",
           (d.final_response || "").slice(0, 2000), (d.prompt || "").slice(0, 2000)].join("\u0000").toLowerCase();
      haystack[i] = h;
    }
    return h;
  }

  function compare(a, b) {
    var x = rows[a][state.sort], y = rows[b][state.sort];
    if (x === y) return a - b;
    if (x === null || x === undefined) return 1;   // empty cells last, whatever the direction
    if (y === null || y === undefined) return -1;
    if (typeof x === "number" && typeof y === "number") return (x - y) * state.dir || a - b;
    return String(x).localeCompare(String(y), undefined, { numeric: true }) * state.dir || a - b;
  }

  function refilter() {
    var q = state.query.trim().toLowerCase();
    view = [];
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      if (state.status && r[COL.status] !== state.status) continue;
      if (state.finish && (r[COL.finish_reason] || "none") !== state.finish) continue;
      if (state.error && r[COL.error] !== state.error) continue;
      if (state.scored && !failedScore(r, state.scored)) continue;
      if (q && hay(i).indexOf(q) < 0) continue;
      view.push(i);
    }
    if (state.sort !== null) view.sort(compare);
    state.page = 0;
    render();
  }

  function score(value) {
    if (value === null || value === undefined) return "—";
    return Number.isInteger(value) ? String(value) : value.toFixed(3);
  }

  function cellText(name, value) {
    if (name === "duration_s") return seconds(value);
    if (name.lastIndexOf("score:", 0) === 0) return score(value);
    if (name === "cost_usd") return value === null || value === undefined ? "" : value.toFixed(6);
    if (value === null || value === undefined) return "";
    return String(value);
  }

  function render() {
    var pages = Math.max(1, Math.ceil(view.length / state.size));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * state.size, end = Math.min(view.length, start + state.size);
    var fragment = document.createDocumentFragment();
    for (var k = start; k < end; k++) {
      var i = view[k], r = rows[i];
      var tr = el("tr", { "data-index": i, tabindex: 0 });
      batch.columns.forEach(function (name, c) {
        var isScore = name.lastIndexOf("score:", 0) === 0;
        var td = el("td", { "class": isScore ? "c-score" : "c-" + name });
        if (isScore) {
          td.setAttribute("data-scorer", name.slice(6));
          if (r[c] === null || r[c] === undefined || r[c] < 1) td.className += " failed";
        }
        if (name === "status") {
          td.appendChild(el("span", { "class": "badge s-" + String(r[c]).replace(/[^a-z0-9-]/gi, "") }, r[c]));
        } else {
          td.textContent = cellText(name, r[c]);
          if (name === "id" || name === "error" || name === "prompt" || name === "response" || name === "target" || name === "choices") td.title = cellText(name, r[c]);
        }
        if (isScore || name === "duration_s" || name === "attempts" || name === "subagents" || name === "approvals" ||
            name === "tokens" || name === "cost_usd" || name === "epoch") td.className += " num";
        tr.appendChild(td);
      });
      fragment.appendChild(tr);
    }
    clear(tbody);
    tbody.appendChild(fragment);
    var filtered = view.length !== rows.length ? " (filtered from " + rows.length + ")" : "";
    info.textContent = view.length ? "Items " + (start + 1) + "–" + end + " of " + view.length + filtered : "No items match" + filtered;
    pageInput.value = String(state.page + 1);
    pageInput.max = String(pages);
    $("page-count").textContent = "of " + pages;
    $("page-prev").disabled = state.page === 0;
    $("page-next").disabled = state.page >= pages - 1;
  }

  // ---- details ----------------------------------------------------------------------------

  var panel = $("detail"), body = $("detail-body"), selected = null;

  function section(title) { body.appendChild(el("h3", null, title)); }

  function textBlock(text, cut, what, id) {
    body.appendChild(el("pre", { "class": "text", id: id }, text));
    if (cut) body.appendChild(el("div", { "class": "note" }, "… " + cut + " more characters of the " + what + " are in the results file."));
  }

  function smallTable(headers, records, keys) {
    var table = el("table", { "class": "plain" }), head = el("tr"), tb = el("tbody");
    headers.forEach(function (h) { head.appendChild(el("th", null, h)); });
    var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
    records.forEach(function (record) {
      var tr = el("tr");
      keys.forEach(function (key) { tr.appendChild(el("td", null, record[key] === null || record[key] === undefined ? "" : record[key])); });
      tb.appendChild(tr);
    });
    table.appendChild(tb);
    return table;
  }

  function safeLink(href) { return /^[A-Za-z0-9._~%\/-]+$/.test(href) && href.indexOf("//") < 0; }

  function scoreTable(scores) {
    var records = Object.keys(scores).map(function (name) {
      var s = scores[name];
      return { name: name, value: score(s.value), answer: s.answer, explanation: s.explanation };
    });
    var table = smallTable(["scorer", "value", "answer", "explanation"], records, ["name", "value", "answer", "explanation"]);
    table.classList.add("scores");
    return table;
  }

  function approvalNode(a) {
    var text = "approval " + (a.tool ? "for " + a.tool + " " : "") + "→ " + (a.outcome || "no decision") + (a.rule ? " (rule " + a.rule + ")" : "");
    var node = el("div", { "class": "entry approval o-" + String(a.outcome || "none").replace(/[^a-z-]/gi, ""), "data-kind": "approval" }, text);
    if (a.reason) node.appendChild(el("div", { "class": "muted" }, a.reason));
    return node;
  }

  function renderEntries(box, entries) {
    entries.forEach(function (e) {
      var node;
      if (e.k === "user") {
        node = el("div", { "class": "entry user", "data-kind": "user" });
        node.appendChild(el("div", { "class": "who" }, "user"));
        node.appendChild(el("pre", { "class": "text" }, e.text));
      } else if (e.k === "text") {
        node = el("div", { "class": "entry assistant", "data-kind": "text" });
        node.appendChild(el("div", { "class": "who" }, "assistant"));
        node.appendChild(el("pre", { "class": "text" }, e.text));
      } else if (e.k === "reasoning") {
        node = el("details", { "class": "entry reasoning", "data-kind": "reasoning" });
        node.appendChild(el("summary", null, "reasoning (" + e.text.length + " characters)"));
        node.appendChild(el("pre", { "class": "text" }, e.text));
      } else if (e.k === "tool") {
        node = el("div", { "class": "entry tool" + (e.is_error ? " tool-error" : ""), "data-kind": "tool", "data-call": e.id || "" });
        node.appendChild(el("div", { "class": "who" }, "tool call " + (e.name || "?")));
        node.appendChild(el("pre", { "class": "text args" }, e.args));
        (e.approvals || []).forEach(function (a) { node.appendChild(approvalNode(a)); });
        if (e.questions && e.questions.length) renderEntries(node, e.questions);
        if (e.children && e.children.length) {
          var kids = el("div", { "class": "children" });
          renderEntries(kids, e.children);
          node.appendChild(kids);
        }
        if (e.result !== null && e.result !== undefined) {
          node.appendChild(el("div", { "class": "who" }, e.is_error ? "result (error)" : "result"));
          node.appendChild(el("pre", { "class": "text result" }, e.result));
        } else node.appendChild(el("div", { "class": "muted" }, "no result"));
      } else if (e.k === "subagent") {
        node = el("div", { "class": "entry subagent", "data-kind": "subagent", "data-session": e.session || "" });
        node.appendChild(el("div", { "class": "who" }, "subagent " + (e.label ? "“" + e.label + "” " : "") + (e.session || "") +
          (e.status ? " · " + e.status : "") + (e.stop_reason ? " · " + e.stop_reason : "")));
        var inner = el("div", { "class": "children" });
        renderEntries(inner, e.entries || []);
        node.appendChild(inner);
      } else if (e.k === "approval") {
        node = approvalNode(e);
      } else if (e.k === "question") {
        node = el("div", { "class": "entry question", "data-kind": "question" });
        node.appendChild(el("div", { "class": "who" }, "question"));
        node.appendChild(el("pre", { "class": "text q" }, e.text));
        if (e.options && e.options.length) node.appendChild(el("div", { "class": "muted" }, "options: " + e.options.join(" | ")));
        node.appendChild(el("div", { "class": "who" }, "answer" + (e.outcome ? " · " + e.outcome : "") + (e.answered_by ? " · by " + e.answered_by : "")));
        node.appendChild(el("pre", { "class": "text a" }, e.answer === null || e.answer === undefined ? "—" : e.answer));
        if (e.error) node.appendChild(el("div", { "class": "muted" }, e.error));
      } else if (e.k === "notice") {
        node = el("div", { "class": "entry notice", "data-kind": "notice" }, e.text);
      } else return;
      box.appendChild(node);
    });
  }

  function openItem(i, push) {
    var r = rows[i], d = details[i];
    if (!r) return;
    clear(body);
    $("detail-title").textContent = r[COL.id];
    var dl = el("dl");
    [["status", r[COL.status]], ["finish reason", r[COL.finish_reason] || "—"], ["duration", seconds(r[COL.duration_s])],
     ["attempts", d.attempts], ["session", d.session_id || "—"]].concat(COL.epoch !== undefined ? [["epoch", r[COL.epoch]]] : []).forEach(function (pair) {
      dl.appendChild(el("dt", null, pair[0]));
      dl.appendChild(el("dd", { "data-field": pair[0] }, pair[1]));
    });
    body.appendChild(dl);
    if (d.not_embedded) {
      body.appendChild(el("p", { "class": "note", id: "detail-not-embedded" }, "This report embeds the details of " + batch.details_embedded +
        " of its " + rows.length + " items (those in error or with a score below 1 first). Open this item with `dsh-orchestra view` over the results file."));
      return finishOpen(i, push);
    }
    if (d.transcript && safeLink(d.transcript)) {
      var p = el("p");
      p.appendChild(el("a", { href: d.transcript, id: "detail-transcript", download: "" }, "Transcript (JSON Lines, gzip)"));
      body.appendChild(p);
    }
    if (d.error) {
      section("Error");
      var err = el("pre", { "class": "text", id: "detail-error" });
      err.textContent = (d.error.type || "Error") + ": " + (d.error.message || "");
      body.appendChild(err);
    }
    if (batch.has_prompts) {
      section("Prompt");
      if (d.prompt === null || d.prompt === undefined) body.appendChild(el("p", { "class": "muted" }, "Not in the dataset."));
      else textBlock(d.prompt, d.prompt_cut, "prompt", "detail-prompt");
    }
    if (d.target !== null && d.target !== undefined) {
      section("Target");
      textBlock(Array.isArray(d.target) ? d.target.join("\n") : String(d.target), 0, "target", "detail-target");
    }
    if (Array.isArray(d.choices) && d.choices.length) {
      section("Choices");
      var list = el("ol", { "class": "choices", id: "detail-choices", type: "A" });
      d.choices.forEach(function (choice) { list.appendChild(el("li", null, String(choice))); });
      body.appendChild(list);
    }
    if (d.scores && Object.keys(d.scores).length) {
      section("Scores");
      body.appendChild(scoreTable(d.scores));
    }
    if (d.usage || d.cost_usd !== null && d.cost_usd !== undefined) {
      var u = d.usage || {};
      body.appendChild(el("p", { "class": "muted", id: "detail-usage" },
        "tokens: " + (u.input_tokens || 0) + " in, " + (u.output_tokens || 0) + " out, " + (u.total_tokens || 0) + " total" +
        (d.cost_usd !== null && d.cost_usd !== undefined ? " · cost " + d.cost_usd.toFixed(6) + " USD" : "")));
    }
    section("Final response");
    if (d.final_response === null || d.final_response === undefined || d.final_response === "") {
      body.appendChild(el("p", { "class": "muted", id: "detail-response", "data-empty": "1" }, d.final_response === "" ? "Empty response." : "No response."));
    }
    else textBlock(d.final_response, d.final_response_cut, "response", "detail-response");
    var conv = d.conversation;
    if (conv) {
      section(conv.source === "transcript" ? "Conversation" : "Conversation (from the result line; run the batch with --transcripts DIR for every step)");
      var box = el("div", { "class": "conversation", id: "detail-conversation", "data-source": conv.source });
      renderEntries(box, conv.entries);
      body.appendChild(box);
      if (conv.cut || conv.truncated) {
        var note = el("div", { "class": "note", id: "detail-conversation-cut" },
          conv.cut ? "The conversation is longer than the report keeps per item; the rest is in the transcript file." :
                     "The transcript file itself was cut when written (" + conv.truncated.omitted_lines + " lines left out).");
        if (d.transcript && safeLink(d.transcript)) {
          note.appendChild(document.createTextNode(" "));
          note.appendChild(el("a", { href: d.transcript, download: "" }, "Open the transcript"));
        }
        body.appendChild(note);
      }
      if (conv.problem) body.appendChild(el("div", { "class": "note" }, conv.problem));
    }
    section("Subagents (" + d.subagents.length + ")");
    if (d.subagents.length) {
      d.subagents.forEach(function (s) {
        body.appendChild(smallTable(["child session", "status", "stop reason"], [s], ["child_session_id", "status", "stop_reason"]));
        if (s.text) body.appendChild(el("pre", { "class": "text subagent-text" }, s.text));
      });
    } else body.appendChild(el("p", { "class": "muted" }, "None."));
    section("Approvals (" + d.approvals.length + ")");
    if (d.approvals.length) body.appendChild(smallTable(["tool", "call id", "outcome", "rule"], d.approvals, ["tool_name", "call_id", "outcome", "rule"]));
    else body.appendChild(el("p", { "class": "muted" }, "None."));
    if (d.metadata && Object.keys(d.metadata).length) {
      section("Metadata");
      body.appendChild(el("pre", { "class": "text" }, JSON.stringify(d.metadata, null, 2)));
    }
    finishOpen(i, push);
  }

  function finishOpen(i, push) {
    var r = rows[i];
    panel.hidden = false;
    panel.setAttribute("data-item", r[COL.id]);
    if (selected) selected.classList.remove("selected");
    selected = tbody.querySelector('tr[data-index="' + i + '"]');
    if (selected) selected.classList.add("selected");
    if (push !== false) history.replaceState(null, "", "#item=" + encodeURIComponent(r[COL.id]));
    $("detail-close").focus();
  }

  function closeItem() {
    panel.hidden = true;
    panel.removeAttribute("data-item");
    if (selected) { selected.classList.remove("selected"); selected.focus(); }
    history.replaceState(null, "", location.pathname + location.search);
  }

  // ---- wiring -----------------------------------------------------------------------------

  var timer = null;
  $("search").addEventListener("input", function (event) {
    clearTimeout(timer);
    timer = setTimeout(function () { state.query = event.target.value; refilter(); }, 120);
  });
  ["status", "finish", "error", "scored"].forEach(function (name) {
    if ($("filter-" + name)) $("filter-" + name).addEventListener("change", function (event) { state[name] = event.target.value; refilter(); });
  });
  $("page-size").addEventListener("change", function (event) { state.size = parseInt(event.target.value, 10) || 100; state.page = 0; render(); });
  $("page-prev").addEventListener("click", function () { state.page--; render(); });
  $("page-next").addEventListener("click", function () { state.page++; render(); });
  pageInput.addEventListener("change", function () { state.page = Math.max(0, (parseInt(pageInput.value, 10) || 1) - 1); render(); });
  $("reset").addEventListener("click", function () {
    state.query = state.status = state.finish = state.error = state.scored = "";
    $("search").value = "";
    ["status", "finish", "error", "scored"].forEach(function (name) { if ($("filter-" + name)) $("filter-" + name).value = ""; });
    refilter();
  });

  document.querySelectorAll("table.items th[data-col]").forEach(function (th) {
    th.addEventListener("click", function () {
      var col = COL[th.getAttribute("data-col")];
      if (state.sort === col) state.dir = -state.dir; else { state.sort = col; state.dir = 1; }
      document.querySelectorAll("table.items th[data-col]").forEach(function (other) { other.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
      refilter();
    });
  });

  tbody.addEventListener("click", function (event) {
    var tr = event.target.closest("tr[data-index]");
    if (tr) openItem(parseInt(tr.getAttribute("data-index"), 10));
  });
  tbody.addEventListener("keydown", function (event) {
    var tr = event.target.closest("tr[data-index]");
    if (tr && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); openItem(parseInt(tr.getAttribute("data-index"), 10)); }
  });
  $("detail-close").addEventListener("click", closeItem);
  document.addEventListener("keydown", function (event) { if (event.key === "Escape" && !panel.hidden) closeItem(); });

  document.querySelectorAll("[data-item]").forEach(function (button) {
    if (button === panel) return;
    button.addEventListener("click", function () {
      var i = byId.get(button.getAttribute("data-item"));
      if (i !== undefined) openItem(i);
    });
  });
  document.querySelectorAll("button[data-filter]").forEach(function (button) {
    button.addEventListener("click", function () {
      var name = button.getAttribute("data-filter"), select = $("filter-" + name);
      select.value = button.getAttribute("data-value");
      state[name] = select.value;
      refilter();
      $("items").scrollIntoView();
    });
  });

  refilter();
  var match = /^#item=(.*)$/.exec(location.hash);
  if (match) {
    var i = byId.get(decodeURIComponent(match[1]));
    if (i !== undefined) openItem(i, false);
  }
  document.body.setAttribute("data-ready", "1");
})();
