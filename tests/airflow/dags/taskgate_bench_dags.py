"""The DAG of scripts/bench-upstream.sh on Airflow (BENCH_UPSTREAM_ENGINE=airflow).

`tg_bench_hold` is a run that stays `running` for as long as the bench counts, a hundred
of them at once, without a worker each: its one task names a pool nobody creates, so
the scheduler never queues it (the task stays `scheduled`) and the run stays `running`
until taskgate cancels it. To taskgate it reads like any running run: the run and its
task instances. `max_active_runs` lets every triggered run be `running` at once (the
default of 16 would leave the rest `queued`, which taskgate reads with one call, not
two). A run an interrupted bench left behind fails at `dagrun_timeout`. No schedule.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

with DAG(
    dag_id="tg_bench_hold",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1000,
    dagrun_timeout=pendulum.duration(minutes=20),
    tags=["taskgate-tests"],
):

    @task(pool="tg_bench_never_created", retries=0)
    def hold():
        raise RuntimeError("tg_bench_hold's task is never meant to run")

    hold()
