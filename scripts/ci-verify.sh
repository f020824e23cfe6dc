#!/usr/bin/env sh
# ci-verify.sh -- a CI step: verify an exported ledger against the anchors its previous run saved.
#
# Usage: scripts/ci-verify.sh [--report HTML] EXPORT [ANCHORS]
#        scripts/ci-verify.sh [--report HTML] --signed KEYFILE VKEY LEDGER [CHECKPOINT]
#
#   EXPORT   an export of the ledger (pmm-export -o ledger.json.gz; JSON, JSONL or gzip of either)
#   ANCHORS  the file the previous run saved (default: EXPORT's folder/anchors.txt). Missing on
#            the first run: the export is verified without anchors and the file is created.
#
# A run passes when the chain verifies (every hash recomputed, every link and id checked) AND
# the events the previous run saw are still there with the same hash (the saved summary's
# last_id:last_hash is an anchor). So history cannot be rewritten between two runs, even by
# someone who recomputes every hash after an edit. On success the new summary replaces the
# anchors; keep that file as a CI artifact or commit it. Exit 0 pass, 1 findings (the anchors
# are left as they were), 2 an unreadable export.
#
# With --signed, the last signed checkpoint is kept instead of an anchors file, for a LEDGER
# (the SQLite file: checkpoints are about its Merkle tree): the chain verifies, the ledger is
# consistent with CHECKPOINT (default: LEDGER's folder/checkpoint.txt; missing on the first
# run) as checked with the verifier key VKEY, and then a new checkpoint signed with KEYFILE
# (pmm-export --keygen wrote both) replaces it. A checkpoint someone else holds pins history
# the same way, with O(log n) data: see docs/verification.md.
#
# --report HTML also writes, after a passing run, the self-verifying HTML report of the ledger
# (pmm-export --format html, docs/report.md) to HTML: with --signed, with the checkpoint just
# signed embedded; otherwise of the export, imported into a temporary ledger first. Keep it as
# the job's artifact: whoever opens it sees the mind and the page checks every event again.
#
# In a GitHub Actions job, for example (the anchors file travels as an artifact or in git):
#   - run: pmm-export --db agent.db -o ledger.json.gz
#   - run: scripts/ci-verify.sh --report mind.html ledger.json.gz anchors/anchors.txt
#   - uses: actions/upload-artifact@v4
#     with: { name: mind, path: mind.html }
#   - run: git add anchors/anchors.txt && git commit -m "ledger anchors" && git push
set -eu

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -ge 1 ] && exit 0
    exit 2
fi
PMM_VERIFY=${PMM_VERIFY:-pmm-verify}
PMM_EXPORT=${PMM_EXPORT:-pmm-export}
PMM_APPEND=${PMM_APPEND:-pmm-append}
REPORT=
if [ "$1" = "--report" ]; then
    if [ $# -lt 3 ]; then
        echo "ci-verify: --report needs a file and then the usual arguments" >&2
        exit 2
    fi
    REPORT=$2
    shift 2
fi
if [ "$1" = "--signed" ]; then
    if [ $# -lt 4 ] || [ $# -gt 5 ]; then
        echo "ci-verify: usage: scripts/ci-verify.sh --signed KEYFILE VKEY LEDGER [CHECKPOINT]" >&2
        exit 2
    fi
    KEYFILE=$2 VKEY=$3 LEDGER=$4
    CHECKPOINT=${5:-$(dirname -- "$LEDGER")/checkpoint.txt}
    OUT=$(mktemp)
    trap 'rm -f -- "$OUT" "$CHECKPOINT.new"' EXIT
    status=0
    "$PMM_VERIFY" --quiet --db "$LEDGER" >"$OUT" || status=$?
    if [ "$status" -eq 0 ] && [ -s "$CHECKPOINT" ]; then
        "$PMM_VERIFY" --db "$LEDGER" --checkpoint "$CHECKPOINT" --key "$VKEY" >"$OUT" || status=$?
    elif [ "$status" -eq 0 ]; then
        echo "ci-verify: no checkpoint at $CHECKPOINT yet: verifying the chain only (first run)" >&2
    fi
    if [ "$status" -ne 0 ]; then
        echo "ci-verify: FAILED (exit $status):" >&2
        grep -e '"type":"finding"' -e '"ok":false' "$OUT" >&2 || true
        exit "$status"
    fi
    mkdir -p -- "$(dirname -- "$CHECKPOINT")"
    "$PMM_EXPORT" --db "$LEDGER" --checkpoint --key "$KEYFILE" >"$CHECKPOINT.new"
    mv -- "$CHECKPOINT.new" "$CHECKPOINT"
    echo "ci-verify: ok; checkpoint saved to $CHECKPOINT:" >&2
    cat -- "$CHECKPOINT" >&2
    if [ -n "$REPORT" ]; then
        "$PMM_EXPORT" --db "$LEDGER" --quiet --format html -o "$REPORT" \
            --embed-checkpoint "$CHECKPOINT" --key "$VKEY"
        echo "ci-verify: report written to $REPORT" >&2
    fi
    exit 0
fi
for a in "$@"; do
    case $a in
    -?*) echo "ci-verify: unknown option '$a' (usage: scripts/ci-verify.sh EXPORT [ANCHORS])" >&2; exit 2 ;;
    esac
done
if [ $# -gt 2 ]; then
    echo "ci-verify: too many arguments (usage: scripts/ci-verify.sh EXPORT [ANCHORS])" >&2
    exit 2
fi
EXPORT=$1
ANCHORS=${2:-$(dirname -- "$EXPORT")/anchors.txt}
OUT=$(mktemp)
trap 'rm -f -- "$OUT"' EXIT

status=0
if [ -s "$ANCHORS" ]; then
    "$PMM_VERIFY" --quiet "$EXPORT" --anchors-from "$ANCHORS" >"$OUT" || status=$?
else
    echo "ci-verify: no anchors at $ANCHORS yet: verifying without (first run)" >&2
    "$PMM_VERIFY" --quiet "$EXPORT" >"$OUT" || status=$?
fi
if [ "$status" -ne 0 ]; then
    echo "ci-verify: FAILED (exit $status):" >&2
    grep '"type":"finding"' "$OUT" >&2 || true
    exit "$status"
fi
mkdir -p -- "$(dirname -- "$ANCHORS")"
tail -n 1 "$OUT" >"$ANCHORS.new"
mv -- "$ANCHORS.new" "$ANCHORS"
echo "ci-verify: ok; anchors saved to $ANCHORS:" >&2
cat -- "$ANCHORS" >&2
if [ -n "$REPORT" ]; then
    TMPDB=$(mktemp -d)
    trap 'rm -f -- "$OUT"; rm -rf -- "$TMPDB"' EXIT
    "$PMM_APPEND" --db "$TMPDB/ledger.db" --quiet --import "$EXPORT" --no-index >/dev/null
    "$PMM_EXPORT" --db "$TMPDB/ledger.db" --quiet --format html -o "$REPORT"
    echo "ci-verify: report written to $REPORT" >&2
fi
