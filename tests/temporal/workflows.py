"""The workflows taskgate's Temporal engine tests run (see README.md beside this file).

Each workflow takes one JSON object (a dict) unless said otherwise and returns one.
The names of the query, update and signals below are the convention the engine's
tests configure in their targets.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Optional

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

QUERY_INPUT = "taskgate_input"
UPDATE_ANSWER = "taskgate_answer"
SIGNAL_ANSWER = "taskgate_answer_signal"
QUERY_PROGRESS = "taskgate_progress"
SIGNAL_ADVANCE = "taskgate_advance"
SIGNAL_NOTE = "taskgate_note"

SHORT = timedelta(seconds=30)


# ---------------------------------------------------------------- activities ----


@activity.defn(name="greet")
async def greet(name: str) -> str:
    return f"hello {name}"


@activity.defn(name="explode")
async def explode(message: str) -> None:
    raise ApplicationError(message, type="TaskgateExploded", non_retryable=True)


@activity.defn(name="cleanup")
async def cleanup(reason: str) -> str:
    return f"cleaned up after {reason}"


@activity.defn(name="work_step")
async def work_step(step: int) -> int:
    return step


@activity.defn(name="heartbeat_beats")
async def heartbeat_beats(beats: int) -> int:
    for i in range(beats):
        activity.heartbeat({"beat": i + 1, "of": beats})
        await asyncio.sleep(0.05)
    return beats


@activity.defn(name="flaky_once")
async def flaky_once(tag: str) -> str:
    # Fails its first attempt so the history holds a retried activity.
    if activity.info().attempt == 1:
        raise ApplicationError("first attempt fails on purpose", type="TaskgateFlaky")
    return f"{tag} ok on attempt {activity.info().attempt}"


ACTIVITIES = [greet, explode, cleanup, work_step, heartbeat_beats, flaky_once]


def _arg(args: Any, name: str, default: Any) -> Any:
    if isinstance(args, dict) and name in args and args[name] is not None:
        return args[name]
    return default


# ---------------------------------------------------------------- workflows -----


@workflow.defn(name="TaskgateSucceed")
class Succeed:
    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        wait = float(_arg(args, "wait_seconds", 0))
        if wait > 0:
            await workflow.sleep(wait)
        greeting = await workflow.execute_activity(
            greet, str(_arg(args, "name", "world")), start_to_close_timeout=SHORT
        )
        return {"greeting": greeting, "input": args if args is not None else {}}


@workflow.defn(name="TaskgateFail")
class Fail:
    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        await workflow.execute_activity(
            explode,
            str(_arg(args, "message", "boom")),
            start_to_close_timeout=SHORT,
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
        return {"unreachable": True}


@workflow.defn(name="TaskgateRunUntilCancelled")
class RunUntilCancelled:
    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        workflow.set_current_details("running until cancelled")
        try:
            await workflow.wait_condition(lambda: False)
        except asyncio.CancelledError:
            # Graceful: clean up (the activity must not itself be cancelled), then end
            # as Cancelled by letting the cancellation through.
            await asyncio.shield(
                workflow.execute_activity(
                    cleanup, "cancellation", start_to_close_timeout=SHORT
                )
            )
            raise
        return {"unreachable": True}


def _schema_errors(schema: dict, content: Any) -> Optional[str]:
    """A small check of a flat object against a flat JSON Schema (types, required,
    enums, no unknown fields). Returns what is wrong, or None."""
    if not isinstance(content, dict):
        return "content must be a JSON object"
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in content:
            return f"field {name!r} is required"
    for name, value in content.items():
        spec = props.get(name)
        if spec is None:
            return f"field {name!r} is not in the schema"
        want = spec.get("type")
        ok = {
            "string": lambda v: isinstance(v, str),
            "boolean": lambda v: isinstance(v, bool),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        }.get(want, lambda v: True)
        if not ok(value):
            return f"field {name!r} must be of type {want}"
        if "enum" in spec and value not in spec["enum"]:
            return f"field {name!r} must be one of {spec['enum']}"
    return None


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "go ahead?"},
        "note": {"type": "string", "description": "a remark for the log"},
    },
    "required": ["approved"],
}


@workflow.defn(name="TaskgateAsk")
class Ask:
    def __init__(self) -> None:
        self._open: Optional[dict] = None
        self._answer: Optional[dict] = None

    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        steps = int(_arg(args, "steps", 1))
        title = str(_arg(args, "title", "deploy"))
        answers = []
        for i in range(1, steps + 1):
            self._answer = None
            self._open = {
                "key": f"step-{i}",
                "message": f"Approve {title} step {i} of {steps}?",
                "schema": ANSWER_SCHEMA,
            }
            workflow.set_current_details(f"waiting for an answer to step {i} of {steps}")
            await workflow.wait_condition(lambda: self._answer is not None)
            answer = self._answer
            self._open = None
            if answer["action"] != "accept":
                raise ApplicationError(
                    f"step {i} was {answer['action']}d by the person asked"
                    if answer["action"] == "decline"
                    else f"step {i} was dismissed (cancel) by the person asked",
                    {"key": answer["key"], "action": answer["action"]},
                    type="taskgate.Declined",
                    non_retryable=True,
                )
            answers.append(answer.get("content"))
            workflow.set_current_details(f"step {i} of {steps} answered")
        return {"answers": answers, "title": title}

    @workflow.query(name=QUERY_INPUT)
    def input(self) -> Optional[dict]:
        return self._open

    def _check(self, answer: Any) -> Optional[tuple[str, str]]:
        if not isinstance(answer, dict):
            return ("taskgate.InvalidAnswer", "the answer must be a JSON object")
        key = answer.get("key")
        if self._open is None or key != self._open["key"]:
            return (
                "taskgate.StaleKey",
                f"no open question has the key {key!r}"
                + (f" (open: {self._open['key']!r})" if self._open else " (none open)"),
            )
        action = answer.get("action")
        if action not in ("accept", "decline", "cancel"):
            return ("taskgate.InvalidAnswer", f"unknown action {action!r}")
        if action == "accept":
            wrong = _schema_errors(self._open["schema"], answer.get("content"))
            if wrong:
                return ("taskgate.InvalidAnswer", wrong)
        return None

    @workflow.update(name=UPDATE_ANSWER)
    async def answer(self, answer: Any) -> dict:
        self._answer = answer
        return {"key": answer["key"], "action": answer["action"]}

    @answer.validator
    def validate_answer(self, answer: Any) -> None:
        wrong = self._check(answer)
        if wrong:
            raise ApplicationError(wrong[1], type=wrong[0], non_retryable=True)

    @workflow.signal(name=SIGNAL_ANSWER)
    def answer_signal(self, answer: Any) -> None:
        wrong = self._check(answer)
        if wrong:
            workflow.logger.warning("ignoring an invalid answer signal: %s", wrong[1])
            return
        self._answer = answer


@workflow.defn(name="TaskgateProgress")
class Progress:
    def __init__(self) -> None:
        self._done = 0
        self._total = 0
        self._advances = 0

    def _progress(self) -> dict:
        return {
            "progress": self._done,
            "total": self._total,
            "message": f"step {self._done} of {self._total}",
        }

    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        self._total = int(_arg(args, "steps", 3))
        step_seconds = float(_arg(args, "step_seconds", 0.5))
        manual = bool(_arg(args, "manual", False))
        workflow.set_current_details(self._progress()["message"])
        for i in range(1, self._total + 1):
            if manual:
                await workflow.wait_condition(lambda: self._advances >= i)
            elif step_seconds > 0:
                await workflow.sleep(step_seconds)
            await workflow.execute_activity(work_step, i, start_to_close_timeout=SHORT)
            self._done = i
            workflow.set_current_details(self._progress()["message"])
        return {"steps": self._total}

    @workflow.query(name=QUERY_PROGRESS)
    def progress(self) -> dict:
        return self._progress()

    @workflow.signal(name=SIGNAL_ADVANCE)
    def advance(self) -> None:
        self._advances += 1


@workflow.defn(name="TaskgateContinueAsNew")
class ContinueAsNew:
    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        rounds = int(_arg(args, "rounds", 2))
        current = int(_arg(args, "round", 1))
        await workflow.execute_activity(work_step, current, start_to_close_timeout=SHORT)
        if current < rounds:
            workflow.continue_as_new({"rounds": rounds, "round": current + 1})
        return {"rounds": rounds, "round": current}


@workflow.defn(name="TaskgateChatty")
class Chatty:
    def __init__(self) -> None:
        self._notes: list = []

    @workflow.run
    async def run(self, args: Optional[dict] = None) -> dict:
        beats = int(_arg(args, "beats", 3))
        await workflow.execute_activity(
            heartbeat_beats,
            beats,
            start_to_close_timeout=SHORT,
            heartbeat_timeout=timedelta(seconds=10),
        )
        await workflow.sleep(0.2)
        await workflow.execute_activity(
            flaky_once,
            "side",
            start_to_close_timeout=SHORT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=100), maximum_attempts=3
            ),
        )
        return {"beats": beats, "notes": self._notes}

    @workflow.signal(name=SIGNAL_NOTE)
    def note(self, note: Any) -> None:
        self._notes.append(note)


@workflow.defn(name="TaskgatePositional")
class Positional:
    @workflow.run
    async def run(self, name: str, times: int) -> dict:
        return {"name": name, "times": times}


WORKFLOWS = [Succeed, Fail, RunUntilCancelled, Ask, Progress, ContinueAsNew, Chatty, Positional]
