#!/usr/bin/env python3
"""pmm-mcp --http's end-to-end client, on the official MCP Python SDK (PyPI `mcp`): its
Streamable HTTP transport with `Authorization: Bearer $PMM_TOKEN` (from the environment, never
the command line). Prints one JSON line per step on stdout for the test to check.

    PMM_TOKEN=pmm_... python3 tests/mcp_http_client.py MODE URL [ARGS...]

Modes:
  session            initialize, list tools and resources, call every tool, read resources
  readonly           list tools, then call every writing tool (each must be refused)
  remember N PREFIX  call remember N times with texts PREFIX-0 .. PREFIX-(N-1)
"""

import asyncio
import json
import os
import sys

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


async def main(argv):
    mode, url, rest = argv[0], argv[1], argv[2:]
    headers = {"Authorization": f"Bearer {os.environ['PMM_TOKEN']}"}
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                if mode == "session":
                    await session_mode(session, init)
                elif mode == "readonly":
                    await readonly_mode(session, init)
                elif mode == "remember":
                    await remember_mode(session, init, int(rest[0]), rest[1])
                else:
                    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
