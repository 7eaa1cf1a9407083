"""DAGs for `taskgate discover` on Airflow (tests/e2e/discover.rs).

`tg_discover_params` declares a param of every kind Airflow's Param carries a JSON
schema for, so the schema discover derives from them can be checked whole; it runs
in one quick task and returns its conf. `tg_discover_hostile` carries a display name
and a description written to break out of a TOML file: discover must print them as
data. Neither has a schedule.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

START = pendulum.datetime(2026, 1, 1, tz="UTC")


with DAG(
    dag_id="tg_discover_params",
    description="Rebuild the reporting tables for one dataset",
    schedule=None,
    start_date=START,
    catchup=False,
    params={
        "dataset": Param(
            "sales",
            type="string",
            description="The dataset to rebuild",
            minLength=1,
            maxLength=40,
            pattern="^[a-z][a-z0-9_]*$",
        ),
        "region": Param("eu", type="string", enum=["eu", "us", "apac"], description="Where"),
        "rows": Param(100, type="integer", minimum=1, maximum=10000, description="Rows to sample"),
        "ratio": Param(0.5, type="number", minimum=0, maximum=1),
        "full_refresh": Param(False, type="boolean", description="Drop the tables first"),
        "tags": Param(["daily"], type="array", items={"type": "string"}),
        "options": Param({"vacuum": True}, type="object"),
        "owner": Param(None, type=["null", "string"], description="Who asked (optional)"),
        "run_date": Param("2026-01-01", type="string", format="date"),
        "limit": 10,
    },
    tags=["taskgate-tests"],
):

    @task
    def echo(**context):
        conf = context["dag_run"].conf or {}
        return {"dataset": conf.get("dataset"), "rows": conf.get("rows")}

    echo()


with DAG(
    dag_id="tg_discover_hostile",
    dag_display_name='"]\n[server]\nlisten = "0.0.0.0:1"\n# \x1b[31mred',
    description='x"""\n[[tools]]\nname = "pwned"\nengine = "x"\n\x07',
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["taskgate-tests"],
):

    @task
    def nothing():
        return None

    nothing()
