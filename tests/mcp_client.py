#!/usr/bin/env python3
"""A Model Context Protocol client for pmm-mcp's end-to-end tests, on the official MCP Python
SDK (PyPI `mcp`): it starts the server given after `--`, talks to it over stdio, and prints one
JSON line per step on stdout (what was asked, what came back) for the test to check.

    python3 tests/mcp_client.py MODE [ARGS...] -- pmm-mcp --db agent.db

Modes:
  session            initialize, list tools and resources, call every tool, read resources
  remember N PREFIX  call remember N times with texts PREFIX-0 .. PREFIX-(N-1)
  bad                unknown tool, wrong argument types, a 10 MB text, limits; then a good call
  readonly           list tools, then call every writing tool (each must be refused)
  locked DB          hold DB's write lock past the server's busy timeout, call remember, release
  bench N QUERY [W]  W recalls to warm up (default 0), then N recall round trips; prints the
                     latencies' p50, p95 and max in ms and the wall clock around the N (t0, t1)
"""

import asyncio
import json
import sqlite3
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


def emit(**record):
    print(json.dumps(record, sort_keys=True), flush=True)


def result_json(r):
    """A CallToolResult as plain JSON: is_error, the text, and the parsed structured value."""
    text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
    value = r.structured_content
    if value is None and not r.is_error:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
    return {"is_error": bool(r.is_error), "text": text, "value": value}


async def call(session, name, args):
    try:
        r = await session.call_tool(name, args)
        out = result_json(r)
    except MCPError as e:
        out = {"protocol_error": {"code": e.error.code, "message": e.error.message}}
    emit(step="call", tool=name, arguments=args, **out)
    return out


async def session_mode(session, init):
    emit(step="initialize", protocol_version=init.protocol_version,
         server=init.server_info.name, instructions=init.instructions)
    tools = await session.list_tools()
    emit(step="list_tools", tools=[
        {"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools.tools])
    res = await session.list_resources()
    tmpl = await session.list_resource_templates()
    emit(step="list_resources", resources=[str(r.uri) for r in res.resources],
         templates=[t.uri_template for t in tmpl.resource_templates])
    await call(session, "remember", {"text": "The quarterly report lives in the blue folder."})
    await call(session, "remember", {"text": "Where is the report?", "kind": "user_message"})
    await call(session, "recall", {"query": "where is the quarterly report?", "k": 5})
    opened = await call(session, "commit", {"text": "send the quarterly report to Dana"})
    await call(session, "state", {})
    cid = opened["value"]["cid"]
    await call(session, "close", {"cid": cid})
    await call(session, "close", {"cid": cid})
    await call(session, "events", {"since": 1, "limit": 3})
    await call(session, "events", {"kind": "commitment_open"})
    await call(session, "verify", {})
    await call(session, "verify", {"deep": True})
    await call(session, "prove", {"id": 2})
    await call(session, "prove", {"id": 999})
    state = await session.read_resource("pmm://state")
    emit(step="read_resource", uri="pmm://state", mime=state.contents[0].mime_type,
         value=json.loads(state.contents[0].text))
    ev = await session.read_resource("pmm://event/1")
    emit(step="read_resource", uri="pmm://event/1", mime=ev.contents[0].mime_type,
         value=json.loads(ev.contents[0].text))
    try:
        await session.read_resource("pmm://event/999999")
        emit(step="read_resource", uri="pmm://event/999999", error=None)
    except MCPError as e:
        emit(step="read_resource", uri="pmm://event/999999", error=e.error.message)


async def remember_mode(session, n, prefix):
    ok, errors = 0, []
    for i in range(n):
        r = await session.call_tool("remember", {"text": f"{prefix}-{i}"})
        if r.is_error:
            errors.append(result_json(r)["text"])
        else:
            ok += 1
    emit(step="remembered", ok=ok, errors=errors)


async def bad_mode(session):
    await call(session, "no_such_tool", {})
    await call(session, "recall", {"query": 42})
    await call(session, "recall", {"query": "x", "k": "five"})
    await call(session, "recall", {"query": "x", "k": 1001})
    await call(session, "recall", {"query": "x", "budget": 1000001})
    await call(session, "recall", {"query": "x", "kinds": ["config"]})
    await call(session, "recall", {"query": "x", "surprise": True})
    await call(session, "remember", {"text": "x" * (10 * 1024 * 1024)})
    await call(session, "remember", {"text": "   "})
    await call(session, "remember", {"text": "hi", "kind": "config"})
    await call(session, "remember", {})
    await call(session, "events", {"limit": 10001})
    await call(session, "events", {"kind": "nonsense"})
    await call(session, "state", {"at": 999999})
    await call(session, "close", {"cid": "deadbeef"})
    await call(session, "remember", {"text": "still serving after all that"})


async def readonly_mode(session):
    tools = await session.list_tools()
    emit(step="list_tools", tools=[{"name": t.name} for t in tools.tools])
    await call(session, "remember", {"text": "should not be written"})
    await call(session, "commit", {"text": "should not be opened"})
    await call(session, "close", {"cid": "deadbeef"})
    await call(session, "recall", {"query": "anything"})


async def locked_mode(session, db):
    con = sqlite3.connect(db, timeout=0, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    await call(session, "remember", {"text": "written while locked"})
    con.execute("ROLLBACK")
    con.close()
    await call(session, "remember", {"text": "written after the lock"})


async def bench_mode(session, n, query, warm=0):
    for _ in range(warm):
        await session.call_tool("recall", {"query": query, "k": 10})
    times = []
    t0 = time.time()
    for _ in range(n):
        t = time.perf_counter()
        r = await session.call_tool("recall", {"query": query, "k": 10})
        times.append((time.perf_counter() - t) * 1000)
        assert not r.is_error, result_json(r)
    t1 = time.time()
    times.sort()

    def pct(p):
        return round(times[min(len(times) - 1, int(p * len(times)))], 2)

    emit(step="bench", n=n, p50_ms=pct(0.50), p95_ms=pct(0.95), max_ms=round(times[-1], 2),
         t0=t0, t1=t1)


async def main(argv):
    split = argv.index("--")
    mode, args, server = argv[0], argv[1:split], argv[split + 1:]
    params = StdioServerParameters(command=server[0], args=server[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            if mode == "session":
                await session_mode(session, init)
            elif mode == "remember":
                await remember_mode(session, int(args[0]), args[1])
            elif mode == "bad":
                await bad_mode(session)
            elif mode == "readonly":
                await readonly_mode(session)
            elif mode == "locked":
                await locked_mode(session, args[0])
            elif mode == "bench":
                await bench_mode(session, int(args[0]), args[1], int(args[2]) if len(args) > 2 else 0)
            else:
                raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
