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


import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { createTaskSessionFromClient } from '@modelcontextprotocol/ext-tasks/client';

import * as shared from '../../shared/taskgate.mjs';

export { repo, bin, toolsDir, waitFor, alive, LIMIT_MS, toolToml, execTarget } from '../../shared/taskgate.mjs';

const { bin } = shared;
export const TASKS = 'io.modelcontextprotocol/tasks';
const KEY_VAR = 'TASKGATE_TS2_TEST_KEY';
const KEY = 'rqHDtPD4EMJMhj2P6gHmJ3WkShFUzIFvEjZV4JnhLPE=';

export const LABEL_SCHEMA =
  '{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }, seconds = { type = "integer", minimum = 0, maximum = 60 } } }';

/**
 * A temporary folder with a config whose exec engine spools there; `body` is
 * appended (engines and tools). `env` is added to the server's environment.
 */
export function makeSetup(body, env = {}) {
  return {
    ...shared.makeExecSetup('taskgate-ts-client2-', KEY_VAR, body),
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', [KEY_VAR]: KEY, TASKGATE_LOG: 'warn', ...env },
  };
}

/** Starts `taskgate serve` on a free port; resolves once /healthz answers. */
export async function startHttpServer(setup) {
  const server = await shared.startHttpServer(setup.config, setup.env);
  return { url: server.url, stop: server.stop };
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
  // Every message the client sends, in order (to prove what it did not send).
  const sent = [];
  const recording = new Proxy(inner, {
    get(target, key) {
      if (key === 'send') {
        return (message, ...rest) => {
          sent.push(message);
          return target.send(message, ...rest);
        };
      }
      const value = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
    set(target, key, value) {
      target[key] = value;
      return true;
    },
  });
  const { transport, rawDispatch } = coordinated(recording);
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
    sent,
    rawDispatch,
    meta: {
      'io.modelcontextprotocol/protocolVersion': client.getNegotiatedProtocolVersion(),
      'io.modelcontextprotocol/clientInfo': CLIENT_INFO,
      'io.modelcontextprotocol/clientCapabilities': capabilities,
    },
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
