#!/usr/bin/env bash
# mcp-bench.sh -- pmm-mcp's figures (issue 19): the round trip of a `recall` through the
# official MCP Python SDK client on a larger ledger (p50, p95, max), and the server's idle RSS
# (after initialize, and after the recalls).
#
# Usage: scripts/mcp-bench.sh [EVENTS] [CALLS]     (defaults 100000 and 200)
#   PMM_BIN=target/release (default) holds pmm-mcp and pmm-append; needs python3 with `mcp`
#   (python3 -m pip install mcp). The ledger is made by scripts/gen-ledger.py in a temporary
#   directory and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000}
CALLS=${2:-200}
BIN=${PMM_BIN:-target/release}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

python3 -c 'import mcp' 2>/dev/null || { echo "mcp-bench: python3 -m pip install mcp" >&2; exit 2; }
echo "mcp-bench: $N events (scripts/gen-ledger.py --chain, imported with the index)" >&2
scripts/gen-ledger.py "$N" --chain > "$W/events.jsonl"
"$BIN/pmm-append" --db "$W/agent.db" --import "$W/events.jsonl" --quiet > /dev/null
rm "$W/events.jsonl"

# Idle RSS: a raw client that initializes, then waits; RSS read from /proc while the server idles.
rss() {
  python3 - "$BIN/pmm-mcp" "$W/agent.db" "$1" <<'EOF'
import json, subprocess, sys, time
server, db, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([server, "--db", db, "--quiet"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def rpc(msg):
    p.stdin.write((json.dumps(msg) + "\n").encode()); p.stdin.flush()
    if "id" in msg:
        return json.loads(p.stdout.readline())
rpc({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
     "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
for i in range(calls):
    rpc({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
         "params": {"name": "recall", "arguments": {"query": "what did we decide about the report", "k": 10}}})
time.sleep(1)
kb = next(int(l.split()[1]) for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS:"))
p.stdin.close(); p.wait()
print(f"{kb / 1024:.1f}")
EOF
}
idle=$(rss 0)
after=$(rss 20)

out=$(python3 tests/mcp_client.py bench "$CALLS" "what did we decide about the report" -- \
  "$BIN/pmm-mcp" --db "$W/agent.db" --quiet)
p50=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["p50_ms"])')
p95=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["p95_ms"])')
max=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_ms"])')

echo "| events | measure | value |"
echo "| --- | --- | --- |"
echo "| $N | recall round trip through the MCP Python client (k 10), p50 of $CALLS | $p50 ms |"
echo "| $N | recall round trip through the MCP Python client (k 10), p95 of $CALLS | $p95 ms |"
echo "| $N | recall round trip through the MCP Python client (k 10), max of $CALLS | $max ms |"
echo "| $N | pmm-mcp RSS, idle after initialize | $idle MiB |"
echo "| $N | pmm-mcp RSS, idle after 20 recalls | $after MiB |"
