#!/usr/bin/env bash
# bench.sh -- the pmm performance benchmark (SPEC §6): every figure beside its floor, in one run.
#
# Usage:
#   scripts/bench.sh [--sizes "10000 100000 1000000"] [--quick] [--runs N] [--keep]
#                    [--fixture PATH] [--no-build] [--locomo FILE] [--embed-model DIR]
#
#   --sizes LIST   ledger sizes in events (default "10000 100000 1000000")
#   --quick        the same as --sizes "10000 100000" (a check that takes about a minute)
#   --runs N       timed runs per measurement (default: best of 3 at sizes <= 100000, 1 above)
#   --keep         keep the work directory (ledgers, exports) and print its path
#   --fixture P    the reference ledger whose events are cycled (default: $PMM_BENCH_FIXTURE, else
#                  ../shared/fixtures/reference-ledgers/GPT-5.1-ledger.json beside the repo); when it is
#                  absent, scripts/gen-ledger.py falls back to its built-in event shapes
#   --embed-model DIR  also run scripts/vector-bench at the largest size with this
#                  all-MiniLM-L6-v2 directory (semantic recall: vector search over as many stored
#                  vectors, a turn with the in-process model, the vectors' cost in ledger size;
#                  needs numpy) and print its figures after the table
#   --no-build     do not run `cargo build --release` first (binaries: $PMM_BIN_DIR, else
#                  target/release)
#
# What it does, per size N:
#   1. Builds a ledger of N events once: scripts/gen-ledger.py --chain writes hash-chained JSONL
#      (the fixture's events cycled, each content made unique) and `pmm-append --import` loads it.
#      Import rather than `--batch`: both take about 45 s at 10^6 on a 2-core box (17 s generate
#      + 28 s import, against 47 s for gen | pmm-append --batch), but import gives the same
#      ledger, byte for byte, on every run and machine (ids, ts and hashes are pinned), does not
#      depend on the write policy, and every hash the generator computed is re-verified by pmm.
#      Then `pmm-export --format jsonl -o` writes the export used below.
#   2. Measures, each against a floor measured in the same run (floor and pmm runs alternate so
#      that noise on a shared machine hits both):
#        - pmm-verify --quiet EXPORT          vs sha256sum EXPORT                ratio <= 2x
#          and pmm-verify's peak RSS                                             <= 64 MiB
#        - pmm-verify --deep LEDGER           vs pmm-verify LEDGER               ratio <= 3x
#        - pmm-append --import EXPORT (fresh) vs sqlite3 CLI `.import` of the identical rows
#          (CSV dumped beforehand, untimed) into the ledger's own `events` DDL and indices
#          (`.schema events`), WAL like the ledger, in one BEGIN ... COMMIT     ratio <= 2x
#   3. Across sizes: one `pmm-append --kind user_message --content x` (process start included)
#      on a copy of the largest ledger vs on a copy of the smallest, best of 5   ratio <= 1.5x
#      (each copy grows by one event per run).
#   2c. pmm-replay --state on a write-protected copy (no checkpoint can be saved: a full
#       rebuild of every projection each run) vs pmm-replay > /dev/null (reading every event)
#       ratio <= 3x, peak RSS <= 256 MiB; and pmm-graph stats against the same floor  <= 3x.
#   3b. pmm-replay --state after 100 new events on a checkpointed copy of the largest ledger
#       vs the same on the smallest, best of 5                                       ratio <= 1.5x
#   3c. one `pmm-turn --adapter dummy` (process start included) on the largest ledger vs on a
#       10^3 one, after a warm-up turn on each, best of 5    ratio <= 1.5x, and <= 50 ms
#   3d. one `pmm-tick` (process start included, each run the next slot, the whole adaptive
#       loop on: outcome, stability, coherence, learning) on the largest ledger vs on a 10^3
#       one, after a warm-up tick on each, best of 5                            ratio <= 1.5x
#   3d'. the same with the same decision at both sizes: index_threshold out of reach on both,
#       the reflection and summary due taken untimed, then idle ticks, best of 5      ratio <= 1.5x
#       (3d's ticks decide idle on the 10^3 ledger and act on the largest)
#   3e. one `index` tick (the indexer's bounded batch; process start included) on the largest
#       ledger, best of 5                                                        <= 50 ms
#   3f. pmm-verify --deep vs pmm-verify (best of 3) on a ledger written by 1,000
#       `pmm-turn --adapter dummy` turns and 10 ticks (about 8,500 events, consistent: --deep
#       rebuilds every prompt and finds nothing)                                 ratio <= 3x
#   5. Recall, at the largest size: `pmm-append --import` of the export with the full-text index
#      vs the same import with --no-index (fresh ledgers, alternating)             ratio <= 1.5x,
#      and the two ledgers' sizes (after a WAL checkpoint)                          ratio <= 1.5x;
#      then one LoCoMo conversation (--locomo FILE; default the first of
#      ../shared/fixtures/locomo-dev/, skipped with a note when absent) appended with its dates
#      to a copy of the largest ledger, a hybrid retrieval config, a warm-up turn, and for each
#      of its first 50 questions one `pmm-turn --adapter dummy` (median <= 50 ms) and one
#      `pmm-recall` (p95 <= 50 ms), process start included.
#   4. At the largest size only, no target: `pmm-export --format json -o FILE` and
#      `pmm-metrics --quiet`, with `cat EXPORT > FILE` as the floor for scale.
#
# Timing: every command is run once untimed first (to warm the page cache; caches cannot be
# dropped here). Peak RSS comes from GNU `/usr/bin/time -f '%e %M'`; wall time is taken with
# bash's $EPOCHREALTIME around that same /usr/bin/time run, because %e has a 10 ms resolution,
# too coarse for a ~30 ms append (it adds /usr/bin/time's own ~1 ms start to both sides).
# Times are the best of the runs, RSS the largest.
#
# Output: machine, commit and sizes at the top, ONE markdown table on stdout (progress goes to
# stderr), then notes and the total bench time. Exit 0 even when a target is missed (the verdict
# says OVER); non-zero when any command fails. The work directory lives under ${TMPDIR:-/tmp}.
# Needs: bash >= 5, python3, sqlite3, sha256sum, GNU time at /usr/bin/time, cargo (unless
# --no-build).

set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SIZES="10000 100000 1000000"
RUNS_OVERRIDE=""
KEEP=0
BUILD=1
FIXTURE="${PMM_BENCH_FIXTURE:-$REPO/../shared/fixtures/reference-ledgers/GPT-5.1-ledger.json}"
LOCOMO="$REPO/../shared/fixtures/locomo-dev/26.json"
EMBED_MODEL=""
BIN="${PMM_BIN_DIR:-$REPO/target/release}"
APPEND_RUNS=5

usage() { sed -n '2,/^$/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "bench.sh: error: $*" >&2; exit 2; }

while (($#)); do
    case "$1" in
        --sizes) (($# >= 2)) || die "--sizes needs a value"; SIZES=$2; shift 2 ;;
        --sizes=*) SIZES=${1#*=}; shift ;;
        --quick) SIZES="10000 100000"; shift ;;
        --runs) (($# >= 2)) || die "--runs needs a value"; RUNS_OVERRIDE=$2; shift 2 ;;
        --runs=*) RUNS_OVERRIDE=${1#*=}; shift ;;
        --keep) KEEP=1; shift ;;
        --fixture) (($# >= 2)) || die "--fixture needs a value"; FIXTURE=$2; shift 2 ;;
        --fixture=*) FIXTURE=${1#*=}; shift ;;
        --no-build) BUILD=0; shift ;;
        --locomo) (($# >= 2)) || die "--locomo needs a value"; LOCOMO=$2; shift 2 ;;
        --locomo=*) LOCOMO=${1#*=}; shift ;;
        --embed-model) (($# >= 2)) || die "--embed-model needs a value"; EMBED_MODEL=$2; shift 2 ;;
        --embed-model=*) EMBED_MODEL=${1#*=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

read -r -a SIZE_LIST <<<"$SIZES"
((${#SIZE_LIST[@]} >= 1)) || die "--sizes is empty"
for s in "${SIZE_LIST[@]}"; do
    [[ $s =~ ^[1-9][0-9]*$ ]] || die "bad size: $s"
done
# Ascending, unique.
mapfile -t SIZE_LIST < <(printf '%s\n' "${SIZE_LIST[@]}" | sort -n -u)
if [[ -n $RUNS_OVERRIDE ]]; then
    [[ $RUNS_OVERRIDE =~ ^[1-9][0-9]*$ ]] || die "bad --runs: $RUNS_OVERRIDE"
fi
[[ -x /usr/bin/time ]] || die "GNU time is needed at /usr/bin/time"
for tool in python3 sqlite3 sha256sum awk; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done
[[ -n ${EPOCHREALTIME:-} ]] || die "bash >= 5 is needed (EPOCHREALTIME)"

START=$EPOCHREALTIME
log() { printf '[%6.1fs] %s\n' "$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN{print b-a}')" "$*" >&2; }

if ((BUILD)); then
    log "cargo build --release"
    (cd "$REPO" && cargo build --release --quiet)
fi
for b in pmm-append pmm-verify pmm-export pmm-metrics pmm-replay pmm-graph pmm-turn pmm-recall; do
    [[ -x $BIN/$b ]] || die "$BIN/$b is missing (build with cargo build --release)"
done
GEN="$REPO/scripts/gen-ledger.py"

W=$(mktemp -d "${TMPDIR:-/tmp}/pmm-bench.XXXXXX")
ROWS=()
DONE=0
cleanup() {
    local rc=$?
    if ((rc != 0 && DONE == 0)) && ((${#ROWS[@]})); then
        echo "bench.sh: stopped early; the rows measured so far:" >&2
        print_table >&2
    fi
    if ((KEEP)); then
        echo "bench.sh: work directory kept: $W" >&2
    else
        rm -rf -- "$W"
    fi
}
trap cleanup EXIT
trap 'echo "bench.sh: error: command failed (status $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------------------------------------
# Measuring

# timed IN OUT CMD...: one run of CMD with stdin IN and stdout OUT; sets T (seconds) and RSS (KiB).
timed() {
    local in=$1 out=$2 t0 t1
    shift 2
    t0=$EPOCHREALTIME
    /usr/bin/time -f '%e %M' -o "$W/time.out" "$@" <"$in" >"$out"
    t1=$EPOCHREALTIME
    T=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.4f", b-a}')
    RSS=$(awk 'END{print $2}' "$W/time.out")
}

# A "side" of a comparison: SETUP function (run before every run, untimed), IN, OUT, CMD...
# bench_pair RUNS SETUP_A IN_A OUT_A CMD_A... -- SETUP_B IN_B OUT_B CMD_B...
# Runs A and B once untimed, then RUNS times alternating A, B. Sets A_T A_RSS B_T B_RSS
# (best time, largest RSS).
bench_pair() {
    local runs=$1
    shift
    local -a a=() b=()
    while [[ $1 != -- ]]; do a+=("$1"); shift; done
    shift
    b=("$@")
    local i
    "${a[0]}"; "${a[@]:3}" <"${a[1]}" >"${a[2]}"   # warm-up, untimed
    "${b[0]}"; "${b[@]:3}" <"${b[1]}" >"${b[2]}"
    A_T=""; A_RSS=0; B_T=""; B_RSS=0
    for ((i = 0; i < runs; i++)); do
        "${a[0]}"; timed "${a[1]}" "${a[2]}" "${a[@]:3}"
        A_T=$(best "$A_T" "$T"); if ((RSS > A_RSS)); then A_RSS=$RSS; fi
        "${b[0]}"; timed "${b[1]}" "${b[2]}" "${b[@]:3}"
        B_T=$(best "$B_T" "$T"); if ((RSS > B_RSS)); then B_RSS=$RSS; fi
    done
    return 0
}

best() { if [[ -z $1 ]]; then echo "$2"; else awk -v a="$1" -v b="$2" 'BEGIN{print (b < a) ? b : a}'; fi; }
nop() { :; }
runs_for() { if [[ -n $RUNS_OVERRIDE ]]; then echo "$RUNS_OVERRIDE"; elif (($1 <= 100000)); then echo 3; else echo 1; fi; }
mib() { awk -v k="$1" 'BEGIN{printf "%.1f", k/1024}'; }
secs() { awk -v t="$1" 'BEGIN{printf (t < 1 ? "%.3f" : (t < 100 ? "%.2f" : "%.1f")), t}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b > 0) ? a/b : 0}'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN{exit !(a <= b)}'; }
human_size() {
    local n=$1 k=0 m=$1
    while ((m % 10 == 0 && m > 1)); do m=$((m / 10)); k=$((k + 1)); done
    if ((m == 1 && k > 0)); then echo "10^$k"; else echo "$n"; fi
}
filesize() { awk -v b="$(stat -c %s "$1")" 'BEGIN{printf "%.1f MiB", b/1048576}'; }

# row SIZE MEASUREMENT PMM FLOOR RATIO TARGET VERDICT
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 |"); }
print_table() {
    echo "| size | measurement | pmm (time s / peak RSS MiB) | floor (time s) | ratio | target | verdict |"
    echo "| ---: | --- | ---: | ---: | ---: | ---: | :---: |"
    printf '%s\n' "${ROWS[@]}"
}
verdict() { if le "$1" "$2"; then echo ok; else echo OVER; fi; }

# ---------------------------------------------------------------------------------------------
# Setup functions (run before each run, untimed)

IMPORT_DB="$W/import.db"
FLOOR_DB="$W/floor.db"
fresh_import_db() { rm -f -- "$IMPORT_DB" "$IMPORT_DB-wal" "$IMPORT_DB-shm" "$IMPORT_DB-journal"; }
fresh_floor_db() {
    rm -f -- "$FLOOR_DB" "$FLOOR_DB-wal" "$FLOOR_DB-shm" "$FLOOR_DB-journal"
    sqlite3 -bail "$FLOOR_DB" <"$W/schema.sql" >/dev/null
}
JSON_OUT="$W/export.json"
CAT_OUT="$W/cat.out"
rm_json_out() { rm -f -- "$JSON_OUT"; }
rm_cat_out() { rm -f -- "$CAT_OUT"; }

# ---------------------------------------------------------------------------------------------
# Header

COMMIT=$(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# Uncommitted changes to tracked files, build output (target/) left aside.
if [[ $COMMIT != unknown && -n $(git -C "$REPO" status --porcelain --untracked-files=no -- . ':(exclude)target' 2>/dev/null) ]]; then
    COMMIT="$COMMIT + uncommitted changes"
fi
BRANCH=$(git -C "$REPO" rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
CPU=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
if [[ -f $FIXTURE ]]; then SOURCE="$FIXTURE (cycled)"; else SOURCE="built-in shapes (no fixture at $FIXTURE)"; fi

{
    echo "# pmm benchmark"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "- commit: $COMMIT ($BRANCH)"
    echo "- machine: nproc=$(nproc), CPU: ${CPU:-unknown}, $(uname -sr)"
    echo "- sqlite3 CLI $(sqlite3 --version | awk '{print $1}'), $(python3 --version 2>&1)"
    echo "- sizes: ${SIZE_LIST[*]}; events from $SOURCE"
    echo
} >&2   # repeated on stdout with the table

NOTES=()
SMALL=${SIZE_LIST[0]}
LARGE=${SIZE_LIST[${#SIZE_LIST[@]} - 1]}

# ---------------------------------------------------------------------------------------------
# Per size

for N in "${SIZE_LIST[@]}"; do
    H=$(human_size "$N")
    RUNS=$(runs_for "$N")
    DB="$W/ledger-$N.db"
    EXPORT="$W/export-$N.jsonl"

    # 1. Build.
    log "$H: generating $N hash-chained events"
    t0=$EPOCHREALTIME
    python3 "$GEN" "$N" --chain --fixture "$FIXTURE" >"$W/gen.jsonl" 2>/dev/null
    t1=$EPOCHREALTIME
    log "$H: pmm-append --import (build)"
    "$BIN/pmm-append" --db "$DB" --import "$W/gen.jsonl" --quiet >/dev/null
    t2=$EPOCHREALTIME
    rm -f -- "$W/gen.jsonl"
    sqlite3 "$DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    log "$H: pmm-export --format jsonl"
    "$BIN/pmm-export" --db "$DB" --format jsonl -o "$EXPORT" --quiet
    t3=$EPOCHREALTIME
    NOTES+=("$H build: generate $(secs "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')") s, import $(secs "$(awk -v a="$t1" -v b="$t2" 'BEGIN{print b-a}')") s, export jsonl $(secs "$(awk -v a="$t2" -v b="$t3" 'BEGIN{print b-a}')") s; ledger $(filesize "$DB"), export $(filesize "$EXPORT")")

    # 2a. Verify vs sha256sum.
    log "$H: pmm-verify vs sha256sum ($RUNS run(s))"
    bench_pair "$RUNS" \
        nop /dev/null /dev/null sha256sum "$EXPORT" -- \
        nop /dev/null /dev/null "$BIN/pmm-verify" --quiet "$EXPORT"
    r=$(ratio "$B_T" "$A_T")
    row "$H" "\`pmm-verify --quiet\` export.jsonl vs \`sha256sum\`" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 2×" "$(verdict "$r" 2)"
    row "$H" "\`pmm-verify\` peak RSS" "$(mib "$B_RSS") MiB" "—" "—" "≤ 64 MiB" \
        "$(verdict "$(mib "$B_RSS")" 64)"

    # 2a'. Deep verification vs plain verification of the same ledger. Exit 1 is allowed on
    # both sides (through the same wrapper): the generated contents no longer match what some
    # derived events (embeddings, digests) were computed from, so --deep has findings to print.
    printf '#!/bin/sh\n"%s" "$@"; [ $? -le 1 ]\n' "$BIN/pmm-verify" >"$W/verify.sh"
    chmod +x "$W/verify.sh"
    log "$H: pmm-verify --deep vs pmm-verify ($RUNS run(s))"
    bench_pair "$RUNS" \
        nop /dev/null /dev/null "$W/verify.sh" --quiet --db "$DB" -- \
        nop /dev/null /dev/null "$W/verify.sh" --quiet --deep --db "$DB"
    r=$(ratio "$B_T" "$A_T")
    row "$H" "\`pmm-verify --deep\` vs \`pmm-verify\` of the ledger" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 3×" "$(verdict "$r" 3)"

    # 2b. Import vs the sqlite3 CLI inserting the identical rows.
    log "$H: preparing the sqlite3 floor (schema, CSV dump; untimed)"
    {
        echo "PRAGMA journal_mode=WAL;"
        sqlite3 "$DB" ".schema events"
    } >"$W/schema.sql"
    sqlite3 -bail -csv "$DB" "SELECT id, ts, kind, content, meta, prev_hash, hash FROM events ORDER BY id;" >"$W/rows.csv"
    NULL_FIX=$(sqlite3 "$DB" "SELECT group_concat(id) FROM events WHERE prev_hash IS NULL;")
    {
        echo "BEGIN;"
        echo ".import --csv '$W/rows.csv' events"
        # CSV cannot say NULL: give the genesis event(s) their NULL prev_hash back (same tx).
        if [[ -n $NULL_FIX ]]; then echo "UPDATE events SET prev_hash = NULL WHERE id IN ($NULL_FIX);"; fi
        echo "COMMIT;"
    } >"$W/load.sql"
    log "$H: pmm-append --import vs sqlite3 .import ($RUNS run(s))"
    bench_pair "$RUNS" \
        fresh_floor_db "$W/load.sql" /dev/null sqlite3 -bail "$FLOOR_DB" -- \
        fresh_import_db /dev/null /dev/null "$BIN/pmm-append" --db "$IMPORT_DB" --import "$EXPORT" --quiet
    # The floor really holds the same rows.
    want=$(sqlite3 "$DB" "SELECT count(*) || ' ' || max(id) || ' ' || (SELECT hash FROM events ORDER BY id DESC LIMIT 1) || ' ' || sum(prev_hash IS NULL) FROM events;")
    got=$(sqlite3 "$FLOOR_DB" "SELECT count(*) || ' ' || max(id) || ' ' || (SELECT hash FROM events ORDER BY id DESC LIMIT 1) || ' ' || sum(prev_hash IS NULL) FROM events;")
    [[ $want == "$got" ]] || die "the sqlite3 floor did not load the same rows ($got, want $want)"
    r=$(ratio "$B_T" "$A_T")
    row "$H" "\`pmm-append --import\` export.jsonl (fresh ledger) vs \`sqlite3\` \`.import\` CSV, 1 tx" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 2×" "$(verdict "$r" 2)"
    fresh_import_db
    fresh_floor_db
    rm -f -- "$W/rows.csv" "$FLOOR_DB" "$FLOOR_DB-wal" "$FLOOR_DB-shm"

    # 2c. Full rebuild of every projection vs merely reading every event. The copy is
    # write-protected, so --state can save no checkpoint and every run rebuilds from scratch.
    STATE_DB="$W/state-$N.db"
    cp -- "$DB" "$STATE_DB"
    chmod a-w "$STATE_DB"
    log "$H: pmm-replay --state (full rebuild) vs pmm-replay > /dev/null ($RUNS run(s))"
    bench_pair "$RUNS" \
        nop /dev/null /dev/null "$BIN/pmm-replay" --db "$STATE_DB" -- \
        nop /dev/null /dev/null "$BIN/pmm-replay" --db "$STATE_DB" --state
    r=$(ratio "$B_T" "$A_T")
    row "$H" "\`pmm-replay --state\` full rebuild vs reading every event (\`pmm-replay > /dev/null\`)" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 3×" "$(verdict "$r" 3)"
    row "$H" "\`pmm-replay --state\` peak RSS" "$(mib "$B_RSS") MiB" "—" "—" "≤ 256 MiB" \
        "$(verdict "$(mib "$B_RSS")" 256)"
    if [[ -x $BIN/pmm-graph ]]; then
        log "$H: pmm-graph stats vs pmm-replay > /dev/null ($RUNS run(s))"
        bench_pair "$RUNS" \
            nop /dev/null /dev/null "$BIN/pmm-replay" --db "$STATE_DB" -- \
            nop /dev/null /dev/null "$BIN/pmm-graph" --db "$STATE_DB" stats
        r=$(ratio "$B_T" "$A_T")
        row "$H" "\`pmm-graph stats\` vs reading every event" \
            "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 3×" "$(verdict "$r" 3)"
    fi
    chmod u+w "$STATE_DB"
    rm -f -- "$STATE_DB" "$STATE_DB-wal" "$STATE_DB-shm"

    # Keep the smallest and largest ledgers (single append, export, metrics); drop the rest.
    if [[ $N != "$SMALL" && $N != "$LARGE" ]]; then
        rm -f -- "$DB" "$DB-wal" "$DB-shm" "$EXPORT"
    elif [[ $N != "$LARGE" ]]; then
        rm -f -- "$EXPORT"
    fi
done

# ---------------------------------------------------------------------------------------------
# 3. One append: largest vs smallest ledger.

HS=$(human_size "$SMALL")
HL=$(human_size "$LARGE")
if [[ $SMALL != "$LARGE" ]]; then
    log "one pmm-append: $HL vs $HS ledger (best of $APPEND_RUNS)"
    for N in "$SMALL" "$LARGE"; do
        cp -- "$W/ledger-$N.db" "$W/append-$N.db"
    done
    bench_pair "$APPEND_RUNS" \
        nop /dev/null /dev/null "$BIN/pmm-append" --db "$W/append-$SMALL.db" --kind user_message --content x -- \
        nop /dev/null /dev/null "$BIN/pmm-append" --db "$W/append-$LARGE.db" --kind user_message --content x
    r=$(ratio "$B_T" "$A_T")
    row "$HL vs $HS" "one \`pmm-append --kind user_message --content x\` on a $HL ledger (floor: the same on $HS)" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
    NOTES+=("one append on $HS: $(secs "$A_T") s / $(mib "$A_RSS") MiB (best of $APPEND_RUNS; each copy grows by one event per run)")
    rm -f -- "$W"/append-*.db*
else
    NOTES+=("one append: skipped (needs two sizes)")
fi
# 3b. --state after 100 new events on a checkpointed ledger: largest vs smallest.
if [[ $SMALL != "$LARGE" ]]; then
    log "pmm-replay --state after 100 new events on checkpointed ledgers: $HL vs $HS (best of $APPEND_RUNS)"
    for N in "$SMALL" "$LARGE"; do
        cp -- "$W/ledger-$N.db" "$W/ck-$N.db"
        "$BIN/pmm-replay" --db "$W/ck-$N.db" --state >/dev/null   # folds everything, saves a checkpoint
        python3 "$GEN" 100 --fixture "$FIXTURE" 2>/dev/null | "$BIN/pmm-append" --db "$W/ck-$N.db" --batch >/dev/null
    done
    bench_pair "$APPEND_RUNS" \
        nop /dev/null /dev/null "$BIN/pmm-replay" --db "$W/ck-$SMALL.db" --state -- \
        nop /dev/null /dev/null "$BIN/pmm-replay" --db "$W/ck-$LARGE.db" --state
    r=$(ratio "$B_T" "$A_T")
    row "$HL vs $HS" "\`pmm-replay --state\` after 100 new events on a checkpointed $HL ledger (floor: the same on $HS)" \
        "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
    rm -f -- "$W"/ck-*.db*
fi

# 3c. One turn (dummy model, process start included): the largest ledger vs a 10^3 one.
log "one pmm-turn --adapter dummy: $HL vs 10^3 (best of $APPEND_RUNS)"
python3 "$GEN" 1000 --chain --fixture "$FIXTURE" >"$W/gen-turn.jsonl" 2>/dev/null
"$BIN/pmm-append" --db "$W/turn-small.db" --import "$W/gen-turn.jsonl" --quiet >/dev/null
rm -f -- "$W/gen-turn.jsonl"
cp -- "$W/ledger-$LARGE.db" "$W/turn-large.db"
for T in small large; do
    # The first turn on a ledger without a checkpoint folds it once and saves one.
    "$BIN/pmm-turn" --db "$W/turn-$T.db" --adapter dummy "warm up" >/dev/null
done
bench_pair "$APPEND_RUNS" \
    nop /dev/null /dev/null "$BIN/pmm-turn" --db "$W/turn-small.db" --adapter dummy "How are you?" -- \
    nop /dev/null /dev/null "$BIN/pmm-turn" --db "$W/turn-large.db" --adapter dummy "How are you?"
r=$(ratio "$B_T" "$A_T")
row "$HL vs 10^3" "one \`pmm-turn --adapter dummy\` on a $HL ledger (floor: the same on 10^3)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
ms=$(awk -v t="$B_T" 'BEGIN{printf "%.1f", t*1000}')
row "$HL" "one \`pmm-turn --adapter dummy\` wall time" "${ms} ms" "—" "—" "≤ 50 ms" "$(if le "$B_T" 0.05; then echo ok; else echo OVER; fi)"
rows=$("$BIN/pmm-turn" --db "$W/turn-large.db" --adapter dummy "rows?" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows_read"])')
NOTES+=("one turn on 10^3: $(secs "$A_T") s / $(mib "$A_RSS") MiB; a turn on $HL read $rows event rows (retrieval window, chunk scan, the events since the checkpoint)")
rm -f -- "$W"/turn-*.db*

# 3d. One pmm-tick on the largest ledger vs on a 10^3 one. Each run ticks the next slot, as
# cron does (a slot already ticked is a cheaper no-op), through the same one-line wrapper on
# both sides.
log "one pmm-tick: $HL vs 10^3 (best of $APPEND_RUNS)"
python3 "$GEN" 1000 --chain --fixture "$FIXTURE" >"$W/gen-tick.jsonl" 2>/dev/null
"$BIN/pmm-append" --db "$W/tick-small.db" --import "$W/gen-tick.jsonl" --quiet >/dev/null
rm -f -- "$W/gen-tick.jsonl"
cp -- "$W/ledger-$LARGE.db" "$W/tick-large.db"
for T in small large; do
    # Past every slot of the generated ledger's stimuli (the fixture's are near 200000): a
    # slot before the newest one is looked up among the stimuli, which cron never needs.
    echo 100000000 >"$W/tick-$T.slot"
    cat >"$W/tick-$T.sh" <<SH
#!/bin/sh
n=\$(cat "$W/tick-$T.slot"); echo \$((n + 1)) >"$W/tick-$T.slot"
exec "$BIN/pmm-tick" --db "$W/tick-$T.db" --slot "\$n"
SH
    chmod +x "$W/tick-$T.sh"
    # The first tick on a ledger without a checkpoint folds it once and saves one.
    "$W/tick-$T.sh" >/dev/null
done
bench_pair "$APPEND_RUNS" \
    nop /dev/null /dev/null "$W/tick-small.sh" -- \
    nop /dev/null /dev/null "$W/tick-large.sh"
r=$(ratio "$B_T" "$A_T")
row "$HL vs 10^3" "one \`pmm-tick\` on a $HL ledger (floor: the same on 10^3)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
rows=$("$W/tick-large.sh" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin).get("rows_read"))')
NOTES+=("one tick on 10^3: $(secs "$A_T") s / $(mib "$A_RSS") MiB; a tick on $HL read $rows event rows")

# 3d'. The row above compares different work: consecutive ticks on the generated 10^3 ledger
# mostly decide `idle`, on the largest they index, reflect and summarize (its unindexed
# messages never run out). Here the same decision at both sizes: index_threshold set out of
# reach on both, the reflection and summary that are due taken untimed, then idle ticks,
# alternating. Only runs that decided `idle` on both sides count.
log "one idle pmm-tick: $HL vs 10^3 (best of $APPEND_RUNS)"
decision() { tail -1 "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("decision"))'; }
for T in small large; do
    "$BIN/pmm-tick" --db "$W/tick-$T.db" --set index_threshold=1000000000 >/dev/null
    for _ in $(seq 1 10); do
        "$W/tick-$T.sh" >"$W/tick-$T.out"
        [[ $(decision "$W/tick-$T.out") == idle ]] && break
    done
done
ID_A="" ID_B="" ID_N=0
for _ in $(seq 1 "$APPEND_RUNS"); do
    timed /dev/null "$W/tick-small.out" "$W/tick-small.sh"; ta=$T
    timed /dev/null "$W/tick-large.out" "$W/tick-large.sh"; tb=$T
    if [[ $(decision "$W/tick-small.out") == idle && $(decision "$W/tick-large.out") == idle ]]; then
        ID_A=$(best "$ID_A" "$ta") ID_B=$(best "$ID_B" "$tb") ID_N=$((ID_N + 1))
    fi
done
if ((ID_N > 0)); then
    r=$(ratio "$ID_B" "$ID_A")
    row "$HL vs 10^3" "one idle \`pmm-tick\` on a $HL ledger (floor: the same on 10^3; $ID_N of $APPEND_RUNS runs idle on both)" \
        "$(secs "$ID_B")" "$(secs "$ID_A")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
else
    NOTES+=("no idle tick pair: the ledgers kept acting with index_threshold out of reach")
fi
rm -f -- "$W"/tick-*

# 3e. One `index` tick on the largest ledger: the other rules are set out of the way, and
# index_threshold to 1, so that every tick takes the next batch of unindexed messages. Only
# runs that decided `index` count.
log "one index tick: $HL (best of $APPEND_RUNS)"
cp -- "$W/ledger-$LARGE.db" "$W/tick-index.db"
"$BIN/pmm-tick" --db "$W/tick-index.db" --set index_threshold=1 \
    --set reflection_interval=1000000000 --set summary_interval=1000000000 \
    --set commitment_staleness=1000000000 >/dev/null
echo 100000000 >"$W/tick-index.slot"
cat >"$W/tick-index.sh" <<SH
#!/bin/sh
n=\$(cat "$W/tick-index.slot"); echo \$((n + 1)) >"$W/tick-index.slot"
exec "$BIN/pmm-tick" --db "$W/tick-index.db" --slot "\$n"
SH
chmod +x "$W/tick-index.sh"
# Warm-up: the first fold and checkpoint, and a reflection a turn may still be owed (rule 2).
for _ in 1 2 3; do "$W/tick-index.sh" >/dev/null; done
IX_T="" IX_RSS=0 IX_N=0 IX_ROWS=""
for _ in $(seq 1 "$APPEND_RUNS"); do
    timed /dev/null "$W/tick-index.out" "$W/tick-index.sh"
    d=$(tail -1 "$W/tick-index.out" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r.get("decision"), r.get("rows_read"))')
    if [[ ${d%% *} == index ]]; then
        IX_T=$(best "$IX_T" "$T") IX_RSS=$RSS IX_N=$((IX_N + 1)) IX_ROWS=${d##* }
    fi
done
if ((IX_N > 0)); then
    row "$HL" "one \`index\` tick ($IX_N of $APPEND_RUNS runs indexed; $IX_ROWS rows read)" \
        "$(secs "$IX_T") / $(mib "$IX_RSS")" "—" "—" "≤ 0.050 s" "$(verdict "$IX_T" 0.050)"
else
    NOTES+=("no index tick on $HL: the ledger has no unindexed messages left")
fi
rm -f -- "$W"/tick-index*

# 3f. Deep verification of a consistent ledger written by pmm itself: the generated ledgers'
# derived events no longer match their contents (2a' prints a finding for most of them), so
# this one is made by 1,000 `pmm-turn --adapter dummy` turns (100 per process, a tick after
# each) and --deep finds nothing: the figure is the recomputation, prompts included.
log "pmm-verify --deep vs pmm-verify on a ledger of 1,000 pmm turns (best of 3)"
topics=(tomatoes rain garden compost weather python memory plans linux music)
for ((chunk = 0; chunk < 10; chunk++)); do
    for ((i = 0; i < 100; i++)); do
        k=$((chunk * 100 + i))
        echo "Tell me about ${topics[k % 10]} number $k and what I said before"
    done | "$BIN/pmm-turn" --db "$W/turns.db" --adapter dummy --plain -q >/dev/null
    "$BIN/pmm-tick" --db "$W/turns.db" --slot "$chunk" -q >/dev/null
done
TURNS_N=$("$BIN/pmm-verify" --db "$W/turns.db" --quiet | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
bench_pair 3 \
    nop /dev/null /dev/null "$BIN/pmm-verify" --quiet --db "$W/turns.db" -- \
    nop /dev/null /dev/null "$BIN/pmm-verify" --quiet --deep --db "$W/turns.db"
r=$(ratio "$B_T" "$A_T")
row "$TURNS_N ev" "\`pmm-verify --deep\` vs \`pmm-verify\` of a ledger of 1,000 pmm turns (no findings)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 3×" "$(verdict "$r" 3)"
rm -f -- "$W"/turns.db*

if [[ $SMALL != "$LARGE" ]]; then
    rm -f -- "$W/ledger-$SMALL.db" "$W/ledger-$SMALL.db-wal" "$W/ledger-$SMALL.db-shm"
fi

# ---------------------------------------------------------------------------------------------
# 5. Recall at the largest size: the index's cost on import and size; turns and recall on a
#    ledger that holds a real conversation.

RUNS=$(runs_for "$LARGE")
EXPORT="$W/export-$LARGE.jsonl"
NOIDX_DB="$W/noindex.db"
fresh_noidx_db() { rm -f -- "$NOIDX_DB" "$NOIDX_DB-wal" "$NOIDX_DB-shm"; }
log "$HL: pmm-append --import with the index vs --no-index ($RUNS run(s))"
bench_pair "$RUNS" \
    fresh_noidx_db /dev/null /dev/null "$BIN/pmm-append" --db "$NOIDX_DB" --import "$EXPORT" --no-index --quiet -- \
    fresh_import_db /dev/null /dev/null "$BIN/pmm-append" --db "$IMPORT_DB" --import "$EXPORT" --quiet
r=$(ratio "$B_T" "$A_T")
row "$HL" "\`pmm-append --import\` with the full-text index (floor: the same with \`--no-index\`)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
sqlite3 "$IMPORT_DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
sqlite3 "$NOIDX_DB" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
with=$(stat -c %s "$IMPORT_DB")
without=$(stat -c %s "$NOIDX_DB")
r=$(ratio "$with" "$without")
row "$HL" "ledger size with the index (floor: without)" "$(filesize "$IMPORT_DB")" "$(filesize "$NOIDX_DB")" "${r}×" "≤ 1.5×" "$(verdict "$r" 1.5)"
fresh_import_db
fresh_noidx_db

if [[ -f $LOCOMO ]]; then
    RDB="$W/recall.db"
    cp -- "$W/ledger-$LARGE.db" "$RDB"
    head_ts=$(sqlite3 "$RDB" "SELECT ts FROM events ORDER BY id DESC LIMIT 1;")
    "$REPO/scripts/recall-bench" --emit "$LOCOMO" --after "$head_ts" --questions-to "$W/questions.txt" \
        | "$BIN/pmm-append" --db "$RDB" --keep-ts --batch --quiet >/dev/null
    printf '%s\n' '{"kind":"config","content":"{\"budget\":8000,\"dims\":64,\"limit\":7,\"model\":\"hash64\",\"quant\":\"none\",\"strategy\":\"hybrid\",\"type\":\"retrieval\"}","meta":{"source":"operator"}}' \
        | "$BIN/pmm-append" --db "$RDB" >/dev/null
    "$BIN/pmm-turn" --db "$RDB" --adapter dummy "warm up" >/dev/null   # folds once, saves a checkpoint
    log "$HL + a LoCoMo conversation: pmm-turn and pmm-recall on its first 50 questions"
    TURN_MS=()
    RECALL_MS=()
    while IFS= read -r q; do
        timed /dev/null /dev/null "$BIN/pmm-turn" --db "$RDB" --adapter dummy "$q"
        TURN_MS+=("$T")
        timed /dev/null /dev/null "$BIN/pmm-recall" --db "$RDB" "$q"
        RECALL_MS+=("$T")
    done < <(head -50 "$W/questions.txt")
    stats() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; p=a[int(NR*0.95+0.999)]; printf "%.1f %.1f %d", m*1000, p*1000, NR}'; }
    read -r tmed tp95 tn <<<"$(stats "${TURN_MS[@]}")"
    read -r rmed rp95 rn <<<"$(stats "${RECALL_MS[@]}")"
    row "$HL" "one \`pmm-turn --adapter dummy\` (hybrid recall) asking a LoCoMo question, median of $tn (p95 $tp95 ms)" \
        "$tmed ms" "—" "—" "≤ 50 ms" "$(verdict "$tmed" 50)"
    row "$HL" "one \`pmm-recall\` of a LoCoMo question, p95 of $rn (median $rmed ms)" \
        "$rp95 ms" "—" "—" "≤ 50 ms" "$(verdict "$rp95" 50)"
    rm -f -- "$RDB" "$RDB-wal" "$RDB-shm"
else
    NOTES+=("recall turns: skipped (no LoCoMo conversation at $LOCOMO; --locomo FILE)")
fi

# ---------------------------------------------------------------------------------------------
# 4. Export json and metrics at the largest size (no target; cat of the JSONL for scale).

RUNS=$(runs_for "$LARGE")
DB="$W/ledger-$LARGE.db"
EXPORT="$W/export-$LARGE.jsonl"
log "$HL: pmm-export --format json vs cat ($RUNS run(s))"
bench_pair "$RUNS" \
    rm_cat_out "$EXPORT" "$CAT_OUT" cat -- \
    rm_json_out /dev/null /dev/null "$BIN/pmm-export" --db "$DB" --format json -o "$JSON_OUT" --quiet
CAT_T=$A_T
row "$HL" "\`pmm-export --format json -o FILE\` (floor: \`cat export.jsonl > FILE\`)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "$(ratio "$B_T" "$A_T")×" "—" "—"
NOTES+=("$HL json export: $(filesize "$JSON_OUT"), jsonl export: $(filesize "$EXPORT")")
rm_json_out
log "$HL: pmm-metrics vs cat ($RUNS run(s))"
bench_pair "$RUNS" \
    rm_cat_out "$EXPORT" "$CAT_OUT" cat -- \
    nop /dev/null /dev/null "$BIN/pmm-metrics" --db "$DB" --quiet
row "$HL" "\`pmm-metrics --quiet\` (floor: \`cat export.jsonl > FILE\`)" \
    "$(secs "$B_T") / $(mib "$B_RSS")" "$(secs "$A_T")" "$(ratio "$B_T" "$A_T")×" "—" "—"
rm_cat_out

# ---------------------------------------------------------------------------------------------
# Report

TOTAL=$(awk -v a="$START" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')
echo "# pmm benchmark"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "- commit: $COMMIT ($BRANCH)"
echo "- machine: nproc=$(nproc), CPU: ${CPU:-unknown}, $(uname -sr)"
echo "- sqlite3 CLI $(sqlite3 --version | awk '{print $1}'), $(python3 --version 2>&1)"
echo "- sizes: ${SIZE_LIST[*]}; events from $SOURCE"
echo
print_table
echo
echo "Notes:"
if [[ -n $RUNS_OVERRIDE ]]; then
    echo "- times: best of $RUNS_OVERRIDE timed runs after one untimed warm-up run; RSS: the largest"
else
    echo "- times: best of 3 timed runs at sizes ≤ 10^5, ONE timed run above (after one untimed warm-up run each); RSS: the largest"
fi
echo "- wall time from \$EPOCHREALTIME around /usr/bin/time (whose %e has 10 ms resolution); peak RSS from /usr/bin/time %M"
echo "- floor and pmm runs alternate; the machine is shared, so single runs can be noisy"
printf -- '- %s\n' "${NOTES[@]}"
echo "- total bench time: ${TOTAL} s"
if [[ -n $EMBED_MODEL ]]; then
    echo
    echo "## Semantic recall (scripts/vector-bench, ${SIZE_LIST[-1]} events)"
    echo
    python3 "$REPO/scripts/vector-bench" --model "$EMBED_MODEL" --events "${SIZE_LIST[-1]}" \
        --bin "$BIN" --conversation "$LOCOMO"
fi
DONE=1
