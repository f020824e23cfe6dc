#!/usr/bin/env bash
# scale-proof.sh -- every program on one very large ledger, with time and peak memory.
#
# Usage:
#   scripts/scale-proof.sh [--events N] [--dir DIR] [--no-build] [--keep]
#
#   --events N   ledger size (default 10000000: about 7 GB of JSON Lines export)
#   --dir DIR    work directory (default ${TMPDIR:-/tmp}/pmm-scale); needs about 2.5 KB of
#                disk per event (the generated file, the ledger, the export)
#   --no-build   use target/release as it is (or $PMM_BIN_DIR)
#   --keep       keep the work directory
#   --reuse      keep using DIR/ledger.db when it is there (skips generate and import)
#   --deep       also time pmm-verify --deep (slow: ~1 ms per event; the synthetic events'
#                derived values do not match, so only its summary line is kept)
#
# Steps, each timed with GNU time (wall seconds, peak RSS):
#   generate (scripts/gen-ledger.py --chain, python; not pmm), import (pmm-append --import),
#   export (pmm-export --format jsonl), verify the export and the ledger (pmm-verify),
#   state rebuild from scratch (pmm-replay --state on a read-only copy: no checkpoint),
#   state with a checkpoint saved (pmm-replay --state twice), graph stats (pmm-graph stats),
#   a turn (pmm-turn --adapter dummy), a tick (pmm-tick), metrics (pmm-metrics), deep verify.
# Prints one markdown table. Nothing here needs memory proportional to the ledger: the RSS
# column is the proof.

set -Eeuo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=10000000
DIR=${TMPDIR:-/tmp}/pmm-scale
BUILD=1
KEEP=0
REUSE=0
DEEP=0
while (($#)); do
    case $1 in
    --events) N=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --keep) KEEP=1; shift ;;
    --reuse) REUSE=1; KEEP=1; shift ;;
    --deep) DEEP=1; shift ;;
    -h | --help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale-proof.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if ((BUILD)); then cargo build --release --quiet --manifest-path "$REPO/Cargo.toml"; fi
BIN=${PMM_BIN_DIR:-$REPO/target/release}
mkdir -p "$DIR"
if ((!KEEP)); then trap 'rm -rf -- "$DIR"' EXIT; fi
DB=$DIR/ledger.db
export PMM_NOW=2025-11-24T06:00:00Z

ROWS=()
step() { # step NAME OUTFILE CMD...
    local name=$1 out=$2
    shift 2
    echo "scale-proof: $name" >&2
    local t0=$EPOCHREALTIME
    /usr/bin/time -f '%M' -o "$DIR/.rss" "$@" >"$out"
    local t1=$EPOCHREALTIME
    local secs rss
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
    rss=$(awk '{printf "%.1f", $1/1024}' "$DIR/.rss")
    ROWS+=("| $name | $secs s | $rss MiB |")
    # Also as it happens: a long run that fails late keeps what it measured.
    echo "| $name | $secs s | $rss MiB |" >>"$DIR/rows.md"
}

if ((REUSE)) && [[ -f $DB ]]; then
    echo "scale-proof: reusing $DB" >&2
else
    step "generate $N events (python, not pmm)" "$DIR/gen.jsonl" python3 "$REPO/scripts/gen-ledger.py" "$N" --chain
    step "pmm-append --import" /dev/null "$BIN/pmm-append" --db "$DB" --import "$DIR/gen.jsonl" --quiet
    rm -f -- "$DIR/gen.jsonl"
fi
SLOT=$(date +%s)   # past the generated stimuli's slots (near 200000), new on every run
step "pmm-export --format jsonl" /dev/null "$BIN/pmm-export" --db "$DB" --format jsonl -o "$DIR/export.jsonl" --quiet
EXPORT_SIZE=$(du -h "$DIR/export.jsonl" | cut -f1)
step "pmm-verify export.jsonl" "$DIR/verify.out" "$BIN/pmm-verify" --quiet "$DIR/export.jsonl"
rm -f -- "$DIR/export.jsonl"
step "pmm-verify --db" /dev/null "$BIN/pmm-verify" --quiet --db "$DB"
sqlite3 "$DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
cp -- "$DB" "$DIR/readonly.db"
chmod a-w "$DIR/readonly.db"
step "pmm-replay --state (full rebuild, no checkpoint)" "$DIR/state.json" "$BIN/pmm-replay" --db "$DIR/readonly.db" --state
rm -f -- "$DIR/readonly.db"
step "pmm-graph stats" /dev/null "$BIN/pmm-graph" --db "$DB" stats
step "pmm-replay --state (first: folds, saves a checkpoint)" /dev/null "$BIN/pmm-replay" --db "$DB" --state
step "pmm-replay --state (from the checkpoint)" /dev/null "$BIN/pmm-replay" --db "$DB" --state
step "pmm-turn --adapter dummy" /dev/null "$BIN/pmm-turn" --db "$DB" --adapter dummy "Hello at scale"
step "pmm-tick" /dev/null "$BIN/pmm-tick" --db "$DB" --slot "$SLOT"
step "pmm-tick (next slot)" /dev/null "$BIN/pmm-tick" --db "$DB" --slot "$((SLOT + 1))"
step "pmm-metrics" /dev/null "$BIN/pmm-metrics" --db "$DB" --quiet
# The generator makes every content unique, so derived events (embeddings, digests ...) no
# longer match their inputs: --deep reports them (exit 1), one line each, so only the summary
# line is kept. It runs for its time and memory.
DEEP_NOTE="not run (--deep)"
if ((DEEP)); then
    step "pmm-verify --deep --db (synthetic: findings expected)" "$DIR/deep.out" \
        bash -c 'set -o pipefail; "$0" "$@" | tail -n 1; s=${PIPESTATUS[0]}; [ "$s" -le 1 ]' \
        "$BIN/pmm-verify" --deep --quiet --db "$DB"
    DEEP_NOTE="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["derived_mismatches"])' <"$DIR/deep.out") derived mismatches (synthetic contents)"
fi

echo "# pmm at $N events ($(nproc) cores, $(git -C "$REPO" rev-parse --short HEAD))"
echo
echo "Ledger: $(du -h "$DB" | cut -f1); JSON Lines export: $EXPORT_SIZE; deep verify: $DEEP_NOTE."
echo
echo "| step | wall | peak RSS |"
echo "| --- | ---: | ---: |"
printf '%s\n' "${ROWS[@]}"
