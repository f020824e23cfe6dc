#!/usr/bin/env bash
# fuzz.sh -- run the cargo-fuzz targets of fuzz/ one after another (docs/fuzzing.md).
#
# Usage:
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
#   SECONDS   how long each target runs (default 600)
#   TARGET    canon, jsonl, reference_json, marker (default: all four, in that order)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). libFuzzer needs nightly-only rustc
# flags (-Zsanitizer...); on a stable toolchain RUSTC_BOOTSTRAP=1 unlocks them, and this script
# sets it. One fuzzer at a time, one process each (-jobs=1 -workers=1); CARGO_BUILD_JOBS
# defaults to 1. The corpus grows in fuzz/corpus/TARGET (not committed), seeded read-only from
# fuzz/seeds/TARGET, with the dictionary fuzz/dicts/marker.dict (marker) or json.dict (the
# others); each run's libFuzzer output goes to fuzz/logs/TARGET.log and crashes to
# fuzz/artifacts/TARGET/. Prints one summary line per target; exits 1 if any target crashed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

case ${1:-} in
-h | --help) sed -n '2,/^set /{/^set /d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
esac
secs=${1:-600}
if ! [[ $secs =~ ^[1-9][0-9]*$ ]]; then
    echo "fuzz.sh: SECONDS must be a positive number, not '$secs' (see scripts/fuzz.sh --help)" >&2
    exit 2
fi
shift $(($# > 0 ? 1 : 0))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(canon jsonl reference_json marker)
for t in "${targets[@]}"; do
    case $t in
    canon | jsonl | reference_json | marker) ;;
    *) echo "fuzz.sh: unknown target '$t' (canon, jsonl, reference_json, marker)" >&2; exit 2 ;;
    esac
done

export RUSTC_BOOTSTRAP=1
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}
unset RUST_BACKTRACE

cargo fuzz build --sanitizer none || exit 2
mkdir -p fuzz/logs
status=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    rm -f fuzz-0.log
    dict=fuzz/dicts/json.dict
    [ "$t" != marker ] || dict=fuzz/dicts/marker.dict
    start=$(date +%s)
    cargo fuzz run --sanitizer none "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$secs" -jobs=1 -workers=1 -print_final_stats=1 -dict="$dict" \
        >/dev/null 2>&1
    took=$(($(date +%s) - start))
    mv -f fuzz-0.log "fuzz/logs/$t.log"
    log=fuzz/logs/$t.log
    stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1)
    crash=$(grep -c -E '^==[0-9]+== ERROR|panicked at|deadly signal' "$log")
    [ "$crash" -eq 0 ] || status=1
    printf '%-15s %5ss  execs %-10s exec/s %-7s %s  corpus %s files  %s\n' \
        "$t" "$took" "$(stat number_of_executed_units)" "$(stat average_exec_per_sec)" \
        "$cov" "$(find "fuzz/corpus/$t" -type f | wc -l)" \
        "$([ "$crash" -eq 0 ] && echo 'no crash' || echo "CRASH: see $log, fuzz/artifacts/$t/")"
done
exit $status
