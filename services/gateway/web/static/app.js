(function () {
  "use strict";
  var STOP_MARK = "*[Response stopped by user]*";
  var DEFAULT_SOURCES = ["Meeting Notes", "Factsheet"];
  var KEY_NAME = "ragmesh.key";
  var NOT_ACCEPTED = "That key was not accepted.";
  var PREVIEW_CHARS = 200;
  var $ = function (id) { return document.getElementById(id); };
  var qEl = $("question"), sendBtn = $("send"), stopBtn = $("stop"), modelSel = $("model");
  var statusEl = $("status"), transcript = $("transcript"), layout = $("app");
  var conversationId = "";
  var current = null;      // {msg, ctrl}
  var msgSeq = 0;
  var apiKey = "";         // the signed-in API key ("" = signed out)
  var whoKey = "";         // "tenant/user" of the last identity /api/meta reported
  var convOffset = null;   // next page of the conversation list
  var panelOpener = null;  // what to focus when the panel closes
  var uploadFiles = [];
  var me = { user: "", role: "" };  // who the key is (/api/meta): owners and admins change who sees a document
  // Inline icons (no emoji: headless and minimal systems often lack an emoji font)
  var SVG = '<svg aria-hidden="true" width="14" height="14" viewBox="0 0 24 24" fill="none" stroke="currentColor" ' +
    'stroke-width="2" stroke-linecap="round" stroke-linejoin="round" class="icon">';
  var ICONS = {
    down: SVG + '<path d="M10 15v4a3 3 0 0 0 3 3l4-9V2H5.7a2 2 0 0 0-2 1.7l-1.4 9A2 2 0 0 0 4.3 15z"/><path d="M17 2h3v11h-3"/></svg>',
    pencil: SVG + '<path d="M17 3a2.8 2.8 0 0 1 4 4L7.5 20.5 2 22l1.5-5.5z"/></svg>',
    trash: SVG + '<path d="M3 6h18"/><path d="M8 6V4h8v2"/><path d="M19 6l-1 14H6L5 6"/></svg>'
  };
  function iconButton(cls, icon, label) {
    var b = el("button", cls);
    b.type = "button";
    b.innerHTML = ICONS[icon];  // a constant of this page, not data
    if (label) b.appendChild(document.createTextNode(" " + label));
    return b;
  }

  // ---------- sign-in ----------
  function readKey() {
    try { return localStorage.getItem(KEY_NAME) || ""; } catch (e) { return ""; }
  }
  function writeKey(key) {
    apiKey = key || "";
    try {
      if (apiKey) localStorage.setItem(KEY_NAME, apiKey); else localStorage.removeItem(KEY_NAME);
    } catch (e) { /* storage unavailable: the key lives for this page only */ }
  }
  function keyFromHash() {
    // #key=<key> (a link that signs in); other hash parts are ignored
    var parts = location.hash.replace(/^#/, "").split("&");
    for (var i = 0; i < parts.length; i++) {
      if (parts[i].slice(0, 4) === "key=") {
        try { return decodeURIComponent(parts[i].slice(4)).trim(); } catch (e) { return ""; }
      }
    }
    return null;
  }
  function setSignedIn(on) {
    document.body.setAttribute("data-auth", on ? "signed-in" : "signed-out");
    document.querySelectorAll(".signed-in-only").forEach(function (e) { e.hidden = !on; });
    $("signin").hidden = on;
  }
  function showSignin(message) {
    writeKey("");
    setSignedIn(false);
    closePanel();
    var err = $("signin-error");
    err.textContent = message || "";
    err.hidden = !message;
    setSigninBusy(false);
    $("api-key").value = "";
    $("api-key").focus();
  }
  function setSigninBusy(busy) {
    $("sign-in").disabled = busy;
    $("api-key").disabled = busy;
  }
  function showIdentity(ident) {
    var who = $("who");
    me = { user: (ident && ident.user) || "", role: (ident && ident.role) || "" };
    offerTenant($("upload-access"), false);
    if (!ident || typeof ident !== "object" || !ident.user) {
      who.textContent = "";
      who.removeAttribute("title");
      return;
    }
    var id = (ident.tenant || "") + "/" + ident.user;
    if (whoKey && whoKey !== id) resetConversation();  // another user's conversation is not ours
    whoKey = id;
    who.textContent = ident.user + (ident.tenant ? " @ " + ident.tenant : "") + (ident.role ? " · " + ident.role : "");
    who.title = "Signed in as " + ident.user + (ident.tenant ? " (tenant " + ident.tenant + ")" : "") +
      (ident.role ? ", role " + ident.role : "");
    who.setAttribute("data-tenant", ident.tenant || "");
    who.setAttribute("data-user", ident.user);
    who.setAttribute("data-role", ident.role || "");
  }
  function signOut() {
    if (current) stop();
    resetConversation();
    whoKey = "";
    showIdentity(null);
    $("conversation-list").textContent = "";
    showSignin("");
  }
  // fetch for /api/*: sends the key, and a 401 (key unknown, revoked or expired) signs out
  function api(path, opts) {
    opts = opts || {};
    var headers = {};
    Object.keys(opts.headers || {}).forEach(function (k) { headers[k] = opts.headers[k]; });
    var key = apiKey;
    if (key) headers["Authorization"] = "Bearer " + key;
    var init = {};
    Object.keys(opts).forEach(function (k) { init[k] = opts[k]; });
    init.headers = headers;
    return fetch(path, init).then(function (res) {
      if (res.status === 401 && key && key === apiKey) showSignin("Your key was not accepted any more. Sign in again.");
      return res;
    });
  }
  function apiJson(path, opts) {
    return api(path, opts).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (body) {
        if (!res.ok) {
          var e = new Error((body && body.error && body.error.message) || ("HTTP " + res.status));
          e.status = res.status;
          throw e;
        }
        return body;
      });
    });
  }
  function sendJson(method, path, body) {
    return apiJson(path, { method: method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  }
  // Checks a key with GET /api/meta; a key that is accepted is kept and the page opens
  async function signIn(key, fromForm) {
    var err = $("signin-error");
    if (!key) { err.textContent = "Enter an API key."; err.hidden = false; return; }
    setSigninBusy(true);
    var res;
    try {
      res = await fetch("/api/meta", { headers: { "Accept": "application/json", "Authorization": "Bearer " + key } });
    } catch (e) {
      res = null;
    }
    if (res && res.status === 401) { showSignin(NOT_ACCEPTED); return; }
    if (fromForm && (!res || !res.ok)) {
      setSigninBusy(false);
      err.textContent = "Could not check the key (" + (res ? "HTTP " + res.status : "network error") + "). Try again.";
      err.hidden = false;
      return;
    }
    // accepted (or, for a stored key, not checkable right now: the page opens and says why)
    writeKey(key);
    setSigninBusy(false);
    err.hidden = true;
    $("api-key").value = "";
    setSignedIn(true);
    if (res && res.ok) {
      try { applyMeta(await res.json()); } catch (e) { setStatus("Could not load options (" + e.message + ")."); }
      loadConversations(false);
      loadDocuments();
      loadCollections();
    } else {
      setStatus("Could not load options (" + (res ? "HTTP " + res.status : "network error") + ").");
    }
    qEl.focus();
  }

  // ---------- helpers ----------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function button(cls, text, type) {
    var b = el("button", cls, text);
    b.type = type || "button";
    return b;
  }
  function setStatus(text, busy) {
    statusEl.textContent = text || "";
    statusEl.classList.toggle("busy", !!busy);
  }
  function setConversation(id) {
    conversationId = id || "";
    document.body.setAttribute("data-conversation-id", conversationId);
    $("conversation-id").textContent = conversationId || "new";
    markCurrentConversation();
  }
  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
  }
  function keepBottom(fn) {
    var stick = nearBottom();
    fn();
    if (stick) window.scrollTo(0, document.documentElement.scrollHeight);
  }
  function shortDate(iso) {
    return typeof iso === "string" ? iso.replace("T", " ").replace(/:\d\dZ$/, "").replace(/Z$/, "") : "";
  }
  function clip(text, n) {
    text = String(text || "").replace(/\s+/g, " ").trim();
    return text.length > n ? text.slice(0, n - 1).replace(/\s+\S*$/, "") + "…" : text;
  }

  // ---------- markdown (marked + DOMPurify) with [n] citation markers ----------
  var CITE = /\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\](?!\()/g;
  DOMPurify.addHook("afterSanitizeAttributes", function (node) {
    if (node.tagName === "A" && node.getAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
  function markdownHtml(src) {
    var html = marked.parse(src || "", { gfm: true, breaks: false, async: false });
    return DOMPurify.sanitize(html, { FORBID_TAGS: ["style", "form", "input", "button", "img"], FORBID_ATTR: ["style"] });
  }
  function citeButton(msg, n) {
    var b = el("button", "cite", n);
    b.type = "button";
    b.setAttribute("data-cite", n);
    var c = msg.citeMap[n];
    b.setAttribute("aria-label", "Source " + n + (c ? ": " + (c.title || c.doc_id || "") : ""));
    b.setAttribute("aria-controls", "cite-panel");
    b.setAttribute("aria-expanded", "false");
    return b;
  }
  function linkCitations(root, msg) {
    var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: function (node) {
        return node.parentNode.closest("code, pre, a") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT;
      }
    });
    var nodes = [];
    while (walker.nextNode()) { if (CITE.test(walker.currentNode.data)) nodes.push(walker.currentNode); CITE.lastIndex = 0; }
    nodes.forEach(function (node) {
      var frag = document.createDocumentFragment(), text = node.data, last = 0, m;
      CITE.lastIndex = 0;
      while ((m = CITE.exec(text))) {
        frag.appendChild(document.createTextNode(text.slice(last, m.index)));
        m[1].split(/\s*,\s*/).forEach(function (n) { frag.appendChild(citeButton(msg, n)); });
        last = m.index + m[0].length;
      }
      frag.appendChild(document.createTextNode(text.slice(last)));
      node.parentNode.replaceChild(frag, node);
    });
  }
  function renderAnswer(msg) {  // while streaming: at most one render per 50 ms
    if (msg.renderQueued) return;
    msg.renderQueued = true;
    setTimeout(function () { msg.renderQueued = false; renderNow(msg); }, 50);
  }
  function renderNow(msg) {
    keepBottom(function () {
      msg.answerEl.innerHTML = markdownHtml(msg.text);
      linkCitations(msg.answerEl, msg);
    });
  }

  // ---------- transcript ----------
  function hideHint() { var h = $("empty-hint"); if (h) h.remove(); }
  function addUserMsg(text) {
    hideHint();
    keepBottom(function () { transcript.appendChild(el("div", "msg user", text)); });
  }
  function addAssistantMsg() {
    hideHint();
    var id = "m" + (++msgSeq);
    var root = el("article", "msg assistant");
    root.id = id;
    root.setAttribute("aria-label", "Answer");
    root.setAttribute("data-state", "streaming");
    var thinking = el("details", "thinking");
    thinking.hidden = true;
    thinking.open = true;
    thinking.appendChild(el("summary", null, "Thinking…"));
    var thinkingText = el("div", "thinking-text");
    thinking.appendChild(thinkingText);
    var answer = el("div", "answer");
    var notice = el("div", "notice error");
    notice.setAttribute("role", "alert");
    notice.hidden = true;
    var block = el("section", "sources-block");
    block.hidden = true;
    block.appendChild(el("h4", null, "Sources"));
    var sources = el("ol", "sources");
    block.appendChild(sources);
    var searched = el("p", "web-queries");
    searched.hidden = true;
    block.appendChild(searched);
    var foot = el("div", "msg-foot");
    var strategy = el("details", "strategy");
    strategy.hidden = true;
    var feedback = el("div", "feedback");
    feedback.hidden = true;
    var down = iconButton("icon thumbs-down", "down", "Wrong?");
    down.setAttribute("aria-label", "This answer is wrong: send a correction");
    down.setAttribute("aria-expanded", "false");
    feedback.appendChild(down);
    foot.appendChild(strategy);
    foot.appendChild(feedback);
    var correctionHost = el("div", "correction-host");
    [thinking, answer, notice, block, foot, correctionHost].forEach(function (c) { root.appendChild(c); });
    keepBottom(function () { transcript.appendChild(root); });
    var msg = { id: id, el: root, answerEl: answer, thinkingEl: thinking, thinkingText: thinkingText,
      noticeEl: notice, sourcesBlock: block, sourcesEl: sources, searchedEl: searched, strategyEl: strategy,
      feedbackEl: feedback, correctionHost: correctionHost, text: "", thinking: "", citeMap: {}, finished: false,
      question: "", conversationId: conversationId };
    root._msg = msg;
    down.addEventListener("click", function () { toggleCorrection(msg, down); });
    return msg;
  }
  function addDl(dl, label, value) {
    if (value == null || value === "" || (Array.isArray(value) && !value.length)) return;
    dl.appendChild(el("dt", null, label));
    dl.appendChild(el("dd", null, Array.isArray(value) ? value.join(", ") : String(value)));
  }
  function renderStrategy(msg, s) {
    var box = msg.strategyEl;
    box.textContent = "";
    box.hidden = false;
    box.setAttribute("data-route", s.route || "");
    var summary = el("summary");
    summary.appendChild(el("span", "route", (s.route || "?") + (s.retrieval ? " / " + s.retrieval : "")));
    var parts = [];
    if (s.chunks != null) parts.push(s.chunks + " chunk" + (s.chunks === 1 ? "" : "s"));
    if (typeof s.retrieval_ms === "number") parts.push(Math.round(s.retrieval_ms) + " ms retrieval");
    if (typeof s.generation_ms === "number") parts.push(Math.round(s.generation_ms) + " ms answer");
    if (s.corrections) parts.push(s.corrections + " correction" + (s.corrections === 1 ? "" : "s") + " applied");
    if (parts.length) summary.appendChild(document.createTextNode(" · " + parts.join(" · ")));
    box.appendChild(summary);
    var dl = el("dl");
    addDl(dl, "Why", s.reason);
    addDl(dl, "Collections", s.collections);
    addDl(dl, "Cache", s.cache_hit ? "hit (same filters and topic)" : (s.cache_hit === false ? "miss" : ""));
    addDl(dl, "Time", s.time_hint);
    addDl(dl, "Funds read", s.detected_funds);
    var f = s.filter || {};
    if (f.start_date || f.end_date) addDl(dl, "Dates", (f.start_date || "…") + " to " + (f.end_date || "…"));
    addDl(dl, "Candidates", s.candidate_count);
    addDl(dl, "Context", s.context_chars ? s.context_chars + " characters" : "");
    addDl(dl, "Model", s.model);
    addDl(dl, "Unavailable", s.unavailable);
    addDl(dl, "Variants", s.variants);
    addDl(dl, "Reranked", s.rerank_count ? s.rerank_count + " candidates" : "");
    addDl(dl, "Quality", (s.quality || []).map(function (q) {
      return q.step + ": " + q.status + " (" + Math.round(q.ms) + " ms" + (q.detail ? "; " + q.detail : "") + ")";
    }).join(" · "));
    box.appendChild(dl);
  }
  function safeUrl(u) {
    return typeof u === "string" && (/^https?:\/\//i.test(u) || /^\/(?!\/)/.test(u)) ? u : "";
  }
  function renderCitations(msg, cites, webQueries) {
    var queries = Array.isArray(webQueries) ? webQueries.filter(function (q) { return typeof q === "string" && q; }) : [];
    msg.searchedEl.textContent = queries.length ? "Searched the web for: " + queries.join(" · ") : "";
    msg.searchedEl.hidden = !queries.length;
    msg.citeMap = {};
    msg.sourcesEl.textContent = "";
    (cites || []).forEach(function (c, i) {
      var n = String(c.index != null ? c.index : i + 1);
      msg.citeMap[n] = c;
      var li = el("li");
      li.id = msg.id + "-src-" + n;
      li.value = Number(n) || i + 1;
      li.setAttribute("data-index", n);
      if (c.chunk_id) li.setAttribute("data-chunk-id", c.chunk_id);
      if (c.doc_id) li.setAttribute("data-doc-id", c.doc_id);
      var title = c.title || c.doc_id || "Untitled";
      var url = safeUrl(c.url);
      var t;
      if (url) {
        t = el("a", "title", title);
        t.href = url; t.target = "_blank"; t.rel = "noopener noreferrer";
      } else {
        t = el("button", "title", title);
        t.type = "button";
        t.setAttribute("data-cite", n);
        t.setAttribute("aria-controls", "cite-panel");
      }
      li.appendChild(t);
      var meta = [];
      var fund = c.metadata && c.metadata.fund_name;
      if (fund) meta.push(fund);
      if (c.collection) meta.push(c.collection);
      if (c.date) meta.push(c.date);
      if (meta.length) li.appendChild(el("span", "meta", " — " + meta.join(" · ")));
      msg.sourcesEl.appendChild(li);
    });
    msg.sourcesBlock.hidden = !msg.sourcesEl.children.length && !queries.length;
    renderNow(msg);
  }
  function showError(msg, text) {
    msg.noticeEl.textContent = text || "Something went wrong.";
    msg.noticeEl.hidden = false;
  }

  // ---------- corrections (thumbs-down) ----------
  function toggleCorrection(msg, opener) {
    var open = msg.correctionHost.querySelector("form");
    if (open) { open.remove(); opener.setAttribute("aria-expanded", "false"); opener.focus(); return; }
    var form = el("form", "correction");
    var fid = msg.id + "-correction";
    var label = el("label", null, "What is the right answer? It is used in your next answers.");
    label.htmlFor = fid;
    var area = el("textarea");
    area.id = fid;
    area.required = true;
    var row = el("div", "row");
    var send = button("primary", "Send correction", "submit"), cancel = button(null, "Cancel");
    row.appendChild(send);
    row.appendChild(cancel);
    var note = el("div", "notice");
    note.hidden = true;
    note.setAttribute("role", "status");
    [label, area, row, note].forEach(function (c) { form.appendChild(c); });
    msg.correctionHost.appendChild(form);
    opener.setAttribute("aria-expanded", "true");
    area.focus();
    function close() { form.remove(); opener.setAttribute("aria-expanded", "false"); opener.focus(); }
    cancel.addEventListener("click", close);
    form.addEventListener("keydown", function (e) { if (e.key === "Escape") { e.stopPropagation(); close(); } });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var text = area.value.trim();
      if (!text) { area.focus(); return; }
      send.disabled = true;
      sendJson("POST", "/api/corrections", {
        correction: text, conversation_id: msg.conversationId,
        message_id: msg.el.getAttribute("data-message-id") || ""
      }).then(function (r) {
        note.className = "notice ok";
        note.textContent = "Thanks: your correction is saved and used in your next answers.";
        note.hidden = false;
        area.disabled = true;
        msg.el.setAttribute("data-correction-id", r.correction_id || "");
        cancel.textContent = "Close";
      }).catch(function (err) {
        note.className = "notice error";
        note.textContent = err.message;
        note.hidden = false;
        send.disabled = false;
      });
    });
  }

  // ---------- lifecycle ----------
  function setBusy(busy) {
    sendBtn.disabled = busy;
    stopBtn.disabled = !busy;
  }
  // stopped before any content, the question goes from the page (and is not stored)
  function unask(msg) {
    var asked = msg.el.previousElementSibling;
    if (asked && asked.classList.contains("user")) asked.remove();
    msg.el.remove();
    if (current && current.msg === msg) current = null;
    setBusy(false);
    if (!transcript.querySelector(".msg")) resetConversation();
    if (!qEl.value) qEl.value = msg.question || "";
    setStatus("Stopped before any answer: the question was not kept.");
    qEl.focus();
    msg.removed = true;  // the sidebar is refreshed once the stream has ended (the server has dropped it then)
  }
  function finish(msg, state, errText, errCode) {
    if (msg.finished) return;
    msg.finished = true;
    if (state === "stopped" && !msg.text.trim()) { unask(msg); return; }
    if (state === "stopped" && msg.text.indexOf(STOP_MARK) === -1) {
      msg.text = msg.text.replace(/\s+$/, "") + (msg.text.trim() ? "\n\n" : "") + STOP_MARK;
    }
    renderNow(msg);
    if (msg.thinking) {  // folded once the answer is in
      msg.thinkingEl.open = false;
      msg.thinkingEl.querySelector("summary").textContent = "Thought process";
    }
    if (state === "error") {
      showError(msg, errText);
      if (errCode) msg.el.setAttribute("data-error-code", errCode);
    }
    msg.feedbackEl.hidden = state === "error" || !msg.el.getAttribute("data-message-id");
    msg.el.setAttribute("data-state", state);
    if (current && current.msg === msg) current = null;
    setBusy(false);
    setStatus(state === "stopped" ? "Stopped." : state === "error" ? "Error." : "");
    if (state !== "error") qEl.focus();
    if (state !== "error") loadConversations(false);
  }
  function handleEvent(msg, ev) {
    if (!ev || typeof ev !== "object" || msg.finished) return;
    if (ev.error) {
      var e = ev.error;
      finish(msg, "error", typeof e === "string" ? e : (e.message || e.code || "Unknown error"), e.code);
      return;
    }
    if (ev.searching === true) setStatus("Finding relevant information...", true);
    if (ev.strategy) {
      if (ev.strategy.conversation_id) { setConversation(ev.strategy.conversation_id); msg.conversationId = conversationId; }
      renderStrategy(msg, ev.strategy);
    }
    if (ev.generating === true) setStatus("Generating response...", true);
    if (typeof ev.thinking === "string" && ev.thinking) {
      msg.thinking += ev.thinking;
      msg.thinkingEl.hidden = false;
      msg.thinkingText.textContent = msg.thinking;
    }
    if (typeof ev.content === "string" && ev.content) {
      msg.text += ev.content;
      renderAnswer(msg);
    }
    if (Array.isArray(ev.citations)) renderCitations(msg, ev.citations, ev.web_queries);
    if (ev.done) {
      if (ev.conversation_id) { setConversation(ev.conversation_id); msg.conversationId = conversationId; }
      if (ev.message_id) msg.el.setAttribute("data-message-id", ev.message_id);
      if (ev.model) msg.el.setAttribute("data-model", ev.model);
      finish(msg, ev.stopped ? "stopped" : "done");
    }
  }
  function parseBlock(msg, block) {
    var data = [];
    block.split("\n").forEach(function (line) {
      if (line.slice(0, 5) === "data:") data.push(line.slice(line.charAt(5) === " " ? 6 : 5));
    });
    if (!data.length) return;
    var ev;
    try { ev = JSON.parse(data.join("\n")); } catch (e) { return; }
    handleEvent(msg, ev);
  }
  function checked(containerId) {
    return Array.prototype.map.call(
      document.querySelectorAll("#" + containerId + " input[type=checkbox]:checked"),
      function (i) { return i.value; });
  }

  async function ask(questionOverride) {
    var question = (typeof questionOverride === "string" ? questionOverride : qEl.value).trim();
    if (!question || current) return;
    if (!apiKey) { showSignin(""); return; }
    addUserMsg(question);
    if (typeof questionOverride !== "string") qEl.value = "";
    var msg = addAssistantMsg();
    msg.question = question;
    var ctrl = new AbortController();
    current = { msg: msg, ctrl: ctrl };
    setBusy(true);
    setStatus("Sending...", true);
    var body = {
      question: question,
      data_sources: checked("data-sources"),
      start_date: $("start-date").value || "",
      end_date: $("end-date").value || "",
      selected_funds: checked("funds"),
      conversation_id: conversationId,
      model: modelSel.value || "",
      document_ids: checked("documents")
    };
    try {
      var res = await api("/api/chat/ask/stream", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
        body: JSON.stringify(body),
        signal: ctrl.signal
      });
      if (!res.ok) {
        var text = "Request failed (HTTP " + res.status + ")", code = "HTTP_" + res.status;
        try {
          var j = await res.json();
          if (j && j.error) { text = j.error.message || j.error.code || text; code = j.error.code || code; }
        } catch (e) { /* not JSON */ }
        finish(msg, "error", text, code);
        return;
      }
      if (!res.body) throw new Error("Streaming is not supported by this browser.");
      var reader = res.body.getReader();
      var decoder = new TextDecoder();
      var buf = "";
      for (;;) {
        var r = await reader.read();
        if (r.done) break;
        buf += decoder.decode(r.value, { stream: true }).replace(/\r\n?/g, "\n");
        var idx;
        while ((idx = buf.indexOf("\n\n")) !== -1) {
          parseBlock(msg, buf.slice(0, idx));
          buf = buf.slice(idx + 2);
        }
        if (msg.finished) { try { reader.cancel(); } catch (e) { /* ignore */ } return; }
      }
      buf += decoder.decode().replace(/\r\n?/g, "\n");
      if (buf.trim()) parseBlock(msg, buf);
      if (!msg.finished) finish(msg, "error", "The response ended unexpectedly.");
    } catch (err) {
      if (msg.finished) return;
      if (err && err.name === "AbortError") finish(msg, "stopped");
      else finish(msg, "error", (err && err.message) || "Network error");
    } finally {
      if (msg.removed) loadConversations(false);
    }
  }

  function stop() {
    if (!current) return;
    var cur = current, conv = conversationId;
    finish(cur.msg, "stopped");
    var abort = function () { cur.ctrl.abort(); };
    if (!conv) { abort(); return; }
    // The stream is closed once the server has the stop: closed first, a question stopped before any
    // content would already be gone (with its conversation) when the stop arrived.
    api("/api/chat/stop", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ conversation_id: conv })
    }).then(abort, abort);
  }

  function resetConversation() {
    setConversation("");
    closePanel();
    transcript.textContent = "";
    var hint = el("div", "empty-hint", "New conversation. Ask a question to get started.");
    hint.id = "empty-hint";
    transcript.appendChild(hint);
    setStatus("");
  }
  function newConversation() {
    if (current) stop();
    resetConversation();
    closeSidebar();
    qEl.focus();
  }

  // ---------- conversation sidebar ----------
  function markCurrentConversation() {
    document.querySelectorAll("#conversation-list li").forEach(function (li) {
      li.setAttribute("aria-current", li.getAttribute("data-id") === conversationId ? "true" : "false");
    });
  }
  function conversationRow(c) {
    var li = el("li");
    li.setAttribute("data-id", c.conversation_id);
    var open = el("button", "open");
    open.type = "button";
    open.appendChild(el("span", "t", c.title || "Untitled conversation"));
    open.appendChild(el("span", "d", shortDate(c.updated_at)));
    open.title = c.title || "";
    open.addEventListener("click", function () { openConversation(c.conversation_id); });
    var actions = el("span", "actions");
    var rename = iconButton("rename-conversation", "pencil");
    rename.setAttribute("aria-label", "Rename “" + clip(c.title || "Untitled", 40) + "”");
    rename.addEventListener("click", function () { startRename(li, c); });
    var del = iconButton("delete-conversation", "trash");
    del.setAttribute("aria-label", "Delete “" + clip(c.title || "Untitled", 40) + "”");
    del.addEventListener("click", function () { confirmDelete(li, c); });
    actions.appendChild(rename);
    actions.appendChild(del);
    li.appendChild(open);
    li.appendChild(actions);
    return li;
  }
  function startRename(li, c) {
    var input = el("input", "rename");
    input.type = "text";
    input.value = c.title || "";
    input.maxLength = 200;
    input.setAttribute("aria-label", "New name for the conversation (Enter to save, Escape to cancel)");
    li.textContent = "";
    li.appendChild(input);
    input.focus();
    input.select();
    var done = false;
    function restore(title) {
      if (done) return;
      done = true;
      c.title = title;
      var row = conversationRow(c);
      li.replaceWith(row);
      markCurrentConversation();
      row.querySelector(".open").focus();
    }
    input.addEventListener("keydown", function (e) {
      if (e.key === "Enter") {
        e.preventDefault();
        sendJson("PATCH", "/api/conversations/" + encodeURIComponent(c.conversation_id), { title: input.value })
          .then(function () { loadConversations(false); restore(input.value.trim() || c.title); })
          .catch(function (err) { setStatus("Could not rename: " + err.message); restore(c.title); });
      } else if (e.key === "Escape") {
        e.preventDefault();
        e.stopPropagation();
        restore(c.title);
      }
    });
    input.addEventListener("blur", function () { setTimeout(function () { restore(c.title); }, 150); });
  }
  function confirmDelete(li, c) {
    var box = el("div", "confirm");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Delete this conversation?");
    box.appendChild(el("span", null, "Delete “" + clip(c.title || "Untitled", 30) + "”?"));
    var yes = button("danger confirm-delete", "Delete"), no = button(null, "Keep");
    box.appendChild(yes);
    box.appendChild(no);
    li.textContent = "";
    li.appendChild(box);
    no.focus();
    function back() { var row = conversationRow(c); li.replaceWith(row); markCurrentConversation(); row.querySelector(".delete-conversation").focus(); }
    no.addEventListener("click", back);
    box.addEventListener("keydown", function (e) { if (e.key === "Escape") { e.stopPropagation(); back(); } });
    yes.addEventListener("click", function () {
      api("/api/conversations/" + encodeURIComponent(c.conversation_id), { method: "DELETE" }).then(function (res) {
        if (!res.ok && res.status !== 404) throw new Error("HTTP " + res.status);
        li.remove();
        if (c.conversation_id === conversationId) resetConversation();
        setStatus("Conversation deleted.");
        $("no-conversations").hidden = !!document.querySelector("#conversation-list li");
        $("new-conversation").focus();
      }).catch(function (err) { setStatus("Could not delete: " + err.message); back(); });
    });
  }
  function loadConversations(more) {
    if (!apiKey) return Promise.resolve();
    var offset = more ? convOffset || 0 : 0;
    var shown = more ? 0 : Math.max(30, document.querySelectorAll("#conversation-list li").length);
    var limit = more ? 30 : Math.min(shown, 200);
    return apiJson("/api/conversations?limit=" + limit + "&offset=" + offset).then(function (r) {
      var list = $("conversation-list");
      if (!more) list.textContent = "";
      (r.conversations || []).forEach(function (c) { list.appendChild(conversationRow(c)); });
      convOffset = r.next_offset;
      $("more-conversations").hidden = r.next_offset == null;
      $("no-conversations").hidden = !!list.children.length;
      markCurrentConversation();
    }).catch(function (err) { if (err.status !== 401) setStatus("Could not list conversations: " + err.message); });
  }
  function citationsOf(m) { return Array.isArray(m.citations) ? m.citations : []; }
  function openConversation(id) {
    if (current) stop();
    closeSidebar();
    return apiJson("/api/conversations/" + encodeURIComponent(id)).then(function (r) {
      resetConversation();
      setConversation(id);
      var lastQuestion = "";
      (r.messages || []).forEach(function (m) {
        if (m.role === "user") { addUserMsg(m.content); lastQuestion = m.content; return; }
        var msg = addAssistantMsg();
        msg.question = lastQuestion;
        msg.conversationId = id;
        msg.text = m.content || "";
        msg.el.setAttribute("data-message-id", m.message_id);
        if (m.model) msg.el.setAttribute("data-model", m.model);
        if (m.route || m.strategy) {  // the stored strategy event: why, collections, filters and all
          var t = m.timings || {};
          var s = Object.assign({ route: m.route, retrieval: m.retrieval, model: m.model }, m.strategy || {});
          if (typeof t.retrieval_ms === "number") s.retrieval_ms = t.retrieval_ms;
          s.generation_ms = t.generation_ms;
          renderStrategy(msg, s);
        }
        renderCitations(msg, citationsOf(m), m.web_queries);
        var stopped = (m.content || "").indexOf(STOP_MARK) !== -1;
        msg.finished = true;
        msg.el.setAttribute("data-state", m.failed ? "error" : stopped ? "stopped" : "done");
        msg.feedbackEl.hidden = !!m.failed;
      });
      setStatus("");
      qEl.focus();
    }).catch(function (err) {
      setStatus("Could not open the conversation: " + err.message);
      if (err.status === 404) loadConversations(false);
    });
  }
  function openSidebar() { document.body.classList.add("sidebar-open"); $("menu").setAttribute("aria-expanded", "true"); $("new-conversation").focus(); }
  function closeSidebar() {
    if (!document.body.classList.contains("sidebar-open")) return;
    document.body.classList.remove("sidebar-open");
    $("menu").setAttribute("aria-expanded", "false");
  }

  // ---------- citation preview and panel ----------
  function citationFor(button) {
    var art = button.closest(".msg");
    return art && art._msg ? art._msg.citeMap[button.getAttribute("data-cite")] : null;
  }
  function showPreview(button) {
    var c = citationFor(button);
    var tip = $("cite-preview");
    if (!c) { tip.hidden = true; return; }
    tip.textContent = "";
    tip.appendChild(el("strong", null, c.title || c.doc_id || c.url || "Source"));
    tip.appendChild(el("span", null, clip(c.snippet || c.url || "", PREVIEW_CHARS)));
    tip.hidden = false;
    var r = button.getBoundingClientRect();
    var w = Math.min(340, window.innerWidth - 16);
    tip.style.maxWidth = w + "px";
    var left = Math.max(8, Math.min(r.left, window.innerWidth - w - 8));
    var top = r.bottom + 6;
    if (top + tip.offsetHeight > window.innerHeight - 8) top = Math.max(8, r.top - tip.offsetHeight - 6);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
    button.setAttribute("aria-describedby", "cite-preview");
  }
  function hidePreview() { $("cite-preview").hidden = true; }
  function panelMeta(rows) {
    var dl = $("panel-meta");
    dl.textContent = "";
    rows.forEach(function (r) { addDl(dl, r[0], r[1]); });
  }
  // Where in a book the source sits: "Chapter 2: Storms › 2.1 The fog signal · ¶3" (empty without chapters).
  function placeOf(c) {
    if (!c.chapter) return "";
    var shown = [c.chapter, c.section].filter(Boolean).join(" › ");
    return c.paragraph ? shown + " · ¶" + c.paragraph : shown;
  }
  function openPanel(button) {
    var c = citationFor(button);
    if (!c) return;
    hidePreview();
    var url = safeUrl(c.url);
    if (url && !c.chunk_id) { window.open(url, "_blank", "noopener"); return; }
    document.querySelectorAll("button.cite[aria-expanded=true]").forEach(function (b) { b.setAttribute("aria-expanded", "false"); });
    if (button.classList.contains("cite")) button.setAttribute("aria-expanded", "true");
    panelOpener = button;
    var panel = $("cite-panel");
    panel.hidden = false;
    panel.setAttribute("data-chunk-id", c.chunk_id || "");
    panel.removeAttribute("data-loaded");
    layout.classList.add("panel-open");
    $("panel-title").textContent = "[" + (c.index != null ? c.index : "") + "] " + (c.title || c.doc_id || "Source");
    var md = c.metadata || {};
    panelMeta([["Document", c.doc_id], ["Place", placeOf(c)], ["Collection", c.collection], ["Date", c.date],
               ["Fund", md.fund_name], ["Page", md.page]]);
    $("panel-text").textContent = c.snippet || "";
    $("panel-parent-block").hidden = true;
    $("panel-summary-block").hidden = true;
    $("panel-error").hidden = true;
    $("panel-close").focus();
    var summary = /#summary\d*$/.test(c.chunk_id || "");
    var path = summary ? documentPath(c.collection, c.doc_id) : "/api/chunks/" + encodeURIComponent(c.chunk_id);
    apiJson(path).then(function (r) {
      if (panel.getAttribute("data-chunk-id") !== (c.chunk_id || "")) return;  // another opened since
      var doc = summary ? r : (r.document || {});
      var dm = doc.metadata || {};
      panelMeta([["Document", doc.title || c.title || c.doc_id], ["Place", placeOf(c)],
                 ["Collection", doc.collection || c.collection],
                 ["Date", (summary ? doc.date : r.date) || c.date], ["Fund", (summary ? dm.fund_name : r.fund) || md.fund_name],
                 ["Page", summary ? "" : r.page], ["Type", dm.doc_type], ["File", dm.filename],
                 ["Chunks", doc.chunk_count]]);
      if (!summary) {
        $("panel-text").textContent = r.text;
        $("panel-parent").textContent = r.parent_text || "";
        $("panel-parent-block").hidden = !r.parent_text;
      }
      $("panel-summary").innerHTML = markdownHtml(doc.summary || "");
      $("panel-summary-block").hidden = !doc.summary;
      panel.setAttribute("data-loaded", "true");
    }).catch(function (err) {
      $("panel-error").textContent = "Could not load the source: " + err.message;
      $("panel-error").hidden = false;
      panel.setAttribute("data-loaded", "error");
    });
  }
  function closePanel() {
    var panel = $("cite-panel");
    if (panel.hidden) return;
    panel.hidden = true;
    layout.classList.remove("panel-open");
    document.querySelectorAll("button.cite[aria-expanded=true]").forEach(function (b) { b.setAttribute("aria-expanded", "false"); });
    if (panelOpener && document.body.contains(panelOpener)) panelOpener.focus();
    panelOpener = null;
  }

  // ---------- options: models, sources, funds, documents, collections ----------
  function addCheckbox(container, name, value, isChecked, text) {
    var label = el("label");
    var box = document.createElement("input");
    box.type = "checkbox"; box.name = name; box.value = value; box.checked = !!isChecked;
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + (text || value)));
    label.title = text || value;
    container.appendChild(label);
    return label;
  }
  function updateFundCount() {
    var n = checked("funds").length;
    $("funds-count").textContent = n ? "(" + n + " selected)" : "";
    updateScope();
  }
  function applyMeta(meta) {
    meta = meta || {};
    showIdentity(meta.identity);
    var models = meta.models || [];
    if (models.length) {
      modelSel.textContent = "";
      models.forEach(function (m) {
        var o = el("option", null, m); o.value = m;
        if (m === meta.default_model) o.selected = true;
        modelSel.appendChild(o);
      });
    }
    var ds = $("data-sources");
    ds.textContent = "";
    (meta.data_sources || []).forEach(function (s) {
      addCheckbox(ds, "data_source", s, DEFAULT_SOURCES.indexOf(s) !== -1);
    });
    var funds = $("funds");
    funds.textContent = "";
    (meta.funds || []).forEach(function (f) { addCheckbox(funds, "fund", f, false); });
    updateFundCount();
  }
  function documentPath(collection, docId) {
    return "/api/documents/" + encodeURIComponent(collection) + "/" + String(docId).split("/").map(encodeURIComponent).join("/");
  }
  function loadDocuments() {
    if (!apiKey) return Promise.resolve();
    var keep = checked("documents");
    return apiJson("/api/documents?limit=200").then(function (r) {
      var box = $("documents");
      box.textContent = "";
      (r.documents || []).forEach(function (d) { box.appendChild(documentRow(d, keep)); });
      updateDocuments();
    }).catch(function (err) { if (err.status !== 401) setStatus("Could not list documents: " + err.message); });
  }
  // A document of the list: a checkbox that puts it in scope, who sees it and its owner, and for its
  // owner or an admin a way to change who sees it
  function documentRow(d, keep) {
    var value = d.collection + "/" + d.doc_id;
    var row = el("div", "doc");
    row.setAttribute("data-doc", value);
    row.setAttribute("data-owner", d.owner || "");
    var label = el("label");
    var cb = document.createElement("input");
    cb.type = "checkbox"; cb.name = "document"; cb.value = value; cb.checked = keep.indexOf(value) !== -1;
    label.appendChild(cb);
    label.appendChild(el("span", "dt", d.title || d.doc_id));
    var bits = [d.collection, d.type, d.date, d.chunk_count + " chunks"];
    if (d.summarized) bits.push("summary");
    label.appendChild(el("span", "dm", bits.filter(Boolean).join(" · ")));
    label.title = (d.title || d.doc_id) + " (" + value + ")";
    label.setAttribute("data-summarized", d.summarized ? "true" : "false");
    row.appendChild(label);
    var line = el("div", "doc-access");
    line.appendChild(el("span", "da", accessText(d.access || {}, d.owner)));
    if (d.owner) line.appendChild(el("span", "do", "owner: " + (d.owner === me.user ? "me" : d.owner)));
    if (me.role === "admin" || (d.owner && d.owner === me.user)) {
      var edit = button("link access-edit", "Change who sees it");
      edit.setAttribute("aria-expanded", "false");
      edit.setAttribute("aria-label", "Change who sees " + (d.title || d.doc_id));
      edit.addEventListener("click", function () { toggleAccessForm(row, d, edit); });
      line.appendChild(edit);
    }
    row.appendChild(line);
    return row;
  }
  function updateDocuments() {
    var picked = checked("documents");
    $("documents-count").textContent = picked.length ? "(" + picked.length + " selected)" : "";
    $("summarize").disabled = picked.length !== 1;
    updateScope();
  }
  function updateScope() {
    var picked = document.querySelectorAll("#documents input:checked");
    var parts = [];
    if (picked.length === 1) parts.push("Document: " + picked[0].parentNode.querySelector(".dt").textContent);
    else if (picked.length > 1) parts.push(picked.length + " documents");
    var funds = checked("funds");
    if (funds.length) parts.push("Funds: " + funds.join(", "));
    $("scope").textContent = parts.length ? "Scope — " + parts.join(" · ") : "";
  }
  function loadCollections() {
    if (!apiKey) return Promise.resolve();
    return apiJson("/api/collections").then(function (r) {
      var sel = $("upload-collection");
      var names = (r.collections || []).map(function (c) { return c.name; });
      if (names.indexOf("documents") === -1) names.unshift("documents");
      var was = sel.value || "documents";
      sel.textContent = "";
      names.forEach(function (n) { var o = el("option", null, n); o.value = n; sel.appendChild(o); });
      sel.value = names.indexOf(was) !== -1 ? was : "documents";
    }).catch(function () { /* the upload box keeps its default */ });
  }

  // ---------- who sees a document ----------
  var ACCESS_MODES = [["", "The collection's default"], ["me", "Only me"], ["named", "Me and named people or groups"],
                      ["tenant", "Everyone in the tenant"]];
  function names(text) { return String(text || "").split(/[\s,]+/).filter(Boolean); }
  // Fills an access editor: who sees the document and, for named ones, the people and groups.
  // withDefault offers the collection's default (an upload); everyone in the tenant is for admins.
  function accessEditor(root, withDefault) {
    var sel = el("select", "access-mode");
    sel.setAttribute("aria-label", "Who sees it");
    ACCESS_MODES.forEach(function (m) {
      if (!m[0] && !withDefault) return;
      var o = el("option", m[0] === "tenant" ? "admin-only" : null, m[1]);
      o.value = m[0];
      sel.appendChild(o);
    });
    root.appendChild(sel);
    [["People", "access-users", "alice, bob"], ["Groups", "access-groups", "research"]].forEach(function (f) {
      var label = el("label", "access-names", f[0] + " ");
      var input = el("input", f[1]);
      input.type = "text"; input.placeholder = f[2]; input.autocomplete = "off"; input.spellcheck = false;
      label.appendChild(input);
      root.appendChild(label);
    });
    sel.addEventListener("change", function () { showNames(root); });
    offerTenant(root, false);
    showNames(root);
    return root;
  }
  function showNames(root) {
    var mode = root.querySelector(".access-mode");
    if (!mode) return;
    var named = mode.value === "named";
    root.querySelectorAll(".access-names").forEach(function (l) { l.hidden = !named; });
  }
  // Only admins share with the whole tenant (a document that already is says so)
  function offerTenant(root, already) {
    root.querySelectorAll("option.admin-only").forEach(function (o) {
      o.hidden = o.disabled = !(me.role === "admin" || already);
      if (o.disabled && o.selected) { root.querySelector(".access-mode").value = root.querySelector("option").value; }
    });
    showNames(root);
  }
  // The access object an editor says; null: the collection's default
  function accessOf(root) {
    var mode = root.querySelector(".access-mode").value;
    if (!mode) return null;
    var named = mode === "named";
    return { users: named ? names(root.querySelector(".access-users").value) : [],
             groups: named ? names(root.querySelector(".access-groups").value) : [], tenant: mode === "tenant" };
  }
  function setAccess(root, a) {
    var users = a.users || [], groups = a.groups || [];
    offerTenant(root, !!a.tenant);
    root.querySelector(".access-mode").value = a.tenant ? "tenant" : (users.length || groups.length) ? "named" : "me";
    root.querySelector(".access-users").value = users.join(", ");
    root.querySelector(".access-groups").value = groups.join(", ");
    showNames(root);
  }
  function accessText(a, owner) {
    if (a.tenant) return "Everyone in the tenant";
    var others = (a.users || []).concat((a.groups || []).map(function (g) { return "group " + g; }));
    var first = owner === me.user ? "me" : owner;
    return others.length ? "Shared with " + others.join(", ") : "Only " + (first || "its owner");
  }
  function toggleAccessForm(row, d, opener) {
    var open = row.querySelector("form.access-form");
    if (open) { open.remove(); opener.setAttribute("aria-expanded", "false"); return; }
    var form = el("form", "access-form");
    var fields = el("fieldset", "access-editor bare");
    fields.appendChild(el("legend", "visually-hidden", "Who sees " + (d.title || d.doc_id)));
    accessEditor(fields, false);
    setAccess(fields, d.access || {});
    form.appendChild(fields);
    var save = button("primary access-save", "Save", "submit");
    var cancel = button("access-cancel", "Cancel");
    var err = el("span", "notice error access-error");
    err.setAttribute("role", "alert");
    err.hidden = true;
    [save, cancel, err].forEach(function (c) { form.appendChild(c); });
    cancel.addEventListener("click", function () {
      form.remove();
      opener.setAttribute("aria-expanded", "false");
      opener.focus();
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      save.disabled = true;
      err.hidden = true;
      sendJson("PUT", documentPath(d.collection, d.doc_id) + "/access", accessOf(fields)).then(loadDocuments)
        .catch(function (x) {
          save.disabled = false;
          err.textContent = x.message;
          err.hidden = false;
        });
    });
    row.appendChild(form);
    opener.setAttribute("aria-expanded", "true");
    fields.querySelector(".access-mode").focus();
  }

  // ---------- upload with per-file progress ----------
  function pickFiles(list) {
    uploadFiles = Array.prototype.slice.call(list || []);
    $("upload-send").disabled = !uploadFiles.length;
    $("upload-send").textContent = uploadFiles.length ? "Upload " + uploadFiles.length + " file" + (uploadFiles.length === 1 ? "" : "s") : "Upload";
  }
  function uploadOne(file, collection, summarize, access) {
    var li = el("li");
    li.setAttribute("data-file", file.name);
    li.setAttribute("data-state", "sending");
    li.appendChild(el("span", "name", file.name));
    var bar = el("progress");
    bar.max = 100; bar.value = 0;
    bar.setAttribute("aria-label", "Progress of " + file.name);
    li.appendChild(bar);
    var stage = el("span", "stage", "Sending…");
    li.appendChild(stage);
    $("upload-results").appendChild(li);
    return new Promise(function (resolve) {
      var form = new FormData();
      form.append("files", file, file.name);
      form.append("collection", collection);
      form.append("summarize", summarize ? "true" : "false");
      if (access) form.append("access", JSON.stringify(access));
      var xhr = new XMLHttpRequest();
      var seen = 0, buf = "", last = null, failed = "";
      xhr.open("POST", "/api/documents");
      xhr.setRequestHeader("Authorization", "Bearer " + apiKey);
      xhr.upload.onprogress = function (e) { if (e.lengthComputable) bar.value = Math.round(50 * e.loaded / e.total); };
      var STAGES = { PARSED: 65, CHUNKED: 75, EMBEDDED: 90, INDEXED: 100, UNCHANGED: 100, FAILED: 100 };
      function events() {
        buf += xhr.responseText.slice(seen);
        seen = xhr.responseText.length;
        var idx;
        while ((idx = buf.indexOf("\n\n")) !== -1) {
          var line = buf.slice(0, idx).replace(/^data: ?/, "");
          buf = buf.slice(idx + 2);
          var ev;
          try { ev = JSON.parse(line); } catch (e) { continue; }
          if (ev.error && typeof ev.error === "object") { failed = ev.error.message || ev.error.code; continue; }
          if (ev.stage) {
            last = ev;
            bar.value = STAGES[ev.stage] || bar.value;
            stage.textContent = ev.stage.charAt(0) + ev.stage.slice(1).toLowerCase() + "…";
            if (ev.stage === "FAILED") failed = ev.error || "failed";
          }
        }
      }
      xhr.onprogress = function () { if (xhr.status === 200) events(); };
      xhr.onload = function () {
        if (xhr.status === 200) events();
        else {
          try { failed = JSON.parse(xhr.responseText).error.message; } catch (e) { failed = "HTTP " + xhr.status; }
          if (xhr.status === 401) showSignin("Your key was not accepted any more. Sign in again.");
        }
        bar.value = 100;
        if (failed) {
          li.setAttribute("data-state", "failed");
          stage.textContent = "Failed: " + failed;
        } else if (last) {
          li.setAttribute("data-state", "done");
          li.setAttribute("data-doc-id", last.collection + "/" + last.doc_id);
          var bits = [last.stage === "UNCHANGED" ? "Unchanged" : "Indexed", last.doc_type, last.chunks + " chunks",
                      (last.redactions || 0) + " redaction" + (last.redactions === 1 ? "" : "s")];
          if (last.summarized) bits.push("summarized");
          stage.textContent = bits.filter(Boolean).join(" · ");
        } else {
          li.setAttribute("data-state", "failed");
          stage.textContent = "Failed: no result";
        }
        resolve();
      };
      xhr.onerror = function () { li.setAttribute("data-state", "failed"); stage.textContent = "Failed: network error"; resolve(); };
      xhr.send(form);
    });
  }
  async function uploadAll() {
    var files = uploadFiles.slice();
    if (!files.length) return;
    $("upload-send").disabled = true;
    var collection = $("upload-collection").value || "documents", summarize = $("upload-summarize").checked;
    var access = accessOf($("upload-access"));
    for (var i = 0; i < files.length; i++) await uploadOne(files[i], collection, summarize, access);
    $("upload-files").value = "";
    pickFiles([]);
    loadDocuments();
    loadCollections();
  }

  // ---------- wiring ----------
  sendBtn.addEventListener("click", function () { ask(); });
  stopBtn.addEventListener("click", stop);
  $("new-conversation").addEventListener("click", newConversation);
  $("more-conversations").addEventListener("click", function () { loadConversations(true); });
  $("menu").addEventListener("click", function () {
    if (document.body.classList.contains("sidebar-open")) closeSidebar(); else openSidebar();
  });
  qEl.addEventListener("keydown", function (e) {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      ask();
    }
  });
  // a checkbox list with a Clear button and a filter box (funds, documents)
  function pickerList(listId, clearId, filterId, onChange) {
    $(listId).addEventListener("change", onChange);
    $(clearId).addEventListener("click", function () {
      document.querySelectorAll("#" + listId + " input[type=checkbox]").forEach(function (b) { b.checked = false; });
      onChange();
    });
    $(filterId).addEventListener("input", function () {
      var q = this.value.trim().toLowerCase();
      document.querySelectorAll("#" + listId + " label[title]").forEach(function (l) {
        (l.closest(".doc") || l).hidden = !!q && l.title.toLowerCase().indexOf(q) === -1;
      });
    });
  }
  pickerList("funds", "funds-clear", "fund-filter", updateFundCount);
  pickerList("documents", "documents-clear", "document-filter", updateDocuments);
  $("summarize").addEventListener("click", function () { ask("Summarize this document."); });
  $("upload-files").addEventListener("change", function () { pickFiles(this.files); });
  $("upload-send").addEventListener("click", uploadAll);
  accessEditor($("upload-access"), true);
  var drop = $("drop");
  drop.addEventListener("dragover", function (e) { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", function () { drop.classList.remove("over"); });
  drop.addEventListener("drop", function (e) { e.preventDefault(); drop.classList.remove("over"); pickFiles(e.dataTransfer.files); });

  transcript.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("button[data-cite]");
    if (!b) return;
    e.preventDefault();
    openPanel(b);
    var art = b.closest(".msg");
    var li = art && art.querySelector('.sources li[data-index="' + b.getAttribute("data-cite") + '"]');
    if (li) {
      document.querySelectorAll(".sources li.highlight").forEach(function (x) { x.classList.remove("highlight"); });
      li.classList.add("highlight");
      setTimeout(function () { li.classList.remove("highlight"); }, 2500);
    }
  });
  ["mouseover", "focusin"].forEach(function (type) {
    transcript.addEventListener(type, function (e) {
      var b = e.target.closest && e.target.closest("button.cite");
      if (b) showPreview(b);
    });
  });
  ["mouseout", "focusout"].forEach(function (type) {
    transcript.addEventListener(type, function (e) {
      if (e.target.closest && e.target.closest("button.cite")) hidePreview();
    });
  });
  window.addEventListener("scroll", hidePreview, { passive: true });
  $("panel-close").addEventListener("click", closePanel);
  $("backdrop").addEventListener("click", closeSidebar);
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    if (!$("cite-preview").hidden) { hidePreview(); return; }
    if (!$("cite-panel").hidden) { e.preventDefault(); closePanel(); return; }
    if (document.body.classList.contains("sidebar-open")) { closeSidebar(); $("menu").focus(); }
  });

  $("sign-out").addEventListener("click", signOut);
  $("signin").addEventListener("submit", function (e) {
    e.preventDefault();
    signIn($("api-key").value.trim(), true);
  });
  window.addEventListener("storage", function (e) {  // signed in or out in another tab
    if (e.key !== KEY_NAME && e.key !== null) return;
    var key = readKey();
    if (!key && apiKey) signOut();
    else if (key && key !== apiKey) signIn(key, false);
  });

  if (window.innerWidth > 900) $("filters").open = true;
  setConversation("");
  var linked = keyFromHash();
  if (linked !== null) {
    // keep the key out of the address bar, the history and bookmarks
    history.replaceState(history.state, "", location.pathname + location.search);
  }
  if (linked) writeKey(linked);
  var key = linked || readKey();
  if (key) {
    apiKey = key;
    setSignedIn(true);
    signIn(key, false);
  } else {
    showSignin("");
  }
})();
