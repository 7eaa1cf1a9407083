"""Fixtures of the Python SDK (mcp 2.3.x) client tests: a temporary config per
test, and the taskgate binary reached over stdio (the SDK spawns it) or over
Streamable HTTP (started here, on a free loopback port)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from taskgate_support import HttpServer, Setup, taskgate_bin


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def setup(tmp_path) -> Iterator[Setup]:
    s = Setup(tmp_path)
    yield s
    s.cleanup()


@pytest.fixture(params=["stdio", "http"])
def connect(request, setup: Setup) -> Iterator[Callable[[], Any]]:
    """A factory of the `server` argument of `mcp.Client`: each call gives a fresh
    connection to taskgate over the parametrized transport."""
    logs = []
    server = None
    if request.param == "http":
        server = HttpServer(setup)

        def make() -> Any:
            return server.url

    else:
        binary = taskgate_bin()

        def make() -> Any:
            log = (setup.root / f"stdio-{len(logs)}.log").open("w")
            logs.append(log)
            params = StdioServerParameters(
                command=binary,
                args=["serve", "--stdio", "--config", str(setup.config)],
                env=setup.env(),
            )
            return stdio_client(params, errlog=log)

    make.transport = request.param  # type: ignore[attr-defined]
    yield make
    if server is not None:
        server.kill()
    for log in logs:
        log.close()
