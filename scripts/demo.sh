#!/usr/bin/env bash
# An offline tour of the pmm programs on fresh temporary ledgers:
# append events (one, a pipeline, a batch), watch the write policy refuse a write, verify,
# tamper with an export and watch verification catch it, export, and read the metrics; then
# hold a short conversation with pmm-turn and scripted replies (no model needed), in which the
# agent opens and closes a commitment and takes a name, and check its state and derived events;
# then let the autonomy kernel tick on that ledger (pmm-tick: reflect, idle and say why, skip a
# slot that already ticked, a dry run, a threshold set in the ledger); and look at its event
# graph (pmm-graph, drawn with Graphviz when it is installed).
#
# Uses the pmm-* programs on PATH (cargo install --path . --locked), or set PMM_BIN to a
# folder that holds them (e.g. PMM_BIN=target/debug). Needs nothing else; uses jq when present.
#
# Usage: scripts/demo.sh   (no arguments; -h or --help prints this text)
set -euo pipefail
unset RUST_BACKTRACE   # errors stay one line in the tour

case ${1:-} in
  "") ;;
  -h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
  *) echo "demo: no arguments expected, got '$1' (see scripts/demo.sh --help)" >&2; exit 2 ;;
esac

if [ -n "${PMM_BIN:-}" ]; then PATH="$(cd "$PMM_BIN" && pwd):$PATH"; fi
for p in pmm-append pmm-verify pmm-export pmm-metrics pmm-turn pmm-replay pmm-tick pmm-graph; do
  command -v "$p" >/dev/null || { echo "demo: $p not found: run 'cargo install --path . --locked' or set PMM_BIN" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/pmm-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PMM_DB="$work/agent.db"
export PMM_NOW="2025-11-24T05:55:41.194157Z"   # pinned clock: the same hashes on every run
step() { printf '\n== %s\n' "$*"; }
show() { if command -v jq >/dev/null; then jq -c "$@"; else cat; fi; }

step "one event from flags"
pmm-append --kind user_message --content "Hello, I am Scott." --meta '{"role":"user"}' | show '{id,kind,hash}'

step "a pipeline: JSON Lines in, appended events out"
printf '%s\n' \
  '{"kind":"assistant_message","content":"Hello Scott.\nCOMMIT: learn the test plan","meta":{"role":"assistant"}}' \
  '{"kind":"commitment_open","content":"Commitment opened: learn the test plan","meta":{"cid":"3f1a9c2e","source":"assistant","text":"learn the test plan"}}' \
  | pmm-append | show '{id,kind,prev_hash}'

step "a batch: all lines or none"
printf '%s\n' \
  '{"kind":"reflection","content":"{\"intent\":\"greet\",\"next\":\"continue\"}","meta":{"source":"autonomy_kernel"}}' \
  '{"kind":"commitment_close","content":"Commitment closed: 3f1a9c2e","meta":{"cid":"3f1a9c2e","source":"assistant"}}' \
  | pmm-append --batch | show '{id,kind}'

step "the write policy refuses a config from the cli (exit 1, a violation is recorded)"
if pmm-append --kind config --content '{"type":"retrieval","strategy":"fixed","limit":3}' --meta '{"source":"cli"}'; then
  echo "demo: the policy should have refused that" >&2; exit 1
else
  echo "(exit $?)"
fi

step "verify the ledger"
pmm-verify | show .

step "export it, as the reference does, and verify the export"
pmm-export -o "$work/ledger.json.gz"
pmm-verify "$work/ledger.json.gz" | tail -1 > "$work/anchors.txt"
show '{events,last_id,last_hash,ok}' < "$work/anchors.txt"

step "tamper with a copy: change one byte of event 2's content"
pmm-export --format jsonl | sed '2s/Hello Scott/Hello Scoot/' > "$work/tampered.jsonl"
if pmm-verify "$work/tampered.jsonl" | show 'select(.type=="finding")'; then
  echo "demo: tampering went unnoticed" >&2; exit 1
fi

step "truncate a copy: clean on its own, caught by the saved anchor"
pmm-export --format jsonl --until 3 > "$work/short.jsonl"
pmm-verify "$work/short.jsonl" | show '{type,events,ok}'
if pmm-verify "$work/short.jsonl" --anchors-from "$work/anchors.txt" | show 'select(.type=="finding")'; then
  echo "demo: truncation went unnoticed" >&2; exit 1
fi

step "a transcript"
pmm-export --format md

step "metrics"
pmm-metrics --deterministic | show .

# A conversation on a ledger of its own. The scripted adapter gives the Nth reply of the file
# to the ledger's Nth user message; the replies carry the markers a model would write.
chat="$work/conversation.db"
cat > "$work/replies.jsonl" <<'EOF'
"Hello Scott. I will start by learning the test plan.\nCOMMIT: learn the test plan"
"Then that is done.\nCLOSE: cc9d9a3f\nREFLECT:{\"observations\":[\"the plan is learned\"],\"next\":\"run the tests\"}"
"Echo it is.\nCLAIM:name_change={\"new_name\":\"Echo\"}"
"I am Echo. I learned the test plan and closed that commitment.\nCLAIM:commitment_status={\"cid\":\"cc9d9a3f\",\"open\":false}\nCLAIM:event_existence={\"id\":3}"
EOF
turn() { pmm-turn --db "$chat" --adapter scripted --script "$work/replies.jsonl" "$@"; }
# The turn record (the last line a turn prints) must contain every argument.
expect() {
  record=$(tail -n 1)
  for want in "$@"; do
    case "$record" in
      *"$want"*) ;;
      *) echo "demo: expected $want in the turn record, got: $record" >&2; exit 1 ;;
    esac
  done
  printf '%s\n' "$record" | show '{reply, opened, closed, valid: [.claims.valid[].type], failed: .claims.failed}'
}

step "a conversation, turn 1: the reply opens a commitment (cid = sha1 of its text, first 8 hex)"
turn "Hello, I am Scott. Please learn the test plan." | expect '"opened":["cc9d9a3f"]'

step "turn 2: the reply closes it and reflects"
turn "The plan is in the repository; you have read it." | expect '"closed":["cc9d9a3f"]'

step "turn 3: the reply claims a new name, and the claim is checked and recorded"
turn "From now on your name is Echo." | expect '"failed":[]' '"type":"name_change"'

step "turn 4: the reply claims what the ledger shows, and both claims hold"
turn "Who are you, and what have you done so far?" |
  expect '"failed":[]' '"type":"commitment_status"' '"type":"event_existence"'

step "the projected state: the identity is Echo, nothing is left open"
state=$(pmm-replay --db "$chat" --state)
identity=$(printf '%s\n' "$state" | grep -o '"identity":{[^}]*}')
echo "$identity"
case "$identity" in
  *'"name":"Echo"'*) ;;
  *) echo "demo: the identity should be Echo" >&2; exit 1 ;;
esac
case "$state" in
  *'"open_commitments":[]'*) ;;
  *) echo "demo: no commitment should be open" >&2; exit 1 ;;
esac

# Autonomy on the conversation's ledger. Cron would run `pmm-tick` once a minute
# (scripts/pmm-tick.cron); here the clock is pinned (PMM_NOW) and the slots are given, so the
# ticks, like everything above, hash the same on every run.
tick() { pmm-tick --db "$chat" "$@"; }
# The tick record (the last line a tick prints) must contain every argument.
decided() {
  record=$(tail -n 1)
  for want in "$@"; do
    case "$record" in
      *"$want"*) ;;
      *) echo "demo: expected $want in the tick record, got: $record" >&2; exit 1 ;;
    esac
  done
  printf '%s\n' "$record"
}

step "a tick: the kernel reflects on the conversation (no kernel reflection yet)"
out=$(tick --slot 1)
printf '%s\n' "$out" | decided '"decision":"reflect"' | show '{slot, decision, reasoning}'
printf '%s\n' "$out" | show 'select(.kind=="reflection") | .content | fromjson | {intent, changes, outcome}'

step "more ticks: nothing new happens, so when the interval comes round the kernel idles and says why"
for s in 2 3 4 5 6; do tick --slot "$s" | decided '"decision":"idle"' | show '{slot, decision, reasoning}'; done
tick --slot 7 | decided '"decision":"idle"' 'but nothing changed since kernel reflection' |
  show '{slot, decision, reasoning}'

step "cron may fire twice in a slot: the second tick writes nothing (exit 0)"
tick --slot 7 | decided '"skipped":"slot 7 already has a stimulus' | show '{slot, skipped}'

step "a dry run: what the tick for slot 8 would decide; the ledger is not touched"
before=$(pmm-replay --db "$chat" | wc -l)
tick --dry-run --slot 8 | show '{type, slot, decision, reasoning}'
[ "$(pmm-replay --db "$chat" | wc -l)" -eq "$before" ] || { echo "demo: a dry run wrote" >&2; exit 1; }

step "thresholds live in the ledger: --set appends them, and replay and every later tick see them"
tick --set reflection_interval=5 --set summary_interval=40 |
  show 'if .type then . else {id, kind, content} end'
thresholds=$(pmm-replay --db "$chat" --state | grep -o '"thresholds":{[^}]*}')
echo "$thresholds"
case "$thresholds" in
  *'"reflection_interval":5'*'"summary_interval":40'*) ;;
  *) echo "demo: the thresholds should be 5 and 40" >&2; exit 1 ;;
esac
# The config is itself news, so the next tick reflects; then the interval comes round again (every tick now
# writes its outcome and, when they change, stability and coherence, so the count grows faster than before).
for s in 8 9 10; do tick --slot "$s" | decided | show '{slot, decision, reasoning}'; done
tick --slot 11 | decided '"decision":"idle"' 'but nothing changed since kernel reflection' |
  show '{slot, decision, reasoning}'

step "the event graph: statistics, a commitment's thread and why it exists"
pmm-graph --db "$chat" stats | show .
cid=$(pmm-replay --db "$chat" --kind commitment_open | head -n 1 | grep -o '"cid":"[0-9a-f]*"' | cut -d'"' -f4)
pmm-graph --db "$chat" thread "$cid" | show '{id, kind}'
pmm-graph --db "$chat" explain "$cid" | show '{id, kind, content}' 
if command -v dot >/dev/null; then
  pmm-graph --db "$chat" export --format dot | dot -Tsvg > "$work/graph.svg"
  echo "graph drawn with Graphviz: $(wc -c < "$work/graph.svg") bytes of SVG"
fi

step "every derived event of the conversation and its ticks (cids, embeddings, digests, snapshots, slot ids) checks out"
pmm-verify --db "$chat" --deep | tail -n 1 | show '{events, ok, deep}'

step "done: both ledgers verify"
pmm-verify --quiet > /dev/null && pmm-verify --db "$chat" --deep --quiet > /dev/null && echo "ok"
