#!/usr/bin/env bash
# deep-scale.sh -- `pmm-verify --deep` against plain `pmm-verify` on a consistent ledger of N
# events written by pmm itself (docs/performance.md).
#
# The generated ledgers of bench.sh and scale-proof.sh have derived events that no longer match
# their contents, so --deep spends its time printing findings there. This one is made the way
# a user's ledger is: `pmm-turn --adapter dummy` turns, 200 per process (one process reading
# lines), and a `pmm-tick` after each 200, until the ledger holds N events (about 10 events a
# turn; 10^6 takes about 70 minutes on 2 cores). Then plain and --deep run alternately, ROUNDS
# times, and each run's wall time, CPU time and peak RSS are printed beside the ratio.
#
# Usage: scripts/deep-scale.sh [--events N] [--rounds R] [--db FILE] [--bin DIR]
#   --events N   events to reach (default 1000000)
#   --rounds R   plain/--deep pairs timed (default 3)
#   --db FILE    the ledger: made or continued, and kept (default: a temporary one, removed)
#   --bin DIR    the programs (default target/release)
# Needs: GNU time (/usr/bin/time), python3.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=1000000
ROUNDS=3
DB=
BIN=target/release
while (($#)); do
    case $1 in
        --events) EVENTS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --db) DB=$2; shift 2 ;;
        --bin) BIN=$2; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "deep-scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for p in pmm-turn pmm-tick pmm-verify pmm-replay; do
    [[ -x $BIN/$p ]] || { echo "deep-scale.sh: $BIN/$p not found (cargo build --release)" >&2; exit 2; }
done
[[ -x /usr/bin/time ]] || { echo "deep-scale.sh: needs GNU time (/usr/bin/time)" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/deep-scale.XXXXXX")
trap 'rm -rf -- "$WORK"' EXIT
[[ -n $DB ]] || DB=$WORK/turns.db

count() {  # the newest event's id: the ledger's size (ids have no gaps in a verified ledger)
    if [[ -f $DB ]]; then
        "$BIN/pmm-replay" --db "$DB" --tail 1 | python3 -c 'import json,sys; print(max([json.loads(l)["id"] for l in sys.stdin] or [0]))'
    else
        echo 0
    fi
}

topics=(tomatoes rain garden compost weather python memory plans linux music)
n=$(count)
chunk=$((n / 2000))
start=$SECONDS
while ((n < EVENTS)); do
    for ((i = 0; i < 200; i++)); do
        k=$((chunk * 200 + i))
        echo "Tell me about ${topics[k % 10]} number $k and what I said before"
    done | "$BIN/pmm-turn" --db "$DB" --adapter dummy --plain -q >/dev/null
    "$BIN/pmm-tick" --db "$DB" --slot "$chunk" -q >/dev/null
    chunk=$((chunk + 1))
    n=$(count)
    if ((chunk % 25 == 0)); then
        echo "deep-scale.sh: $n events ($((SECONDS - start)) s)" >&2
    fi
done
n=$(count)
echo "deep-scale.sh: the ledger holds $n events" >&2

time_one() {  # prints "wall cpu rss_mib"
    local s e
    s=$EPOCHREALTIME
    /usr/bin/time -f '%U %S %M' -o "$WORK/time" "$BIN/pmm-verify" --quiet --db "$DB" "$@" >"$WORK/out" ||
        { echo "deep-scale.sh: pmm-verify $* found problems (exit $?)" >&2; tail -c 2000 "$WORK/out" >&2; exit 1; }
    e=$EPOCHREALTIME
    read -r u sy rss <"$WORK/time"
    awk -v s="$s" -v e="$e" -v u="$u" -v sy="$sy" -v r="$rss" 'BEGIN{printf "%.2f %.2f %.1f", e - s, u + sy, r / 1024}'
}

echo "| round | plain wall s | plain CPU s | plain RSS MiB | --deep wall s | --deep CPU s | --deep RSS MiB | ratio (wall) | load |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for ((r = 1; r <= ROUNDS; r++)); do
    read -r pw pc pr <<<"$(time_one)"
    read -r dw dc dr <<<"$(time_one --deep)"
    load=$(cut -d' ' -f1 /proc/loadavg)
    ratio=$(awk -v d="$dw" -v p="$pw" 'BEGIN{printf "%.2f", d / p}')
    echo "| $r | $pw | $pc | $pr | $dw | $dc | $dr | ${ratio}× | $load |"
done
echo "deep-scale.sh: $n events; target: --deep <= 3x plain" >&2
