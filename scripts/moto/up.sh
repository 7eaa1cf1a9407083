#!/usr/bin/env bash
# Starts moto's server (AWS emulator) with Step Functions execution turned on, for the
# Step Functions engine's integration tests. Installs moto into a venv under
# ${TASKGATE_CACHE:-$HOME/.cache/taskgate} when missing; starts the server on
# 127.0.0.1:${TASKGATE_MOTO_PORT:-5005} unless it already answers; prints `export` lines
# for scripts/test.sh to eval. Everything else goes to stderr.
set -euo pipefail

MOTO_VERSION="5.2.5"
cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
venv="$cache/moto-venv"
port="${TASKGATE_MOTO_PORT:-5005}"
url="http://127.0.0.1:$port"
log="$cache/moto-$port.log"
pidfile="$cache/moto-$port.pid"

mkdir -p "$cache"

answers() {
    curl -fsS -o /dev/null --max-time 2 "$url/moto-api/" 2>/dev/null
}

if ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$MOTO_VERSION')" 2>/dev/null \
    || [ ! -x "$venv/bin/moto_server" ]; then
    echo "installing moto[server]==$MOTO_VERSION into $venv" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2
fi

if ! answers; then
    echo "starting moto_server on $url (log: $log)" >&2
    # MOTO_PORT must equal the port: the state machine interpreter calls back into it.
    MOTO_PORT="$port" nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 150); do
        answers && break
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "moto_server exited; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 0.2
    done
    answers || { echo "moto_server did not answer on $url within 30s" >&2; exit 1; }
fi

# Turn on real execution of state machines (off by default in moto).
curl -fsS --max-time 5 -X POST -H 'Content-Type: application/json' \
    -d '{"stepfunctions":{"execute_state_machine":true}}' "$url/moto-api/config" >/dev/null

echo "export TASKGATE_MOTO_URL=$url"
echo "export AWS_ACCESS_KEY_ID=testing"
echo "export AWS_SECRET_ACCESS_KEY=testing"
echo "export AWS_REGION=us-east-1"
