"""Helpers of the Python SDK client tests.

- `Setup`: a temporary taskgate config whose exec tools are tests/tools/*.sh,
  its sealing key in an environment variable set only on the server child.
- `HttpServer`: `taskgate serve` on a free loopback port, waited for on /healthz.
- `TasksExtension`: the 2026-07-28 tasks extension (io.modelcontextprotocol/tasks)
  plugged into the SDK through its client-extension hook (`ClientExtension` with a
  `ResultClaim` on `resultType: "task"`). The SDK 2.3 ships no tasks client of its
  own; the claim's resolver polls `tasks/get`, answers input requests through the
  client's own elicitation callback and `tasks/update`, all sent with the
  session's generic `send_request`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tests" / "tools"
KEY_VAR = "TASKGATE_TEST_KEY_K1"
KEY_SECRET = "8vBdKXub1EpedBSh915DzTCkdbZ4CegNO4LkSLsdBdk="
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TOOL_NAMES = ["work", "fail", "ask", "sleeper", "brief"]
# What a client that can hold tasks lists: the tools, then taskgate_logs.
LISTED_WITH_TASKS = [*TOOL_NAMES, "taskgate_logs"]


def taskgate_bin() -> str:
    """The binary under test: $TASKGATE_BIN, else the debug build cargo made."""
    path = os.environ.get("TASKGATE_BIN") or str(REPO / "target" / "debug" / "taskgate")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"taskgate binary not found at {path}: build it and set TASKGATE_BIN")
    return path


def _toml(value: str) -> str:
    return json.dumps(value)


class Setup:
    """A config file and a spool folder under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spool = root / "spool"
        self.config = root / "taskgate.toml"
        label = '{ type = "string", pattern = "^[A-Za-z0-9_-]+$", minLength = 1 }'
        work_schema = (
            '{ type = "object", required = ["label"], properties = { label = %s, '
            'seconds = { type = "integer", minimum = 0, maximum = 120 } } }' % label
        )
        label_schema = '{ type = "object", required = ["label"], properties = { label = %s } }' % label

        def tool(name: str, mode: str, keep: str, script: str, schema: str) -> str:
            return (
                f'[[tools]]\nname = "{name}"\ndescription = "test tool {name}"\nengine = "local"\n'
                f'mode = "{mode}"\npoll_interval = "200ms"\nkeep_alive = "{keep}"\n'
                f"input_schema = {schema}\ntarget = {{ command = [{_toml(str(TOOLS / script))}] }}\n\n"
            )

        text = (
            '[server]\nlisten = "127.0.0.1:0"\ncall_timeout = "10s"\nmax_wait = "30s"\n\n'
            f'[keys]\nseal = [{{ id = "k1", secret_env = "{KEY_VAR}" }}]\n\n'
            f'[engines.local]\nkind = "exec"\nspool_dir = {_toml(str(self.spool))}\ngrace_period = "1s"\n\n'
            + tool("work", "hybrid", "1h", "work.sh", work_schema)
            + tool("fail", "hybrid", "1h", "fail.sh", label_schema)
            + tool("ask", "async", "1h", "ask.sh", label_schema)
            + tool("sleeper", "async", "1h", "sleeper.sh", '{ type = "object" }')
            + tool("brief", "hybrid", "1s", "work.sh", work_schema)
        )
        self.config.write_text(text)

    def env(self) -> dict[str, str]:
        """Variables the server child needs on top of a minimal environment."""
        return {KEY_VAR: KEY_SECRET, "TASKGATE_LOG": "info"}

    def runs(self) -> list[Path]:
        if not self.spool.is_dir():
            return []
        return sorted(p for p in self.spool.iterdir() if p.is_dir() and not p.name.startswith("."))

    def cleanup(self) -> None:
        """Runs outlive servers by design: end each run's process group by its recorded pid."""
        for run in self.runs():
            for name in ("pid.json", "supervisor.json"):
                try:
                    pid = int(json.loads((run / name).read_text())["pid"])
                except (OSError, ValueError, KeyError):
                    continue
                if pid > 1:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`taskgate serve` over HTTP on a free loopback port."""

    def __init__(self, setup: Setup, deadline_s: float = 30.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = (setup.root / f"server-{self.port}.log").open("w")
        env = dict(os.environ) | setup.env()
        self.proc = subprocess.Popen(
            [taskgate_bin(), "serve", "--config", str(setup.config), "--listen", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=env,
        )
        deadline = time.monotonic() + deadline_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"taskgate exited with {self.proc.returncode}: {self.stderr()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"no /healthz within {deadline_s}s: {self.stderr()}")
            time.sleep(0.05)

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()


# ---------------------------------------------------------------- tasks extension


class TaskFields(types.Result):
    """The fields of a Task, as both results below carry them."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreateTaskResult(TaskFields):
    """`CreateTaskResult` (resultType "task"): a flat Task."""

    result_type: Literal["task"]


class DetailedTask(TaskFields):
    """The `tasks/get` result: a Task with its status payload inlined."""

    result_type: str | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskAck(types.Result):
    """The empty acknowledgement of `tasks/update` and `tasks/cancel`."""

    result_type: str | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(types.RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(GetTaskRequest(params=TaskIdParams(task_id=task_id)), DetailedTask)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> TaskAck:
    request = UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses))
    return await session.send_request(request, TaskAck)


async def cancel_task(session: ClientSession, task_id: str) -> TaskAck:
    return await session.send_request(CancelTaskRequest(params=TaskIdParams(task_id=task_id)), TaskAck)


async def poll(
    session: ClientSession, task_id: str, done: Callable[[DetailedTask], bool], limit_s: float = 30.0
) -> DetailedTask:
    """Polls `tasks/get` until `done` holds, failing after `limit_s`."""
    with anyio.fail_after(limit_s):
        while True:
            task = await get_task(session, task_id)
            if done(task):
                return task
            await anyio.sleep(0.1)


_INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


class TasksExtension(ClientExtension):
    """Client side of `io.modelcontextprotocol/tasks` through the SDK's extension hook."""

    identifier = TASKS

    def __init__(self, limit_s: float = 60.0) -> None:
        self.limit_s = limit_s
        self.created: list[CreateTaskResult] = []
        self.statuses: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.created.append(created)
        session = ctx.session
        answered: set[str] = set()
        with anyio.fail_after(self.limit_s):
            while True:
                task = await get_task(session, created.task_id)
                self.statuses.append(task.status)
                if task.status == "completed":
                    return types.CallToolResult.model_validate(task.result)
                if task.status == "failed":
                    error = task.error or {}
                    raise MCPError(error.get("code", -32603), error.get("message", "task failed"))
                if task.status == "cancelled":
                    text = types.TextContent(type="text", text=task.status_message or "cancelled")
                    return types.CallToolResult(content=[text], is_error=True)
                if task.status == "input_required":
                    responses = {}
                    for key, raw in (task.input_requests or {}).items():
                        if key in answered:
                            continue
                        request = _INPUT_REQUEST.validate_python(raw)
                        rctx = ClientRequestContext(session=session, request_id=key, meta=None)
                        response = await session.dispatch_input_request(rctx, request)
                        if isinstance(response, types.ErrorData):
                            raise MCPError.from_error_data(response)
                        responses[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
                    if responses:
                        await update_task(session, created.task_id, responses)
                        answered.update(responses)
                interval = (task.poll_interval_ms or created.poll_interval_ms or 200) / 1000
                await anyio.sleep(min(interval, 1.0))


Elicit = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[types.ElicitResult | types.ErrorData]]


def approve(ok: bool) -> Elicit:
    """An elicitation callback that accepts with `{"ok": ok}` and records the prompts."""

    async def callback(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        callback.prompts.append(params.message)  # type: ignore[attr-defined]
        return types.ElicitResult(action="accept", content={"ok": ok})

    callback.prompts = []  # type: ignore[attr-defined]
    return callback
