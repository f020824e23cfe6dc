#!/usr/bin/env bash
# pg-bench.sh -- a PostgreSQL ledger against a SQLite one and against the database's own floor,
# in one run (issues 35 and 47): appends per second of 1, 4 and 16 concurrent `pmm-append`
# streams, the path users run, beside pgbench with pmm's transaction shape; with --size N the
# programs on an N-event ledger (a turn with hybrid recall on a warm cache, pmm-verify,
# catching up an empty cache).
#
# Usage:
#   scripts/pg-bench.sh [--seconds N] [--release] [--library] [--bins DIR] [--size N] [--keep]
#
#   --seconds N  how long each append measurement runs (default 5)
#   --release    build the --library benchmark and the --size programs optimised (the streams
#                always run release binaries, `cargo build --release --bin pmm-append`, unless --bins)
#   --bins DIR   run the streams (and, with --size, the programs) on the binaries in DIR instead of building them
#   --library    also the library rows: `Writer::append_independent` on `store::replica::Cached`,
#                the path a plain `pmm-append` line takes, one event at a time, without a
#                program's start (before issue 47 they timed a write straight on the server that
#                no program took; it is gone)
#   --size N     also the program figures on an N-event ledger (the issue's: 1000000)
#   --keep       keep the server's directory and print its path
#
# What it does:
#   1. Starts a throwaway PostgreSQL from Debian's binaries (initdb -A trust, pg_ctl; as the
#      postgres user when run as root) on a free loopback port, fsync ON as a real server.
#   2. Floor: pgbench -c W -j W -T N with a script of pmm's transaction shape -- BEGIN; lock the
#      head row FOR UPDATE; insert an event row of the same size (the same columns, UNIQUE(hash),
#      UNIQUE(prev_hash), the kind index); move the head; COMMIT -- for W = 1, 4, 16, each
#      measured right before pmm's streams of the same W, so that the load of the moment hits both.
#   3. pmm: W concurrent `pmm-append --db postgresql://...` processes (scripts/append-streams.py),
#      each reading one event a line on stdin and keeping its host cache in a directory of its
#      own (W hosts), on a fresh database per W; the same W streams on a SQLite file per W.
#      Each stream has two lines in flight: pmm-append commits the lines waiting together (on
#      PostgreSQL in one round trip the server links; on SQLite a transaction each).
#      Counted: events committed (printed) in N seconds after a second's warm-up; every
#      process must exit 0 when its stdin closes.
#   4. Prints one table: writers, SQLite, PostgreSQL, pgbench floor, PostgreSQL / floor
#      (target at 16 writers: >= 0.7). With --library, a second table of the library path
#      (the library's `bench_appends`, src/store/replica/tests.rs: W writers, each a host of
#      its own with its own connection and cache file, one event at a time through
#      `Writer::append_independent` on `Cached`).
#   5. With --size N: scripts/gen-ledger.py --chain writes N events; `pmm-append --import` loads
#      them into a SQLite file (timed: the plain import) and into the server (timed; host A's
#      cache fills as it goes); both get a hybrid retrieval config. Then, alternating SQLite
#      and PostgreSQL runs so that noise hits both:
#        - one `pmm-turn --adapter dummy` (process start included) after a warm-up turn, median
#          of 5: PostgreSQL with host A's warm cache / SQLite                     ratio <= 1.5x
#        - `pmm-verify --quiet`: PostgreSQL (the server's rows) / SQLite           ratio <= 2x
#        - `pmm-replay --tail 1` with an empty cache directory (host B): the whole cache built
#          from the server, in events per second, beside the plain import's    (no target)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=5
size=0
profile=()
keep=0
library=0
relbin=
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --release) profile=(--release); shift ;;
    --library) library=1; shift ;;
    --bins) relbin="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "pg-bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "pg-bench.sh: no PostgreSQL server binaries (apt-get install postgresql)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/pmm-pg-bench.XXXXXX)
as_pg=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$work"
  as_pg=(runuser -u postgres --)
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
stop() {
  "${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -m fast stop >/dev/null 2>&1 || true
  if ((keep)); then echo "kept: $work"; else rm -rf "$work"; fi
}
trap stop EXIT

"${as_pg[@]}" "$bin/initdb" -A trust -U postgres -E UTF8 --locale=C -D "$work/data" >/dev/null
"${as_pg[@]}" "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w \
  -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c max_connections=60" start >/dev/null
psql=("$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres)
"${psql[@]}" -d postgres -c "CREATE DATABASE floor" -c "CREATE DATABASE pmm"

# The floor's tables: the shape of store/postgres's migration 1.
"${psql[@]}" -d floor <<'SQL'
CREATE TABLE events (
    id BIGINT PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL, content BYTEA NOT NULL,
    meta TEXT NOT NULL, prev_hash TEXT UNIQUE, hash TEXT UNIQUE);
CREATE INDEX events_kind_id ON events (kind, id);
CREATE TABLE head (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), id BIGINT NOT NULL, hash TEXT);
INSERT INTO head VALUES (TRUE, 0, NULL);
SQL
cat >"$work/shape.sql" <<'SQL'
BEGIN;
SELECT id, hash FROM head WHERE one FOR UPDATE;
INSERT INTO events (id, ts, kind, content, meta, prev_hash, hash)
  SELECT id + 1, '2025-11-24T05:55:41.123456Z', 'test_event',
         convert_to('writer 0 event 0 ' || repeat('x', 40), 'UTF8'), '{}', hash,
         lpad(to_hex(id + 1), 64, '0')
  FROM head WHERE one;
UPDATE head SET id = id + 1, hash = lpad(to_hex(id + 1), 64, '0') WHERE one;
COMMIT;
SQL

declare -A floor
pgfloor() { # $1 writers: the floor's transactions per second
  local tps
  tps=$("$bin/pgbench" -n -h 127.0.0.1 -p "$port" -U postgres -c "$1" -j "$1" -T "$seconds" \
          -f "$work/shape.sql" floor 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
  floor[$1]=${tps%.*}
}

# 3. The streams users run, on the release binaries.
if [ -z "$relbin" ]; then
  cargo build --release --locked --quiet --bin pmm-append
  relbin=${CARGO_TARGET_DIR:-target}/release
fi
declare -A pg sq
# Per W: the floor, then the same W streams on PostgreSQL and on SQLite, so that the
# machine's load at the time hits the floor and pmm alike.
for w in 1 4 16; do
  pgfloor "$w"
  "${psql[@]}" -d postgres -c "CREATE DATABASE pmm$w"
  streams=(python3 scripts/append-streams.py --bin "$relbin/pmm-append" --writers "$w" --seconds "$seconds")
  p=$("${streams[@]}" --db "postgresql://postgres@127.0.0.1:$port/pmm$w?sslmode=disable" --caches "$work/hosts$w")
  s=$("${streams[@]}" --db "$work/streams$w.db")
  pg[$w]=${p#appends_per_s=}
  sq[$w]=${s#appends_per_s=}
done

echo "pmm-append streams, one event a line, each PostgreSQL stream on its own host cache ($relbin)"
printf '%-8s %12s %12s %14s %10s\n' writers sqlite/s postgres/s pgbench-floor/s pg/floor
for w in 1 4 16; do
  ratio=$(python3 -c "print(f'{${pg[$w]}/${floor[$w]}:.2f}')" 2>/dev/null || echo "?")
  printf '%-8s %12s %12s %14s %10s\n' "$w" "${sq[$w]}" "${pg[$w]}" "${floor[$w]}" "$ratio"
done
echo "target: postgres >= 0.7 x the floor at 16 writers"

if ((library)); then
  if ! PMM_BENCH_SECONDS="$seconds" PMM_BENCH_PG_URL="postgres://postgres@127.0.0.1:$port/pmm?sslmode=disable" \
    cargo test "${profile[@]}" --quiet --lib bench_appends -- --ignored --nocapture >"$work/appends.out" 2>&1; then
    echo "pg-bench.sh: the append benchmark failed:" >&2
    tail -30 "$work/appends.out" >&2
    exit 1
  fi
  out=$(grep '^bench ' "$work/appends.out")
  echo
  echo "the library path: Writer::append_independent on store::replica::Cached, each writer a host of its own (no program's start)"
  printf '%-8s %12s %12s %14s %10s\n' writers sqlite/s postgres/s pgbench-floor/s pg/floor
  for w in 1 4 16; do
    s=$(sed -n "s/^bench sqlite writers=$w appends_per_s=//p" <<<"$out")
    p=$(sed -n "s/^bench postgres writers=$w appends_per_s=//p" <<<"$out")
    ratio=$(python3 -c "print(f'{$p/${floor[$w]}:.2f}')" 2>/dev/null || echo "?")
    printf '%-8s %12s %12s %14s %10s\n' "$w" "$s" "$p" "${floor[$w]}" "$ratio"
  done
fi

((size > 0)) || exit 0

# 5. The programs on an N-event ledger (built here, unless --bins names them).
[ -n "$relbin" ] || cargo build "${profile[@]}" --quiet --bins
bindir=target/$([ ${#profile[@]} -gt 0 ] && echo release || echo debug)
[ -n "${CARGO_TARGET_DIR:-}" ] && bindir="$CARGO_TARGET_DIR/${bindir#target/}"
# --bins names the binaries to time here too (the streams above ran on them).
[ -n "$relbin" ] && bindir="$relbin"
url="postgres://postgres@127.0.0.1:$port/scale?sslmode=disable"
"${psql[@]}" -d postgres -c "CREATE DATABASE scale"
file="$work/scale.db"
now() { date +%s.%N; }
took() { python3 -c "print(f'{$2 - $1:.3f}')"; }
export PMM_NOW=2026-01-01T00:00:00Z
echo "generating $size events ..." >&2
python3 scripts/gen-ledger.py "$size" --chain > "$work/gen.jsonl"
t0=$(now); "$bindir/pmm-append" --db "$file" --import "$work/gen.jsonl" --quiet >/dev/null; t1=$(now)
import_sqlite=$(took "$t0" "$t1")
t0=$(now); PMM_CACHE_DIR="$work/hostA" "$bindir/pmm-append" --db "$url" --import "$work/gen.jsonl" --quiet >/dev/null; t1=$(now)
import_pg=$(took "$t0" "$t1")
hybrid='{"kind":"config","content":"{\"budget\":8000,\"dims\":64,\"limit\":7,\"model\":\"hash64\",\"quant\":\"none\",\"strategy\":\"hybrid\",\"type\":\"retrieval\"}","meta":{"source":"operator"}}'
printf '%s\n' "$hybrid" | "$bindir/pmm-append" --db "$file" >/dev/null
printf '%s\n' "$hybrid" | PMM_CACHE_DIR="$work/hostA" "$bindir/pmm-append" --db "$url" >/dev/null

turn() { # $1 db, $2 cache dir: seconds of one turn
  local a b; a=$(now)
  PMM_CACHE_DIR="$2" "$bindir/pmm-turn" --db "$1" --adapter dummy "what did we decide about the garden and the quarterly report?" >/dev/null
  b=$(now); took "$a" "$b"
}
turn "$file" "$work/hostA" >/dev/null; turn "$url" "$work/hostA" >/dev/null
ts=(); tp=()
for _ in 1 2 3 4 5; do ts+=("$(turn "$file" "$work/hostA")"); tp+=("$(turn "$url" "$work/hostA")"); done
median() { printf '%s\n' "$@" | sort -g | sed -n 3p; }
turn_s=$(median "${ts[@]}"); turn_p=$(median "${tp[@]}")

verify() { local a b; a=$(now); PMM_CACHE_DIR="$work/hostA" "$bindir/pmm-verify" --db "$1" --quiet >/dev/null; b=$(now); took "$a" "$b"; }
verify "$file" >/dev/null
ver_s=$(verify "$file"); ver_p=$(verify "$url")

t0=$(now); PMM_CACHE_DIR="$work/hostB" "$bindir/pmm-replay" --db "$url" --tail 1 >/dev/null; t1=$(now)
catchup=$(took "$t0" "$t1")

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
rate() { python3 -c "print(f'{$1/$2:,.0f}')"; }
echo
echo "programs on a $size-event ledger ($bindir)"
printf '| %-58s | %10s | %10s | %6s | %s |\n' measurement sqlite postgres ratio target
printf '| %-58s | %10s | %10s | %6s | %s |\n' "one pmm-turn --adapter dummy, hybrid recall, median of 5 (s)" "$turn_s" "$turn_p" "$(ratio "$turn_p" "$turn_s")" "<= 1.5"
printf '| %-58s | %10s | %10s | %6s | %s |\n' "pmm-verify --quiet (s)" "$ver_s" "$ver_p" "$(ratio "$ver_p" "$ver_s")" "<= 2"
printf '| %-58s | %10s | %10s | %6s | %s |\n' "pmm-append --import of the $size events (s)" "$import_sqlite" "$import_pg" "$(ratio "$import_pg" "$import_sqlite")" "-"
printf '| %-58s | %10s | %10s | %6s | %s |\n' "an empty cache caught up (events/s; sqlite: the plain import)" "$(rate "$size" "$import_sqlite")" "$(rate "$size" "$catchup")" "-" "-"
