#!/usr/bin/env python3
"""pmm-mcp --http's end-to-end client, on the official MCP Python SDK (PyPI `mcp`): its
Streamable HTTP transport with `Authorization: Bearer $PMM_TOKEN` (from the environment, never
the command line). Prints one JSON line per step on stdout for the test to check.

    PMM_TOKEN=pmm_... python3 tests/mcp_http_client.py MODE URL [ARGS...]

PMM_TOKEN unset or empty: no Authorization header (a --no-auth server). PMM_CA=FILE: trust
this PEM certificate (a self-signed https:// server) instead of the system's.

Modes:
  session            initialize, list tools and resources, call every tool, read resources
  readonly           list tools, then call every writing tool (each must be refused)
  remember N PREFIX  call remember N times with texts PREFIX-0 .. PREFIX-(N-1)
  acked N PREFIX     the same, printing {"acked": TEXT} as soon as each call is answered
  bench N QUERY [W]  W recalls (default 3) to warm up, then N recall round trips; prints the
                     latencies' p50, p95 and max in ms and the wall clock around the N (t0, t1)
"""

import asyncio
import json
import os
import ssl
import sys
import time

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def emit(**record):
    print(json.dumps(record, sort_keys=True), flush=True)


def result_json(r):
    text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
    value = r.structured_content
    if value is None and not r.is_error:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
    return {"is_error": bool(r.is_error), "text": text, "value": value}


async def call(session, name, args, quiet=False):
    try:
        out = result_json(await session.call_tool(name, args))
    except MCPError as e:
        out = {"protocol_error": {"code": e.error.code, "message": e.error.message}}
    if not quiet:
        emit(step="call", tool=name, arguments=args, **out)
    return out


async def session_mode(session, init):
    emit(step="initialize", protocol_version=init.protocol_version, server=init.server_info.name)
    tools = await session.list_tools()
    emit(step="list_tools", tools=[t.name for t in tools.tools])
    res = await session.list_resources()
    tmpl = await session.list_resource_templates()
    emit(step="list_resources", resources=[str(r.uri) for r in res.resources],
         templates=[t.uri_template for t in tmpl.resource_templates])
    await call(session, "remember", {"text": "The quarterly report lives in the blue folder."})
    await call(session, "recall", {"query": "where is the quarterly report?", "k": 5})
    opened = await call(session, "commit", {"text": "send the quarterly report to Dana"})
    await call(session, "state", {})
    await call(session, "close", {"cid": opened["value"]["cid"]})
    await call(session, "events", {"since": 1, "limit": 3})
    await call(session, "verify", {})
    await call(session, "prove", {"id": 1})
    state = await session.read_resource("pmm://state")
    emit(step="read_resource", uri="pmm://state", value=json.loads(state.contents[0].text))
    ev = await session.read_resource("pmm://event/1")
    emit(step="read_resource", uri="pmm://event/1", value=json.loads(ev.contents[0].text))


async def readonly_mode(session, init):
    tools = await session.list_tools()
    emit(step="list_tools", tools=[t.name for t in tools.tools])
    await call(session, "remember", {"text": "a read token must not write this"})
    await call(session, "commit", {"text": "nor this"})
    await call(session, "close", {"cid": "abc"})
    await call(session, "recall", {"query": "anything"})


async def remember_mode(session, init, n, prefix):
    errors = []
    for i in range(n):
        out = await call(session, "remember", {"text": f"{prefix}-{i}"}, quiet=True)
        if out.get("is_error") or "protocol_error" in out:
            errors.append(out)
    emit(step="remembered", n=n, errors=errors)


async def acked_mode(session, init, n, prefix):
    for i in range(n):
        out = await call(session, "remember", {"text": f"{prefix}-{i}"}, quiet=True)
        if out.get("is_error") or "protocol_error" in out:
            emit(step="error", out=out)
            return
        emit(acked=f"{prefix}-{i}")


async def bench_mode(session, init, n, query, warm):
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


def http_client():
    token = os.environ.get("PMM_TOKEN", "")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    ca = os.environ.get("PMM_CA")
    if not ca:
        return create_mcp_http_client(headers=headers)
    # As create_mcp_http_client makes it, trusting the one certificate.
    import httpx2
    from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        verify=ssl.create_default_context(cafile=ca),
    )


async def main(argv):
    mode, url, rest = argv[0], argv[1], argv[2:]
    async with http_client() as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                if mode == "session":
                    await session_mode(session, init)
                elif mode == "readonly":
                    await readonly_mode(session, init)
                elif mode == "remember":
                    await remember_mode(session, init, int(rest[0]), rest[1])
                elif mode == "acked":
                    await acked_mode(session, init, int(rest[0]), rest[1])
                elif mode == "bench":
                    warm = int(rest[2]) if len(rest) > 2 else 3
                    await bench_mode(session, init, int(rest[0]), rest[1], warm)
                else:
                    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
