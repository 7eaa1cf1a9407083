"""DAGs for taskgate's Airflow engine tests (scripts/airflow/up.sh loads this folder).

Each DAG is triggered by the tests through the REST API only (no schedule). The DAG
ids are listed by up.sh, which waits until all of them are parsed.
"""

from __future__ import annotations

import time

import pendulum
from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLEntryOperator
from airflow.sdk import DAG, Param, task

START = pendulum.datetime(2026, 1, 1, tz="UTC")


# Succeeds after three tasks; the last returns a JSON object built from the conf.
with DAG(
    dag_id="tg_success",
    schedule=None,
    start_date=START,
    catchup=False,
    params={
        "dataset": Param("demo", type="string", description="The dataset to process"),
        "rows": Param(3, type="integer", minimum=0),
    },
    tags=["taskgate-tests"],
):

    @task
    def extract(**context):
        conf = context["dag_run"].conf or {}
        rows = int(conf.get("rows", 3))
        print(f"extracting {rows} rows")
        return list(range(rows))

    @task
    def transform(values):
        return [v * 2 for v in values]

    @task
    def load(values, **context):
        conf = context["dag_run"].conf or {}
        return {"dataset": conf.get("dataset"), "total": sum(values), "count": len(values)}

    load(transform(extract()))


# Fails in its second task after printing a few log lines.
with DAG(
    dag_id="tg_fail",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task
    def prepare():
        return "ready"

    @task(retries=0)
    def explode(_ready):
        for i in range(1, 6):
            print(f"taskgate-log-line {i} of 5")
        raise RuntimeError("taskgate test failure: the input table is empty")

    explode(prepare())


# Runs for ten minutes unless stopped: for cancel tests.
with DAG(
    dag_id="tg_long",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task
    def warm_up():
        return 1

    @task(retries=0)
    def sleep_long(_x):
        for i in range(600):
            print(f"still working ({i}s)")
            time.sleep(1)

    sleep_long(warm_up())


# Waits for an approval, then reports it.
with DAG(
    dag_id="tg_approval",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):
    approve = ApprovalOperator(
        task_id="approve_release",
        subject="Release {{ dag_run.conf.get('version', 'unknown') }}?",
        body="Approve the release of version {{ dag_run.conf.get('version', 'unknown') }}.",
    )

    @task
    def release(**context):
        conf = context["dag_run"].conf or {}
        return {"released": conf.get("version")}

    approve >> release()


# Asks for a form (params), then returns what was entered.
with DAG(
    dag_id="tg_form",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):
    ask = HITLEntryOperator(
        task_id="ask_details",
        subject="Deployment details",
        body="Which region, and how many replicas?",
        params={
            "region": Param("eu-west-1", type="string", enum=["eu-west-1", "us-east-1"]),
            "replicas": Param(2, type="integer", minimum=1, maximum=10),
        },
    )

    @task
    def use_details(answer):
        return {"chosen": answer["chosen_options"], "details": answer["params_input"]}

    use_details(ask.output)


# Paused when created: a trigger must be refused by taskgate, not queued.
with DAG(
    dag_id="tg_paused",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=True,
    tags=["taskgate-tests"],
):

    @task
    def never():
        return "should not run"

    never()


# Runs for two minutes: a run that stays running while the zero-calls-while-idle
# tests count the requests made for it (by run, in Airflow's access log or at a
# proxy: several tests use this DAG).
with DAG(
    dag_id="tg_idle",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task(retries=0)
    def idle():
        time.sleep(120)

    idle()


# Prints numbered lines while it runs (conf: "lines", "interval" in seconds), after
# a first task; the second task also prints what a hostile pipeline may print (an
# ANSI colour, a control character, a line of 10,000 bytes, a message of two lines)
# and, at once, "filler" numbered lines of 200 bytes: for the logs tests.
with DAG(
    dag_id="tg_logs",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task(retries=0)
    def begin():
        print("tg-logs begin")
        return 1

    @task(retries=0)
    def talk(_x, **context):
        conf = context["dag_run"].conf or {}
        lines = int(conf.get("lines", 5))
        interval = float(conf.get("interval", 0.5))
        print("tg-logs \x1b[31mred\x1b[0m and a bell\x07")
        print("tg-logs long " + "x" * 10000)
        print("tg-logs two\ntg-logs lines")
        for i in range(int(conf.get("filler", 0))):
            print(f"tg-logs filler {i:05d} " + "f" * 180)
        for i in range(1, lines + 1):
            print(f"tg-logs line {i} of {lines}", flush=True)
            time.sleep(interval)
        print("tg-logs done")

    talk(begin())


# Fails its first try and succeeds in its second: for the logs of a retried task.
with DAG(
    dag_id="tg_retry",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task(retries=1, retry_delay=pendulum.duration(seconds=1))
    def flaky(**context):
        attempt = context["ti"].try_number
        print(f"tg-retry try {attempt} line 1")
        print(f"tg-retry try {attempt} line 2")
        if attempt < 2:
            raise RuntimeError("tg-retry: the first try fails")
        return "ok"

    flaky()
