#!/usr/bin/env bash
# An offline tour of the pmm ledger programs on a fresh temporary ledger:
# append events (one, a pipeline, a batch), watch the write policy refuse a write, verify,
# tamper with an export and watch verification catch it, export, and read the metrics.
#
# Uses the pmm-* programs on PATH (cargo install --path . --locked), or set PMM_BIN to a
# folder that holds them (e.g. PMM_BIN=target/debug). Needs nothing else; uses jq when present.
set -euo pipefail
unset RUST_BACKTRACE   # errors stay one line in the tour

if [ -n "${PMM_BIN:-}" ]; then PATH="$(cd "$PMM_BIN" && pwd):$PATH"; fi
for p in pmm-append pmm-verify pmm-export pmm-metrics; do
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

step "done: the ledger verifies"
pmm-verify --quiet > /dev/null && echo "ok"
