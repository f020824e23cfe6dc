#!/usr/bin/env bash
# mcp-http-bench.sh -- pmm-mcp --http's figures (issue 36): the round trip of a `recall` over
# Streamable HTTP through the official MCP Python SDK client with a bearer token, with 1 and
# with 8 concurrent clients (8 sessions of one server), beside the same through stdio (8
# clients: 8 stdio servers, one each); the 8-client runs again with a minimal client of
# JSON-RPC written by hand (scripts/mcp-raw-client.py), whose own CPU is small beside the SDK's;
# the HTTP server's RSS idle, and at its peak while the 8 sessions call.
#
# Usage: scripts/mcp-http-bench.sh [EVENTS] [CALLS]     (defaults 1000000 and 200)
#   PMM_BIN=target/release (default) holds pmm-mcp and pmm-append; needs python3 with `mcp`
#   (python3 -m pip install mcp) and curl. The ledger is made by scripts/gen-ledger.py in a
#   temporary directory and removed afterwards; PMM_BENCH_DB=FILE uses an existing ledger
#   of EVENTS events instead (only read: recall writes nothing). CALLS is per client; each client warms up
#   with 3 recalls first (the first call of a server folds the ledger's projections: that
#   time is shown apart, as "first recall").
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
CALLS=${2:-200}
BIN=${PMM_BIN:-target/release}
Q="what did we decide about the report"
W=$(mktemp -d)
SERVER=
cleanup() {
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT

python3 -c 'import mcp' 2>/dev/null || { echo "mcp-http-bench: python3 -m pip install mcp" >&2; exit 2; }
command -v curl >/dev/null || { echo "mcp-http-bench: needs curl" >&2; exit 2; }
if [ -n "${PMM_BENCH_DB:-}" ]; then
  DB=$PMM_BENCH_DB
  echo "mcp-http-bench: $DB, $N events" >&2
else
  DB=$W/agent.db
  echo "mcp-http-bench: $N events (scripts/gen-ledger.py --chain, imported with the index)" >&2
  scripts/gen-ledger.py "$N" --chain > "$W/events.jsonl"
  "$BIN/pmm-append" --db "$DB" --import "$W/events.jsonl" --quiet > /dev/null
  rm "$W/events.jsonl"
fi

"$BIN/pmm-mcp" --tokens "$W/tokens.json" --new-token bench --scope read > "$W/token.json"
export PMM_TOKEN
PMM_TOKEN=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$W/token.json")
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT/mcp
"$BIN/pmm-mcp" --db "$DB" --http "127.0.0.1:$PORT" --tokens "$W/tokens.json" --quiet &
SERVER=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/.well-known/oauth-protected-resource" && break
  sleep 0.1
done
rss() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
sleep 1
idle=$(rss "$SERVER")

field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1"; }

# The first recall of the server (it folds the projections), then one client.
first=$(python3 tests/mcp_http_client.py bench "$URL" 1 "$Q" 0 | field max_ms)
one=$(python3 tests/mcp_http_client.py bench "$URL" "$CALLS" "$Q" 3)
idle_after=$(rss "$SERVER")

# n clients at once, each its own process; prints p95 (the worst client's), throughput, and
# for HTTP the server's peak RSS while they run.
many() {
  local kind=$1 n=$2 pids=() i peak=0
  for i in $(seq "$n"); do
    case $kind in
      http) python3 tests/mcp_http_client.py bench "$URL" "$CALLS" "$Q" 3 > "$W/$kind.$i" & ;;
      stdio) python3 tests/mcp_client.py bench "$CALLS" "$Q" 3 -- "$BIN/pmm-mcp" --db "$DB" --quiet > "$W/$kind.$i" & ;;
      raw-http) python3 scripts/mcp-raw-client.py http "$CALLS" "$Q" 3 "$URL" > "$W/$kind.$i" & ;;
      raw-stdio) python3 scripts/mcp-raw-client.py stdio "$CALLS" "$Q" 3 -- "$BIN/pmm-mcp" --db "$DB" --quiet > "$W/$kind.$i" & ;;
    esac
    pids+=($!)
  done
  alive() { local p; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
  while alive; do
    if [ "$kind" = http ]; then
      r=$(rss "$SERVER"); peak=$(python3 -c "print(max($peak, $r))")
    fi
    sleep 0.2
  done
  wait "${pids[@]}"
  python3 - "$W" "$kind" "$n" "$peak" <<'EOF'
import json, sys
w, kind, n, peak = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rs = [json.loads(open(f"{w}/{kind}.{i}").read().splitlines()[-1]) for i in range(1, n + 1)]
calls = sum(r["n"] for r in rs)
span = max(r["t1"] for r in rs) - min(r["t0"] for r in rs)
print(max(r["p95_ms"] for r in rs), round(calls / span, 1), max(r["p50_ms"] for r in rs), peak)
EOF
}
read -r h8_p95 h8_tput h8_p50 h8_peak < <(many http 8)
read -r s8_p95 s8_tput s8_p50 _ < <(many stdio 8)
read -r s1_p95 s1_tput s1_p50 _ < <(many stdio 1)
# The same 8 clients written without the SDK (scripts/mcp-raw-client.py: JSON-RPC by hand, one
# kept-alive HTTP connection or one pipe each): the servers' throughput with less of the
# clients' own CPU on the same 2 cores.
read -r r8h_p95 r8h_tput r8h_p50 _ < <(many raw-http 8)
read -r r8s_p95 r8s_tput r8s_p50 _ < <(many raw-stdio 8)
h1_p50=$(echo "$one" | field p50_ms)
h1_p95=$(echo "$one" | field p95_ms)
h1_max=$(echo "$one" | field max_ms)
h1_tput=$(echo "$one" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print(round(r["n"]/(r["t1"]-r["t0"]),1))')

echo "| $N events, $CALLS recalls (k 10) a client | over HTTP | over stdio |"
echo "| --- | --- | --- |"
echo "| 1 client: p50 | $h1_p50 ms | $s1_p50 ms |"
echo "| 1 client: p95 | $h1_p95 ms | $s1_p95 ms |"
echo "| 1 client: max (after 3 to warm up) | $h1_max ms | |"
echo "| 1 client: recalls a second | $h1_tput | $s1_tput |"
echo "| 8 clients: p50 (the slowest client's) | $h8_p50 ms | $s8_p50 ms |"
echo "| 8 clients: p95 (the slowest client's) | $h8_p95 ms | $s8_p95 ms |"
echo "| 8 clients: recalls a second, all together | $h8_tput | $s8_tput (8 servers) |"
echo "| 8 minimal clients (no SDK): p50 / p95 (the slowest client's) | $r8h_p50 / $r8h_p95 ms | $r8s_p50 / $r8s_p95 ms |"
echo "| 8 minimal clients (no SDK): recalls a second, all together | $r8h_tput | $r8s_tput (8 servers) |"
echo "| the server's first recall (folds the projections) | $first ms | |"
echo "| RSS idle, just started | $idle MiB | |"
echo "| RSS idle after the first client (projections kept) | $idle_after MiB | |"
echo "| RSS at its peak with 8 sessions calling | $h8_peak MiB | |"
