#!/usr/bin/env bash
# forget-bench.sh -- issue 46's benchmark: forgetting 10,000 events by subject against erasing
# the same ids one by one, and recall with 10^4 superseded events against none.
#
# Usage: scripts/forget-bench.sh [N] [ONE_BY_ONE_SAMPLE]   (default N=100000, sample 100)
# Binaries: $PMM_BIN_DIR (default target/debug). Prints one line per figure.
#
# The ledger: N events, of which 10,000 user messages by mcp:guest about quinces, each bound to
# the concept topic.quince (10,000 concept_bind_event), the rest filler messages. Then:
#   - --erase-concept topic.quince --dry-run, and the erasure itself (one transaction), with
#     the ledger's size before and after;
#   - the same ids erased one by one (pmm-append --erase ID per id) on a copy: ONE_BY_ONE_SAMPLE
#     of them timed, the total extrapolated linearly (each costs a process, a transaction and a
#     rewrite of the full-text index, which grows no cheaper);
#   - pmm-recall p95 over 50 questions on two ledgers: + 10^4 corrections (meta.supersedes
#     naming each quince message) against + the same 10^4 texts without supersedes.
set -euo pipefail
N=${1:-100000}
SAMPLE=${2:-100}
BIN=${PMM_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target/debug}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export PMM_NOW=2026-01-01T00:00:00Z
python3 - "$N" > "$W/base.jsonl" <<'PY'
import json, sys
n = int(sys.argv[1])
targets = 10000
filler = n - 2 * targets - 1
out = sys.stdout
out.write(json.dumps({"kind": "concept_define", "content": json.dumps({"attributes": {}, "concept_kind": "topic", "definition": "quinces", "token": "topic.quince", "version": 1}, sort_keys=True), "meta": {"source": "owner"}}) + "\n")
step = max(1, filler // targets)
t = f = 0
while t < targets or f < filler:
    for _ in range(step):
        if f < filler:
            out.write(json.dumps({"kind": "user_message", "content": f"filler message {f} about the weather and the garden", "meta": {"role": "user", "source": "owner"}}) + "\n")
            f += 1
    if t < targets:
        out.write(json.dumps({"kind": "user_message", "content": f"guest note {t}: the quince tree by gate {t % 97} needs pruning", "meta": {"role": "user", "source": "mcp:guest"}}) + "\n")
        t += 1
PY
"$BIN/pmm-append" --db "$W/base.db" --batch --quiet < "$W/base.jsonl" > /dev/null
# Bind each quince message to the concept.
"$BIN/pmm-replay" --db "$W/base.db" --kind user_message | python3 -c '
import json, sys
for line in sys.stdin:
    e = json.loads(line)
    if e["meta"].get("source") == "mcp:guest":
        print(json.dumps({"kind": "concept_bind_event", "content": json.dumps({"event_id": e["id"], "relation": "relevant_to", "tokens": ["topic.quince"]}, sort_keys=True), "meta": {"source": "owner"}}))
' > "$W/binds.jsonl"
"$BIN/pmm-append" --db "$W/base.db" --batch --quiet < "$W/binds.jsonl" > /dev/null
"$BIN/pmm-recall" --db "$W/base.db" --reindex > /dev/null
events=$("$BIN/pmm-replay" --db "$W/base.db" --kind concept_bind_event | wc -l)
total=$(sqlite3 "$W/base.db" 'select count(*) from events')
echo "ledger: $total events, $events bindings ($(stat -c %s "$W/base.db") bytes)"
secs() { local s e; s=$(date +%s.%N); "$@" > /dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
for c in a b d e; do cp "$W/base.db" "$W/$c.db"; done
echo "dry-run (--erase-concept, 10,000 events): $(secs "$BIN/pmm-append" --db "$W/a.db" --erase-concept topic.quince --dry-run) s"
echo "erase by concept, one transaction: $(secs "$BIN/pmm-append" --db "$W/a.db" --erase-concept topic.quince --reason bench --source owner) s"
echo "size before $(stat -c %s "$W/base.db") bytes, after $(stat -c %s "$W/a.db") bytes"
ids=$(sqlite3 "$W/b.db" "select id from events where kind='user_message' and meta like '%mcp:guest%' order by id limit $SAMPLE")
s=$(date +%s.%N)
for id in $ids; do "$BIN/pmm-append" --db "$W/b.db" --erase "$id" --reason bench --source owner > /dev/null; done
e=$(date +%s.%N)
one=$(echo "($e - $s) / $SAMPLE" | bc -l)
printf 'one by one: %.3f s per id over %d ids; 10,000 ids extrapolated: %.0f s\n' "$one" "$SAMPLE" "$(echo "$one * 10000" | bc -l)"
# Recall: 10^4 corrections against 10^4 plain events of the same texts.
sqlite3 "$W/d.db" "select id from events where kind='user_message' and meta like '%mcp:guest%' order by id" | python3 -c '
import json, sys
for i, line in enumerate(sys.stdin):
    print(json.dumps({"kind": "user_message", "content": f"correction {i}: the quince tree was cut down", "meta": {"role": "user", "source": "owner", "supersedes": [int(line)]}}))
' > "$W/corr.jsonl"
sed 's/, "supersedes": \[[0-9]*\]//' "$W/corr.jsonl" > "$W/plain.jsonl"
"$BIN/pmm-append" --db "$W/d.db" --batch --quiet < "$W/corr.jsonl" > /dev/null
"$BIN/pmm-append" --db "$W/e.db" --batch --quiet < "$W/plain.jsonl" > /dev/null
for i in $(seq 1 50); do echo "what about the quince tree by gate $((i % 97))"; done > "$W/q.txt"
p95() { "$BIN/pmm-recall" --db "$1" --lines --timings < "$W/q.txt" | python3 -c '
import json, sys
ms = sorted(json.loads(l)["recall_ms"] for l in sys.stdin if "\"timings\"" in l)
print("%.1f ms (median %.1f)" % (ms[int(0.95 * (len(ms) - 1))], ms[len(ms) // 2]))'; }
for round in 1 2; do
  echo "recall p95, 10^4 plain events (round $round): $(p95 "$W/e.db")"
  echo "recall p95, 10^4 superseded (round $round): $(p95 "$W/d.db")"
done
