"""Fixtures of the mcp 1.30 client tests (helpers are in mcp1_support.py)."""

from __future__ import annotations

import pytest

from mcp1_support import BIN, Setup


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture(autouse=True)
def _binary_exists():
    # Never a skip: without the binary every test fails.
    if not BIN.is_file():
        pytest.fail(f"taskgate binary not found at {BIN}: build it (cargo build) or set TASKGATE_BIN")


@pytest.fixture
def setup():
    s = Setup()
    yield s
    s.cleanup()
