"use strict";
// pmm report: what a person sees. Every ledger text reaches the page through textContent or
// an attribute value set by code (never innerHTML, never a URL), so nothing a model or a client
// wrote can run or make a request; the verdict element is written only from what verify.js
// computed.
(function () {
  const PMM = window.PMM;
  // Milestones from the start of navigation, for scripts/report-bench.py.
  const timing = (window.PMMTiming = { script: Math.round(performance.now()) });
  const $ = (id) => document.getElementById(id);
  const PAGE = 100;
  const CLIP = 4000;
  const BIG = 200000;

  // el("div", {class: "x", "data-id": 3}, child, "text", ...): attributes by name (never
  // an event handler or a URL: none is ever passed), text as text nodes.
  function el(tag, attrs) {
    const svg = tag.startsWith("svg:");
    const e = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4)) : document.createElement(tag);
    for (const k in attrs || {}) {
      const v = attrs[k];
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = String(v);
      else if (k === "class") e.setAttribute("class", v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (let i = 2; i < arguments.length; i++) {
      const c = arguments[i];
      if (c === null || c === undefined || c === false) continue;
      e.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  // ---- The events, as embedded.
  // The block's text, parsed. A text longer than the longest string the engine makes (V8:
  // 2^29 - 24 characters, about 537 MB: a report of about 750,000 events) reads as "" through
  // textContent, but its text node still gives it in parts (substringData): those are parsed
  // a part at a time, cut where pmm-export puts one event a line.
  function readEvents(node) {
    const text = node.textContent;
    const t = node.firstChild;
    if (text !== "" || !t || t.nodeType !== 3 || node.childNodes.length !== 1 || t.length === 0) return JSON.parse(text);
    return PMM.parseInParts(t);
  }
  let events = [];
  let loadError = "";
  try {
    const parsed = readEvents($("pmm-events"));
    if (!Array.isArray(parsed)) throw new Error("the events block is not a JSON array");
    events = parsed;
  } catch (e) {
    loadError = String(e && e.message ? e.message : e);
  }
  timing.parsed = Math.round(performance.now());
  const byId = new Map();
  const shapeOk = (ev) => ev && typeof ev === "object" && Number.isSafeInteger(ev.id) &&
    typeof ev.ts === "string" && typeof ev.kind === "string" && typeof ev.content === "string" &&
    typeof ev.meta === "string" && (ev.prev_hash === null || typeof ev.prev_hash === "string") &&
    (ev.hash === null || typeof ev.hash === "string");
  events.forEach((ev, i) => { if (shapeOk(ev) && !byId.has(ev.id)) byId.set(ev.id, i); });
  const metaCache = new Map();
  function meta(ev) {
    if (metaCache.has(ev.id)) return metaCache.get(ev.id);
    let m = {};
    try { const v = JSON.parse(ev.meta); if (v && typeof v === "object" && !Array.isArray(v)) m = v; } catch (e) { /* shown raw */ }
    metaCache.set(ev.id, m);
    return m;
  }
  function contentJson(ev) {
    try { const v = JSON.parse(ev.content); return v && typeof v === "object" ? v : null; } catch (e) { return null; }
  }
  const str = (v) => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v));
  const day = (ts) => (typeof ts === "string" ? ts.slice(0, 10) : "");
  const when = (ts) => (typeof ts === "string" ? ts.replace("T", " ").replace(/\.\d+Z$/, "Z") : "");

  // ---- The verdict (filled in by verify(); views read it to mark events).
  const state = { verdict: null, bad: new Set(), erased: new Map() };

  // ---- Routing: #view or #view/arg, no request.
  const views = {};
  let current = "";
  function route() {
    const h = decodeURIComponent(location.hash.slice(1));
    const [name, arg] = h.split(/\/(.*)/s);
    const v = views[name] ? name : "timeline";
    for (const sec of document.querySelectorAll("main > section.view")) sec.hidden = sec.id !== "view-" + v;
    for (const a of document.querySelectorAll(".tabs a")) {
      if (a.dataset.view === v) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
    }
    if (current !== v || arg) views[v].show(arg || "");
    current = v;
  }
  function go(view, arg) { location.hash = "#" + view + (arg !== undefined && arg !== "" ? "/" + encodeURIComponent(arg) : ""); }

  // ---- An event, shown the same way everywhere.
  const LABEL = {
    user_message: "User", assistant_message: "Reply", autonomy_tick: "Tick", commitment_open: "Commitment opened",
    commitment_close: "Commitment closed", claim: "Claim", reflection: "Reflection", identity_adoption: "Identity adopted",
    internal_goal_created: "Goal opened", erasure: "Erasure", inter_ledger_ref: "Reference", summary_update: "Summary",
  };
  function who(ev) {
    const m = meta(ev);
    if (ev.kind === "assistant_message") {
      const src = m.source === "autonomy_kernel" ? "thinking tick · " : "";
      return src + [m.provider, m.model].filter((x) => typeof x === "string" && x).join("/");
    }
    return str(m.source || m.role || m.origin || "");
  }
  function idButton(id, text) {
    const b = el("button", { type: "button", class: "linkish", "data-ev": id, text: text || "#" + id });
    return b;
  }
  function chip(text, cls, id) {
    const c = el("span", { class: "chip " + (cls || "") }, text);
    if (id !== undefined) c.appendChild(document.createTextNode(" ")), c.appendChild(idButton(id));
    return c;
  }
  function body(text, mark) {
    const clipped = text.length > CLIP;
    const p = el("div", { class: "ev-body" + (clipped ? " clipped" : ""), dir: "auto" });
    highlight(p, clipped ? text.slice(0, CLIP) : text, mark);
    if (clipped) {
      const more = el("button", { type: "button", class: "linkish more", text: "show all " + text.length + " characters" });
      more.addEventListener("click", () => { clear(p).className = "ev-body"; highlight(p, text, mark); });
      return el("div", null, p, more);
    }
    return p;
  }
  function highlight(node, text, q) {
    if (!q) { node.textContent = text; return; }
    const low = text.toLowerCase();
    let at = 0;
    for (;;) {
      const j = low.indexOf(q, at);
      if (j < 0) break;
      node.appendChild(document.createTextNode(text.slice(at, j)));
      node.appendChild(el("mark", { text: text.slice(j, j + q.length) }));
      at = j + q.length;
    }
    node.appendChild(document.createTextNode(text.slice(at)));
  }
  function eventItem(ev, mark) {
    const erased = state.erased.get(ev.id);
    const cls = ["ev", ev.kind.replace(/[^a-z_]/g, "")];
    if (erased) cls.push("erased");
    if (state.bad.has(ev.id)) cls.push("bad");
    const m = meta(ev);
    if (ev.kind === "assistant_message" && m.source === "autonomy_kernel") cls.push("thinking");
    const li = el("li", { class: cls.join(" "), "data-id": ev.id });
    li.appendChild(el("div", { class: "ev-head" }, idButton(ev.id), el("time", { text: when(ev.ts) }),
      el("span", { class: "who", text: LABEL[ev.kind] || ev.kind }), el("span", { text: who(ev) })));
    if (erased) {
      li.appendChild(el("p", { class: "ev-body" }, "Erased by event ", idButton(erased.erasure_id),
        erased.source ? " (" + erased.source + ")" : "", ": " + (erased.reason || "no reason given")));
    } else if (ev.kind === "autonomy_tick") li.appendChild(tickBody(ev));
    else li.appendChild(body(ev.content, mark));
    if (state.bad.has(ev.id)) li.appendChild(el("div", { class: "chips" }, chip("does not verify", "bad")));
    const caused = effects(ev);
    if (caused.length) li.appendChild(el("div", { class: "chips" }, ...caused));
    return li;
  }
  function tickBody(ev) {
    const c = contentJson(ev) || {};
    const lines = el("div", { class: "ev-body" });
    lines.appendChild(el("strong", { text: "decision: " + str(c.decision || "?") }));
    if (c.reasoning) lines.appendChild(document.createTextNode(" — " + str(c.reasoning)));
    const m = meta(ev);
    if (m.think) lines.appendChild(document.createTextNode(" · thinking: " + str(m.think)));
    if (Array.isArray(c.evidence) && c.evidence.length) {
      lines.appendChild(document.createTextNode(" · evidence: "));
      for (const id of c.evidence.slice(0, 20)) if (Number.isSafeInteger(id)) lines.appendChild(idButton(id)), lines.appendChild(document.createTextNode(" "));
    }
    return lines;
  }
  // What a reply's markers did: the marker events written after it, before the next message.
  const MARKS = new Set(["commitment_open", "commitment_close", "claim", "reflection", "inter_ledger_ref", "identity_adoption", "internal_goal_created"]);
  function effects(ev) {
    if (ev.kind !== "assistant_message") return [];
    const out = [];
    const i = byId.get(ev.id);
    for (let j = i + 1; j < events.length && j < i + 60; j++) {
      const e = events[j];
      if (e.kind === "user_message" || e.kind === "assistant_message" || e.kind === "autonomy_stimulus") break;
      if (!MARKS.has(e.kind)) continue;
      const m = meta(e);
      const txt = e.kind === "commitment_open" ? "opened: " + str(m.text || m.cid) :
        e.kind === "commitment_close" ? "closed: " + str(m.cid) :
        e.kind === "claim" ? "claim" : (LABEL[e.kind] || e.kind).toLowerCase();
      out.push(chip(txt, e.kind === "commitment_open" ? "open" : e.kind === "commitment_close" ? "close" : "", e.id));
    }
    return out;
  }
  function showEvent(id) {
    const i = byId.get(id);
    const dlg = $("event-dialog");
    const b = clear($("ev-body"));
    $("ev-h").textContent = "Event " + id;
    if (i === undefined) b.appendChild(el("p", { text: "Event " + id + " is not in this report." }));
    else {
      const ev = events[i];
      const status = state.erased.has(id) ? "erased (its hash is the hash of what was erased)" :
        state.bad.has(id) ? "does not verify" : state.verdict ? "verified" : "not checked yet";
      b.appendChild(el("dl", { class: "kv" },
        el("dt", { text: "kind" }), el("dd", { text: ev.kind }), el("dt", { text: "time" }), el("dd", { text: ev.ts }),
        el("dt", { text: "hash" }), el("dd", { class: "mono", text: str(ev.hash) }),
        el("dt", { text: "prev_hash" }), el("dd", { class: "mono", text: str(ev.prev_hash) }),
        el("dt", { text: "status" }), el("dd", { text: status })));
      b.appendChild(el("h3", { text: "content" }), el("pre", { dir: "auto", text: ev.content }));
      b.appendChild(el("h3", { text: "meta (as stored)" }));
      b.appendChild(el("pre", { dir: "auto", text: ev.meta }));
    }
    dlg.hidden = false;
    $("ev-close").focus();
  }
  document.addEventListener("click", (e) => {
    const t = e.target.closest ? e.target.closest("[data-ev]") : null;
    if (t) { e.preventDefault(); showEvent(Number(t.getAttribute("data-ev"))); }
  });
  $("ev-close").addEventListener("click", () => { $("event-dialog").hidden = true; });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") $("event-dialog").hidden = true;
    const typing = /INPUT|SELECT|TEXTAREA/.test(document.activeElement.tagName);
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === "/") { e.preventDefault(); go("search"); $("search-q").focus(); }
    if (current === "timeline" && (e.key === "n" || e.key === "p")) timeline.turn(e.key === "n" ? 1 : -1);
  });

  // ---- Timeline: paged over the filtered ids.
  const CONV = new Set(["user_message", "assistant_message"]);
  const TICKS = new Set(["autonomy_tick"]);
  const timeline = {
    page: 0, rows: [],
    filter() {
      const f = { conv: $("tl-conv").checked, ticks: $("tl-ticks").checked, marks: $("tl-marks").checked, all: $("tl-all").checked };
      this.rows = [];
      for (let i = 0; i < events.length; i++) {
        const k = events[i].kind;
        const show = CONV.has(k) ? f.conv : TICKS.has(k) ? f.ticks : (MARKS.has(k) || k === "erasure") ? f.marks : f.all;
        if (show) this.rows.push(i);
      }
    },
    turn(d) { this.page = Math.max(0, Math.min(this.pages() - 1, this.page + d)); this.render(); },
    pages() { return Math.max(1, Math.ceil(this.rows.length / PAGE)); },
    render() {
      const list = clear($("tl-list"));
      const frag = document.createDocumentFragment();
      for (const i of this.rows.slice(this.page * PAGE, (this.page + 1) * PAGE)) if (shapeOk(events[i])) frag.appendChild(eventItem(events[i]));
      list.appendChild(frag);
      if (!this.rows.length) list.appendChild(el("li", { class: "hint", text: "No event of the kinds chosen." }));
      const pager = clear($("tl-pager"));
      const btn = (t, to, label) => {
        const b = el("button", { type: "button", text: t, "aria-label": label, disabled: to < 0 || to >= this.pages() || to === this.page });
        b.addEventListener("click", () => { this.page = to; this.render(); $("main").focus(); });
        return b;
      };
      pager.append(btn("«", 0, "First page"), btn("‹", this.page - 1, "Previous page (p)"),
        el("span", { text: "page " + (this.page + 1) + " of " + this.pages() + " · " + this.rows.length + " events" }),
        btn("›", this.page + 1, "Next page (n)"), btn("»", this.pages() - 1, "Last page"));
    },
    show(arg) {
      if (!this.rows.length) this.filter();
      if (arg) {
        const i = byId.get(Number(arg));
        const at = i === undefined ? -1 : this.rows.indexOf(i);
        if (at >= 0) this.page = Math.floor(at / PAGE);
      }
      this.render();
    },
  };
  for (const id of ["tl-conv", "tl-ticks", "tl-marks", "tl-all"]) $(id).addEventListener("change", () => { timeline.filter(); timeline.page = 0; timeline.render(); });
  views.timeline = timeline;

  window.PMMViews = { el: el, events: events, byId: byId, meta: meta, contentJson: contentJson, str: str, day: day, when: when,
    state: state, views: views, go: go, idButton: idButton, eventItem: eventItem, body: body, clear: clear, $: $, route: route };

  // ---- The verdict: computed from the events alone, in slices so the page stays usable.
  function checkpointBlock() {
    const node = $("pmm-checkpoint");
    if (!node) return null;
    try {
      const v = JSON.parse(node.textContent);
      return v && typeof v.key === "string" && typeof v.note === "string" ? v : { key: "", note: "" };
    } catch (e) { return { key: "", note: "" }; }
  }
  // Lets the page paint and answer input between slices of the check. Not setTimeout: a tab
  // in the background has its timers throttled to about one a second, which would stretch a
  // check of 10^5 events from seconds to minutes; a message is not throttled.
  const channel = new MessageChannel();
  const waiting = [];
  channel.port1.onmessage = () => { const r = waiting.shift(); if (r) r(); };
  function yieldToPage() {
    return new Promise((r) => { waiting.push(r); channel.port2.postMessage(0); });
  }
  async function verify() {
    const cp = checkpointBlock();
    let size = 0;
    if (cp) { try { size = PMM.parseCheckpointBody(cp.note.slice(0, cp.note.lastIndexOf("\n\n") + 1)).size; } catch (e) { size = 0; } }
    const opened = cp ? PMM.openCheckpoint(cp).catch((e) => ({ ok: false, why: String(e.message || e) })) : null;
    timing.verifying = Math.round(performance.now());
    const chain = new PMM.Chain({ rootAt: size });
    let slice = performance.now();
    for (let i = 0; i < events.length; i++) {
      const ev = events[i];
      if (shapeOk(ev)) chain.check(ev);
      else { chain.count++; chain.find(ev && Number.isSafeInteger(ev.id) ? ev.id : null, "malformed", { error: "not an event" }); }
      if ((i & 1023) === 1023 && performance.now() - slice > 50) {
        await yieldToPage();
        slice = performance.now();
      }
    }
    const v = chain.finish();
    timing.verified = Math.round(performance.now());
    if (loadError) { v.status = "failed"; v.findings.push({ id: null, problem: "malformed", error: loadError }); }
    v.checkpoint = "none";
    if (opened) {
      const o = await opened;
      v.cp = o;
      if (!o.ok) v.checkpoint = "failed";
      else if (v.first !== 1 || v.events < o.checkpoint.size) { v.checkpoint = "failed"; o.why = "this report does not hold the checkpoint's events"; }
      else if (v.rootAt.get(o.checkpoint.size) !== o.checkpoint.root && !(o.checkpoint.size === 0)) { v.checkpoint = "failed"; o.why = "the events' tree at size " + o.checkpoint.size + " has another root: history was rewritten"; }
      else v.checkpoint = "verified";
    }
    return v;
  }
  function publish(v) {
    // From the start of navigation (the time origin), not from when this script began: the
    // time a reader waits for the verdict.
    const ms = Math.round(performance.now());
    state.verdict = v;
    for (const f of v.findings) if (f.id !== null) state.bad.add(f.id);
    state.erased = v.erased;
    const out = $("pmm-verdict");
    out.setAttribute("data-events", String(v.events));
    out.setAttribute("data-head", v.head);
    out.setAttribute("data-root", v.root);
    out.setAttribute("data-first-bad", v.firstBad === null ? "" : String(v.firstBad));
    out.setAttribute("data-erased", String(v.erased.size));
    out.setAttribute("data-checkpoint", v.checkpoint);
    out.setAttribute("data-ms", String(ms));
    out.setAttribute("data-sha", PMM.engine.name());
    out.setAttribute("data-status", v.status);
    const banner = $("integrity");
    banner.className = "banner " + v.status;
    out.textContent = v.status === "ok"
      ? "Verified: all " + v.events + " events recompute and link" + (v.first !== 1 ? " (a window from event " + v.first + ")" : "") + "."
      : v.firstBad !== null ? "FAILED at event " + v.firstBad + ": " + v.findings.length + " finding(s)." : "FAILED: " + (v.findings[0] ? v.findings[0].error || v.findings[0].problem : "no events") + ".";
    const facts = clear($("integrity-facts"));
    const fact = (k, val) => facts.appendChild(el("div", null, el("dt", { text: k }), el("dd", { text: val })));
    fact("events", v.first !== null ? v.events + " (" + v.first + "–" + (v.first + v.events - 1) + ")" : "0");
    fact("head", v.head.slice(0, 16) + "…");
    fact("Merkle root", v.root ? v.root.slice(0, 16) + "…" : "— (a window)");
    fact("erased", String(v.erased.size));
    fact("checkpoint", v.checkpoint === "none" ? "none embedded" : v.checkpoint + (v.cp && v.cp.key ? " · signed by " + v.cp.key.name + "+" + v.cp.key.hash : "") + (v.cp && v.cp.why ? " · " + v.cp.why : ""));
    fact("checked in", ms + " ms, SHA-256 " + (PMM.engine.name() === "wasm" ? "in WebAssembly" : "in JavaScript" + (PMM.engine.why() ? " (" + PMM.engine.why() + ")" : "")));
    const paint = performance.getEntriesByType("paint").find((p) => p.name === "first-contentful-paint");
    if (paint) document.documentElement.setAttribute("data-first-paint-ms", String(Math.round(paint.startTime)));
    if (current && views[current].refresh) views[current].refresh();
  }

  // Called by panels.js once every view is registered: the first view, then the verdict.
  window.PMMViews.start = function () {
    window.addEventListener("hashchange", route);
    if (events.length > BIG) {
      const from = events[events.length - 100000].id;
      $("main").prepend(el("p", { class: "warn", role: "note", text: "This report holds " + events.length +
        " events: a page this large is slow to open and check. Export a window instead, e.g. pmm-export --since " + from + " -o recent.html." }));
    }
    try { route(); } catch (e) { $("main").prepend(el("p", { class: "warn", text: "A view failed: " + e })); }
    setTimeout(() => {
      verify().then(publish, (e) => publish({ status: "failed", events: 0, first: null, head: "", root: "", firstBad: null,
        erased: new Map(), findings: [{ id: null, problem: "malformed", error: String(e) }], checkpoint: "failed" }));
    }, 0);
  };
})();
