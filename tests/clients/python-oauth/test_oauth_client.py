"""The MCP Python SDK's OAuth support (mcp 2.3, `ClientCredentialsOAuthProvider`) as a
real client of taskgate protected by a real authorization server (ORY Hydra, from
scripts/hydra/up.sh). The client starts with no token: its first request gets taskgate's
401, it discovers Hydra through the Protected Resource Metadata the challenge points
at, gets a token with the challenged scope, and completes a long-running tool as a
2026-07-28 task. A second tool needs a scope the first token lacks: taskgate's 403
`insufficient_scope` makes the SDK step up and the call completes.

Hydra takes the token audience from an `audience` form parameter, not from RFC 8707's
`resource` (which the SDK sends); the provider below adds it, as one does for Hydra
or Auth0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from taskgate_support import Setup, TasksExtension, free_port, taskgate_bin  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def hydra() -> tuple[str, str, str] | None:
    names = ("TASKGATE_HYDRA_PUBLIC", "TASKGATE_HYDRA_ADMIN", "TASKGATE_HYDRA_ISSUER")
    values = [os.environ.get(n, "") for n in names]
    if all(values):
        return values[0], values[1], values[2]
    if os.environ.get("TASKGATE_REQUIRE_E2E") == "1":
        pytest.fail("TASKGATE_HYDRA_* are not set and TASKGATE_REQUIRE_E2E=1: run scripts/hydra/up.sh")
    pytest.skip("TASKGATE_HYDRA_* are not set (scripts/test.sh starts Hydra)")


def hydra_client(admin: str, resource: str, strategy: str) -> tuple[str, str]:
    client_id = f"tg-py-{strategy}-{time.time_ns()}"
    secret = f"secret-{time.time_ns()}-0123456789abcdef"
    body = {
        "client_id": client_id,
        "client_secret": secret,
        "grant_types": ["client_credentials"],
        "token_endpoint_auth_method": "client_secret_basic",
        "scope": "pipelines.run pipelines.deploy",
        "audience": [resource],
        "access_token_strategy": strategy,
    }
    req = urllib.request.Request(
        f"{admin}/admin/clients",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 201, r.status
    return client_id, secret


class InMemoryTokens:
    def __init__(self) -> None:
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens) -> None:
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info) -> None:
        self.client_info = client_info


class AudienceClientCredentials(ClientCredentialsOAuthProvider):
    """Client credentials that also name the resource as Hydra's `audience`."""

    token_requests: list[dict[str, str]]

    async def _exchange_token_client_credentials(self) -> httpx2.Request:
        request = await super()._exchange_token_client_credentials()
        form = dict(urllib.parse.parse_qsl(request.content.decode()))
        form["audience"] = form.get("resource") or self.context.get_resource_url()
        self.token_requests.append(form)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        return httpx2.Request("POST", request.url, data=form, headers=headers)


class Protected:
    """taskgate on a free port, trusting Hydra, its resource identifier its own URL."""

    def __init__(self, setup: Setup, issuer: str, admin: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        work = json.dumps(str(Path(__file__).resolve().parents[2] / "tools" / "work.sh"))
        deploy = (
            '[[tools]]\nname = "deploy"\nengine = "local"\nmode = "hybrid"\npoll_interval = "200ms"\n'
            'access = [{ scopes = ["pipelines.deploy"] }]\n'
            'input_schema = { type = "object", properties = { label = { type = "string" }, '
            'seconds = { type = "integer", minimum = 0 } } }\n'
            f"target = {{ command = [{work}] }}\n\n"
        )
        text = setup.config.read_text() + deploy + (
            '[auth]\ndefault_access = [{ scopes = ["pipelines.run"] }]\n\n'
            f'[auth.oauth]\nresource = "{self.url}"\nscopes_supported = ["pipelines.run"]\n'
            f'[[auth.oauth.issuers]]\nissuer = "{issuer}"\n'
            f'introspection = {{ endpoint = "{admin}/admin/oauth2/introspect" }}\n'
        )
        setup.config.write_text(text)
        self.log = (setup.root / f"server-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [taskgate_bin(), "serve", "--config", str(setup.config), "--listen", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=dict(os.environ) | setup.env() | {"TASKGATE_LOG_FORMAT": "json"},
        )
        deadline = time.monotonic() + 30
        while True:
            assert self.proc.poll() is None, self.stderr()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no /healthz: {self.stderr()}"
            time.sleep(0.05)

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def engine_calls(self) -> int:
        """`taskgate_engine_calls_total` summed over its labels (engine, tool, operation)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert "# TYPE taskgate_engine_calls_total counter" in text, text
        total = 0
        for line in text.splitlines():
            if line.startswith("taskgate_engine_calls_total{") or line.startswith(
                "taskgate_engine_calls_total "
            ):
                total += int(float(line.split()[-1]))
        return total

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.mark.parametrize("strategy", ["jwt", "opaque"])
async def test_sdk_discovers_hydra_gets_a_token_and_completes_a_task(tmp_path, strategy) -> None:
    public, admin, issuer = hydra()
    setup = Setup(tmp_path)
    server = Protected(setup, issuer, admin)
    try:
        # Without a token: 401 pointing at the metadata, which names Hydra.
        async with httpx2.AsyncClient() as raw:
            r = await raw.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert r.status_code == 401
            challenge = r.headers["www-authenticate"]
            metadata_url = f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp"
            assert f'resource_metadata="{metadata_url}"' in challenge, challenge
            prm = (await raw.get(metadata_url)).json()
            assert prm["authorization_servers"] == [issuer] and prm["resource"] == server.url

        client_id, secret = hydra_client(admin, server.url, strategy)
        provider = AudienceClientCredentials(
            server_url=server.url,
            storage=InMemoryTokens(),
            client_id=client_id,
            client_secret=secret,
            issuer=issuer,
        )
        provider.token_requests = []
        tasks = TasksExtension()
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
            async with Client(streamable_http_client(server.url, http_client=http), extensions=[tasks]) as client:
                listed = [t.name for t in (await client.list_tools()).tools]
                assert "work" in listed and "deploy" not in listed, listed
                result = await client.call_tool("work", {"label": "oauth", "seconds": 2})
                assert result.is_error is False
                assert result.structured_content == {"label": "oauth", "seconds": 2, "rows": 42}
                assert tasks.statuses[-1] == "completed" and "working" in tasks.statuses
                # deploy needs pipelines.deploy: 403 insufficient_scope, the SDK steps up.
                before = server.engine_calls()
                result = await client.call_tool("deploy", {"label": "prod", "seconds": 0})
                assert result.is_error is False, result
        assert len(tasks.created) == 2, "both calls became tasks"
        scopes = [r.get("scope", "") for r in provider.token_requests]
        assert scopes[0] == "pipelines.run", provider.token_requests
        assert "pipelines.deploy" in scopes[-1].split(), provider.token_requests
        assert len(provider.token_requests) == 2, "one token, then one step-up"
        assert server.engine_calls() > before
        events = [json.loads(l) for l in server.stderr().splitlines() if l.startswith("{")]
        audit = [e["fields"] for e in events if e.get("target") == "taskgate::audit"]
        caller = f"{issuer}#{client_id}"
        assert any(e["action"] == "start" and e["tool"] == "deploy" and e["outcome"] == "refused"
                   and e["reason"] == "insufficient_scope" and e["caller"] == caller for e in audit), audit
        assert any(e["action"] == "start" and e["tool"] == "deploy" and e["outcome"] == "ok"
                   and e["caller"] == caller for e in audit), audit
        token = provider.context.current_tokens.access_token
        assert token not in server.stderr(), "a token reached taskgate's log"
    finally:
        server.kill()
        setup.cleanup()
