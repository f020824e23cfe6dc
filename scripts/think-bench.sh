#!/usr/bin/env bash
# think-bench.sh -- a thinking tick's overhead, the model excluded (issue 37's benchmark).
#
# Usage:
#   scripts/think-bench.sh [--sizes "1000 1000000"] [--runs N] [--keep] [--fixture PATH] [--no-build]
#                          [--cache DIR]
#
#   --sizes LIST   ledger sizes in events (default "1000 1000000"); the smallest is the floor
#   --runs N       timed ticks per size (default 11); the median is reported
#   --keep         keep the work directory and print its path
#   --fixture P    the reference ledger whose events are cycled (as scripts/bench.sh)
#   --no-build     do not run `cargo build --release` first (binaries: $PMM_BIN_DIR, else
#                  $CARGO_TARGET_DIR/release, else target/release)
#   --cache DIR    keep each size's imported ledger in DIR (ledger-N.db, before the warm-up) and
#                  start from a copy of it when it is there: building 10^6 events takes about
#                  100 s, a copy a few. The cache is the caller's to delete (after a change of
#                  the ledger's schema, or of the fixture)
#
# What it does, per size N:
#   1. Builds a ledger of N events as scripts/bench.sh does (scripts/gen-ledger.py --chain, then
#      `pmm-append --import`), sets the daily budget out of the way, and warms it up: one
#      `pmm-turn --adapter dummy` and one thinking tick (which fold the ledger once and leave a
#      projection checkpoint, as a running agent's ledger has).
#   2. Runs, --runs times: an untimed `pmm-turn --adapter dummy` (so that the next tick's
#      decision is `reflect`, rule 2: every timed tick asks the model), then one timed
#      `pmm-tick --adapter ollama --slot S` (process start included, the next slot each time)
#      against a stub Ollama server on 127.0.0.1 (python3, answering at once). The overhead of
#      a run is its wall time (measured by a python3 parent from the spawn to the exit) minus
#      the model call's own latency as the reply records it (`meta.lat_ms`: the HTTP round trip
#      of the chat request, whole milliseconds rounded down). What lat_ms does not cover is
#      pmm's, with one exception: the stub's own handling of the adapter's preflight request
#      (`POST /api/show`), which the stub times and the note column shows (well under a
#      millisecond) and which is left in the figure.
#   3. Prints one markdown table: the median overhead per size against 50 ms, and the largest
#      size's median against the smallest's (<= 1.5x); the note column has the rows the last
#      tick read, the median CPU time of the tick process (user + system: pmm's own work,
#      which other processes on the machine do not inflate), and the stub's preflight time.
#      The header line has the machine's load average at the start and the end: on a busy
#      machine the wall times hold waiting for a core.
#
# Exit 0 even when a target is missed (the verdict says OVER); non-zero when a command fails.
# Needs: bash >= 5, python3, cargo (unless --no-build).

set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZES="1000 1000000"
RUNS=11
KEEP=0
BUILD=1
FIXTURE="${PMM_BENCH_FIXTURE:-$REPO/../shared/fixtures/reference-ledgers/GPT-5.1-ledger.json}"
BIN="${PMM_BIN_DIR:-${CARGO_TARGET_DIR:-$REPO/target}/release}"
CACHE=""

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "think-bench.sh: error: $*" >&2; exit 2; }

while (($#)); do
    case "$1" in
        --sizes) (($# >= 2)) || die "--sizes needs a value"; SIZES=$2; shift 2 ;;
        --runs) (($# >= 2)) || die "--runs needs a value"; RUNS=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --fixture) (($# >= 2)) || die "--fixture needs a value"; FIXTURE=$2; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        --cache) (($# >= 2)) || die "--cache needs a value"; CACHE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
read -r -a SIZE_LIST <<<"$SIZES"
((${#SIZE_LIST[@]} >= 1)) || die "--sizes is empty"
for s in "${SIZE_LIST[@]}"; do [[ $s =~ ^[1-9][0-9]*$ ]] || die "bad size: $s"; done
mapfile -t SIZE_LIST < <(printf '%s\n' "${SIZE_LIST[@]}" | sort -n -u)
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "bad --runs: $RUNS"
[[ -n ${EPOCHREALTIME:-} ]] || die "bash >= 5 is needed (EPOCHREALTIME)"
command -v python3 >/dev/null || die "python3 is needed"

START=$EPOCHREALTIME
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)
log() { printf '[%6.1fs] %s\n' "$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" "$*" >&2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/think-bench.XXXXXX")
STUB_PID=""
cleanup() {
    if [[ -n $STUB_PID ]]; then kill "$STUB_PID" 2>/dev/null || true; fi
    if ((KEEP)); then echo "work directory kept: $W" >&2; else rm -rf -- "$W"; fi
}
trap cleanup EXIT

if ((BUILD)); then
    log "cargo build --release"
    (cd "$REPO" && cargo build --release --quiet --bin pmm-append --bin pmm-turn --bin pmm-tick)
fi

# The stub Ollama server: /api/show (the preflight) and /api/chat, answered at once.
# Each request's handling time (from its parsed headers to its answer written) is appended to
# stub.times, so that the stub's share of what lat_ms does not cover can be shown.
python3 - "$W/port" "$W/stub.times" <<'PY' &
import http.server, json, sys, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def answer(self, body):
        b = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
        self.wfile.flush()
        with open(sys.argv[2], "a") as f:
            f.write(f"{self.path} {time.perf_counter() - self.t0:.6f}\n")
    def do_GET(self):
        self.t0 = time.perf_counter()
        self.answer({"models": [{"name": "stub"}]})
    def do_POST(self):
        self.t0 = time.perf_counter()
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith("/api/show"):
            return self.answer({"details": {"family": "stub"}, "modelfile": "FROM stub\n"})
        self.answer({"model": "stub", "message": {"role": "assistant", "content": "Nothing to add."},
                     "done": True, "done_reason": "stop", "prompt_eval_count": 100, "eval_count": 5})
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[1], "w").write(str(s.server_address[1]))
s.serve_forever()
PY
STUB_PID=$!
for _ in $(seq 100); do [[ -s $W/port ]] && break; sleep 0.05; done
[[ -s $W/port ]] || die "the stub server did not start"
export OLLAMA_HOST="http://127.0.0.1:$(cat "$W/port")"
unset PMM_NOW PMM_ADAPTER PMM_MODEL

median() { sort -n | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
declare -A MEDIAN
ROWS=()
for N in "${SIZE_LIST[@]}"; do
    DB="$W/ledger-$N.db"
    if [[ -n $CACHE && -s $CACHE/ledger-$N.db ]]; then
        log "$N events: a copy of $CACHE/ledger-$N.db"
        cp -- "$CACHE/ledger-$N.db" "$DB"
    else
        log "$N events: generate and import"
        python3 "$REPO/scripts/gen-ledger.py" "$N" --chain --fixture "$FIXTURE" >"$W/gen.jsonl" 2>/dev/null
        "$BIN/pmm-append" --db "$DB" --import "$W/gen.jsonl" --quiet >/dev/null
        rm -f -- "$W/gen.jsonl"
        "$BIN/pmm-tick" --db "$DB" --set think_calls_per_day=100000 --set think_tokens_per_day=1000000000 >/dev/null
        if [[ -n $CACHE ]]; then
            mkdir -p -- "$CACHE"
            # One file: the WAL folded in, so that a copy is the whole ledger.
            python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.close()' "$DB"
            cp -- "$DB" "$CACHE/ledger-$N.db.tmp" && mv -- "$CACHE/ledger-$N.db.tmp" "$CACHE/ledger-$N.db"
        fi
    fi
    slot=100000000   # past every slot of the generated ledger's stimuli
    tick() { "$BIN/pmm-tick" --db "$DB" --slot "$slot" --adapter ollama --model stub; slot=$((slot + 1)); }
    log "$N events: warm-up"
    "$BIN/pmm-turn" --db "$DB" --adapter dummy "warm up" >/dev/null
    tick >/dev/null
    : >"$W/overheads"
    : >"$W/cpu"
    : >"$W/stubms"
    for ((i = 0; i < RUNS; i++)); do
        "$BIN/pmm-turn" --db "$DB" --adapter dummy "How are you?" >/dev/null
        : >"$W/stub.times"
        # The tick timed by a python3 parent: wall time from the spawn to the exit, and the
        # child's own CPU time (user + system, from wait4), which the machine's other work
        # does not inflate.
        python3 - "$W/tick.out" "$BIN/pmm-tick" --db "$DB" --slot "$slot" --adapter ollama --model stub \
            >>"$W/overheads" 2>>"$W/cpu" <<'PY'
import json, os, subprocess, sys, time
out = open(sys.argv[1], "w")
t0 = time.perf_counter()
child = subprocess.Popen(sys.argv[2:], stdout=out)
_, status, ru = os.wait4(child.pid, 0)
wall = (time.perf_counter() - t0) * 1000
out.close()
assert status == 0, status
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rec = [l for l in lines if l.get("type") == "tick"][-1]
assert rec["think"]["asked"], rec
lat = [l["meta"]["lat_ms"] for l in lines if l.get("kind") == "assistant_message"][0]
print(wall - lat)
sys.stderr.write(f"{(ru.ru_utime + ru.ru_stime) * 1000}\n")
PY
        slot=$((slot + 1))
        # The stub's own handling of the requests lat_ms does not cover (the preflight).
        awk '$1 != "/api/chat" {s += $2} END {print s * 1000}' "$W/stub.times" >>"$W/stubms"
    done
    MEDIAN[$N]=$(median <"$W/overheads")
    CPU=$(median <"$W/cpu")
    STUBMS=$(median <"$W/stubms")
    rows=$("$BIN/pmm-turn" --db "$DB" --adapter dummy "again" >/dev/null; tick | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin).get("rows_read"))')
    verdict=$(awk -v m="${MEDIAN[$N]}" 'BEGIN{print (m <= 50) ? "ok" : "OVER"}')
    ROWS+=("| $N | thinking tick overhead, median of $RUNS (wall − model latency) | $(printf '%.1f' "${MEDIAN[$N]}") ms | ≤ 50 ms | $verdict | $rows rows read; CPU $(printf '%.1f' "$CPU") ms; the stub's preflight $(printf '%.2f' "$STUBMS") ms |")
    rm -f -- "$DB" "$DB-wal" "$DB-shm"
done
SMALL=${SIZE_LIST[0]}
LARGE=${SIZE_LIST[${#SIZE_LIST[@]} - 1]}
r=$(awk -v a="${MEDIAN[$LARGE]}" -v b="${MEDIAN[$SMALL]}" 'BEGIN{printf "%.2f", (b > 0) ? a/b : 0}')
ROWS+=("| $LARGE vs $SMALL | the same, ratio | ${r}× | ≤ 1.5× | $(awk -v r="$r" 'BEGIN{print (r <= 1.5) ? "ok" : "OVER"}') | |")

echo "# think-bench: $(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown), nproc=$(nproc), $(date -u +%Y-%m-%dT%H:%M:%SZ), load average at the start $LOAD0, at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| size | measure | figure | target | verdict | note |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
log "done"
