#!/usr/bin/env python3
"""report-bench.py -- the HTML report's benchmark (issue 45, docs/report.md).

For a ledger of COUNT events from scripts/gen-ledger.py: the size of `pmm-export --format html`
against `--format jsonl`, the time of each export (best of RUNS), and in headless Chromium the
time to first contentful paint and to the page's verdict (`data-ms`), both from the start of
navigation, read through the DevTools protocol (--remote-debugging-pipe, no virtual time:
real clocks).

Usage: scripts/report-bench.py COUNT [RUNS] [--db LEDGER]   (python3 standard library only)
  --db: a ledger made before (of COUNT events) instead of a new one from gen-ledger.py.
  Uses the pmm-* programs on PATH, or PMM_BIN; Chromium from PMM_CHROMIUM (default chromium).
Prints one JSON object and a Markdown table row.
"""
import json, os, shutil, subprocess, sys, tempfile, time

def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__); sys.exit(0 if len(sys.argv) > 1 else 2)
    args = sys.argv[1:]
    given = None
    if "--db" in args:
        at = args.index("--db")
        given = os.path.abspath(args[at + 1])
        del args[at:at + 2]
    count, runs = int(args[0]), int(args[1]) if len(args) > 1 else 3
    here = os.path.dirname(os.path.abspath(__file__))
    bin_dir = os.environ.get("PMM_BIN")
    prog = lambda p: os.path.join(bin_dir, p) if bin_dir else p
    work = tempfile.mkdtemp(prefix="pmm-report-bench.")
    try:
        db = given or os.path.join(work, "l.db")
        if not given:
            gen = os.path.join(work, "gen.jsonl")
            with open(gen, "w") as f:
                subprocess.run([sys.executable, os.path.join(here, "gen-ledger.py"), str(count), "--chain"], stdout=f, check=True)
            subprocess.run([prog("pmm-append"), "--db", db, "--import", gen, "--quiet"], stdout=subprocess.DEVNULL, check=True)
        out = {"events": count}
        for fmt in ("jsonl", "html"):
            path = os.path.join(work, "x." + fmt)
            best = None
            for _ in range(runs):
                t = time.perf_counter()
                subprocess.run([prog("pmm-export"), "--db", db, "--quiet", "--format", fmt, "-o", path], check=True)
                d = time.perf_counter() - t
                best = d if best is None else min(best, d)
            out[fmt + "_bytes"], out[fmt + "_s"] = os.path.getsize(path), round(best, 3)
        out["size_ratio"] = round(out["html_bytes"] / out["jsonl_bytes"], 3)
        out["time_ratio"] = round(out["html_s"] / out["jsonl_s"], 3)
        loads = [browser(os.path.join(work, "x.html")) for _ in range(runs)]
        out["first_paint_ms"] = min(l["paint"] for l in loads)
        out["verdict_ms"] = min(l["ms"] for l in loads)
        out["status"] = loads[0]["status"]
        out["milestones_ms"] = min(loads, key=lambda l: l["ms"])["timing"]
        out["renderer_cpu_ms"] = min(l["renderer_cpu_ms"] for l in loads)
        out["load_average"] = os.getloadavg()[0]
        print(json.dumps(out))
        print("| %d | %.1f MB | %.1f MB | %.2fx | %.2f s | %.2f s | %.2fx | %d ms | %d ms | %s |" % (
            count, out["jsonl_bytes"] / 1e6, out["html_bytes"] / 1e6, out["size_ratio"], out["jsonl_s"],
            out["html_s"], out["time_ratio"], out["first_paint_ms"], out["verdict_ms"], out["status"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)

class Pipe:
    """The DevTools protocol over Chromium's --remote-debugging-pipe (fds 3 and 4, NUL-ended)."""
    def __init__(self, chrome, profile):
        r_in, self.w = os.pipe()      # we write, Chromium reads on fd 3
        self.r, w_out = os.pipe()     # Chromium writes on fd 4, we read
        def child():
            # Through fresh copies: dup2 onto the same number would keep close-on-exec.
            a, b = os.dup(r_in), os.dup(w_out)
            os.dup2(a, 3); os.dup2(b, 4)
        self.proc = subprocess.Popen([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--window-size=1280,800", "--user-data-dir=" + profile, "--remote-debugging-pipe", "about:blank"],
            close_fds=False, preexec_fn=child, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r_in); os.close(w_out)
        self.buf, self.n = b"", 0
    def call(self, method, params=None, session=None):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session: msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.r, 1 << 16)
                if not chunk: raise RuntimeError("chromium closed the pipe")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(line)
            if m.get("id") == self.n:
                if "error" in m: raise RuntimeError(m["error"])
                return m["result"]
    def close(self):
        try: self.call("Browser.close")
        except Exception: pass
        self.proc.wait(timeout=20)

PROBE = """(() => { const v = document.getElementById('pmm-verdict');
  const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');
  return JSON.stringify({status: v ? v.dataset.status : 'none', ms: v ? Number(v.dataset.ms) : 0,
    paint: p ? Math.round(p.startTime) : -1, timing: window.PMMTiming || {}}); })()"""

def renderer_cpu_ms(profile):
    """CPU time (user + system) of the renderer processes of this Chromium: the machine's load
    stretches the wall-clock figures, not this one."""
    total, tick = 0, os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read()
            if b"--type=renderer" not in cmd or profile.encode() not in cmd:
                continue
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            continue
    return round(total * 1000 / tick)

def browser(path):
    profile = tempfile.mkdtemp(prefix="pmm-chrome.")
    pipe = Pipe(os.environ.get("PMM_CHROMIUM", "chromium"), profile)
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        s = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        pipe.call("Page.enable", session=s)
        pipe.call("Page.navigate", {"url": "file://" + path}, session=s)
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.1)
            try:
                r = pipe.call("Runtime.evaluate", {"expression": PROBE, "returnByValue": True}, session=s)
                v = json.loads(r["result"]["value"])
            except Exception:
                continue
            if v["status"] not in ("pending", "none"):
                v["renderer_cpu_ms"] = renderer_cpu_ms(profile)
                return v
        raise RuntimeError("no verdict in 120 s")
    finally:
        pipe.close()
        shutil.rmtree(profile, ignore_errors=True)

if __name__ == "__main__":
    main()
