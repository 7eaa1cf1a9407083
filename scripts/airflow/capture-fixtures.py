#!/usr/bin/env python3
"""Captures real Airflow REST API payloads for taskgate's translation tests.

Drives the DAGs of tests/airflow/dags on the Airflow that scripts/airflow/up.sh
started (TASKGATE_AIRFLOW_URL, _USERNAME, _PASSWORD) and writes each answer to
adapters/airflow/tests/fixtures/NAME.json, as Airflow sent it. Run it again after
an Airflow upgrade and re-run the tests:

    eval "$(scripts/airflow/up.sh)" && scripts/airflow/capture-fixtures.py

With the argument `logs` it captures only the task-log payloads (`logs_*.json`,
read by the logs tests of src/logs.rs).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

URL = os.environ["TASKGATE_AIRFLOW_URL"].rstrip("/")
API = URL + "/api/v2"
OUT = Path(__file__).resolve().parents[2] / "adapters" / "airflow" / "tests" / "fixtures"
DEADLINE = 120.0


def call(method: str, path: str, body=None, token=None, accept="application/json"):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(path if path.startswith("http") else API + path, data=data, method=method)
    req.add_header("Accept", accept)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            return err.code, json.loads(raw)
        except ValueError:
            return err.code, {"raw": raw.decode(errors="replace")}


def save(name: str, status: int, payload) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"status": status, "body": payload}, indent=2, sort_keys=True) + "\n")
    print(f"captured {name} (HTTP {status})", file=sys.stderr)


def login() -> str:
    status, body = call(
        "POST",
        URL + "/auth/token",
        {"username": os.environ["TASKGATE_AIRFLOW_USERNAME"], "password": os.environ["TASKGATE_AIRFLOW_PASSWORD"]},
    )
    assert status in (200, 201), (status, body)
    return body["access_token"]


def wait(what: str, probe):
    end = time.monotonic() + DEADLINE
    last = None
    while time.monotonic() < end:
        last = probe()
        if last:
            return last
        time.sleep(0.3)
    raise SystemExit(f"timed out waiting for {what}; last: {last}")


def trigger(token: str, dag: str, conf: dict) -> str:
    run_id = f"capture-{dag.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    status, body = call("POST", f"/dags/{dag}/dagRuns", {"dag_run_id": run_id, "logical_date": None, "conf": conf}, token)
    assert status == 200, (status, body)
    return run_id


def run(token, dag, run_id):
    return call("GET", f"/dags/{dag}/dagRuns/{run_id}", token=token)


def tis(token, dag, run_id):
    return call("GET", f"/dags/{dag}/dagRuns/{run_id}/taskInstances", token=token)


def finished(token, dag, run_id):
    def probe():
        status, body = run(token, dag, run_id)
        return (status, body) if body.get("state") in ("success", "failed") else None

    return wait(f"{dag} {run_id} to finish", probe)


def task_in_state(token, dag, run_id, task_id, states):
    def probe():
        status, body = tis(token, dag, run_id)
        for ti in body["task_instances"]:
            if ti["task_id"] == task_id and ti["state"] in states:
                return status, body
        return None

    return wait(f"{dag}.{task_id} to be {states}", probe)


def main() -> None:
    token = login()

    # A success with an XCom result.
    rid = trigger(token, "tg_success", {"dataset": "sales", "rows": 4})
    save("trigger_queued", *run(token, "tg_success", rid))
    status, body = call("POST", "/dags/tg_success/dagRuns", {"dag_run_id": rid, "logical_date": None, "conf": {"rows": 1}}, token)
    save("trigger_duplicate_409", status, body)
    save("run_success", *finished(token, "tg_success", rid))
    save("tis_success", *tis(token, "tg_success", rid))
    save("xcom_success", *call("GET", f"/dags/tg_success/dagRuns/{rid}/taskInstances/load/xcomEntries/return_value?deserialize=true", token=token))
    save("xcom_missing_404", *call("GET", f"/dags/tg_success/dagRuns/{rid}/taskInstances/load/xcomEntries/nope?deserialize=true", token=token))
    save("dag_details_success", *call("GET", "/dags/tg_success/details", token=token))
    save("dag_paused", *call("GET", "/dags/tg_paused", token=token))
    save("dag_unknown_404", *call("GET", "/dags/no_such_dag", token=token))
    save("run_unknown_404", *call("GET", "/dags/tg_success/dagRuns/no-such-run", token=token))
    save("unauthenticated_401", *call("GET", "/dags/tg_success"))
    save("bad_token_403", *call("GET", "/dags/tg_success", token="not-a-token"))

    # A failure, with its log.
    rid = trigger(token, "tg_fail", {})
    save("run_failed", *finished(token, "tg_fail", rid))
    status, body = tis(token, "tg_fail", rid)
    save("tis_failed", status, body)
    failed = [t for t in body["task_instances"] if t["state"] == "failed"][0]
    save("log_failed", *call("GET", f"/dags/tg_fail/dagRuns/{rid}/taskInstances/{failed['task_id']}/logs/{failed['try_number']}?map_index=-1", token=token))

    # A long run, read while running, then marked failed with a note (taskgate's cancel).
    rid = trigger(token, "tg_long", {})
    save("run_running", *run(token, "tg_long", rid))
    save("tis_running", *task_in_state(token, "tg_long", rid, "sleep_long", ("running",)))
    save("run_running_with_task", *run(token, "tg_long", rid))
    save(
        "patch_cancel",
        *call("PATCH", f"/dags/tg_long/dagRuns/{rid}", {"state": "failed", "note": "taskgate: cancelled by the client"}, token),
    )
    save("run_cancelled", *finished(token, "tg_long", rid))
    save("tis_cancelled", *task_in_state(token, "tg_long", rid, "sleep_long", ("failed", "skipped", "removed", "upstream_failed")))

    # An approval: awaiting input, its HITL details, the answer, a stale answer.
    rid = trigger(token, "tg_approval", {"version": "1.2.3"})
    save("tis_awaiting_input", *task_in_state(token, "tg_approval", rid, "approve_release", ("awaiting_input", "deferred")))
    save("run_awaiting_input", *run(token, "tg_approval", rid))
    save("hitl_approval", *call("GET", f"/dags/tg_approval/dagRuns/{rid}/hitlDetails?response_received=false", token=token))
    save(
        "hitl_answer_approval",
        *call("PATCH", f"/dags/tg_approval/dagRuns/{rid}/taskInstances/approve_release/-1/hitlDetails", {"chosen_options": ["Reject"], "params_input": {}}, token),
    )
    save(
        "hitl_answer_stale_409",
        *call("PATCH", f"/dags/tg_approval/dagRuns/{rid}/taskInstances/approve_release/-1/hitlDetails", {"chosen_options": ["Approve"], "params_input": {}}, token),
    )
    save("run_rejected", *finished(token, "tg_approval", rid))
    save("tis_rejected", *tis(token, "tg_approval", rid))

    # A form.
    rid = trigger(token, "tg_form", {})
    task_in_state(token, "tg_form", rid, "ask_details", ("awaiting_input", "deferred"))
    save("hitl_form", *call("GET", f"/dags/tg_form/dagRuns/{rid}/hitlDetails?response_received=false", token=token))
    save(
        "hitl_answer_form_invalid",
        *call("PATCH", f"/dags/tg_form/dagRuns/{rid}/taskInstances/ask_details/-1/hitlDetails", {"chosen_options": ["Nope"], "params_input": {}}, token),
    )
    save(
        "hitl_answer_form",
        *call(
            "PATCH",
            f"/dags/tg_form/dagRuns/{rid}/taskInstances/ask_details/-1/hitlDetails",
            {"chosen_options": ["OK"], "params_input": {"region": "us-east-1", "replicas": 3}},
            token,
        ),
    )
    save("run_form_success", *finished(token, "tg_form", rid))
    save("xcom_form", *call("GET", f"/dags/tg_form/dagRuns/{rid}/taskInstances/use_details/xcomEntries/return_value?deserialize=true", token=token))


def log(token, dag, run_id, task_id, try_number, continuation=None):
    query = f"?map_index=-1&token={continuation}" if continuation else "?map_index=-1"
    return call("GET", f"/dags/{dag}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}{query}", token=token)


def main_logs() -> None:
    token = login()

    # A task that prints lines while it runs: read while it runs (from the start, then
    # on from Airflow's continuation token), then to its end.
    rid = trigger(token, "tg_logs", {"lines": 8, "interval": 1})
    save("logs_dag_tasks", *call("GET", "/dags/tg_logs/tasks", token=token))
    save("logs_tis_running", *task_in_state(token, "tg_logs", rid, "talk", ("running",)))

    def printed(n):
        def probe():
            status, body = log(token, "tg_logs", rid, "talk", 1)
            said = [e for e in body.get("content", []) if "tg-logs line" in str(e)]
            return (status, body) if len(said) >= n else None

        return probe

    status, first = wait("talk to print a line", printed(1))
    save("logs_running_first", status, first)
    assert first["continuation_token"], first

    def grew():
        status, body = log(token, "tg_logs", rid, "talk", 1, first["continuation_token"])
        return (status, body) if body.get("content") else None

    status, nxt = wait("talk to print more", grew)
    save("logs_running_next", status, nxt)
    finished(token, "tg_logs", rid)
    save("logs_finished_rest", *log(token, "tg_logs", rid, "talk", 1, nxt["continuation_token"] or first["continuation_token"]))
    save("logs_finished_whole", *log(token, "tg_logs", rid, "talk", 1))
    save("logs_tis_finished", *tis(token, "tg_logs", rid))
    save("logs_bad_token_400", *log(token, "tg_logs", rid, "talk", 1, "eyJmb3JnZWQiOnRydWV9.bm90LWEtc2lnbmF0dXJl"))
    save("logs_try_missing_404", *log(token, "tg_logs", rid, "talk", 7))

    # A task that fails its first try and succeeds in its second.
    rid = trigger(token, "tg_retry", {})
    finished(token, "tg_retry", rid)
    save("logs_retry_tis", *tis(token, "tg_retry", rid))
    save("logs_retry_try1", *log(token, "tg_retry", rid, "flaky", 1))
    save("logs_retry_try2", *log(token, "tg_retry", rid, "flaky", 2))


if __name__ == "__main__":
    if sys.argv[1:] == ["logs"]:
        main_logs()
    else:
        main()
