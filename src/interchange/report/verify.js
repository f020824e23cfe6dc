"use strict";
// pmm report: the verifier. Recomputes every embedded event's hash and link exactly as
// pmm-verify does (SPEC §2.3/§2.6, docs/verification.md), the RFC 9162 Merkle root, and an
// embedded checkpoint's Ed25519 signature. Nothing here touches the page: views.js shows what
// it finds. Exposed as window.PMM for views.js and for the browser tests
// (tests/it/report_page.html).
(function () {
  // ---- SHA-256 (FIPS 180-4), synchronous: 10^5 small inputs are far faster here than one
  // WebCrypto promise each. Checked against WebCrypto and the NIST vectors by the tests.
  const K = new Int32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const W = new Int32Array(64);
  // The digest's eight words, as the last compression left them.
  const H = new Int32Array(8);
  const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

  // A byte buffer and a word view of the same memory: messages are padded in place and read
  // a word at a time.
  // A buffer of its own, or n bytes of another's memory at a 4-aligned offset.
  function Buf(n, memory, offset) {
    this.bytes = memory ? new Uint8Array(memory, offset, n) : new Uint8Array((n + 63) & ~63);
    this.words = memory ? new Int32Array(memory, offset, n >> 2) : new Int32Array(this.bytes.buffer);
  }
  let scratch = new Buf(1 << 16);

  function sha256(bytes, len) {
    if (len === undefined) len = bytes.length;
    const total = ((len + 9 + 63) >> 6) << 6;
    if (scratch.bytes.length < total) scratch = new Buf(total * 2);
    scratch.bytes.set(len === bytes.length ? bytes : bytes.subarray(0, len), 0);
    digestInPlace(scratch, len);
    return digestBytes();
  }
  // The digest of buf.bytes[0..len) into H, padding it in place: the buffer must have room for
  // the padding (len + 72 bytes).
  function digestInPlace(buf, len) {
    if (wasm !== null) { wasm.digest(buf.bytes, len); return; }
    const m = buf.bytes;
    const total = ((len + 9 + 63) >> 6) << 6;
    m[len] = 0x80;
    m.fill(0, len + 1, total);
    const bits = len * 8;
    m[total - 4] = bits >>> 24; m[total - 3] = bits >>> 16; m[total - 2] = bits >>> 8; m[total - 1] = bits;
    m[total - 5] = (len / 0x20000000) | 0;
    compress(buf.words, total >> 2);
  }
  // ---- SHA-256 in WebAssembly: hash-wasm's module (vendor/hash-wasm/README.md), which
  // pmm-export embeds as base64 in #pmm-sha256-wasm. In Chromium it hashes about twice as fast
  // as compress() (10^5 events and their tree: 0.3 s less to the verdict). compress() does the
  // work where there is no such block, its bytes are not the module pinned here, or the
  // browser will not compile it (no WebAssembly, a policy without 'wasm-unsafe-eval', V8
  // without a compiler): the verdict is the same either way.
  const WASM_SHA256 = "7ad88dae37c322722a047435058ffc5e4f3315762c7114dfa740e5db6b474c87";
  // The module's own buffer holds 16 KiB: a longer message goes through it in parts.
  const WASM_PART = 16384;
  function WasmSha(x) {
    const at = x.Hash_GetBuffer();
    this.x = x;
    // The module's buffer as a Buf: the verifier writes messages straight into it.
    this.buf = new Buf(WASM_PART, x.memory.buffer, at);
    this.mem = this.buf.bytes;
    this.out = new Int32Array(x.memory.buffer, at, 8);
  }
  // The digest of bytes[0..len) into H.
  WasmSha.prototype.digest = function (bytes, len) {
    const x = this.x, mem = this.mem;
    if (len <= WASM_PART) {
      if (bytes !== mem) mem.set(len === bytes.length ? bytes : bytes.subarray(0, len));
      x.Hash_Calculate(len, 256);
    } else {
      x.Hash_Init(256);
      for (let at = 0; at < len; at += WASM_PART) {
        const n = Math.min(WASM_PART, len - at);
        mem.set(bytes.subarray(at, at + n));
        x.Hash_Update(n);
      }
      x.Hash_Final();
    }
    const o = this.out;
    for (let i = 0; i < 8; i++) {
      const w = o[i];
      H[i] = LITTLE ? (w << 24) | ((w & 0xff00) << 8) | ((w >>> 8) & 0xff00) | (w >>> 24) : w;
    }
  };
  // The module from the page's block, or null (and why, for the tests and the Integrity view).
  let wasm = null;
  let engineWhy = "";
  function loadWasm() {
    const node = typeof document === "undefined" ? null : document.getElementById("pmm-sha256-wasm");
    if (!node) { engineWhy = "no module in the page"; return null; }
    try {
      const text = node.textContent.trim();
      const bin = atob(text);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      if (hex(sha256(bytes)) !== WASM_SHA256) { engineWhy = "the module is not the pinned one"; return null; }
      const x = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports;
      const w = new WasmSha(x);
      // One known digest before it is trusted with the page: sha256("abc").
      w.digest(new Uint8Array([97, 98, 99]), 3);
      if (H[0] !== (0xba7816bf | 0) || H[7] !== (0xf20015ad | 0)) { engineWhy = "the module's digest of \"abc\" is wrong"; return null; }
      return w;
    } catch (e) {
      engineWhy = String(e && e.message ? e.message : e);
      return null;
    }
  }
  // Which SHA-256 the verifier uses: "wasm" when the module loaded, else "js". The tests
  // switch between them with use("js") and use("wasm") (false when it is not available).
  let loaded = null;
  const engine = {
    name() { return wasm !== null ? "wasm" : "js"; },
    why() { return engineWhy; },
    use(name) {
      if (name === "js") wasm = null;
      else {
        if (loaded === null) loaded = loadWasm() || false;
        wasm = loaded || null;
      }
      // Leaves and nodes are written where they are hashed: into the module's buffer.
      leafBuf = wasm !== null ? wasm.buf : ownLeaf;
      nodeBuf = wasm !== null ? wasm.buf : ownNode;
      return name === "js" || wasm !== null;
    },
  };

  function digestBytes() {
    const out = new Uint8Array(32);
    for (let i = 0; i < 8; i++) {
      const x = H[i];
      out[4 * i] = x >>> 24; out[4 * i + 1] = x >>> 16; out[4 * i + 2] = x >>> 8; out[4 * i + 3] = x;
    }
    return out;
  }
  // FIPS 180-4's compression over every 16-word block of `words` (big-endian words read from
  // memory in the machine's order), from the initial hash value. The rounds are written out
  // eight at a time, each group naming the working variables in their rotated places, so that
  // no round shuffles eight variables.
  function compress(words, n) {
    let h0 = 0x6a09e667, h1 = 0xbb67ae85 | 0, h2 = 0x3c6ef372, h3 = 0xa54ff53a | 0;
    let h4 = 0x510e527f, h5 = 0x9b05688c | 0, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
    for (let o = 0; o < n; o += 16) {
      for (let i = 0; i < 16; i++) {
        const x = words[o + i];
        W[i] = LITTLE ? (x << 24) | ((x & 0xff00) << 8) | ((x >>> 8) & 0xff00) | (x >>> 24) : x;
      }
      for (let i = 16; i < 64; i++) {
        const a = W[i - 15], b = W[i - 2];
        const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
        const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
      }
      let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7, t;
      for (let i = 0; i < 64; i += 8) {
        t = (h + (((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7))) + (g ^ (e & (f ^ g))) + K[i] + W[i]) | 0;
        d = (d + t) | 0; h = (t + (((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10))) + ((a & b) | (c & (a | b)))) | 0;
        t = (g + (((d >>> 6) | (d << 26)) ^ ((d >>> 11) | (d << 21)) ^ ((d >>> 25) | (d << 7))) + (f ^ (d & (e ^ f))) + K[i + 1] + W[i + 1]) | 0;
        c = (c + t) | 0; g = (t + (((h >>> 2) | (h << 30)) ^ ((h >>> 13) | (h << 19)) ^ ((h >>> 22) | (h << 10))) + ((h & a) | (b & (h | a)))) | 0;
        t = (f + (((c >>> 6) | (c << 26)) ^ ((c >>> 11) | (c << 21)) ^ ((c >>> 25) | (c << 7))) + (e ^ (c & (d ^ e))) + K[i + 2] + W[i + 2]) | 0;
        b = (b + t) | 0; f = (t + (((g >>> 2) | (g << 30)) ^ ((g >>> 13) | (g << 19)) ^ ((g >>> 22) | (g << 10))) + ((g & h) | (a & (g | h)))) | 0;
        t = (e + (((b >>> 6) | (b << 26)) ^ ((b >>> 11) | (b << 21)) ^ ((b >>> 25) | (b << 7))) + (d ^ (b & (c ^ d))) + K[i + 3] + W[i + 3]) | 0;
        a = (a + t) | 0; e = (t + (((f >>> 2) | (f << 30)) ^ ((f >>> 13) | (f << 19)) ^ ((f >>> 22) | (f << 10))) + ((f & g) | (h & (f | g)))) | 0;
        t = (d + (((a >>> 6) | (a << 26)) ^ ((a >>> 11) | (a << 21)) ^ ((a >>> 25) | (a << 7))) + (c ^ (a & (b ^ c))) + K[i + 4] + W[i + 4]) | 0;
        h = (h + t) | 0; d = (t + (((e >>> 2) | (e << 30)) ^ ((e >>> 13) | (e << 19)) ^ ((e >>> 22) | (e << 10))) + ((e & f) | (g & (e | f)))) | 0;
        t = (c + (((h >>> 6) | (h << 26)) ^ ((h >>> 11) | (h << 21)) ^ ((h >>> 25) | (h << 7))) + (b ^ (h & (a ^ b))) + K[i + 5] + W[i + 5]) | 0;
        g = (g + t) | 0; c = (t + (((d >>> 2) | (d << 30)) ^ ((d >>> 13) | (d << 19)) ^ ((d >>> 22) | (d << 10))) + ((d & e) | (f & (d | e)))) | 0;
        t = (b + (((g >>> 6) | (g << 26)) ^ ((g >>> 11) | (g << 21)) ^ ((g >>> 25) | (g << 7))) + (a ^ (g & (h ^ a))) + K[i + 6] + W[i + 6]) | 0;
        f = (f + t) | 0; b = (t + (((c >>> 2) | (c << 30)) ^ ((c >>> 13) | (c << 19)) ^ ((c >>> 22) | (c << 10))) + ((c & d) | (e & (c | d)))) | 0;
        t = (a + (((f >>> 6) | (f << 26)) ^ ((f >>> 11) | (f << 21)) ^ ((f >>> 25) | (f << 7))) + (h ^ (f & (g ^ h))) + K[i + 7] + W[i + 7]) | 0;
        e = (e + t) | 0; a = (t + (((b >>> 2) | (b << 30)) ^ ((b >>> 13) | (b << 19)) ^ ((b >>> 22) | (b << 10))) + ((b & c) | (d & (b | c)))) | 0;
      }
      h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
      h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
    }
    H[0] = h0; H[1] = h1; H[2] = h2; H[3] = h3; H[4] = h4; H[5] = h5; H[6] = h6; H[7] = h7;
  }

  const HEX = "0123456789abcdef";
  const BYTE_HEX = [];
  for (let i = 0; i < 256; i++) BYTE_HEX.push(HEX[i >> 4] + HEX[i & 15]);
  const NIBBLE = new Int8Array(128).fill(-1);
  for (let i = 0; i < 16; i++) { NIBBLE[HEX.charCodeAt(i)] = i; NIBBLE["0123456789ABCDEF".charCodeAt(i)] = i; }
  function hex(bytes) {
    let s = "";
    for (let i = 0; i < bytes.length; i++) s += BYTE_HEX[bytes[i]];
    return s;
  }
  // The last digest (H) in hex, without its bytes.
  function digestHex() {
    let s = "";
    for (let i = 0; i < 8; i++) {
      const x = H[i];
      s += BYTE_HEX[x >>> 24] + BYTE_HEX[(x >>> 16) & 255] + BYTE_HEX[(x >>> 8) & 255] + BYTE_HEX[x & 255];
    }
    return s;
  }
  // 64 hex digits of either case (as Digest::from_hex), else null.
  function fromHex(s) {
    if (typeof s !== "string" || s.length !== 64) return null;
    const out = new Uint8Array(32);
    for (let i = 0; i < 32; i++) {
      const a = s.charCodeAt(2 * i), b = s.charCodeAt(2 * i + 1);
      const hi = a < 128 ? NIBBLE[a] : -1, lo = b < 128 ? NIBBLE[b] : -1;
      if (hi < 0 || lo < 0) return null;
      out[i] = (hi << 4) | lo;
    }
    return out;
  }
  // sha256 of an ASCII string (canonical JSON is ASCII by construction).
  let asciiBuf = new Buf(1 << 16);
  const encoder = new TextEncoder();
  // Its digest into H.
  function digestAscii(s) {
    const n = s.length;
    if (asciiBuf.bytes.length < n + 72) asciiBuf = new Buf((n + 72) * 2);
    encoder.encodeInto(s, asciiBuf.bytes);
    digestInPlace(asciiBuf, n);
  }
  function sha256Ascii(s) {
    digestAscii(s);
    return digestBytes();
  }
  function sha256Utf8(s) {
    return sha256(new TextEncoder().encode(s));
  }

  // ---- Canonical JSON: CPython's json.dumps(obj, sort_keys=True, separators=(",", ":")),
  // as src/canon does it (FORMATS.md §1.3).
  const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;
  const SHORT = { 0x22: '\\"', 0x5c: "\\\\", 0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x08: "\\b", 0x0c: "\\f" };
  function escapeOne(ch) {
    const c = ch.charCodeAt(0);
    if (SHORT[c] !== undefined) return SHORT[c];
    return "\\u" + HEX[(c >> 12) & 15] + HEX[(c >> 8) & 15] + HEX[(c >> 4) & 15] + HEX[c & 15];
  }
  // A JSON string as CPython writes it with ensure_ascii (surrogate pairs escaped unit by unit,
  // which is what the regular expression without the u flag does).
  // JSON.stringify escapes what CPython does below U+007F, the same way (\" \\ \b \f \n \r \t,
  // \u00xx in lower case, lone surrogates as \udxxx), natively: what is left is every unit from
  // U+007F up, which ensure_ascii escapes and JSON.stringify keeps.
  const HIGH = /[\x7f-\uffff]/;
  const HIGH_ALL = /[\x7f-\uffff]/g;
  function canonStr(s) {
    if (PLAIN.test(s)) return '"' + s + '"';
    const j = JSON.stringify(s);
    return HIGH.test(j) ? j.replace(HIGH_ALL, escapeOne) : j;
  }

  // Code-point order (what serde_json's map keeps): UTF-16 order differs only when a
  // surrogate meets a unit at or above U+E000.
  function byCodePoint(a, b) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) {
      const x = a.charCodeAt(i), y = b.charCodeAt(i);
      if (x === y) continue;
      const xs = x >= 0xd800 && x < 0xe000, ys = y >= 0xd800 && y < 0xe000;
      if (xs !== ys) return xs ? 1 : -1;
      return x - y;
    }
    return a.length - b.length;
  }

  // CPython repr(float) of a finite number: the shortest digits that round-trip, and of those
  // the correctly rounded (ties to even) string when it round-trips too (src/canon float_repr).
  function floatRepr(f) {
    if (f === 0) return Object.is(f, -0) ? "-0.0" : "0.0";
    const neg = f < 0;
    const x = Math.abs(f);
    const [mant, e] = x.toExponential().split("e");
    let digits = mant.replace(".", "");
    let exp = parseInt(e, 10);
    const nearest = nearestDigits(x, digits.length);
    if (Number(nearest[0][0] + "." + nearest[0].slice(1) + "e" + nearest[1]) === x) {
      digits = nearest[0];
      exp = nearest[1];
    }
    let s = neg ? "-" : "";
    if (exp >= -4 && exp < 16) {
      if (exp >= 0) {
        const il = exp + 1;
        if (digits.length <= il) s += digits + "0".repeat(il - digits.length) + ".0";
        else s += digits.slice(0, il) + "." + digits.slice(il);
      } else s += "0." + "0".repeat(-exp - 1) + digits;
    } else {
      s += digits[0] + (digits.length > 1 ? "." + digits.slice(1) : "");
      s += "e" + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }
    return s;
  }

  // The k significant digits nearest to x (exactly, ties to even) and their exponent.
  function nearestDigits(x, k) {
    const dv = new DataView(new ArrayBuffer(8));
    dv.setFloat64(0, x);
    const hi = dv.getUint32(0), lo = dv.getUint32(4);
    const bexp = (hi >>> 20) & 0x7ff;
    let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    let e2;
    if (bexp === 0) e2 = -1074;
    else { m |= 1n << 52n; e2 = bexp - 1075; }
    let n, scale;
    if (e2 >= 0) { n = m << BigInt(e2); scale = 0; }
    else { n = m * 5n ** BigInt(-e2); scale = -e2; }
    const nd = n.toString();
    let exp = nd.length - 1 - scale;
    if (nd.length <= k) return [nd + "0".repeat(k - nd.length), exp];
    let head = nd.slice(0, k);
    const rest = nd.slice(k);
    let up;
    if (rest[0] > "5") up = true;
    else if (rest[0] < "5") up = false;
    else if (/[1-9]/.test(rest.slice(1))) up = true;
    else up = (head.charCodeAt(k - 1) & 1) === 1;
    if (up) {
      head = (BigInt(head) + 1n).toString();
      if (head.length > k) { head = head.slice(0, k); exp += 1; }
    }
    return [head, exp];
  }

  // A strict JSON parser (RFC 8259, what serde_json accepts) that returns the canonical text
  // of what it parsed; numbers are kept as the text they were written with until written.
  function canonJson(text) {
    let i = 0;
    const fail = (why) => { throw new Error(why + " at " + i); };
    const ws = () => {
      for (;;) {
        const c = text.charCodeAt(i);
        if (c === 32 || c === 9 || c === 10 || c === 13) i++;
        else return;
      }
    };
    const NUM = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
    const PLAIN_STR = /"([^"\\\x00-\x1f]*)"/y;
    function str() {
      // text[i] is the opening quote; most strings have no escape at all.
      PLAIN_STR.lastIndex = i;
      const fast = PLAIN_STR.exec(text);
      if (fast) { i = PLAIN_STR.lastIndex; return fast[1]; }
      let out = "";
      i++;
      for (;;) {
        const c = text.charCodeAt(i);
        if (Number.isNaN(c)) fail("a string without end");
        if (c === 0x22) { i++; return out; }
        if (c < 0x20) fail("a control character in a string");
        if (c !== 0x5c) { out += text[i++]; continue; }
        const e = text[i + 1];
        i += 2;
        const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" }[e];
        if (simple !== undefined) { out += simple; continue; }
        if (e !== "u") fail("a bad escape");
        const u = hex4(i);
        i += 4;
        if (u >= 0xd800 && u < 0xdc00) {
          if (text[i] !== "\\" || text[i + 1] !== "u") fail("a lone surrogate");
          const v = hex4(i + 2);
          if (v < 0xdc00 || v >= 0xe000) fail("a lone surrogate");
          i += 6;
          out += String.fromCharCode(u, v);
        } else if (u >= 0xdc00 && u < 0xe000) fail("a lone surrogate");
        else out += String.fromCharCode(u);
      }
    }
    function hex4(at) {
      const h = text.substr(at, 4);
      if (!/^[0-9a-fA-F]{4}$/.test(h)) fail("a bad \\u escape");
      return parseInt(h, 16);
    }
    function value(depth) {
      if (depth > 128) fail("nesting too deep");
      ws();
      const c = text[i];
      if (c === "{") {
        i++;
        const map = new Map();
        ws();
        if (text[i] === "}") { i++; return "{}"; }
        for (;;) {
          ws();
          if (text[i] !== '"') fail("a key that is not a string");
          const k = str();
          ws();
          if (text[i] !== ":") fail("no ':' after a key");
          i++;
          map.set(k, value(depth + 1));
          ws();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === "}") { i++; break; }
          fail("no ',' or '}' in an object");
        }
        const keys = Array.from(map.keys()).sort(byCodePoint);
        return "{" + keys.map((k) => canonStr(k) + ":" + map.get(k)).join(",") + "}";
      }
      if (c === "[") {
        i++;
        const items = [];
        ws();
        if (text[i] === "]") { i++; return "[]"; }
        for (;;) {
          items.push(value(depth + 1));
          ws();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === "]") { i++; break; }
          fail("no ',' or ']' in an array");
        }
        return "[" + items.join(",") + "]";
      }
      if (c === '"') return canonStr(str());
      for (const lit of ["true", "false", "null"]) {
        if (text.startsWith(lit, i)) { i += lit.length; return lit; }
      }
      NUM.lastIndex = i;
      const mm = NUM.exec(text);
      if (!mm) fail("not a JSON value");
      i += mm[0].length;
      if (mm[1] !== undefined || mm[2] !== undefined) {
        const f = Number(mm[0]);
        if (!Number.isFinite(f)) throw new Error("number " + mm[0] + " is out of range");
        return floatRepr(f);
      }
      return /^-?0+$/.test(mm[0]) ? "0" : mm[0];
    }
    const out = value(0);
    ws();
    if (i !== text.length) fail("trailing characters");
    return out;
  }

  // The canonical text of a stored meta: an object (an empty or blank text is {}, as the
  // export readers take it). Most metas are short and repeat (`{"source":"autonomy_kernel"}`),
  // so short ones are remembered.
  const metaMemo = new Map();
  function canonMeta(text) {
    const short = text.length <= 256;
    if (short) { const hit = metaMemo.get(text); if (hit !== undefined) return hit; }
    let out;
    if (text.trim() === "") out = "{}";
    else {
      out = fastCanon(text);
      if (out === null) out = canonJson(text);
      if (out[0] !== "{") throw new Error("meta must be a JSON object");
    }
    if (short && metaMemo.size < 50000) metaMemo.set(text, out);
    return out;
  }

  // The native parser is exact whenever no number could change on the way (no fraction, no
  // exponent, no integer of 16 digits or more: a digit followed by '.', 'e' or 'E', or 16
  // digits in a row, anywhere in the text) and no \u escape could be a lone surrogate (which
  // JSON.parse accepts and serde_json refuses): otherwise null, and canonJson parses it.
  const RISKY = /[0-9][.eE]|[0-9]{16}|\\u[dD][89a-fA-F]/;
  function fastCanon(text) {
    if (RISKY.test(text)) return null;
    let v;
    try { v = JSON.parse(text); } catch (e) { return null; }
    return canonValue(v);
  }
  function canonValue(v) {
    if (v === null) return "null";
    switch (typeof v) {
      case "string": return canonStr(v);
      case "boolean": return v ? "true" : "false";
      case "number": return String(v);
      default:
        if (Array.isArray(v)) return "[" + v.map(canonValue).join(",") + "]";
        return "{" + Object.keys(v).sort(byCodePoint).map((k) => canonStr(k) + ":" + canonValue(v[k])).join(",") + "}";
    }
  }

  function payload(ev) {
    return '{"content":' + canonStr(ev.content) + ',"kind":' + canonStr(ev.kind) +
      ',"meta":' + canonMeta(ev.meta) + ',"prev_hash":' +
      (ev.prev_hash === null ? "null" : canonStr(ev.prev_hash)) + "}";
  }

  // Writes payload(ev) into asciiBuf and returns its length, without building the string:
  // each string is escaped as canonStr escapes it while it is copied in, a char code at a
  // time. Not TextEncoder.encodeInto: in Chromium every encodeInto call copies its string into
  // the engine first (10^5 events: 0.8 s of a 2.7 s check); nor canonStr's JSON.stringify and
  // regular expressions, which build a string to copy again.
  const OPEN = '{"content":', KIND = ',"kind":', META = ',"meta":', PREV = ',"prev_hash":';
  // The payload goes into the SHA-256 module's buffer when it fits (no copy), else into
  // asciiBuf; `written` is the one it went into.
  let written = asciiBuf;
  function writePayload(ev) {
    const c = ev.content, k = ev.kind, meta = canonMeta(ev.meta), p = ev.prev_hash;
    // At most six bytes a UTF-16 unit (\uXXXX).
    const need = 6 * (c.length + k.length + (p === null ? 0 : p.length)) + meta.length + 128;
    if (wasm !== null && need <= WASM_PART) written = wasm.buf;
    else {
      if (asciiBuf.bytes.length < need) asciiBuf = new Buf(need * 2);
      written = asciiBuf;
    }
    const m = written.bytes;
    let at = putAscii(m, 0, OPEN);
    at = putJsonStr(m, at, c);
    at = putAscii(m, at, KIND);
    at = putJsonStr(m, at, k);
    at = putAscii(m, at, META);
    at = putAscii(m, at, meta);
    at = putAscii(m, at, PREV);
    at = p === null ? putAscii(m, at, "null") : putJsonStr(m, at, p);
    m[at++] = 0x7d;
    return at;
  }
  // Writes the ASCII string s at m[at..] and returns where it ends.
  function putAscii(m, at, s) {
    for (let i = 0; i < s.length; i++) m[at + i] = s.charCodeAt(i);
    return at + s.length;
  }
  // Writes canonStr(s) at m[at..] and returns where it ends.
  function putJsonStr(m, at, s) {
    m[at++] = 0x22;
    for (let i = 0; i < s.length; i++) {
      const u = s.charCodeAt(i);
      if (u >= 0x20 && u < 0x7f && u !== 0x22 && u !== 0x5c) m[at++] = u;
      else at = putEscape(m, at, u);
    }
    m[at++] = 0x22;
    return at;
  }
  const HEX_CODE = new Uint8Array([48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 97, 98, 99, 100, 101, 102]);
  // One UTF-16 unit as escapeOne escapes it: \" \\ \n \r \t \b \f, else \u and four lower-case
  // hex digits (a surrogate, paired or not, on its own).
  function putEscape(m, at, u) {
    m[at++] = 0x5c;
    switch (u) {
      case 0x22: m[at] = 0x22; return at + 1;
      case 0x5c: m[at] = 0x5c; return at + 1;
      case 0x0a: m[at] = 0x6e; return at + 1;
      case 0x0d: m[at] = 0x72; return at + 1;
      case 0x09: m[at] = 0x74; return at + 1;
      case 0x08: m[at] = 0x62; return at + 1;
      case 0x0c: m[at] = 0x66; return at + 1;
    }
    m[at] = 0x75;
    m[at + 1] = HEX_CODE[(u >> 12) & 15]; m[at + 2] = HEX_CODE[(u >> 8) & 15];
    m[at + 3] = HEX_CODE[(u >> 4) & 15]; m[at + 4] = HEX_CODE[u & 15];
    return at + 5;
  }

  // The hash an event should have, in hex; throws when its meta has no canonical form. Its
  // eight words stay in eventDigest until the next call (the chain's tree takes them from
  // there when the event's stored hash is this one, rather than parse its hex again).
  const eventDigest = new Int32Array(8);
  function eventHash(ev) {
    const n = writePayload(ev);
    digestInPlace(written, n);
    eventDigest.set(H);
    return digestHex();
  }
  // Whether the event's stored hash is the one it should have (eventHash(ev) === ev.hash),
  // read off the digest's words without writing them out as a string (10^5 events: 10^5
  // strings of 64 digits fewer to build and collect); the words stay in eventDigest. Throws
  // as eventHash does.
  const HEX_LOWER = new Int8Array(128).fill(-1);
  for (let i = 0; i < 16; i++) HEX_LOWER[HEX.charCodeAt(i)] = i;
  function eventMatches(ev) {
    const n = writePayload(ev);
    digestInPlace(written, n);
    eventDigest.set(H);
    const h = ev.hash;
    if (typeof h !== "string" || h.length !== 64) return false;
    for (let i = 0, at = 0; i < 8; i++) {
      let w = 0;
      for (let j = 0; j < 8; j++, at++) {
        const c = h.charCodeAt(at), v = c < 128 ? HEX_LOWER[c] : -1;
        if (v < 0) return false;
        w = (w << 4) | v;
      }
      if (w !== H[i]) return false;
    }
    return true;
  }

  // ---- The Merkle tree (RFC 9162): leaf = H(0x00 ‖ 32 bytes of the event's hash), or H(0x00)
  // for an event without a well-formed hash; node = H(0x01 ‖ l ‖ r).
  const ownLeaf = new Buf(128), ownNode = new Buf(192);
  let leafBuf = ownLeaf, nodeBuf = ownNode;
  function leafHash(hashHex) {
    const d = fromHex(hashHex);
    leafBuf.bytes[0] = 0;
    if (d) leafBuf.bytes.set(d, 1);
    digestInPlace(leafBuf, d ? 33 : 1);
    return digestBytes();
  }
  function nodeHash(l, r) {
    const m = nodeBuf.bytes;
    m[0] = 1;
    m.set(l, 1);
    m.set(r, 33);
    digestInPlace(nodeBuf, 65);
    return digestBytes();
  }
  // Writes the eight words w[o..o+8) big-endian at m[at..].
  function putWords(m, at, w, o) {
    for (let i = 0; i < 8; i++, at += 4) {
      const x = w[o + i];
      m[at] = x >>> 24; m[at + 1] = x >>> 16; m[at + 2] = x >>> 8; m[at + 3] = x;
    }
  }
  // node(l, r) into H, for subtrees of eight words each.
  function nodeInto(lw, lo, rw, ro) {
    const m = nodeBuf.bytes;
    m[0] = 1;
    putWords(m, 1, lw, lo);
    putWords(m, 33, rw, ro);
    digestInPlace(nodeBuf, 65);
  }
  // A streaming root: the perfect subtrees the size decomposes into, largest first, kept as
  // eight words each in one array (no object or byte array a node: 10^5 events make 2·10^5).
  function RootHasher() {
    this.words = new Int32Array(64 * 8);
    this.sizes = new Float64Array(64);
    this.depth = 0;
    this.size = 0;
  }
  // Pushes the leaf whose hash is in H, merging the subtrees of equal size it completes.
  RootHasher.prototype.pushLeaf = function () {
    let n = 1;
    const w = this.words;
    while (this.depth > 0 && this.sizes[this.depth - 1] === n) {
      this.depth--;
      nodeInto(w, this.depth * 8, H, 0);
      n *= 2;
    }
    w.set(H, this.depth * 8);
    this.sizes[this.depth++] = n;
    this.size++;
  };
  // An event's leaf, from its stored hash in hex.
  RootHasher.prototype.push = function (hashHex) {
    const d = fromHex(hashHex);
    leafBuf.bytes[0] = 0;
    if (d) leafBuf.bytes.set(d, 1);
    digestInPlace(leafBuf, d ? 33 : 1);
    this.pushLeaf();
  };
  // An event's leaf, from its hash as eight words (the digest just computed).
  RootHasher.prototype.pushDigest = function (words) {
    leafBuf.bytes[0] = 0;
    putWords(leafBuf.bytes, 1, words, 0);
    digestInPlace(leafBuf, 33);
    this.pushLeaf();
  };
  RootHasher.prototype.root = function () {
    if (this.size === 0) return sha256(new Uint8Array(0));
    const w = this.words, r = w.slice((this.depth - 1) * 8, this.depth * 8);
    for (let j = this.depth - 2; j >= 0; j--) {
      nodeInto(w, j * 8, r, 0);
      r.set(H);
    }
    const out = new Uint8Array(32);
    putWords(out, 0, r, 0);
    return out;
  };
  function merkleRoot(hashes) {
    const t = new RootHasher();
    for (const h of hashes) t.push(h);
    return hex(t.root());
  }

  // ---- The chain, as src/chain/verify.rs checks it. Findings carry the event's id. A report
  // whose first event is not event 1 is a window: its first event starts the chain check (its
  // link to what came before cannot be checked here) and it has no root.
  const HASH_HEX = /^[0-9a-fA-F]{64}$/;
  function Chain(opts) {
    this.opts = opts || {};
    this.findings = [];
    this.prev = null;
    this.seen = new Map();
    this.maybeErased = [];
    this.erasures = new Map();
    this.erased = new Map();
    this.count = 0;
    this.first = null;
    this.head = "";
    this.tree = null;
    this.rootAt = new Map();
  }
  Chain.prototype.find = function (id, problem, extra) {
    this.findings.push(Object.assign({ id: id, problem: problem }, extra || {}));
  };
  Chain.prototype.check = function (ev) {
    const id = ev.id;
    this.count++;
    if (this.first === null) {
      this.first = id;
      if (id === 1) this.tree = new RootHasher();
    } else if (ev.id !== this.prev.id + 1) this.find(id, "id_gap", { expected: this.prev.id + 1 });
    const bad = this.findings.length;
    let lastErased = false;
    let matches = false, computed = null;
    try {
      matches = eventMatches(ev);
      if (!matches) computed = digestHex();
    } catch (e) { this.find(id, "malformed", { error: String(e.message) }); }
    if (computed !== null) {
      if (ev.content === "" && ev.meta === "{}") {
        lastErased = true;
        this.maybeErased.push({ id: id, found: ev.hash, expected: computed });
      } else this.find(id, "hash_mismatch", { expected: computed, found: ev.hash });
    }
    if (ev.kind === "erasure" && this.findings.length === bad && !lastErased) this.noteErasure(ev);
    if (this.prev === null) {
      if (id === 1 && ev.prev_hash !== null) this.find(id, "genesis_prev_hash", { found: ev.prev_hash });
    } else if (ev.prev_hash !== this.prev.hash) {
      this.find(id, "broken_link", { expected: this.prev.hash, found: ev.prev_hash });
    }
    // A hash equal to the one computed is 64 lower-case hex digits already.
    if (typeof ev.hash === "string" && (matches || HASH_HEX.test(ev.hash))) {
      const key = matches ? ev.hash : ev.hash.toLowerCase();
      if (this.seen.has(key)) this.find(id, "duplicate_hash", { hash: key, first_id: this.seen.get(key) });
      else this.seen.set(key, id);
    }
    if (this.tree) {
      if (matches) this.tree.pushDigest(eventDigest);
      else this.tree.push(ev.hash);
      const want = this.opts.rootAt;
      if (want && want === this.tree.size) this.rootAt.set(want, hex(this.tree.root()));
    }
    this.head = ev.hash === null ? "" : ev.hash;
    this.prev = { id: id, hash: ev.hash };
  };
  Chain.prototype.noteErasure = function (ev) {
    let m;
    try { m = JSON.parse(ev.meta); } catch (e) { return; }
    if (!m || typeof m !== "object" || Array.isArray(m)) return;
    const id = m.erased_id, hash = m.erased_hash;
    if (Number.isSafeInteger(id) && typeof hash === "string" && !this.erasures.has(id)) {
      this.erasures.set(id, { hash: hash, erasure_id: ev.id, reason: typeof m.reason === "string" ? m.reason : "", source: typeof m.source === "string" ? m.source : "" });
    }
  };
  Chain.prototype.finish = function () {
    for (const e of this.maybeErased) {
      const named = this.erasures.get(e.id);
      if (named && named.hash === e.found) this.erased.set(e.id, named);
      else this.find(e.id, "hash_mismatch", { expected: e.expected, found: e.found });
    }
    let firstBad = null;
    for (const f of this.findings) if (f.id !== null && (firstBad === null || f.id < firstBad)) firstBad = f.id;
    return {
      status: this.findings.length === 0 && this.count > 0 ? "ok" : "failed",
      events: this.count,
      first: this.first,
      head: this.head,
      root: this.tree ? hex(this.tree.root()) : "",
      firstBad: firstBad,
      erased: this.erased,
      findings: this.findings,
      rootAt: this.rootAt,
    };
  };

  // ---- The events block, when it is too long to read as one string (views.js).
  // The array "[" EVENT (",\n" EVENT)* "]" read 2^25 characters at a time (`size` is for the
  // tests): each run of whole events is parsed as an array of its own, so no string holds the
  // whole text. It never accepts what JSON.parse of the whole would refuse, nor reads it
  // otherwise: a cut falls only on a ",\n" (which no JSON string can hold), and an empty run
  // ("[,\n", ",\n,\n", ",\n]") is refused. It refuses a ",\n" inside an event, which
  // pmm-export never writes (one event a line, each on one line).
  const SPACE_HEAD = /^[ \t\n\r]+/, SPACE_TAIL = /[ \t\n\r]+$/, BLANK = /^[ \t\n\r]*$/;
  function parseInParts(t, size) {
    const step = size || 1 << 25;
    const total = t.length;
    const out = [];
    let at = 0, carry = "", opened = false, cuts = 0;
    while (at < total) {
      const n = Math.min(step, total - at);
      let s = carry + t.substringData(at, n);
      at += n;
      carry = "";
      if (!opened) {
        s = s.replace(SPACE_HEAD, "");
        if (s === "" && at < total) continue;
        if (s[0] !== "[") throw new Error("the events block is not a JSON array");
        s = s.slice(1);
        opened = true;
      }
      let run;
      if (at >= total) {
        s = s.replace(SPACE_TAIL, "");
        if (s[s.length - 1] !== "]") throw new Error("the events block does not end its array");
        run = s.slice(0, -1);
      } else {
        const cut = s.lastIndexOf(",\n");
        if (cut < 0) { carry = s; continue; }
        run = s.slice(0, cut);
        carry = s.slice(cut + 2);
        cuts++;
      }
      if (BLANK.test(run)) {
        if (cuts > 0) throw new Error("an empty element in the events array");
        continue;
      }
      const got = JSON.parse("[" + run + "]");
      for (let i = 0; i < got.length; i++) out.push(got[i]);
    }
    return out;
  }

  // ---- Signed checkpoints (C2SP signed note + tlog-checkpoint, src/chain/note.rs).
  function b64(s) {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) throw new Error("not base64");
    const bin = atob(s);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function parseVerifierKey(text) {
    // NAME+HASH+BASE64: the name has no "+", base64 may.
    const m = /^([^+]+)\+([0-9a-f]{8})\+(.+)$/.exec(text.trim());
    if (!m) throw new Error("not a verifier key");
    const parts = [m[1], m[2], m[3]];
    const name = parts[0];
    const raw = b64(parts[2]);
    if (raw.length !== 33 || raw[0] !== 1) throw new Error("not an Ed25519 verifier key");
    const pub = raw.slice(1);
    const idBytes = new TextEncoder().encode(name + "\n");
    const buf = new Uint8Array(idBytes.length + 33);
    buf.set(idBytes, 0); buf[idBytes.length] = 1; buf.set(pub, idBytes.length + 1);
    const h = hex(sha256(buf).subarray(0, 4));
    if (h !== parts[1]) throw new Error("the key's hash does not match its name and key");
    return { name: name, hash: h, pub: pub, text: text.trim() };
  }
  function parseCheckpointBody(body) {
    const lines = body.slice(0, -1).split("\n");
    if (lines.length < 3 || lines[0] === "") throw new Error("not a checkpoint");
    if (!/^(0|[1-9][0-9]*)$/.test(lines[1])) throw new Error("the tree size is not a number");
    const root = b64(lines[2]);
    if (root.length !== 32) throw new Error("the root is not 32 bytes");
    return { origin: lines[0], size: Number(lines[1]), root: hex(root) };
  }
  // Opens the note with the key: {ok, why, key, checkpoint}. Ed25519 through WebCrypto.
  async function openCheckpoint(cp) {
    const key = parseVerifierKey(cp.key);
    const note = cp.note;
    if (!note.endsWith("\n")) throw new Error("the note does not end in a newline");
    const split = note.lastIndexOf("\n\n");
    if (split < 0) throw new Error("no blank line before the signatures");
    const body = note.slice(0, split + 1), sigs = note.slice(split + 2);
    const checkpoint = parseCheckpointBody(body);
    const pub = await crypto.subtle.importKey("raw", key.pub, { name: "Ed25519" }, false, ["verify"]);
    let signed = false;
    for (const line of sigs.split("\n")) {
      if (line === "") continue;
      if (!line.startsWith("\u2014 ")) throw new Error("a signature line does not start with '\u2014 '");
      const sp = line.indexOf(" ", 2);
      if (sp < 0) throw new Error("a signature line has no signature");
      const name = line.slice(2, sp);
      const blob = b64(line.slice(sp + 1));
      if (blob.length < 4 || name !== key.name || hex(blob.subarray(0, 4)) !== key.hash) continue;
      if (blob.length === 68 && await crypto.subtle.verify({ name: "Ed25519" }, pub, blob.slice(4), new TextEncoder().encode(body))) signed = true;
    }
    if (!signed) return { ok: false, why: "no valid signature by " + key.name, key: key, checkpoint: checkpoint };
    if (checkpoint.origin !== key.name) return { ok: false, why: "its origin is not the key's name", key: key, checkpoint: checkpoint };
    return { ok: true, why: "", key: key, checkpoint: checkpoint };
  }

  engine.use("wasm");

  window.PMM = {
    engine: engine, sha256: sha256, sha256Ascii: sha256Ascii, sha256Utf8: sha256Utf8, hex: hex, fromHex: fromHex,
    canonStr: canonStr, canonJson: canonJson, canonMeta: canonMeta, floatRepr: floatRepr,
    payload: payload, eventHash: eventHash, leafHash: leafHash, nodeHash: nodeHash,
    RootHasher: RootHasher, merkleRoot: merkleRoot, Chain: Chain, parseInParts: parseInParts,
    parseVerifierKey: parseVerifierKey, parseCheckpointBody: parseCheckpointBody, openCheckpoint: openCheckpoint,
  };
})();
