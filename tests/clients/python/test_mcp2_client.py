"""The official MCP Python SDK 2.3.x as a real client of taskgate, over stdio and
Streamable HTTP. It speaks 2026-07-28 (server/discover, per-request _meta); the
tasks extension is driven through the SDK's client-extension hook (see
taskgate_support.TasksExtension), and raw tasks/* requests go through the
session's generic send_request."""

from __future__ import annotations

import json
import os

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from taskgate_support import (
    LISTED_WITH_TASKS,
    MODERN,
    TASKS,
    CreateTaskResult,
    Setup,
    TasksExtension,
    approve,
    cancel_task,
    get_task,
    poll,
)

pytestmark = pytest.mark.anyio


async def test_discover_lists_every_tool(connect) -> None:
    async with Client(connect(), extensions=[TasksExtension()]) as client:
        assert client.protocol_version == MODERN
        assert TASKS in (client.server_capabilities.extensions or {})
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == LISTED_WITH_TASKS


async def test_long_running_tool_completes_as_a_task(connect, setup: Setup) -> None:
    tasks = TasksExtension()
    async with Client(connect(), extensions=[tasks]) as client:
        result = await client.call_tool("work", {"label": "py", "seconds": 1})
    assert result.is_error is False
    assert result.structured_content == {"label": "py", "seconds": 1, "rows": 42}
    assert result.content, "content mirrors the structured result"
    assert len(tasks.created) == 1, "the call became a task"
    created = tasks.created[0]
    assert created.status == "working"
    assert created.poll_interval_ms == 200 and created.ttl_ms == 3_600_000
    assert tasks.statuses[-1] == "completed"
    assert len(setup.runs()) == 1


async def test_tool_error_is_a_completed_task_with_is_error(connect) -> None:
    tasks = TasksExtension()
    async with Client(connect(), extensions=[tasks]) as client:
        result = await client.call_tool("fail", {"label": "ds3"})
    assert result.is_error is True
    assert "dataset ds3 not found" in result.content[0].text
    assert tasks.statuses[-1] == "completed"


async def test_input_round_trip(connect) -> None:
    tasks = TasksExtension()
    elicit = approve(True)
    async with Client(connect(), extensions=[tasks], elicitation_callback=elicit) as client:
        result = await client.call_tool("ask", {"label": "py7"})
    assert elicit.prompts == ["Deploy py7?"]
    assert "input_required" in tasks.statuses
    assert result.is_error is False
    answer = result.structured_content["answer"]
    assert answer["action"] == "accept" and answer["content"] == {"ok": True}


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 1 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X", "x"):
            return True
    return False


async def test_cancel(connect, setup: Setup) -> None:
    async with Client(connect(), extensions=[TasksExtension()]) as client:
        created = await client.session.call_tool("sleeper", {}, allow_claimed=True)
        assert isinstance(created, CreateTaskResult)
        run = setup.runs()[0]
        with anyio.fail_after(30):
            while not (run / "grandchild.pid").exists():
                await anyio.sleep(0.05)
        pgid = json.loads((run / "pid.json").read_text())["pid"]
        assert _group_alive(pgid)
        assert (await get_task(client.session, created.task_id)).status == "working"

        ack = await cancel_task(client.session, created.task_id)
        assert ack.result_type == "complete"
        task = await poll(client.session, created.task_id, lambda t: t.status != "working")
        assert task.status == "cancelled"
    with anyio.fail_after(30):
        while _group_alive(pgid):
            await anyio.sleep(0.05)


async def test_unknown_task_is_invalid_params(connect) -> None:
    async with Client(connect(), extensions=[TasksExtension()]) as client:
        with pytest.raises(MCPError) as err:
            await get_task(client.session, "tsk_unknown")
    assert err.value.code == -32602


async def test_without_the_extension_hybrid_runs_synchronously_and_async_is_refused(connect) -> None:
    async with Client(connect()) as client:
        assert client.protocol_version == MODERN
        result = await client.call_tool("work", {"label": "sync", "seconds": 1})
        assert result.structured_content["label"] == "sync"
        with pytest.raises(MCPError) as err:
            await client.call_tool("ask", {"label": "x"})
    assert err.value.code == -32021


async def test_invalid_arguments_name_the_field(connect, setup: Setup) -> None:
    async with Client(connect(), extensions=[TasksExtension()]) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("work", {"label": 5})
    assert err.value.code == -32602
    assert "/label" in err.value.message
    assert setup.runs() == []


async def test_legacy_handshake(connect) -> None:
    """mode="legacy" sends initialize with the SDK's newest handshake version,
    2025-11-25: async-only tools are listed as taskSupport "required", hybrid
    ones as "optional", and a plain call of a hybrid tool runs synchronously."""
    async with Client(connect(), mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        tools = await client.list_tools()
        listed = {t.name: t.model_dump(by_alias=True, exclude_none=True) for t in tools.tools}
        assert sorted(listed) == sorted(LISTED_WITH_TASKS)
        support = {name: (t.get("execution") or {}).get("taskSupport") for name, t in listed.items()}
        assert support["ask"] == support["sleeper"] == "required", support
        assert support["work"] == "optional", support
        result = await client.call_tool("work", {"label": "old", "seconds": 1})
    assert result.is_error is False
    assert result.structured_content["label"] == "old"
