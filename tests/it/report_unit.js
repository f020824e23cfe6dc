"use strict";
// Browser tests of the report's verifier (src/interchange/report/verify.js), run in headless
// Chromium by tests/it/report.rs: the page is verify.js, a JSON block of cases
// (#unit-cases, made by the Rust test from the repository's corpora) and this file. Results
// go on #unit-results: data-pass, data-fail, and one line per failure.
(async function () {
  const PMM = window.PMM;
  const cases = JSON.parse(document.getElementById("unit-cases").textContent);
  const out = document.getElementById("unit-results");
  let pass = 0;
  const fails = [];
  const check = (ok, what) => { if (ok) pass++; else fails.push(what); };
  const utf8 = (s) => new TextEncoder().encode(s);
  const subtleHex = async (bytes) => PMM.hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
  try {
    // Every hash twice: through the page's SHA-256 module (hash-wasm's, in WebAssembly) and
    // through verify.js's own SHA-256 in JavaScript, which a browser that refuses the module
    // uses.
    check(PMM.engine.use("wasm"), "the SHA-256 module did not load: " + PMM.engine.why());
    for (const engine of ["wasm", "js"]) {
      check(PMM.engine.use(engine) && PMM.engine.name() === engine, "the " + engine + " SHA-256 is not in use");
      // SHA-256: the NIST vectors, then every length from 0 to 300 and a few large ones
      // against WebCrypto.
      const nist = [
        ["", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"],
        ["abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"],
        ["abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"],
        ["a".repeat(1000000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"],
      ];
      for (const [m, want] of nist) check(PMM.hex(PMM.sha256Utf8(m)) === want, "sha256 NIST vector of length " + m.length);
      for (const n of [...Array(301).keys(), 1023, 1024, 16383, 16384, 16385, 32768, 32769, 65535, 65536, 200001]) {
        const b = new Uint8Array(n);
        for (let i = 0; i < n; i++) b[i] = (i * 131 + n) & 255;
        check(PMM.hex(PMM.sha256(b)) === await subtleHex(b), "sha256 of " + n + " bytes differs from WebCrypto");
      }
      // Event hashes against WebCrypto's SHA-256 of payload(ev), for contents that need no
      // escape and contents that do, at lengths that make the verifier's buffer grow (odd
      // sizes included: its word view needs whole words).
      for (const n of [0, 1, 55, 63, 64, 1000, 65531, 65537, 131075, 1048583]) {
        for (const tail of ["", "\"", "\u00e9\u2028\ud83d\ude00\n"]) {
          const ev = { content: "x".repeat(n) + tail, kind: "user_message", meta: '{"role":"user"}', prev_hash: n ? "ab".repeat(32) : null };
          check(PMM.eventHash(ev) === await subtleHex(utf8(PMM.payload(ev))), "event hash of a content of " + n + " + " + tail.length + " characters");
        }
      }
      // Canonical JSON and event hashes: the CPython corpora (each case one event of a chain).
      for (const c of cases.canon) {
        let got;
        try { got = PMM.canonMeta(c.input); } catch (e) { got = "refused: " + e.message; }
        check(got === c.canonical, "canonical form of " + JSON.stringify(c.input) + ": " + got + " != " + c.canonical);
        let h;
        try { h = PMM.eventHash({ content: c.content, kind: c.kind, meta: c.input, prev_hash: c.prev_hash }); } catch (e) { h = "refused"; }
        check(h === c.hash, "event hash of the case with input " + JSON.stringify(c.input));
      }
      // The Merkle root: Go's sumdb/tlog roots for sizes 1 to 70 (tests/fixtures/merkle).
      for (let n = 1; n < cases.merkle.roots.length; n++) {
        check(PMM.merkleRoot(cases.merkle.leaves.slice(0, n)) === cases.merkle.roots[n], "Merkle root of size " + n);
      }
      check(PMM.merkleRoot([]) === "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "the empty tree's root");
      // The chain: links, ids, repeats and erasures as pmm-verify reports them.
      for (const t of cases.chains) {
        const chain = new PMM.Chain({});
        for (const ev of t.events) chain.check(ev);
        const v = chain.finish();
        const got = v.findings.map((f) => f.id + ":" + f.problem).sort().join(",");
        check(got === t.findings, t.name + ": findings " + got + ", pmm-verify " + t.findings);
        check(v.erased.size === t.erased, t.name + ": erased " + v.erased.size + ", pmm-verify " + t.erased);
      }
    }
    PMM.engine.use("wasm");
    // The events block read in parts (a report too long for one string): the same events
    // as JSON.parse of the whole, at every part size; refused where the whole is no JSON; and
    // never other events than the whole's.
    const parts = (text, size) => PMM.parseInParts(document.createTextNode(text), size);
    const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
    const evs = [{ id: 1, content: "a,\nb ] [ \",\n\"", meta: "{\"k\":[1,2]}" }, { id: 2, content: "" }, { id: 3, content: "\u2028 ,\n,\n" }];
    const good = ["[]", " \n[ ] \n", "[" + JSON.stringify(evs[0]) + "]", "\r\n [" + evs.map((e) => JSON.stringify(e)).join(",\n") + "]\n"];
    const refusedTexts = ["[" + JSON.stringify(evs[0]) + ",\n]", "[,\n" + JSON.stringify(evs[0]) + "]", "[{\"id\":1},\n,\n{\"id\":2}]", "{\"id\":1}]", "[{\"id\":1}", "[{\"id\":1},\n{\"id\":2}] x", "\u00a0[]"];
    const nested = '[{"id":1,"x":[1,\n2]},\n{"id":2}]';
    for (let size = 1; size <= 90; size++) {
      for (const text of good) {
        let got;
        try { got = parts(text, size); } catch (e) { got = "refused: " + e.message; }
        check(same(got, JSON.parse(text)), "read in parts of " + size + ": " + JSON.stringify(text) + " gave " + JSON.stringify(got));
      }
      for (const text of refusedTexts) {
        let refused = false;
        try { parts(text, size); } catch (e) { refused = true; }
        check(refused, "read in parts of " + size + ", accepted " + JSON.stringify(text));
      }
      let got = null;
      try { got = parts(nested, size); } catch (e) { got = null; }
      check(got === null || same(got, JSON.parse(nested)), "read in parts of " + size + ", other events than the whole's");
    }
    // Floats: what src/canon float_repr gives for the same numbers.
    for (const [text, want] of cases.floats) {
      const got = PMM.floatRepr(Number(text));
      check(got === want, "floatRepr(" + text + ") = " + got + ", Rust says " + want);
    }
    // What src/canon refuses, the page refuses.
    for (const bad of cases.refused) {
      let refused = false;
      try { PMM.canonMeta(bad); } catch (e) { refused = true; }
      check(refused, "canonMeta accepted " + JSON.stringify(bad));
    }
    // Escaping: what report.rs wrote into a JSON block reads back as the original strings.
    const back = JSON.parse(document.getElementById("unit-escaped").textContent);
    check(JSON.stringify(back) === JSON.stringify(cases.escaped), "escaped strings do not read back");
    // A signed note of Go's sumdb/note opens; one byte changed does not.
    const go = await PMM.openCheckpoint({ key: cases.note.key, note: cases.note.note });
    check(go.ok && go.checkpoint.size === 70 && go.checkpoint.root === cases.merkle.roots[70], "Go's signed checkpoint: " + go.why);
    const at = cases.note.note.lastIndexOf(" ") + 21; // inside the signature, past the key hash
    const bent = cases.note.note.slice(0, at) + (cases.note.note[at] === "A" ? "B" : "A") + cases.note.note.slice(at + 1);
    const bad = await PMM.openCheckpoint({ key: cases.note.key, note: bent }).catch((e) => ({ ok: false, why: String(e) }));
    check(!bad.ok, "a checkpoint with a changed signature opened");
  } catch (e) {
    fails.push("threw: " + e + " " + (e.stack || ""));
  }
  out.setAttribute("data-pass", String(pass));
  out.setAttribute("data-fail", String(fails.length));
  out.textContent = fails.slice(0, 20).join("\n");
  out.setAttribute("data-done", "1");
})();
