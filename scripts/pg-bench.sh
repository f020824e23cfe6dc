#!/usr/bin/env bash
# pg-bench.sh -- appends per second with 1, 4 and 16 concurrent writers: pmm's event log on
# SQLite, on PostgreSQL, and the floor of PostgreSQL itself (pgbench running the same
# transaction shape), in one run (issue 35's benchmark; a skeleton: the turn, verify and
# cache figures come when the programs speak PostgreSQL).
#
# Usage:
#   scripts/pg-bench.sh [--seconds N] [--release] [--keep]
#
#   --seconds N  how long each measurement runs (default 5)
#   --release    build pmm's benchmark optimised (slow to build; the appends are database-bound,
#                so the default debug build with sha2 optimised measures nearly the same)
#   --keep       keep the server's directory and print its path
#
# What it does:
#   1. Starts a throwaway PostgreSQL from Debian's binaries (initdb -A trust, pg_ctl; as the
#      postgres user when run as root) on a free loopback port, fsync ON as a real server.
#   2. Floor: pgbench -c W -j W -T N with a script of pmm's transaction shape -- BEGIN; lock the
#      head row FOR UPDATE; insert an event row of the same size (the same columns, UNIQUE(hash),
#      UNIQUE(prev_hash), the kind index); move the head; COMMIT -- for W = 1, 4, 16.
#   3. pmm: the library's `bench_appends` (src/store/postgres/tests.rs): W writers, each on its
#      own connection, one event per transaction through `Writer::append_one`, on SQLite
#      (a file in /tmp) and on the same server.
#   4. Prints one table: writers, SQLite, PostgreSQL, pgbench floor, PostgreSQL / floor
#      (target at 16 writers: >= 0.7).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=5
profile=()
keep=0
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --release) profile=(--release); shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
for w in 1 4 16; do
  tps=$("$bin/pgbench" -n -h 127.0.0.1 -p "$port" -U postgres -c "$w" -j "$w" -T "$seconds" \
          -f "$work/shape.sql" floor 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
  floor[$w]=${tps%.*}
done

out=$(PMM_BENCH_SECONDS="$seconds" PMM_BENCH_PG_URL="postgres://postgres@127.0.0.1:$port/pmm?sslmode=disable" \
  cargo test "${profile[@]}" --quiet --lib bench_appends -- --ignored --nocapture 2>/dev/null | grep '^bench ')

printf '%-8s %12s %12s %14s %10s\n' writers sqlite/s postgres/s pgbench-floor/s pg/floor
for w in 1 4 16; do
  s=$(sed -n "s/^bench sqlite writers=$w appends_per_s=//p" <<<"$out")
  p=$(sed -n "s/^bench postgres writers=$w appends_per_s=//p" <<<"$out")
  ratio=$(python3 -c "print(f'{$p/${floor[$w]}:.2f}')" 2>/dev/null || echo "?")
  printf '%-8s %12s %12s %14s %10s\n' "$w" "$s" "$p" "${floor[$w]}" "$ratio"
done
echo "target: postgres >= 0.7 x the floor at 16 writers"
