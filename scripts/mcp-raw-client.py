#!/usr/bin/env python3
"""mcp-raw-client.py -- a minimal MCP client for scripts/mcp-http-bench.sh: JSON-RPC written by
hand (no SDK, no asyncio) over stdio or Streamable HTTP, so that the figures measure the
server rather than a client library. Standard library only.

    mcp-raw-client.py stdio N QUERY WARM -- PMM-MCP ARGS...
    PMM_TOKEN=... mcp-raw-client.py http N QUERY WARM URL

WARM recalls first, then N `recall` calls (k 10) one after another; prints one JSON line:
n, p50_ms, p95_ms, max_ms, and the wall clock around the N (t0, t1).
"""
import http.client, json, os, subprocess, sys, time, urllib.parse

VERSION = "2025-06-18"


def request(i, method, params):
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


INIT = {"protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "mcp-raw-client", "version": "1"}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Stdio:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.call("initialize", INIT, 0)
        self.send(INITIALIZED)

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def call(self, method, params, i):
        self.send(request(i, method, params))
        while True:
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == i:
                return msg

    def close(self):
        self.p.stdin.close()
        self.p.wait()


class Http:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.path = u.path
        self.conn = http.client.HTTPConnection(u.hostname, u.port)
        self.headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream",
                        "MCP-Protocol-Version": VERSION}
        token = os.environ.get("PMM_TOKEN", "")
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.call("initialize", INIT, 0)
        self.post(INITIALIZED)

    def post(self, msg):
        self.conn.request("POST", self.path, json.dumps(msg), self.headers)
        r = self.conn.getresponse()
        body = r.read()
        session = r.getheader("Mcp-Session-Id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        if r.status >= 300:
            raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
        return r.getheader("Content-Type", ""), body

    def call(self, method, params, i):
        kind, body = self.post(request(i, method, params))
        if kind.startswith("application/json"):
            return json.loads(body)
        for line in body.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if msg.get("id") == i:
                    return msg
        raise RuntimeError(f"no response to {i}: {body[:200]!r}")

    def close(self):
        self.conn.close()


def main(argv):
    mode, n, query, warm = argv[0], int(argv[1]), argv[2], int(argv[3])
    rest = argv[4:]
    client = Stdio(rest[1:] if rest and rest[0] == "--" else rest) if mode == "stdio" else Http(rest[0])
    args = {"name": "recall", "arguments": {"query": query, "k": 10}}
    i = 1
    for _ in range(warm):
        client.call("tools/call", args, i)
        i += 1
    times = []
    t0 = time.time()
    for _ in range(n):
        t = time.perf_counter()
        r = client.call("tools/call", args, i)
        times.append((time.perf_counter() - t) * 1000)
        if "error" in r or r.get("result", {}).get("isError"):
            raise RuntimeError(f"recall failed: {r}")
        i += 1
    t1 = time.time()
    client.close()
    times.sort()
    pct = lambda p: round(times[min(len(times) - 1, int(p * len(times)))], 2)
    print(json.dumps({"n": n, "p50_ms": pct(0.5), "p95_ms": pct(0.95), "max_ms": round(times[-1], 2),
                      "t0": t0, "t1": t1}))


if __name__ == "__main__":
    main(sys.argv[1:])
