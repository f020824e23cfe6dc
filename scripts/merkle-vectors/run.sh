#!/bin/sh
# Regenerates tests/fixtures/merkle/ with Go's golang.org/x/mod/sumdb/tlog and sumdb/note:
#   go-vectors.json  roots, inclusion and consistency proofs and a signed note made by Go
#                    (pmm must produce and accept the same: tests/it/merkle.rs)
#   pmm-outputs.json what the real pmm programs print for a small ledger
#   go-check.txt     Go's verdict on pmm-outputs.json (tlog.CheckRecord, tlog.CheckTree,
#                    note.Open)
# Not run by CI. Needs Go and the pmm programs on PATH (cargo build; PATH=target/debug:$PATH).
# Without the module proxy, point GOFLAGS=-modfile=... at a go.mod with a replace of
# golang.org/x/mod to a local checkout (any version with sumdb/tlog and sumdb/note).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../../tests/fixtures/merkle"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$here"
go run . gen > "$out/go-vectors.json"

export PMM_DB="$tmp/l.db" PMM_NOW=2025-11-01T00:00:00Z
i=0
while [ $i -lt 1000 ]; do
    printf '{"kind":"user_message","content":"message %d"}\n' $i
    i=$((i + 1))
done | pmm-append --batch > /dev/null
vkey=$(pmm-export --keygen pmm.example/vectors --key "$tmp/k.key")
pmm-export --checkpoint --key "$tmp/k.key" > "$tmp/cp.txt"
{
    pmm-verify --root
    pmm-verify --root --size 1
    pmm-verify --root --size 777
    for id in 1 2 500 777 1000; do pmm-verify --prove $id; done
    for id in 1 300 777; do pmm-verify --prove $id --size 777; done
    pmm-verify --consistency 1 1000
    pmm-verify --consistency 512 1000
    pmm-verify --consistency 777 1000
    pmm-verify --consistency 3 7
} > "$tmp/records.jsonl"
python3 - "$vkey" "$tmp/cp.txt" "$tmp/records.jsonl" > "$out/pmm-outputs.json" <<'PY'
import json, sys
vkey, cp, recs = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
records = [json.loads(l) for l in open(recs)]
print(json.dumps({"verifier_key": vkey, "signed_note": cp, "records": records}, indent=1))
PY
go run . check < "$out/pmm-outputs.json" > "$out/go-check.txt"
cat "$out/go-check.txt"
