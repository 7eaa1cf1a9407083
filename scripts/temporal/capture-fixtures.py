"""Capture real Temporal server responses for the Temporal engine's translation tests.

Runs each test workflow of tests/temporal/workflows.py on the server scripts/temporal/up.sh
started (with a worker in this process) and saves, per case, what the server answered:

  <case>.describe.json  DescribeWorkflowExecutionResponse (canonical protobuf JSON, as
                        google.protobuf.json_format writes it: camelCase names, enums as
                        their names, int64 as strings, payload data base64)
  <case>.history.json   GetWorkflowExecutionHistoryResponse, every page merged
  <case>.http-*.json    the same reads through the server's HTTP API (its own JSON: the
                        shape a client of that API gets), where the case saves them
  and a few single answers (query results, update outcomes, start responses).

    py=$(scripts/temporal/python-setup.sh | tail -n 1)
    eval "$(scripts/temporal/up.sh)"
    "$py" scripts/temporal/capture-fixtures.py [--out adapters/temporal/tests/fixtures]

Fixtures hold no secrets: ids are the ones this script chooses, identities are replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import timedelta
from typing import Any, Awaitable, Callable, Optional

import temporalio
from google.protobuf import json_format

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "temporal"))

from temporalio.api.common.v1 import Payloads, WorkflowExecution  # noqa: E402
from temporalio.api.enums.v1 import (  # noqa: E402
    UpdateWorkflowExecutionLifecycleStage,
    WorkflowIdConflictPolicy,
    WorkflowIdReusePolicy,
)
from temporalio.api.query.v1 import WorkflowQuery  # noqa: E402
from temporalio.api.taskqueue.v1 import TaskQueue  # noqa: E402
from temporalio.api.common.v1 import WorkflowType  # noqa: E402
from temporalio.api.update.v1 import Input as UpdateInput  # noqa: E402
from temporalio.api.update.v1 import Meta as UpdateMeta  # noqa: E402
from temporalio.api.update.v1 import Request as UpdateRequest  # noqa: E402
from temporalio.api.update.v1 import WaitPolicy  # noqa: E402
from temporalio.api.workflowservice.v1 import (  # noqa: E402
    DescribeWorkflowExecutionRequest,
    GetWorkflowExecutionHistoryRequest,
    QueryWorkflowRequest,
    StartWorkflowExecutionRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.converter import default as default_converter  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

import workflows  # noqa: E402

IDENTITY = "taskgate-fixtures"
SITE_PACKAGES = os.path.dirname(os.path.dirname(os.path.abspath(temporalio.__file__)))


class Capture:
    def __init__(self, client: Client, http: Optional[str], out: str, queue: str, suffix: str):
        self.client = client
        self.svc = client.workflow_service
        self.ns = client.namespace
        self.http = http
        self.out = out
        self.queue = queue
        self.suffix = suffix
        self.written: list[str] = []

    def wid(self, case: str) -> str:
        return f"fixture-{case}-{self.suffix}"

    def save(self, name: str, value: Any) -> None:
        path = os.path.join(self.out, name)
        text = json.dumps(value, indent=2, sort_keys=True) + "\n"
        # Stack traces name files on this machine: keep them machine-independent.
        text = text.replace(SITE_PACKAGES, "<site-packages>").replace(ROOT, "<repo>")
        with open(path, "w") as f:
            f.write(text)
        self.written.append(name)

    def save_msg(self, name: str, msg: Any) -> None:
        self.save(name, json_format.MessageToDict(msg))

    async def describe(self, wid: str, run_id: str = "") -> Any:
        return await self.svc.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=self.ns, execution=WorkflowExecution(workflow_id=wid, run_id=run_id)
            )
        )

    async def history(self, wid: str, run_id: str = "") -> Any:
        merged = None
        token = b""
        while True:
            page = await self.svc.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=self.ns,
                    execution=WorkflowExecution(workflow_id=wid, run_id=run_id),
                    next_page_token=token,
                )
            )
            if merged is None:
                merged = page
            else:
                merged.history.events.extend(page.history.events)
            token = page.next_page_token
            if not token:
                merged.next_page_token = b""
                return merged

    def http_get(self, path: str, query: Optional[dict] = None) -> Any:
        if not self.http:
            return None
        url = f"{self.http}/api/v1/namespaces/{urllib.parse.quote(self.ns)}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return {"status": resp.status, "body": json.load(resp)}
        except urllib.error.HTTPError as err:
            return {"status": err.code, "body": json.loads(err.read() or b"null")}

    async def save_reads(self, case: str, wid: str, run_id: str = "", http: bool = True) -> None:
        self.save_msg(f"{case}.describe.json", await self.describe(wid, run_id))
        self.save_msg(f"{case}.history.json", await self.history(wid, run_id))
        if http and self.http:
            q = {"execution.runId": run_id} if run_id else None
            self.save(f"{case}.http-describe.json", self.http_get(f"/workflows/{wid}", q))
            self.save(f"{case}.http-history.json", self.http_get(f"/workflows/{wid}/history", q))

    async def start(self, case: str, wf: str, *args: Any, **kw: Any) -> WorkflowHandle:
        return await self.client.start_workflow(
            wf, args=list(args), id=self.wid(case), task_queue=self.queue, **kw
        )

    async def start_raw(self, wid: str, arg: Any) -> Any:
        try:
            resp = await self.svc.start_workflow_execution(
                StartWorkflowExecutionRequest(
                    namespace=self.ns,
                    workflow_id=wid,
                    workflow_type=WorkflowType(name="TaskgateSucceed"),
                    task_queue=TaskQueue(name=self.queue),
                    input=Payloads(payloads=default_converter().payload_converter.to_payloads([arg])),
                    identity=IDENTITY,
                    request_id=str(uuid.uuid4()),
                    workflow_id_conflict_policy=WorkflowIdConflictPolicy.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
                    workflow_id_reuse_policy=WorkflowIdReusePolicy.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
                )
            )
            return json_format.MessageToDict(resp)
        except RPCError as err:
            return _rpc_error(err)

    async def query_raw(self, wid: str, name: str) -> Any:
        try:
            resp = await self.svc.query_workflow(
                QueryWorkflowRequest(
                    namespace=self.ns,
                    execution=WorkflowExecution(workflow_id=wid),
                    query=WorkflowQuery(query_type=name),
                )
            )
            return json_format.MessageToDict(resp)
        except RPCError as err:
            return _rpc_error(err)

    async def update_raw(self, wid: str, update_id: str, answer: Any) -> Any:
        try:
            resp = await self.svc.update_workflow_execution(
                UpdateWorkflowExecutionRequest(
                    namespace=self.ns,
                    workflow_execution=WorkflowExecution(workflow_id=wid),
                    wait_policy=WaitPolicy(
                        lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED
                    ),
                    request=UpdateRequest(
                        meta=UpdateMeta(update_id=update_id, identity=IDENTITY),
                        input=UpdateInput(
                            name=workflows.UPDATE_ANSWER,
                            args=Payloads(payloads=default_converter().payload_converter.to_payloads([answer])),
                        ),
                    ),
                )
            )
            return json_format.MessageToDict(resp)
        except RPCError as err:
            return _rpc_error(err)


def _rpc_error(err: RPCError) -> dict:
    """A gRPC error as the fixtures keep it: code, message and the details' types."""
    out: dict = {"status": err.status.name, "code": int(err.status), "message": err.message}
    try:
        out["details"] = [
            {"@type": d.type_url, **json_format.MessageToDict(_unpack(d))} for d in err.grpc_status.details
        ]
    except Exception as e:  # noqa: BLE001 - details are a bonus
        out["detailsError"] = str(e)
    return {"rpcError": out}


def _unpack(any_msg: Any) -> Any:
    from google.protobuf import symbol_database

    name = any_msg.type_url.split("/")[-1]
    cls = symbol_database.Default().GetSymbol(name)
    msg = cls()
    any_msg.Unpack(msg)
    return msg


async def until(what: str, check: Callable[[], Awaitable[bool]], seconds: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def capture(c: Capture) -> None:
    svc_status = lambda d: d.workflow_execution_info.status  # noqa: E731

    async def status_is(wid: str, status: int) -> bool:
        return svc_status(await c.describe(wid)) == status

    async def has_pending_activity_or_timer(wid: str) -> bool:
        h = await c.history(wid)
        return any(e.event_type in (17,) for e in h.history.events)  # TIMER_STARTED

    # --- succeeds (running while its timer waits, then completed)
    h = await c.start("succeed", "TaskgateSucceed", {"name": "taskgate", "wait_seconds": 1.5},
                      memo={"taskgate_args": "sha256:0f3a"})
    await until("the succeed timer", lambda: has_pending_activity_or_timer(h.id))
    await c.save_reads("succeed-running", h.id)
    # The same id started again while it runs, conflict policy USE_EXISTING: the
    # server answers started=false and the running run's id.
    c.save("start-running-use-existing.start.json", await c.start_raw(h.id, {"name": "x"}))
    await h.result()
    await c.save_reads("succeed", h.id)
    # The same id started again once it is closed, reuse policy REJECT_DUPLICATE: an
    # ALREADY_EXISTS error (its details: WorkflowExecutionAlreadyStartedFailure).
    c.save("start-closed-reject-duplicate.start.json", await c.start_raw(h.id, {"name": "x"}))
    # A query the workflow does not declare (it is closed: the SDK replays it to answer).
    c.save("succeed.query-unknown.json", await c.query_raw(h.id, workflows.QUERY_PROGRESS))

    # --- fails in an activity
    h = await c.start("fail", "TaskgateFail", {"message": "the deploy exploded"})
    await until("fail to close", lambda: status_is(h.id, 3))  # FAILED
    await c.save_reads("fail", h.id)

    # --- cancelled gracefully
    h = await c.start("cancel", "TaskgateRunUntilCancelled", {})
    await until("the cancel workflow to start", lambda: _has_event(c, h.id, 6))  # WFT completed
    c.save_msg("cancel-running.describe.json", await c.describe(h.id))
    await h.cancel()
    await until("cancel to close", lambda: status_is(h.id, 4))  # CANCELED
    await c.save_reads("cancel", h.id)

    # --- terminated
    h = await c.start("terminate", "TaskgateRunUntilCancelled", {})
    await until("the terminate workflow to start", lambda: _has_event(c, h.id, 6))
    await h.terminate("stopped by the fixture capture")
    await until("terminate to close", lambda: status_is(h.id, 5))  # TERMINATED
    await c.save_reads("terminate", h.id)

    # --- timed out (run timeout)
    h = await c.start("timeout", "TaskgateRunUntilCancelled", {}, run_timeout=timedelta(seconds=1))
    await until("timeout to close", lambda: status_is(h.id, 7))  # TIMED_OUT
    await c.save_reads("timeout", h.id)

    # --- asks a person: two steps, answered; a stale key, a bad answer refused
    h = await c.start("ask", "TaskgateAsk", {"steps": 2, "title": "release"})

    async def open_key(wid: str, key: str) -> bool:
        r = await c.query_raw(wid, workflows.QUERY_INPUT)
        if "rpcError" in r:
            return False
        q = await c.client.get_workflow_handle(wid).query(workflows.QUERY_INPUT)
        return isinstance(q, dict) and q.get("key") == key

    await until("the first question", lambda: open_key(h.id, "step-1"))
    c.save_msg("ask-waiting.describe.json", await c.describe(h.id))
    c.save("ask-waiting.query-input.json", await c.query_raw(h.id, workflows.QUERY_INPUT))
    c.save("ask.update-invalid.json", await c.update_raw(
        h.id, "u-invalid", {"key": "step-1", "action": "accept", "content": {"approved": "yes"}}))
    c.save("ask.update-accepted.json", await c.update_raw(
        h.id, "u-1", {"key": "step-1", "action": "accept", "content": {"approved": True, "note": "ok"}}))
    await until("the second question", lambda: open_key(h.id, "step-2"))
    c.save("ask.update-stale.json", await c.update_raw(
        h.id, "u-stale", {"key": "step-1", "action": "accept", "content": {"approved": True}}))
    c.save("ask.update-accepted-again.json", await c.update_raw(
        h.id, "u-1", {"key": "step-1", "action": "accept", "content": {"approved": True, "note": "ok"}}))
    await c.update_raw(h.id, "u-2", {"key": "step-2", "action": "accept", "content": {"approved": True}})
    await h.result()
    c.save("ask.query-input-closed.json", await c.query_raw(h.id, workflows.QUERY_INPUT))
    c.save("ask.update-after-close.json", await c.update_raw(
        h.id, "u-late", {"key": "step-2", "action": "accept", "content": {"approved": True}}))
    await c.save_reads("ask", h.id)

    h = await c.start("declined", "TaskgateAsk", {"steps": 1})
    await until("the question", lambda: open_key(h.id, "step-1"))
    c.save("declined.update.json", await c.update_raw(
        h.id, "u-decline", {"key": "step-1", "action": "decline", "content": None}))
    await until("declined to close", lambda: status_is(h.id, 3))
    await c.save_reads("declined", h.id)

    # --- progress, advanced by signals
    h = await c.start("progress", "TaskgateProgress", {"steps": 3, "manual": True})
    await until("the progress workflow to start", lambda: _has_event(c, h.id, 6))
    await h.signal(workflows.SIGNAL_ADVANCE)

    async def progressed(n: int) -> bool:
        p = await h.query(workflows.QUERY_PROGRESS)
        return p["progress"] >= n

    await until("one step", lambda: progressed(1))
    c.save_msg("progress-running.describe.json", await c.describe(h.id))
    c.save("progress-running.query-progress.json", await c.query_raw(h.id, workflows.QUERY_PROGRESS))
    # The SDK's built-in query that carries the current details (set_current_details):
    # DescribeWorkflowExecution does not show them.
    c.save("progress-running.query-metadata.json", await c.query_raw(h.id, "__temporal_workflow_metadata"))
    c.save("progress-running.query-input-unknown.json", await c.query_raw(h.id, workflows.QUERY_INPUT))
    if c.http:
        c.save("progress-running.http-describe.json", c.http_get(f"/workflows/{h.id}"))
    await h.signal(workflows.SIGNAL_ADVANCE)
    await h.signal(workflows.SIGNAL_ADVANCE)
    await h.result()
    await c.save_reads("progress", h.id, http=False)

    # --- continues as new once
    h = await c.start("continue", "TaskgateContinueAsNew", {"rounds": 2})
    first_run = h.first_execution_run_id or h.result_run_id
    await h.result()
    await c.save_reads("continue-first-run", h.id, first_run or "")
    await c.save_reads("continue", h.id)

    # --- varied history: heartbeats, a timer, a retried activity, a signal
    h = await c.start("chatty", "TaskgateChatty", {"beats": 3})
    await h.signal(workflows.SIGNAL_NOTE, {"from": "fixture", "text": "hi"})
    await h.result()
    await c.save_reads("chatty", h.id)

    # --- positional arguments
    h = await c.start("positional", "TaskgatePositional", "ada", 3)
    await h.result()
    await c.save_reads("positional", h.id, http=False)

    # --- long poll: waitNewEvent on a closed workflow answers at once with no events
    resp = await c.svc.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=c.ns,
            execution=WorkflowExecution(workflow_id=h.id),
            wait_new_event=True,
            history_event_filter_type=2,  # CLOSE_EVENT
        )
    )
    c.save_msg("positional.history-close-event.json", resp)


async def _has_event(c: Capture, wid: str, event_type: int) -> bool:
    h = await c.history(wid)
    return any(e.event_type == event_type for e in h.history.events)


async def main() -> int:
    parser = argparse.ArgumentParser(description="capture Temporal fixtures")
    parser.add_argument("--address", default=os.environ.get("TASKGATE_TEMPORAL_ADDRESS", "127.0.0.1:17233"))
    parser.add_argument("--namespace", default=os.environ.get("TASKGATE_TEMPORAL_NAMESPACE", "taskgate-test"))
    parser.add_argument("--http", default=os.environ.get("TASKGATE_TEMPORAL_HTTP"),
                        help="the server's HTTP API base URL (optional)")
    parser.add_argument("--out", default=os.path.join(ROOT, "adapters", "temporal", "tests", "fixtures"))
    parser.add_argument("--suffix", default="1", help="appended to every workflow id")
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)

    client = await Client.connect(opts.address, namespace=opts.namespace, identity=IDENTITY)
    queue = f"fixtures-{uuid.uuid4().hex[:8]}"
    cap = Capture(client, opts.http, opts.out, queue, opts.suffix)
    async with Worker(client, task_queue=queue, workflows=workflows.WORKFLOWS,
                      activities=workflows.ACTIVITIES, identity=IDENTITY):
        await capture(cap)
    for name in cap.written:
        print(os.path.join(opts.out, name))
    return 0


if __name__ == "__main__":
    code = asyncio.run(main())
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter finalisation: the SDK's native runtime can abort while it is torn
    # down after the work is done, which would turn a good capture into a failed exit.
    os._exit(code)
