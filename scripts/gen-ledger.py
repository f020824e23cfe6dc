#!/usr/bin/env python3
"""gen-ledger.py -- synthetic pmm events for the benchmark (python3 standard library only).

Writes COUNT events as JSON Lines on stdout, shaped like a real ledger:

  * With the reference fixture (a JSON array of {id,ts,kind,content,meta(string),prev_hash,hash},
    default $PMM_BENCH_FIXTURE, else ../shared/fixtures/reference-ledgers/GPT-5.1-ledger.json
    beside the repository):
    cycle through its events, keeping kind and meta and making every content unique. Contents
    that are JSON objects stay valid JSON in the same textual style with an extra "bench_seq"
    key (so projections and metrics that parse them still work, e.g. the write policy and
    autonomy decisions); other contents get " #<n>" appended.
  * Without it (a user's clone): a built-in, deterministic mix of a dozen shapes (user and
    assistant messages of a few hundred characters, reflections with JSON content,
    embedding_add with 64-int vectors, summary_update with a large nested meta, ...).

Output modes:
  (default)   {"kind","content","meta"} lines, for `pmm-append --batch`.
  --chain     complete hash-chained events {"id","ts","kind","content","meta","prev_hash","hash"}
              for `pmm-append --import`: hash = sha256 of CPython
              json.dumps({"content","kind","meta","prev_hash"}, sort_keys=True,
              separators=(",", ":")) (SPEC 2.3); ids 1..COUNT, ts one millisecond apart from
              2025-01-01T00:00:00Z (or --start).

Usage:
  scripts/gen-ledger.py COUNT [--chain] [--fixture PATH | --builtin] [--start EPOCH_SECONDS]

Examples:
  scripts/gen-ledger.py 1000 | pmm-append --db x.db --batch > /dev/null
  scripts/gen-ledger.py 1000000 --chain > big.jsonl && pmm-append --db big.db --import big.jsonl
"""

import argparse
import hashlib
import json
import os
import random
import sys
import time

# The shared fixtures sit beside the repository (as the tests expect them), not in it.
DEFAULT_FIXTURE = str(
    __import__("pathlib").Path(__file__).resolve().parent.parent.parent
    / "shared" / "fixtures" / "reference-ledgers" / "GPT-5.1-ledger.json"
)

# (sort_keys, separators) styles we recognise in JSON-object contents, so that the unique
# variant keeps the original text style.
STYLES = [
    (True, (",", ":")),
    (False, (",", ":")),
    (True, (", ", ": ")),
    (False, (", ", ": ")),
]


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def json_style(text):
    """The (obj, style) of a JSON-object content written in a style we can reproduce, or None."""
    if not text.startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or "bench_seq" in obj:
        return None
    for sort_keys, seps in STYLES:
        if json.dumps(obj, sort_keys=sort_keys, separators=seps) == text:
            return obj, (sort_keys, seps)
    return None


class Template:
    """One event shape: kind, a function n -> content, and the canonical meta text."""

    __slots__ = ("kind", "kind_json", "content", "meta_canon")

    def __init__(self, kind, content_fn, meta):
        self.kind = kind
        self.kind_json = json.dumps(kind)
        self.content = content_fn
        self.meta_canon = canon(meta)


def content_fn_from_text(text):
    js = json_style(text)
    if js is None:
        return lambda n: "%s #%d" % (text, n)
    obj, (sort_keys, seps) = js

    def fn(n):
        d = dict(obj)
        d["bench_seq"] = n
        return json.dumps(d, sort_keys=sort_keys, separators=seps)

    return fn


def fixture_templates(path):
    with open(path, encoding="utf-8") as f:
        events = json.load(f)
    out = []
    for e in events:
        meta = e["meta"]
        if isinstance(meta, str):
            meta = json.loads(meta)
        out.append(Template(e["kind"], content_fn_from_text(e["content"]), meta))
    if not out:
        raise SystemExit("gen-ledger.py: error: %s holds no events" % path)
    return out


WORDS = (
    "ledger memory commitment reflection identity projection replay chain hash event "
    "autonomy tick summary concept stability coherence policy model adapter evidence "
    "goal trait claim retrieval embedding vector anchor continuity self narrative"
).split()


def builtin_templates():
    """A dozen shapes, deterministic (fixed seed), sizes roughly like the reference ledger."""
    rng = random.Random(20251124)

    def sentence(k):
        return " ".join(rng.choice(WORDS) for _ in range(k))

    def vec():
        return [rng.randint(-127, 127) for _ in range(64)]

    big_meta = {
        "rsm_state": {
            "behavioral_tendencies": {w: rng.randint(0, 20) for w in WORDS[:12]},
            "interaction_meta_patterns": [sentence(4) for _ in range(8)],
            "knowledge_gaps": [sentence(3) for _ in range(10)],
            "concepts": {w: {"weight": round(rng.random(), 6), "refs": list(range(rng.randint(1, 9)))}
                         for w in WORDS[10:30]},
        },
        "source": "autonomy_kernel",
        "snapshot": {"reflections": rng.randint(1, 99), "threads": [sentence(6) for _ in range(6)]},
    }
    user_text = "Hello again, I'd like to talk about " + sentence(40) + "?"
    assistant_text = (json.dumps({"intent": "answer", "outcome": sentence(4)}) + "\n" +
                      sentence(90) + "\nCOMMIT: " + sentence(5))
    reflection = {"intent": sentence(20), "outcome": sentence(12), "next": sentence(8),
                  "self_model": {"traits": {w: round(rng.random(), 3) for w in WORDS[:6]}}}
    tick = {"decision": "reflect", "evidence": [1, 2, 3], "reasoning": sentence(10)}
    shapes = [
        ("user_message", user_text, {"role": "user"}),
        ("assistant_message", assistant_text,
         {"role": "assistant", "assistant_payload": json.dumps({"concepts": WORDS[:4], "intent": "answer"})}),
        ("reflection", canon(reflection), {"source": "unknown", "synth": "pmm"}),
        ("embedding_add", canon({"dims": 64, "event_id": 92, "model": "hash64", "quant": "int8",
                                 "scale": 0.002535373, "vector": vec()}), {}),
        ("summary_update", canon({"last_event_id": 103, "open_commitments": 2,
                                  "reflections_since_last": 1}), big_meta),
        ("autonomy_tick", canon(tick), {"slot": 200854, "source": "autonomy_supervisor",
                                        "slot_id": hashlib.sha256(b"slot").hexdigest()}),
        ("concept_define", canon({"attributes": {"priority": 0.95, "scope": "system"},
                                  "concept_kind": "identity", "definition": sentence(18),
                                  "token": "identity.Echo", "version": "1.0"}),
         {"concept_id": hashlib.sha256(b"c").hexdigest(), "source": "autonomy_kernel"}),
        ("concept_relate", canon({"from": "identity.Echo", "relation": "facet_of",
                                  "to": "identity.PMM_Core", "weight": 0.8}),
         {"relation_id": hashlib.sha256(b"r").hexdigest(), "source": "autonomy_kernel"}),
        ("metrics_turn", "provider:openai,model:gpt-5.1,in_tokens:452,out_tokens:61,lat_ms:4245", {}),
        ("commitment_open", "Commitment opened: " + sentence(4),
         {"cid": "e86ccfd1", "origin": "assistant", "source": "assistant", "text": sentence(4),
          "impact_score": 0.5}),
        ("commitment_close", "Commitment closed: e86ccfd1",
         {"cid": "e86ccfd1", "origin": "autonomy_kernel", "reason": "auto_close_idle_opt",
          "source": "autonomy_kernel"}),
        ("lifetime_memory", "Span 1..120 (120 events)\nConcepts: " + sentence(60) + "\n" + sentence(120),
         {"concepts": WORDS[:12], "span": [1, 120], "source": "autonomy_kernel"}),
        ("stability_metrics", canon({"metrics": {"claim_stability": 1.0, "commitment_churn": 0.0,
                                                 "policy_change_rate": 0.25}, "window": 50}),
         {"source": "autonomy_kernel"}),
    ]
    return [Template(k, content_fn_from_text(c), m) for k, c, m in shapes]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("count", type=int, help="how many events to write")
    ap.add_argument("--chain", action="store_true",
                    help="write complete hash-chained events (for pmm-append --import)")
    ap.add_argument("--fixture", default=os.environ.get("PMM_BENCH_FIXTURE", DEFAULT_FIXTURE),
                    help="reference ledger to cycle through (default: $PMM_BENCH_FIXTURE or %s)"
                    % DEFAULT_FIXTURE)
    ap.add_argument("--builtin", action="store_true", help="use the built-in shapes, not the fixture")
    ap.add_argument("--start", type=int, default=1735689600,
                    help="epoch seconds of the first ts (default 2025-01-01T00:00:00Z)")
    args = ap.parse_args()
    if args.count < 0:
        ap.error("COUNT must be >= 0")

    if not args.builtin and os.path.isfile(args.fixture):
        templates = fixture_templates(args.fixture)
        source = args.fixture
    else:
        templates = builtin_templates()
        source = "built-in shapes"
    print("gen-ledger.py: %d events from %s (%d shapes)%s"
          % (args.count, source, len(templates), ", hash-chained" if args.chain else ""),
          file=sys.stderr)

    out = sys.stdout
    write = out.write
    dumps = json.dumps
    sha256 = hashlib.sha256
    nt = len(templates)
    buf = []
    prev_json = "null"
    sec_cached, prefix = -1, ""
    for i in range(args.count):
        n = i + 1
        t = templates[i % nt]
        content_json = dumps(t.content(n))
        if args.chain:
            # Keys in code-point order: content, kind, meta, prev_hash.
            payload = ('{"content":' + content_json + ',"kind":' + t.kind_json + ',"meta":' +
                       t.meta_canon + ',"prev_hash":' + prev_json + "}")
            h = sha256(payload.encode("ascii")).hexdigest()
            ms = i  # one millisecond apart
            sec = ms // 1000
            if sec != sec_cached:
                sec_cached = sec
                prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(args.start + sec))
            ts = "%s.%06dZ" % (prefix, (ms % 1000) * 1000)
            buf.append('{"id":%d,"ts":"%s","kind":%s,"content":%s,"meta":%s,"prev_hash":%s,"hash":"%s"}\n'
                       % (n, ts, t.kind_json, content_json, t.meta_canon, prev_json, h))
            prev_json = '"' + h + '"'
        else:
            buf.append('{"kind":%s,"content":%s,"meta":%s}\n' % (t.kind_json, content_json, t.meta_canon))
        if len(buf) >= 4096:
            write("".join(buf))
            buf.clear()
    write("".join(buf))
    out.flush()


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        # A closed pipe (| head) ends quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
