#!/usr/bin/env bash
# Starts a real Apache Airflow 3.3 (api-server, scheduler, dag-processor; LocalExecutor;
# its metadata database on a private PostgreSQL server, as production Airflow runs)
# for the Airflow engine's tests, with the DAGs of tests/airflow/dags.
# Installs Airflow into a venv under ${TASKGATE_CACHE:-$HOME/.cache/taskgate} when
# missing, pinned by constraints-3.3.2-py3.11.txt beside this script (Airflow's own
# published constraints file could not be fetched here: this one is the frozen result
# of installing apache-airflow==3.3.2 with Python 3.11), plus the PostgreSQL drivers
# pinned below. PostgreSQL is the machine's (Debian's postgresql package, which
# .ci/run installs when missing): a throwaway cluster of its own (initdb; loopback
# only; trust auth; no fsync) under ${TMPDIR:-/tmp}, port ${TASKGATE_AIRFLOW_PG_PORT:-28432},
# removed by down.sh. Starts the services on
# 127.0.0.1:${TASKGATE_AIRFLOW_PORT:-28080} unless the API already answers there,
# waits until the API answers and every test DAG is parsed, and prints `export`
# lines for scripts/test.sh to eval. Everything else goes to stderr.
set -euo pipefail

AIRFLOW_VERSION="3.3.2"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
venv="$cache/airflow-$AIRFLOW_VERSION"
port="${TASKGATE_AIRFLOW_PORT:-28080}"
home="$cache/airflow-home-$port"
url="http://127.0.0.1:$port"
user="taskgate"
password="taskgate-test-password"
constraints="$here/constraints-$AIRFLOW_VERSION-py3.11.txt"
dags="$root/tests/airflow/dags"
deadline_s="${TASKGATE_AIRFLOW_START_TIMEOUT:-240}"
# The metadata database's drivers (Airflow reaches PostgreSQL through psycopg2 and,
# for its async sessions, asyncpg).
drivers=(psycopg2-binary==2.9.13 asyncpg==0.32.0)
pg_port="${TASKGATE_AIRFLOW_PG_PORT:-28432}"
pg_data="${TMPDIR:-/tmp}/taskgate-airflow-pg-$pg_port"

mkdir -p "$cache"

python=""
for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then
        python="$candidate"
        break
    fi
done
[ -n "$python" ] || { echo "no python3.11 or python3 on PATH" >&2; exit 1; }

if ! "$venv/bin/python" -c "import airflow, sys; sys.exit(airflow.__version__ != '$AIRFLOW_VERSION')" 2>/dev/null; then
    echo "installing apache-airflow==$AIRFLOW_VERSION into $venv" >&2
    t0=$(date +%s)
    rm -rf "$venv"
    "$python" -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "apache-airflow==$AIRFLOW_VERSION" --constraint "$constraints" >&2
    echo "installed Airflow in $(( $(date +%s) - t0 ))s" >&2
fi
if ! "$venv/bin/python" -c "import psycopg2, asyncpg" 2>/dev/null; then
    echo "installing ${drivers[*]} into $venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${drivers[@]}" >&2
fi

# ------------------------------------------------------------ PostgreSQL ----
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -x "$pg_bin/initdb" ] || { echo "no PostgreSQL server (Debian's postgresql package) under /usr/lib/postgresql" >&2; exit 1; }
# PostgreSQL refuses to run as root: as root, its files belong to the postgres user.
as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
pg_ready() {
    "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -d airflow -U airflow 2>/dev/null
}
if ! pg_ready; then
    t0=$(date +%s)
    rm -rf "$pg_data"
    mkdir -p "$pg_data"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$pg_data"
    chmod 700 "$pg_data"
    as_pg "$pg_bin/initdb" -D "$pg_data" -U airflow -A trust -E UTF8 --no-sync >"$pg_data.initdb.log" 2>&1 \
        || { echo "initdb failed; its log:" >&2; tail -n 20 "$pg_data.initdb.log" >&2; exit 1; }
    # A test database: durability traded for speed (a crash loses it; down.sh removes it anyway).
    as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_data/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $pg_port -c unix_socket_directories=$pg_data -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >&2 || { echo "PostgreSQL did not start; its log:" >&2; tail -n 20 "$pg_data/server.log" >&2; exit 1; }
    "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U airflow airflow
    echo "PostgreSQL answers on 127.0.0.1:$pg_port after $(( $(date +%s) - t0 ))s" >&2
fi

# Every process shares one configuration, through the environment.
export AIRFLOW_HOME="$home"
export AIRFLOW__CORE__DAGS_FOLDER="$dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM=8
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
export AIRFLOW__CORE__AUTH_MANAGER=airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="$user:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$home/passwords.json"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="$url/execution/"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg2://airflow@127.0.0.1:$pg_port/airflow"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__BASE_URL="$url"
export AIRFLOW__API__SECRET_KEY="taskgate-tests-only-secret-key"
export AIRFLOW__API_AUTH__JWT_SECRET="taskgate-tests-only-jwt-secret-0123456789abcdef"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL=30
export AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES=1
export AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=1
export AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT=300
# A worker's calls to the api-server (its execution API) time out after 5 s by
# default, five tries in about 31 s; on a loaded 2-core machine that was seen too
# short (a task failed with "API_SERVER_ERROR ... ReadTimeout" in a CI run, when the
# database was SQLite). Airflow's own advice for high load: a longer timeout.
export AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=60
export AIRFLOW__WORKERS__EXECUTION_API_RETRIES=8
export AIRFLOW__LOGGING__LOGGING_LEVEL=INFO

answers() {
    curl -fsS -o /dev/null --max-time 2 "$url/api/v2/monitor/health" 2>/dev/null
}

token() {
    curl -fsS --max-time 5 -X POST -H 'Content-Type: application/json' \
        -d "{\"username\":\"$user\",\"password\":\"$password\"}" "$url/auth/token" \
        | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["access_token"])'
}

# The DAG ids the tests use, read from the files (one `dag_id="..."` per DAG).
expected_dags() {
    grep -ho 'dag_id="[a-z0-9_]*"' "$dags"/*.py | sed 's/dag_id="\(.*\)"/\1/' | sort -u
}

all_parsed() {
    local tok listed
    tok=$(token 2>/dev/null) || return 1
    listed=$(curl -fsS --max-time 5 -H "Authorization: Bearer $tok" "$url/api/v2/dags?limit=100" \
        | "$venv/bin/python" -c 'import json,sys; print("\n".join(d["dag_id"] for d in json.load(sys.stdin)["dags"]))') \
        || return 1
    local id
    for id in $(expected_dags); do
        grep -qx "$id" <<<"$listed" || return 1
    done
}

start() {
    local name=$1
    shift
    nohup "$venv/bin/airflow" "$@" >"$home/$name.log" 2>&1 &
    echo $! >"$home/$name.pid"
}

if ! answers; then
    t0=$(date +%s)
    mkdir -p "$home"
    echo "{\"$user\": \"$password\"}" >"$home/passwords.json"
    echo "migrating the Airflow database in $home" >&2
    "$venv/bin/airflow" db migrate >"$home/db-migrate.log" 2>&1 \
        || { echo "airflow db migrate failed; its log:" >&2; tail -n 40 "$home/db-migrate.log" >&2; exit 1; }
    echo "starting Airflow on $url (logs: $home/*.log)" >&2
    start api-server api-server --host 127.0.0.1 --port "$port" --workers 1
    start scheduler scheduler
    start dag-processor dag-processor
    end=$(( $(date +%s) + deadline_s ))
    until answers; do
        for name in api-server scheduler dag-processor; do
            if ! kill -0 "$(cat "$home/$name.pid")" 2>/dev/null; then
                echo "airflow $name exited; its log:" >&2
                tail -n 40 "$home/$name.log" >&2
                exit 1
            fi
        done
        [ "$(date +%s)" -lt "$end" ] || { echo "the Airflow API did not answer on $url within ${deadline_s}s" >&2; exit 1; }
        sleep 0.5
    done
    echo "the API answers after $(( $(date +%s) - t0 ))s" >&2
fi

end=$(( $(date +%s) + deadline_s ))
until all_parsed; do
    [ "$(date +%s)" -lt "$end" ] || { echo "the test DAGs were not all parsed within ${deadline_s}s" >&2; exit 1; }
    sleep 0.5
done
echo "Airflow is ready on $url with the test DAGs" >&2

echo "export TASKGATE_AIRFLOW_URL=$url"
echo "export TASKGATE_AIRFLOW_USERNAME=$user"
echo "export TASKGATE_AIRFLOW_PASSWORD=$password"
echo "export TASKGATE_AIRFLOW_HOME=$home"
