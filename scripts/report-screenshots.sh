#!/usr/bin/env bash
# report-screenshots.sh -- the screenshots of docs/report.md, made again.
#
# Builds a ledger from the reference fixture's events 1 to 467 (the part before its first
# fork, so the page verifies), adds a scripted conversation, a thinking tick, an MCP client's
# writes, an erasure and a signed checkpoint, exports the report and takes one 1280x800
# screenshot of each view with headless Chromium into docs/report/.
#
# Usage: scripts/report-screenshots.sh   (uses PMM_BIN or the pmm-* programs on PATH;
#        PMM_CHROMIUM names Chromium, default chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PMM_BIN:-}" ]; then PATH="$(cd "$PMM_BIN" && pwd):$PATH"; fi
CHROME=${PMM_CHROMIUM:-chromium}
FIXTURE=../shared/fixtures/reference-ledgers/GPT-5.1-ledger.json
work=$(mktemp -d "${TMPDIR:-/tmp}/pmm-shots.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PMM_NOW="2025-11-24T07:00:00.000000Z"
pmm-append --db "$work/ref.db" --quiet --import "$FIXTURE" --accept-forks >/dev/null
pmm-export --db "$work/ref.db" --quiet --until 467 -o "$work/head.jsonl"
export PMM_DB="$work/agent.db"
pmm-append --quiet --import "$work/head.jsonl" >/dev/null
# The scripted adapter answers the ledger's Nth turn with line N: the fixture's turns come first.
turns=$(pmm-replay | grep -c '"kind":"user_message"' || true)
for _ in $(seq "$turns"); do echo '"(an earlier turn)"'; done > "$work/replies.jsonl"
cat >> "$work/replies.jsonl" <<'JSON'
"Hello Scott. I will start by learning the test plan.\nCOMMIT: learn the test plan"
"Then that is done.\nCLOSE: cc9d9a3f\nREFLECT:{\"observations\":[\"the plan is learned\"],\"next\":\"run the tests\"}"
"I looked at the plan again.\nCOMMIT: review the flaky tests"
JSON
turn() { pmm-turn --adapter scripted --script "$work/replies.jsonl" "$@" >/dev/null; }
turn "Hello, I am Scott. Please learn the test plan."
turn "The plan is in the repository; you have read it. My password is hunter2."
pmm-tick --slot 900000 --adapter scripted --script "$work/replies.jsonl" >/dev/null
printf '%s\n' \
  '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"shots","version":"1"}}}' \
  '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
  '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember","arguments":{"text":"Scott prefers short answers"}}}' \
  '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"commit","arguments":{"text":"send the weekly report"}}}' \
  | pmm-mcp >/dev/null 2>&1
secret=$(pmm-replay | grep -F 'hunter2' | grep -F '"user_message"' | head -1 | sed 's/^{"id":\([0-9]*\),.*/\1/')
pmm-append --erase "$secret" --reason "the user asked to forget a password" --source user --with-quotes >/dev/null
vkey=$(pmm-export --keygen agent.example/echo --key "$work/log.key")
pmm-export --checkpoint --key "$work/log.key" > "$work/cp.txt"
pmm-export --quiet -o "$work/mind.html" --title "Echo: the mind of an agent" \
  --embed-checkpoint "$work/cp.txt" --key "$vkey"
pmm-verify --quiet "$work/mind.html" | tail -1
mkdir -p docs/report
reply=$(pmm-replay | grep -F '"assistant_message"' | tail -3 | head -1 | sed 's/^{"id":\([0-9]*\),.*/\1/')
for view in timeline "why/$reply" commitments self concepts/topic.stability_metrics cost search/weekly%20report integrity-view; do
  name=${view%%/*}
  profile=$(mktemp -d)
  "$CHROME" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --hide-scrollbars --window-size=1280,800 \
    --virtual-time-budget=20000 --screenshot="docs/report/$name.png" \
    "file://$work/mind.html#$view" 2>/dev/null
  rm -rf "$profile"
  echo "docs/report/$name.png"
done
# "Why did it say that" in the dark scheme (prefers-color-scheme: dark).
profile=$(mktemp -d)
"$CHROME" --headless --no-sandbox --disable-gpu --force-dark-mode --blink-settings=preferredColorScheme=0 \
  --no-first-run --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars --window-size=1280,800 --virtual-time-budget=20000 \
  --screenshot=docs/report/why-dark.png "file://$work/mind.html#why/$reply" 2>/dev/null
rm -rf "$profile"
echo docs/report/why-dark.png
