#!/usr/bin/env sh
# ci-verify.sh -- a CI step: verify an exported ledger against the anchors its previous run saved.
#
# Usage: scripts/ci-verify.sh EXPORT [ANCHORS]
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
# In a GitHub Actions job, for example (the anchors file travels as an artifact or in git):
#   - run: pmm-export --db agent.db -o ledger.json.gz
#   - run: scripts/ci-verify.sh ledger.json.gz anchors/anchors.txt
#   - run: git add anchors/anchors.txt && git commit -m "ledger anchors" && git push
set -eu

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    [ $# -ge 1 ] && exit 0
    exit 2
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
PMM_VERIFY=${PMM_VERIFY:-pmm-verify}
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
