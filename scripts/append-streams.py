#!/usr/bin/env python3
"""append-streams.py -- appends per second of W concurrent `pmm-append` streams (issue 47).

Usage:
  scripts/append-streams.py --bin target/release/pmm-append --db DB --writers W \
      --seconds N [--caches DIR] [--warmup S]

Each stream is one `pmm-append --db DB` process reading one event a line on stdin, as a user
pipes events in (`tail -f notes.jsonl | pmm-append --db ...`). With --caches DIR, stream i
keeps its host cache in DIR/i (PMM_CACHE_DIR): W hosts of one PostgreSQL ledger.

The load is a closed loop: each stream has two lines in flight (the next one is already in
its pipe while one commits) and gets a new line for every event it prints, which it prints
only after the commit. So the count is of committed events, and at the end no more than two
lines per stream are left to drain: stdin is closed and every process must exit 0.

Counted: the events printed between the end of --warmup (process start, opening the ledger
and its first catch-up are left out) and --seconds later. Prints `appends_per_s=R`.
"""
import argparse
import os
import subprocess
import sys
import threading
import time

IN_FLIGHT = 2


def line(writer, n):
    # The floor's event: the same kind and a content of the same size.
    content = f"writer {writer} event {n} " + "x" * 40
    return ('{"kind":"test_event","content":"%s"}\n' % content).encode()


class Stream:
    def __init__(self, i, args):
        env = dict(os.environ)
        if args.caches:
            env["PMM_CACHE_DIR"] = os.path.join(args.caches, str(i))
        self.i = i
        self.proc = subprocess.Popen(
            [args.bin, "--db", args.db],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.times = []  # when each printed event was read
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def send(self):
        self.proc.stdin.write(line(self.i, self.sent))
        self.proc.stdin.flush()
        self.sent += 1

    def run(self):
        for _ in range(IN_FLIGHT):
            self.send()
        out = self.proc.stdout
        while True:
            got = out.readline()
            if not got:
                return
            self.times.append(time.monotonic())
            if self.stop.is_set():
                if len(self.times) >= self.sent:
                    return
                continue
            self.send()

    def finish(self):
        self.stop.set()
        self.thread.join()
        self.proc.stdin.close()
        rest = self.proc.stdout.read()
        err = self.proc.stderr.read().decode(errors="replace")
        code = self.proc.wait()
        self.times.extend([time.monotonic()] * rest.count(b"\n"))
        return code, err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--writers", type=int, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--caches")
    args = p.parse_args()

    streams = [Stream(i, args) for i in range(args.writers)]
    for s in streams:
        s.thread.start()
    time.sleep(args.warmup)
    t0 = time.monotonic()
    time.sleep(args.seconds)
    t1 = time.monotonic()
    failed = 0
    for s in streams:
        code, err = s.finish()
        if code != 0:
            failed += 1
            print(f"stream {s.i}: exit {code}: {err.strip()}", file=sys.stderr)
    if failed:
        sys.exit(1)
    n = sum(1 for s in streams for t in s.times if t0 <= t < t1)
    print(f"appends_per_s={n / (t1 - t0):.0f}")


if __name__ == "__main__":
    main()
