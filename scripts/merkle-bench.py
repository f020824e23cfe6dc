#!/usr/bin/env python3
"""merkle-bench.py -- what the Merkle tree costs and what proofs take (docs/verification.md).

Usage: scripts/merkle-bench.py COUNT [--bin target/release]

Builds a COUNT-event ledger (scripts/gen-ledger.py --chain, imported), then prints:
  * import time with the tree kept vs without it (the same import into a ledger whose tree
    tables were dropped: a writer keeps only the derived tables a ledger has);
  * 2,000 appends, one transaction each (pmm-append reading lines), on top of that ledger,
    with and without the tree;
  * pmm-verify --root, --prove and --consistency wall time, process start included (median of
    25 runs), and the size of the tree's tables.
"""
import os, shutil, sqlite3, statistics, subprocess, sys, tempfile, time

count = int(sys.argv[1])
bindir = sys.argv[sys.argv.index("--bin") + 1] if "--bin" in sys.argv else "target/release"
here = os.path.dirname(os.path.abspath(__file__))
tmp = tempfile.mkdtemp(prefix="merkle-bench-")
prog = lambda p: os.path.join(bindir, p)


def run(args, stdin=None, db=None):
    env = dict(os.environ, PMM_DB=db or os.path.join(tmp, "a.db"), PMM_NOW="2025-11-01T00:00:00Z")
    t = time.perf_counter()
    r = subprocess.run(args, input=stdin, stdout=subprocess.PIPE, env=env, check=True)
    return time.perf_counter() - t, r.stdout


def ledger(name, tree):
    db = os.path.join(tmp, name)
    run([prog("pmm-append"), "--batch"], stdin=b"", db=db)
    if not tree:
        c = sqlite3.connect(db)
        c.executescript("DROP TABLE pmm_merkle; DROP TABLE pmm_merkle_state;")
        c.close()
    return db


try:
    src = os.path.join(tmp, "src.jsonl")
    with open(src, "wb") as f:
        subprocess.run([sys.executable, os.path.join(here, "gen-ledger.py"), str(count), "--chain"], stdout=f, check=True)
    with_tree, without = ledger("a.db", True), ledger("b.db", False)
    ta, _ = run([prog("pmm-append"), "--import", src, "--no-index"], db=with_tree)
    tb, _ = run([prog("pmm-append"), "--import", src, "--no-index"], db=without)
    print(f"import {count} events (--no-index): with the tree {ta:.2f} s, without {tb:.2f} s, ratio {ta / tb:.2f}")
    # One warm-up append each: the first writer after a --no-index import builds the
    # full-text index, which is not what is measured here.
    for db in (with_tree, without):
        run([prog("pmm-append")], stdin=b'{"kind":"user_message","content":"warm"}\n', db=db)
    lines = b"".join(b'{"kind":"user_message","content":"bench %d"}\n' % i for i in range(1000))
    ta, tb = [], []
    for _ in range(3):  # alternated, the median of three: the machine is shared
        ta.append(run([prog("pmm-append")], stdin=lines, db=with_tree)[0])
        tb.append(run([prog("pmm-append")], stdin=lines, db=without)[0])
    ta, tb = statistics.median(ta), statistics.median(tb)
    print(f"1000 appends, one transaction each, on ~{count}: with the tree {ta:.3f} ms/append, "
          f"without {tb:.3f} ms/append, ratio {ta / tb:.2f}")
    n = count + 3001

    def median(args, k=25):
        times = [run(args, db=with_tree)[0] for _ in range(k)]
        return statistics.median(times) * 1000

    base = median([prog("pmm-verify"), "--version"])
    print(f"process start (pmm-verify --version): {base:.1f} ms")
    print(f"--root: {median([prog('pmm-verify'), '--root']):.1f} ms")
    for i in (1, n // 3, n - 1):
        print(f"--prove {i} (size {n}): {median([prog('pmm-verify'), '--prove', str(i)]):.1f} ms")
    for m in (1, n // 2 + 7, n - 3):
        print(f"--consistency {m} {n}: {median([prog('pmm-verify'), '--consistency', str(m), str(n)]):.1f} ms")
    c = sqlite3.connect(with_tree)
    rows = c.execute("SELECT COUNT(*) FROM pmm_merkle").fetchone()[0]
    try:
        pages = c.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'pmm_merkle'").fetchone()[0]
    except sqlite3.Error:
        pages = None
    total = os.path.getsize(with_tree)
    print(f"pmm_merkle: {rows} rows" + (f", {pages / 1e6:.1f} MB" if pages else "") + f"; ledger file {total / 1e6:.1f} MB")
finally:
    shutil.rmtree(tmp)
