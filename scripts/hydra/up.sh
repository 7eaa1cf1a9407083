#!/usr/bin/env bash
# Starts ORY Hydra (built by scripts/hydra/install.sh) as the authorization server of
# taskgate's OAuth tests: `hydra serve all --dev` with the in-memory database, public
# port ${TASKGATE_HYDRA_PORT:-4444}, admin port +1, on 127.0.0.1. Opaque access tokens
# by default; a client created with `access_token_strategy: jwt` gets JWTs, so one
# instance serves both the JWKS and the introspection tests. Waits until the admin
# health endpoint says ready and the discovery document answers, then prints `export`
# lines for scripts/test.sh to eval; everything else goes to stderr. Tests create their
# own clients through the admin API.
set -euo pipefail

cache="${TASKGATE_CACHE:-$HOME/.cache/taskgate}"
port="${TASKGATE_HYDRA_PORT:-4444}"
admin_port=$((port + 1))
public="http://127.0.0.1:$port"
admin="http://127.0.0.1:$admin_port"
issuer="$public/"
log="$cache/hydra-$port.log"
pidfile="$cache/hydra-$port.pid"
mkdir -p "$cache"

ready() {
    curl -fsS -o /dev/null --max-time 2 "$admin/health/ready" 2>/dev/null &&
        curl -fsS -o /dev/null --max-time 2 "$public/.well-known/openid-configuration" 2>/dev/null
}

if ! ready; then
    hydra="$(scripts/hydra/install.sh)"
    echo "starting hydra on $public (admin $admin; log: $log)" >&2
    # A fixed system secret is fine for throw-away tokens in an in-memory database.
    DSN=memory \
        URLS_SELF_ISSUER="$issuer" \
        URLS_LOGIN="$public/unused-login" URLS_CONSENT="$public/unused-consent" \
        SERVE_PUBLIC_HOST=127.0.0.1 SERVE_PUBLIC_PORT="$port" \
        SERVE_ADMIN_HOST=127.0.0.1 SERVE_ADMIN_PORT="$admin_port" \
        SECRETS_SYSTEM="taskgate-tests-hydra-system-secret-0123" \
        STRATEGIES_ACCESS_TOKEN=opaque \
        LOG_LEVEL=warn \
        nohup "$hydra" serve all --dev >"$log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 300); do
        ready && break
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "hydra exited; its log:" >&2
            cat "$log" >&2
            exit 1
        fi
        sleep 0.2
    done
    ready || { echo "hydra did not become ready within 60s" >&2; tail -n 30 "$log" >&2; exit 1; }
fi

echo "export TASKGATE_HYDRA_ISSUER=$issuer"
echo "export TASKGATE_HYDRA_PUBLIC=$public"
echo "export TASKGATE_HYDRA_ADMIN=$admin"
