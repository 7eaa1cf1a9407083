"""Helpers of the mcp 1.30 client tests: a temporary taskgate config whose
tools are the scripts in tests/tools/, the built binary (TASKGATE_BIN,
default target/debug/taskgate) on stdio or on a loopback HTTP port, and a
connected ClientSession whose elicitation callback records and approves.

Every wait polls a condition against a deadline; nothing sleeps and hopes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
import httpx
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

REPO = Path(__file__).resolve().parents[3]
BIN = (REPO / os.environ.get("TASKGATE_BIN", "target/debug/taskgate")).resolve()
TOOLS = REPO / "tests" / "tools"
KEY_VAR = "TASKGATE_PY1_TEST_KEY"
KEY = "oyZheMkMT/N61eSaSv3CBFq75gWxdzBudobo6l9e6u0="
LIMIT = 30.0
RELATED_TASK = "io.modelcontextprotocol/related-task"


class Setup:
    """A temporary folder with a config file and the exec engine's spool."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="taskgate-py-mcp1-")
        self.dir = Path(self._dir.name)
        self.spool = self.dir / "spool"
        self.config = self.dir / "taskgate.toml"
        schema = (
            '{ type = "object", required = ["label"], properties = { label = { type = "string" }, '
            'steps = { type = "integer" } } }'
        )

        def tool(name: str, mode: str, script: str, input_schema: str, args: tuple[str, ...] = ()) -> str:
            command = json.dumps([str(TOOLS / script), *args])
            return (
                f'[[tools]]\nname = "{name}"\ndescription = "test tool {name}"\nengine = "local"\n'
                f'mode = "{mode}"\npoll_interval = "200ms"\nkeep_alive = "1h"\ninput_schema = {input_schema}\n'
                f"target = {{ command = {command} }}\n\n"
            )

        self.config.write_text(
            '[server]\nlisten = "127.0.0.1:0"\nmax_wait = "30s"\n\n'
            f'[keys]\nseal = [{{ id = "k1", secret_env = "{KEY_VAR}" }}]\n\n'
            f'[engines.local]\nkind = "exec"\nspool_dir = {json.dumps(str(self.spool))}\ngrace_period = "1s"\n\n'
            + tool("work", "hybrid", "work.sh", schema, ("steps",))
            + tool("ask", "async", "ask.sh", schema, ("Approve",))
            + tool("sleeper", "async", "sleeper.sh", '{ type = "object" }')
        )

    def runs_of(self, tool: str) -> list[Path]:
        if not self.spool.is_dir():
            return []
        found = []
        for d in sorted(self.spool.iterdir()):
            if d.name.startswith("."):
                continue
            try:
                if json.loads((d / "meta.json").read_text())["tool"] == tool:
                    found.append(d)
            except (OSError, ValueError, KeyError):
                pass
        return found

    def cleanup(self) -> None:
        self._dir.cleanup()


def server_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        KEY_VAR: KEY,
        "TASKGATE_LOG": "warn",
    }


async def wait_for(what: str, check, limit: float = LIMIT):
    """Polls `check` (sync or async) every 50 ms until it returns a truthy value."""
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        await anyio.sleep(0.05)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat[stat.rindex(")") + 2 :].split()[0]
    return state not in ("Z", "X")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def http_server(setup: Setup):
    """`taskgate serve` on a free loopback port, up once /healthz answers."""
    for _attempt in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [str(BIN), "serve", "--config", str(setup.config), "--listen", f"127.0.0.1:{port}"],
            env=server_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        try:
            async with httpx.AsyncClient() as http:

                async def up():
                    if proc.poll() is not None:
                        return "exited"
                    try:
                        r = await http.get(f"http://127.0.0.1:{port}/healthz")
                        return "up" if r.status_code == 200 else None
                    except httpx.HTTPError:
                        return None

                state = await wait_for(f"taskgate on port {port}", up, 20.0)
            if state == "up":
                yield f"http://127.0.0.1:{port}/mcp"
                return
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
    raise AssertionError("taskgate could not be started")


class Asked:
    """The elicitation callback: records each request and approves it."""

    def __init__(self) -> None:
        self.requests: list[types.ElicitRequestParams] = []

    async def __call__(self, context, params):
        self.requests.append(params)
        return types.ElicitResult(action="accept", content={"ok": True})


@contextlib.asynccontextmanager
async def connected(transport: str, setup: Setup):
    """A ClientSession on `transport` ("stdio" or "http"), initialized."""
    asked = Asked()
    async with contextlib.AsyncExitStack() as stack:
        if transport == "stdio":
            params = StdioServerParameters(
                command=str(BIN), args=["serve", "--stdio", "--config", str(setup.config)], env=server_env()
            )
            read, write = await stack.enter_async_context(stdio_client(params))
        else:
            url = await stack.enter_async_context(http_server(setup))
            read, write, _session_id = await stack.enter_async_context(streamablehttp_client(url))
        session = await stack.enter_async_context(ClientSession(read, write, elicitation_callback=asked))
        init = await session.initialize()
        assert init.protocolVersion == "2025-11-25"
        assert init.capabilities.tasks is not None and init.capabilities.tasks.requests is not None
        yield session, asked
