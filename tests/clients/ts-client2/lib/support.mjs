// Helpers of the TypeScript client 2.x tests: the taskgate binary as a child
// (Streamable HTTP on a free loopback port, or stdio spawned by the SDK), a
// temporary config, and the 2026-07-28 tasks session of
// @modelcontextprotocol/ext-tasks on top of an SDK `Client`.
//
// The SDK client decodes every `tools/call` result itself and refuses
// `resultType: "task"`, so ext-tasks needs a "raw dispatch" from the host for
// task traffic (its docs: "rawDispatch must use the host coordinator that owns
// request IDs and response matching"). `coordinated()` is that coordinator:
// it wraps the SDK transport, sends the extension's requests on the same
// connection with ids of its own, and takes their responses off the stream
// before the SDK client sees them. Over HTTP the transport still derives the
// 2026 headers (MCP-Protocol-Version, Mcp-Method, Mcp-Name) from each body.

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';

const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, '../../../..');
export const bin = resolve(repo, process.env.TASKGATE_BIN ?? 'target/debug/taskgate');
export const toolsDir = join(repo, 'tests/tools');
export const TASKS = 'io.modelcontextprotocol/tasks';
const KEY_VAR = 'TASKGATE_TS2_TEST_KEY';
const KEY = 'ts-client2-test-key-0123456789abcdef-0123456789';
export const LIMIT_MS = 40_000;

/** Polls `check` every 50 ms until it returns a truthy value; fails after `limit` ms. */
export async function waitFor(what, check, limit = LIMIT_MS) {
  const deadline = Date.now() + limit;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** True while `pid` exists and is not a zombie. */
export function alive(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** One `[[tools]]` table. `target` is TOML inline-table text. */
export function toolToml(name, { mode = 'hybrid', schema = '{ type = "object" }', target, extra = '' }) {
  return (
    `[[tools]]\nname = "${name}"\ndescription = "test tool ${name}"\nengine = "${target.engine}"\nmode = "${mode}"\n` +
    `poll_interval = "200ms"\nkeep_alive = "1h"\ninput_schema = ${schema}\n${extra}target = ${target.toml}\n\n`
  );
}

/** An exec-engine target running tests/tools/<script>. */
export function execTarget(script) {
  return { engine: 'local', toml: `{ command = [${JSON.stringify(join(toolsDir, script))}] }` };
}

export const LABEL_SCHEMA =
  '{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }, seconds = { type = "integer", minimum = 0, maximum = 60 } } }';

/**
 * A temporary folder with a config whose exec engine spools there; `body` is
 * appended (engines and tools). `env` is added to the server's environment.
 */
export function makeSetup(body, env = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'taskgate-ts-client2-'));
  const spool = join(dir, 'spool');
  const config = join(dir, 'taskgate.toml');
  writeFileSync(
    config,
    `[server]\nlisten = "127.0.0.1:0"\ncall_timeout = "10s"\nmax_wait = "30s"\n\n` +
      `[keys]\nseal = [{ id = "k1", secret_env = "${KEY_VAR}" }]\n\n` +
      `[engines.local]\nkind = "exec"\nspool_dir = ${JSON.stringify(spool)}\ngrace_period = "1s"\n\n` +
      body,
  );
  return {
    dir,
    spool,
    config,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', [KEY_VAR]: KEY, TASKGATE_LOG: 'warn', ...env },
    /** The run folders of `tool` in the exec spool. */
    runsOf(tool) {
      if (!existsSync(spool)) return [];
      return readdirSync(spool)
        .filter((n) => !n.startsWith('.'))
        .map((n) => join(spool, n))
        .filter((d) => {
          try {
            return JSON.parse(readFileSync(join(d, 'meta.json'), 'utf8')).tool === tool;
          } catch {
            return false;
          }
        });
    },
    /** Ends what the runs left (they outlive servers by design), then removes the folder. */
    cleanup() {
      if (existsSync(spool)) {
        for (const name of readdirSync(spool)) {
          for (const file of ['pid.json', 'supervisor.json']) {
            try {
              const pid = JSON.parse(readFileSync(join(spool, name, file), 'utf8')).pid;
              if (pid > 1) process.kill(-pid, 'SIGKILL');
            } catch {
              // not running, or never started
            }
          }
        }
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function freePort() {
  return new Promise((resolvePort, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolvePort(port));
    });
  });
}

/** Starts `taskgate serve` on a free port; resolves once /healthz answers. */
export async function startHttpServer(setup) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawn(bin, ['serve', '--config', setup.config, '--listen', `127.0.0.1:${port}`], {
      env: setup.env,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    let exited = false;
    child.once('exit', () => {
      exited = true;
    });
    const up = await waitFor(
      `taskgate on port ${port}`,
      async () => {
        if (exited) return 'exited';
        try {
          const r = await fetch(`http://127.0.0.1:${port}/healthz`);
          return r.ok ? 'up' : false;
        } catch {
          return false;
        }
      },
      20_000,
    );
    if (up === 'up') {
      return {
        url: new URL(`http://127.0.0.1:${port}/mcp`),
        stop: () =>
          new Promise((done) => {
            if (exited) return done();
            child.once('exit', () => done());
            child.kill('SIGTERM');
          }),
      };
    }
  }
  throw new Error('taskgate could not be started');
}

/**
 * Wraps an SDK transport so the host can send raw JSON-RPC requests on it:
 * returns the transport to hand to `client.connect` and the `rawDispatch`
 * ext-tasks needs.
 */
export function coordinated(inner) {
  const pending = new Map();
  let next = 0;
  const settle = (id, response) => {
    const resolveIt = pending.get(id);
    if (!resolveIt) return false;
    pending.delete(id);
    resolveIt(response);
    return true;
  };
  const failAll = (error) => {
    for (const [id, resolveIt] of pending) {
      pending.delete(id);
      resolveIt(Promise.reject(error));
    }
  };
  const transport = new Proxy(inner, {
    get(target, key) {
      const value = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
    set(target, key, value) {
      if (key === 'onmessage' && typeof value === 'function') {
        target.onmessage = (message, extra) => {
          const isResponse =
            message && typeof message === 'object' && !Array.isArray(message) && 'id' in message && !('method' in message);
          if (isResponse && pending.has(message.id)) {
            settle(
              message.id,
              'error' in message ? { kind: 'error', error: message.error } : { kind: 'result', result: message.result },
            );
            return;
          }
          return value(message, extra);
        };
        return true;
      }
      if (key === 'onclose' && typeof value === 'function') {
        target.onclose = () => {
          failAll(new Error('transport closed'));
          return value();
        };
        return true;
      }
      target[key] = value;
      return true;
    },
  });
  const rawDispatch = async (request, options = {}) => {
    const id = `taskgate-test-raw-${++next}`;
    const response = new Promise((resolveIt) => pending.set(id, resolveIt));
    // Awaited below, after the send; a close during the send must not count
    // as an unhandled rejection meanwhile.
    response.catch(() => {});
    const { signal } = options;
    const onAbort = () => settle(id, Promise.reject(signal.reason ?? new Error('aborted')));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      if (signal?.aborted) onAbort();
      else await inner.send({ jsonrpc: '2.0', id, ...request });
      return await response;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      pending.delete(id);
    }
  };
  return { transport, rawDispatch };
}

export const CLIENT_INFO = { name: 'taskgate-ts-client2-tests', version: '1.0.0' };

/**
 * Connects an SDK client (2026-07-28 by `server/discover`, no fallback) over
 * `inner` and, with `tasks`, opens an ext-tasks session on it.
 * `onInputRequest` answers the input requests of tasks and of MRTR rounds.
 */
export async function connectModern(inner, { tasks = true, onInputRequest, endpointId = 'taskgate-under-test' } = {}) {
  const capabilities = {
    elicitation: { form: {} },
    ...(tasks ? { extensions: { [TASKS]: {} } } : {}),
  };
  const { transport, rawDispatch } = coordinated(inner);
  const client = new Client(CLIENT_INFO, { capabilities, versionNegotiation: { mode: { pin: '2026-07-28' } } });
  client.setRequestHandler('elicitation/create', async (request) => {
    if (!onInputRequest) return { action: 'cancel' };
    return onInputRequest({ kind: 'elicitation', params: request.params }, { scope: 'request', delivery: 'sdk' });
  });
  await client.connect(transport);
  if (!tasks) return { client, close: () => client.close() };
  const session = createTaskSessionFromClient(client, {
    endpointId,
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: client.getNegotiatedProtocolVersion(),
      clientInfo: CLIENT_INFO,
      clientCapabilities: capabilities,
    },
    ...(onInputRequest ? { onInputRequest } : {}),
  });
  return {
    client,
    session,
    close: async () => {
      await session.close();
      await client.close();
    },
  };
}

/** A transport factory for each way of reaching the server. */
export function stdioTransport(setup) {
  return new StdioClientTransport({
    command: bin,
    args: ['serve', '--stdio', '--config', setup.config],
    env: setup.env,
    stderr: 'inherit',
  });
}

export function httpTransport(url) {
  return new StreamableHTTPClientTransport(url);
}

/** Runs an execution to its end, collecting the task views it saw. */
export async function settleAll(execution, onTask = async () => {}) {
  const views = [];
  const { outcome } = await execution.settle({
    onEvent: async (event) => {
      if (event.type === 'task') {
        views.push(event.task);
        await onTask(event.task);
      }
    },
  });
  return { outcome, views };
}

/** Raw AWS JSON-protocol calls to moto (it checks no signature). */
export async function aws(service, target, body) {
  const url = process.env.TASKGATE_MOTO_URL;
  const r = await fetch(`${url}/`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-amz-json-1.0',
      'x-amz-target': target,
      authorization: `AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/${service}/aws4_request, SignedHeaders=host, Signature=0`,
    },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${target}: HTTP ${r.status}: ${text}`);
  return JSON.parse(text);
}
