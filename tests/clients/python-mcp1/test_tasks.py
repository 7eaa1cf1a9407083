"""taskgate against the Python MCP SDK 1.30.0 (session.experimental.call_tool_as_task),
over stdio and Streamable HTTP: a long-running call completed as a task, a
cancel, and an input_required round trip answered by the elicitation callback."""

from __future__ import annotations

import pytest
from mcp import types
from mcp.shared.exceptions import McpError

from mcp1_support import RELATED_TASK, alive, connected, wait_for

pytestmark = pytest.mark.anyio

TRANSPORTS = ["stdio", "http"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_long_running_call_completes_as_a_task(transport, setup):
    async with connected(transport, setup) as (session, _asked):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["work"].execution.taskSupport == "optional"
        assert tools["ask"].execution.taskSupport == "required"

        created = await session.experimental.call_tool_as_task("work", {"label": "py1", "steps": 4}, ttl=60000)
        task_id = created.task.taskId
        assert created.task.status == "working"
        statuses = [s.status async for s in session.experimental.poll_task(task_id)]
        assert statuses[0] == "working", statuses
        assert statuses[-1] == "completed", statuses
        result = await session.experimental.get_task_result(task_id, types.CallToolResult)
        assert result.isError is False
        assert result.structuredContent == {"label": "py1", "steps": 4}
        assert (result.meta or {}).get(RELATED_TASK) == {"taskId": task_id}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancel(transport, setup):
    async with connected(transport, setup) as (session, _asked):
        created = await session.experimental.call_tool_as_task("sleeper", {})
        task_id = created.task.taskId
        run = await wait_for(
            "the sleeper to run",
            lambda: next((d for d in setup.runs_of("sleeper") if (d / "sleeper.pids").exists()), None),
        )
        pids = [int(p) for p in (run / "sleeper.pids").read_text().split()]
        assert all(alive(p) for p in pids)

        cancelled = await session.experimental.cancel_task(task_id)
        assert cancelled.status == "cancelled"
        assert cancelled.taskId == task_id
        assert (await session.experimental.get_task(task_id)).status == "cancelled"
        await wait_for("the sleeper's processes to end", lambda: not any(alive(p) for p in pids))
        with pytest.raises(McpError) as again:
            await session.experimental.cancel_task(task_id)
        assert again.value.error.code == -32602
        with pytest.raises(McpError) as result:
            await session.experimental.get_task_result(task_id, types.CallToolResult)
        assert "cancelled" in result.value.error.message


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_input_required_round_trip(transport, setup):
    async with connected(transport, setup) as (session, asked):
        created = await session.experimental.call_tool_as_task("ask", {"label": "py-ask"})
        task_id = created.task.taskId
        seen = []
        async for status in session.experimental.poll_task(task_id):
            seen.append(status.status)
            if status.status == "input_required":
                break
        assert seen[-1] == "input_required", seen
        # tasks/result carries the server's elicitation request; the callback answers it.
        result = await session.experimental.get_task_result(task_id, types.CallToolResult)
        assert len(asked.requests) == 1
        request = asked.requests[0]
        assert request.message == "Approve py-ask?"
        meta = request.meta.model_dump(by_alias=True) if request.meta else {}
        assert meta.get(RELATED_TASK) == {"taskId": task_id}, meta
        assert result.isError is False
        assert result.structuredContent["answer"] == {"action": "accept", "content": {"ok": True}}
        assert (await session.experimental.get_task(task_id)).status == "completed"
