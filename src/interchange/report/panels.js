"use strict";
// pmm report: the views besides the timeline (views.js holds the shared parts). Every
// projection here is a fold over the embedded events, the same events the verdict is about.
(function () {
  const V = window.PMMViews;
  const { el, events, byId, meta, contentJson, str, day, when, views, go, idButton, eventItem, clear, $ } = V;
  const once = (f) => { let done = false; return (arg) => { if (!done) { done = true; f(arg); } }; };
  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

  // ---- Charts: hand-written SVG. series: [{name, points: [[x, y], ...]}].
  function lineChart(title, series, opts) {
    opts = opts || {};
    const W = 960, H = 220, L = 48, R = 12, T = 12, B = 28;
    const pts = series.flatMap((s) => s.points);
    const box = el("figure", { class: "chart" }, el("h3", { text: title }));
    if (!pts.length) { box.appendChild(el("p", { class: "hint", text: "Nothing of this kind in the report." })); return box; }
    let x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
    let y0 = opts.y0 !== undefined ? opts.y0 : Math.min(...pts.map((p) => p[1])), y1 = Math.max(...pts.map((p) => p[1]), opts.y1 || -Infinity);
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) y1 = y0 + 1;
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const svg = el("svg:svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title });
    svg.appendChild(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
    svg.appendChild(el("svg:line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
    const fmt = (v) => (Math.abs(v) >= 1000 ? Math.round(v).toString() : (+v.toFixed(2)).toString());
    for (const [y, t] of [[y0, fmt(y0)], [y1, fmt(y1)]]) svg.appendChild(el("svg:text", { class: "lbl", x: 4, y: sy(y) + 4, text: t }));
    svg.appendChild(el("svg:text", { class: "lbl", x: L, y: H - 8, text: (opts.xlabel || "event") + " " + (opts.xfmt ? opts.xfmt(x0) : x0) }));
    svg.appendChild(el("svg:text", { class: "lbl", x: W - R, y: H - 8, "text-anchor": "end", text: opts.xfmt ? opts.xfmt(x1) : String(x1) }));
    series.forEach((s, k) => {
      if (!s.points.length) return;
      const d = s.points.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1)).join("");
      svg.appendChild(el("svg:path", { class: "s" + (k % 3), d: d }));
      if (s.points.length < 60) for (const p of s.points) svg.appendChild(el("svg:circle", { class: "dot", cx: sx(p[0]), cy: sy(p[1]), r: 2.5 }));
    });
    box.appendChild(svg);
    if (series.length > 1 || opts.legend) box.appendChild(el("div", { class: "legend" }, ...series.map((s, k) => el("span", { class: "k" + (k % 3), text: s.name }))));
    return box;
  }
  function barChart(title, bars, names) {
    // bars: [{label, values: [a, b]}]
    const W = 960, H = 220, L = 48, B = 28, T = 12;
    const box = el("figure", { class: "chart" }, el("h3", { text: title }));
    if (!bars.length) { box.appendChild(el("p", { class: "hint", text: "Nothing of this kind in the report." })); return box; }
    const max = Math.max(1, ...bars.map((b) => b.values.reduce((a, c) => a + c, 0)));
    const bw = (W - L - 12) / bars.length;
    const svg = el("svg:svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title });
    svg.appendChild(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W - 12, y2: H - B }));
    svg.appendChild(el("svg:text", { class: "lbl", x: 4, y: T + 4, text: String(max) }));
    bars.forEach((b, i) => {
      let y = H - B;
      b.values.forEach((v, k) => {
        const h = (v / max) * (H - B - T);
        y -= h;
        svg.appendChild(el("svg:rect", { class: "b" + k, x: L + i * bw + 1, y: y, width: Math.max(1, bw - 2), height: h }, el("svg:title", { text: b.label + ": " + names[k] + " " + v })));
      });
    });
    svg.appendChild(el("svg:text", { class: "lbl", x: L, y: H - 8, text: bars[0].label }));
    svg.appendChild(el("svg:text", { class: "lbl", x: W - 12, y: H - 8, "text-anchor": "end", text: bars[bars.length - 1].label }));
    box.appendChild(svg);
    box.appendChild(el("div", { class: "legend" }, ...names.map((n, k) => el("span", { class: "k" + k, text: n }))));
    return box;
  }
  function table(head, rows, caption) {
    return el("table", { class: "grid" }, el("caption", { class: "vh", text: caption || "" }),
      el("thead", null, el("tr", null, ...head.map((h) => el("th", { scope: "col", text: h })))),
      el("tbody", null, ...rows.map((r) => el("tr", null, ...r.map((c) => (c instanceof Node ? el("td", null, c) : el("td", { class: typeof c === "number" ? "num" : null, text: c })))))));
  }

  // ---- Why did it say that.
  const replies = [];
  const selectionFor = new Map();
  for (let i = 0; i < events.length; i++) {
    const ev = events[i];
    if (ev.kind === "assistant_message") replies.push(i);
    if (ev.kind === "retrieval_selection") {
      const c = contentJson(ev);
      if (c && Number.isSafeInteger(c.turn_id)) selectionFor.set(c.turn_id, { ev: ev, c: c });
    }
  }
  views.why = {
    init: once(() => {
      const pick = $("why-pick");
      const recent = replies.slice(-2000).reverse();
      for (const i of recent) {
        const ev = events[i];
        pick.appendChild(el("option", { value: ev.id, text: "#" + ev.id + " · " + when(ev.ts) + " · " + ev.content.slice(0, 60).replace(/\s+/g, " ") }));
      }
      if (!recent.length) pick.appendChild(el("option", { value: "", text: "No reply in this report" }));
      pick.addEventListener("change", () => go("why", pick.value));
    }),
    show(arg) {
      this.init();
      const pick = $("why-pick");
      const id = arg ? Number(arg) : Number(pick.value);
      if (arg) pick.value = arg;
      const out = clear($("why-detail"));
      const i = byId.get(id);
      if (i === undefined || events[i].kind !== "assistant_message") { out.appendChild(el("p", { class: "hint", text: "Choose a reply." })); return; }
      const ev = events[i], m = meta(ev);
      const list = el("ol", { class: "timeline" });
      out.append(el("ol", { class: "timeline" }, eventItem(ev)));
      const asked = Number.isSafeInteger(m.reply_to) ? m.reply_to : null;
      if (asked !== null && byId.has(asked)) out.append(el("h3", { text: "In reply to" }), el("ol", { class: "timeline" }, eventItem(events[byId.get(asked)])));
      const sel = selectionFor.get(id);
      const selected = Array.isArray(m.selected) ? m.selected : sel && Array.isArray(sel.c.selected) ? sel.c.selected : [];
      const via = Array.isArray(m.via) ? m.via : sel && Array.isArray(sel.c.via) ? sel.c.via : [];
      out.append(el("dl", { class: "kv" },
        el("dt", { text: "prompt sha256" }), el("dd", { class: "mono", text: str(m.prompt_sha256) || "not recorded" }),
        el("dt", { text: "rebuild it" }), el("dd", null, el("code", { text: "pmm-replay --prompt " + id })),
        el("dt", { text: "selection" }), el("dd", null, sel ? idButton(sel.ev.id, "retrieval_selection #" + sel.ev.id) : "recorded with the reply", sel ? " · strategy " + str(sel.c.strategy) : "")));
      out.append(el("h3", { text: "What its prompt recalled (" + selected.length + ")" }));
      selected.forEach((sid, k) => {
        const j = byId.get(sid);
        const why = Array.isArray(via[k]) ? via[k].map(str).join(", ") : str(via[k]);
        list.appendChild(el("li", { class: "chips" }, el("span", { class: "chip", text: "recalled by: " + (why || "the selection") })));
        if (j !== undefined) list.appendChild(eventItem(events[j]));
        else list.appendChild(el("li", { class: "hint", text: "event " + sid + " is outside this report" }));
      });
      out.append(list);
    },
  };

  // ---- Commitments: open and closed, who opened each, age, the close, the thread.
  views.commitments = {
    show: once(() => {
      const byCid = new Map();
      const last = events.length ? events[events.length - 1] : null;
      for (const ev of events) {
        if (ev.kind !== "commitment_open" && ev.kind !== "commitment_close") continue;
        const m = meta(ev);
        if (typeof m.cid !== "string") continue;
        if (ev.kind === "commitment_open") byCid.set(m.cid, { open: ev, m: m, close: null, cm: null, thread: [ev.id] });
        else { const c = byCid.get(m.cid); if (c && !c.close) { c.close = ev; c.cm = m; } if (c) c.thread.push(ev.id); }
      }
      const all = Array.from(byCid.values()).reverse();
      const open = all.filter((c) => !c.close).length;
      $("cm-summary").append(el("p", { text: all.length + " commitments: " + open + " open, " + (all.length - open) + " closed." }));
      const tbody = $("cm-table").tBodies[0];
      for (const c of all.slice(0, 2000)) {
        const by = str(c.m.origin || c.m.source || "unknown");
        const end = c.close || last;
        const age = end.id - c.open.id;
        tbody.appendChild(el("tr", null,
          el("td", { class: "nowrap" }, idButton(c.open.id), el("br"), el("time", { text: when(c.open.ts) })),
          el("td", { dir: "auto", text: str(c.m.text || c.open.content) }),
          el("td", { class: "nowrap", text: by }),
          el("td", { class: "num", text: age + " events" + (day(end.ts) !== day(c.open.ts) ? " · since " + day(c.open.ts) : "") }),
          el("td", { class: "nowrap", text: c.close ? "closed" : "open" }),
          el("td", null, c.close ? idButton(c.close.id) : "", c.close ? " " + str(c.cm.reason || "") + (c.cm.source ? " (" + str(c.cm.source) + ")" : "") : "",
            c.thread.length > 2 ? el("div", null, "thread: ", ...c.thread.map((id) => idButton(id)).flatMap((b) => [b, " "])) : "")));
      }
    }),
  };

  // ---- The self over time: identity, tendencies, stability and coherence.
  views.self = {
    show: once(() => {
      const out = $("self-charts");
      const stab = [], coh = [], tend = new Map(), ids = [];
      for (const ev of events) {
        if (ev.kind === "stability_metrics") { const c = contentJson(ev); if (c && num(c.stability_score) !== null) stab.push([ev.id, c.stability_score]); }
        else if (ev.kind === "coherence_check") { const c = contentJson(ev); if (c && num(c.coherence_score) !== null) coh.push([ev.id, c.coherence_score]); }
        else if (ev.kind === "summary_update") {
          const bt = meta(ev).rsm_state && meta(ev).rsm_state.behavioral_tendencies;
          if (bt && typeof bt === "object") for (const k in bt) if (num(bt[k]) !== null) { if (!tend.has(k)) tend.set(k, []); tend.get(k).push([ev.id, bt[k]]); }
        } else if (ev.kind === "identity_adoption" || (ev.kind === "claim" && /name|identity/.test(ev.content))) ids.push(ev);
      }
      out.append(el("h3", { text: "Identity changes (" + ids.length + ")" }));
      out.append(ids.length ? el("ol", { class: "timeline" }, ...ids.slice(-50).map((e) => eventItem(e))) : el("p", { class: "hint", text: "No identity adoption or name claim in this report." }));
      out.append(lineChart("Stability score (stability_metrics)", [{ name: "stability", points: stab }], { y0: 0, y1: 1 }));
      out.append(lineChart("Coherence score (coherence_check)", [{ name: "coherence", points: coh }], { y0: 0, y1: 1 }));
      const top = Array.from(tend.entries()).sort((a, b) => b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1)).slice(0, 3);
      out.append(lineChart("Self-model tendencies (summary_update rsm_state)", top.map(([k, p]) => ({ name: k, points: p })), { y0: 0, legend: true }));
    }),
  };

  // ---- Concepts: the graph of the most bound concepts; choose one to see its events.
  const concepts = new Map();
  function concept(tok) {
    if (!concepts.has(tok)) concepts.set(tok, { tok: tok, kind: "", events: [], rel: [] });
    return concepts.get(tok);
  }
  views.concepts = {
    init: once(() => {
      for (const ev of events) {
        if (!ev.kind.startsWith("concept_")) continue;
        const c = contentJson(ev);
        if (!c) continue;
        if (ev.kind === "concept_define" && typeof c.token === "string") concept(c.token).kind = str(c.concept_kind);
        else if (ev.kind === "concept_relate" && typeof c.from === "string" && typeof c.to === "string") {
          concept(c.from).rel.push([str(c.relation), c.to, ev.id]); concept(c.to).rel.push([str(c.relation), c.from, ev.id]);
        } else if (ev.kind === "concept_bind_event" && Array.isArray(c.tokens) && Number.isSafeInteger(c.event_id)) {
          for (const t of c.tokens) if (typeof t === "string") { const k = concept(t); if (k.events[k.events.length - 1] !== c.event_id) k.events.push(c.event_id); }
        }
      }
      const all = Array.from(concepts.values()).sort((a, b) => b.events.length - a.events.length || b.rel.length - a.rel.length || (a.tok < b.tok ? -1 : 1));
      const tbody = $("cc-table").tBodies[0];
      for (const c of all.slice(0, 500)) {
        const b = el("button", { type: "button", class: "linkish", text: c.tok });
        b.addEventListener("click", () => go("concepts", c.tok));
        tbody.appendChild(el("tr", null, el("td", null, b), el("td", { text: c.kind }), el("td", { class: "num", text: String(c.events.length) }), el("td", { class: "num", text: String(c.rel.length) })));
      }
      drawGraph(all.slice(0, 40));
    }),
    show(arg) {
      this.init();
      for (const n of document.querySelectorAll(".graph .node")) n.classList.toggle("sel", n.getAttribute("data-tok") === arg);
      const out = clear($("cc-detail"));
      const c = concepts.get(arg);
      if (!c) { out.appendChild(el("p", { class: "hint", text: concepts.size ? "Choose a concept to see its relations and its events." : "No concept in this report." })); return; }
      out.append(el("h3", { text: c.tok }), el("p", { text: (c.kind ? c.kind + " · " : "") + c.events.length + " events · " + c.rel.length + " relations" }));
      if (c.rel.length) out.append(el("ul", null, ...c.rel.slice(0, 50).map(([r, t, id]) => el("li", null, r + " ", el("strong", { text: t }), " ", idButton(id)))));
      out.append(el("ol", { class: "timeline" }, ...c.events.slice(-30).reverse().map((id) => byId.has(id) ? eventItem(events[byId.get(id)]) : el("li", { class: "hint", text: "event " + id + " is outside this report" }))));
    },
  };
  function radialLabel(x, y, a, text) {
    const left = Math.cos(a) < 0;
    const deg = (a * 180) / Math.PI + (left ? 180 : 0);
    const d = 16;
    return el("svg:text", { x: x + d * Math.cos(a), y: y + d * Math.sin(a) + 3.5, "text-anchor": left ? "end" : "start",
      transform: "rotate(" + deg.toFixed(1) + " " + (x + d * Math.cos(a)).toFixed(1) + " " + (y + d * Math.sin(a) + 3.5).toFixed(1) + ")", text: text });
  }
  function drawGraph(nodes) {
    const box = $("cc-graph");
    box.className = "graph";
    if (!nodes.length) return;
    // A circle with the labels along the radii, outward: 40 labels never overlap.
    const W = 760, H = 640, cx = W / 2, cy = H / 2, rad = 150;
    const pos = new Map(), ang = new Map();
    nodes.forEach((n, i) => {
      const a = (2 * Math.PI * i) / nodes.length;
      ang.set(n.tok, a);
      pos.set(n.tok, [cx + rad * Math.cos(a), cy + rad * Math.sin(a)]);
    });
    const svg = el("svg:svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "Concept graph of the " + nodes.length + " most bound concepts" });
    const seen = new Set();
    for (const n of nodes) for (const [, t] of n.rel) {
      const key = n.tok < t ? n.tok + "\u0000" + t : t + "\u0000" + n.tok;
      if (!pos.has(t) || seen.has(key)) continue;
      seen.add(key);
      const [x1, y1] = pos.get(n.tok), [x2, y2] = pos.get(t);
      svg.appendChild(el("svg:line", { class: "edge", x1: x1, y1: y1, x2: x2, y2: y2 }));
    }
    const maxE = Math.max(1, ...nodes.map((n) => n.events.length));
    for (const n of nodes) {
      const [x, y] = pos.get(n.tok);
      const g = el("svg:g", { class: "node", tabindex: "0", role: "button", "data-tok": n.tok, "aria-label": n.tok + ", " + n.events.length + " events" },
        el("svg:circle", { cx: x, cy: y, r: 4 + 10 * Math.sqrt(n.events.length / maxE) }),
        radialLabel(x, y, ang.get(n.tok), n.tok.length > 24 ? n.tok.slice(0, 23) + "…" : n.tok));
      const pick = () => go("concepts", n.tok);
      g.addEventListener("click", pick);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } });
      svg.appendChild(g);
    }
    box.appendChild(svg);
  }

  // ---- Cost: tokens and latency per turn and per day; thinking calls per day.
  views.cost = {
    show: once(() => {
      const out = $("cost-charts");
      const turns = [], days = new Map();
      const dayRow = (d) => { if (!days.has(d)) days.set(d, { turns: 0, inT: 0, outT: 0, lat: 0, think: 0 }); return days.get(d); };
      for (const ev of events) {
        if (ev.kind === "metrics_turn") {
          const f = {};
          for (const part of ev.content.split(",")) { const k = part.indexOf(":"); if (k > 0) f[part.slice(0, k)] = part.slice(k + 1); }
          const t = { id: ev.id, inT: Number(f.in_tokens) || 0, outT: Number(f.out_tokens) || 0, lat: Number(f.lat_ms) || 0, ts: ev.ts };
          turns.push(t);
          const r = dayRow(day(ev.ts)); r.turns++; r.inT += t.inT; r.outT += t.outT; r.lat += t.lat;
        } else if (ev.kind === "autonomy_stimulus" && meta(ev).claim === "think") dayRow(day(ev.ts)).think++;
      }
      const lastTurns = turns.slice(-200);
      out.append(barChart("Tokens per turn (the last " + lastTurns.length + ")", lastTurns.map((t) => ({ label: "#" + t.id, values: [t.inT, t.outT] })), ["in", "out"]));
      out.append(lineChart("Model latency per turn (ms)", [{ name: "latency", points: lastTurns.map((t) => [t.id, t.lat]) }], { y0: 0 }));
      const rows = Array.from(days.entries()).sort((a, b) => (a[0] < b[0] ? -1 : 1));
      out.append(el("h3", { text: "Per day" }));
      out.append(table(["day", "turns", "tokens in", "tokens out", "mean latency (ms)", "thinking-tick calls"],
        rows.map(([d, r]) => [d, r.turns, r.inT, r.outT, r.turns ? Math.round(r.lat / r.turns) : 0, r.think]), "Cost per day"));
      const budget = events.filter((e) => e.kind === "config" && /think/.test(e.content)).pop();
      if (budget) out.append(el("p", null, "Thinking budget (the last config that sets it): ", idButton(budget.id), " ", el("code", { text: budget.content.slice(0, 200) })));
    }),
  };

  // ---- Search over every event's kind, content and meta.
  views.search = {
    show(arg) {
      if (arg && $("search-q").value !== arg) $("search-q").value = arg;
      const q = $("search-q").value.trim().toLowerCase();
      const list = clear($("search-results"));
      if (!q) { $("search-count").textContent = "Type a word or phrase."; return; }
      let n = 0;
      const frag = document.createDocumentFragment();
      for (const ev of events) {
        if (ev.content.toLowerCase().includes(q) || ev.meta.toLowerCase().includes(q) || ev.kind.includes(q)) {
          n++;
          if (n <= 200) frag.appendChild(eventItem(ev, q));
        }
      }
      list.appendChild(frag);
      $("search-count").textContent = n + " event(s) contain “" + q + "”" + (n > 200 ? "; the first 200 are shown." : ".");
    },
  };
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); go("search", $("search-q").value); });

  // ---- Integrity, in full.
  views["integrity-view"] = {
    show() { this.refresh(); },
    refresh() {
      const out = clear($("iv-detail"));
      const v = V.state.verdict;
      if (!v) { out.appendChild(el("p", { text: "Checking…" })); return; }
      out.append(el("p", { text: "Every event's hash was recomputed from its kind, content, meta and prev_hash (SPEC §2.3), each link and id checked, and the Merkle root (RFC 9162) computed from the hashes — by this page, offline, as pmm-verify does." }));
      out.append(el("dl", { class: "kv" },
        el("dt", { text: "verdict" }), el("dd", { text: v.status }),
        el("dt", { text: "events" }), el("dd", { text: String(v.events) }),
        el("dt", { text: "head" }), el("dd", { class: "mono", text: v.head }),
        el("dt", { text: "Merkle root" }), el("dd", { class: "mono", text: v.root || "— (the report is a window: it does not start at event 1)" }),
        el("dt", { text: "erased" }), el("dd", { text: String(v.erased.size) }),
        el("dt", { text: "checkpoint" }), el("dd", { text: v.checkpoint + (v.cp && v.cp.checkpoint ? " · size " + v.cp.checkpoint.size + " · root " + v.cp.checkpoint.root : "") + (v.cp && v.cp.why ? " · " + v.cp.why : "") }),
        el("dt", { text: "signer" }), el("dd", { class: "mono", text: v.cp && v.cp.key ? v.cp.key.text : "—" }),
        el("dt", { text: "on the command line" }), el("dd", null, el("code", { text: "pmm-verify this-file.html" }), v.root ? " · " : "", v.root ? el("code", { text: "pmm-verify --root" }) : "")));
      if (v.findings.length) {
        out.append(el("h3", { text: "Findings (" + v.findings.length + ")" }));
        out.append(table(["event", "problem", "detail"], v.findings.slice(0, 300).map((f) =>
          [f.id === null ? "—" : idButton(f.id), f.problem, f.error || (f.expected !== undefined ? "expected " + str(f.expected) + ", found " + str(f.found) : f.hash || "")]), "Findings"));
      }
      if (v.erased.size) {
        out.append(el("h3", { text: "Erased events (" + v.erased.size + ")" }));
        out.append(table(["event", "erased by", "source", "reason"], Array.from(v.erased.entries()).slice(0, 300).map(([id, e]) => [idButton(id), idButton(e.erasure_id), e.source, e.reason]), "Erased events"));
      }
    },
  };

  V.start();
})();
