#!/usr/bin/env bash
# import-scale.sh -- does pmm-append --import grow linearly? 10^6 then 10^7 events, back to back.
#
# Usage:
#   scripts/import-scale.sh [--small N] [--large N] [--dir DIR] [--no-build] [--existing]
#
#   --small N    the smaller size (default 1000000)
#   --large N    the larger size (default 10000000); the target is large/small x 1.1 (11x)
#   --dir DIR    work directory (default ${TMPDIR:-/tmp}/pmm-import-scale); needs about 1.6 KB
#                of disk per event of the larger size (the generated file and the ledger),
#                and 0.9 KB more with --existing (its WAL)
#   --no-build   use target/release as it is (or $PMM_BIN_DIR)
#   --existing   also import into an existing empty ledger (the WAL path) at each size
#
# Each size's events come from scripts/gen-ledger.py --chain (not timed) and are imported
# into a path that holds no ledger (built beside it without a journal, then linked into
# place), timed with GNU time: wall, user, system, peak RSS. Prints one markdown table, the
# ratio beside its target, and the load average before each import (a shared machine).

set -Eeuo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SMALL=1000000
LARGE=10000000
DIR=${TMPDIR:-/tmp}/pmm-import-scale
BUILD=1
EXISTING=0
while (($#)); do
    case $1 in
    --small) SMALL=$2; shift 2 ;;
    --large) LARGE=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --existing) EXISTING=1; shift ;;
    -h | --help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "import-scale.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if ((BUILD)); then cargo build --release --quiet --manifest-path "$REPO/Cargo.toml"; fi
BIN=${PMM_BIN_DIR:-$REPO/target/release}
mkdir -p "$DIR"
trap 'rm -f -- "$DIR"/gen.jsonl "$DIR"/ledger.db* "$DIR"/.ledger.db.import-* "$DIR"/.time' EXIT
DB=$DIR/ledger.db

ROWS=()
declare -A WALL
timed() { # timed N MODE
    local n=$1 mode=$2 load t0 t1 secs
    rm -f -- "$DB" "$DB-wal" "$DB-shm"
    if [[ $mode == existing ]]; then "$BIN/pmm-append" --db "$DB" --batch </dev/null; fi
    sync
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "import-scale: $n events, $mode ledger" >&2
    t0=$EPOCHREALTIME
    /usr/bin/time -f '%U %S %M' -o "$DIR/.time" \
        "$BIN/pmm-append" --db "$DB" --import "$DIR/gen.jsonl" --quiet >/dev/null
    t1=$EPOCHREALTIME
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
    WALL[$n.$mode]=$secs
    read -r user sys rss <"$DIR/.time"
    ROWS+=("| $n | $mode | $secs s | $user s | $sys s | $(awk -v r="$rss" 'BEGIN{printf "%.1f", r/1024}') MiB | $(du -m "$DB" | cut -f1) MiB | $load |")
}

MODES=(new)
if ((EXISTING)); then MODES+=(existing); fi
for n in "$SMALL" "$LARGE"; do
    echo "import-scale: generating $n events" >&2
    python3 "$REPO/scripts/gen-ledger.py" "$n" --chain >"$DIR/gen.jsonl"
    for mode in "${MODES[@]}"; do timed "$n" "$mode"; done
done

echo "| events | ledger | wall | user | system | peak RSS | ledger size | load before |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"
printf '%s\n' "${ROWS[@]}"
echo
for mode in "${MODES[@]}"; do
    awk -v a="${WALL[$SMALL.$mode]}" -v b="${WALL[$LARGE.$mode]}" -v s="$SMALL" -v l="$LARGE" -v m="$mode" \
        'BEGIN{r=b/a; t=1.1*l/s; printf "%s ledger: %d events take %.1fx the time of %d (target <= %.0fx): %s\n", m, l, r, s, t, (r<=t)?"ok":"over"}'
done
