// taskgate against the TypeScript MCP SDK 1.32.x, over stdio and Streamable
// HTTP: long-running calls as 2025-11-25 tasks through
// client.experimental.tasks.callToolStream — a completed call, a cancel, and
// an input_required round trip answered by the client's elicitation handler.
//
// The server is the built binary (TASKGATE_BIN, default target/debug/taskgate)
// with the exec engine running the scripts in tests/tools/.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import * as shared from '../../shared/taskgate.mjs';

const { bin, waitFor, alive } = shared;
const KEY_VAR = 'TASKGATE_TS_TEST_KEY';
const KEY = 'cXE6eWvJRkVuvW3p2/UlP9cvcKYwh2e+EI9u4IWRVV8=';

/** A temporary config (and spool) whose tools are the scripts in tests/tools (work in 0.2 s steps, ask "Approve ...?"). */
function makeSetup() {
  const label = '{ type = "object", required = ["label"], properties = { label = { type = "string" }, steps = { type = "integer" } } }';
  const tool = (name, mode, script, schema, args = []) =>
    shared.toolToml(name, { mode, schema, target: shared.execTarget(script, args) });
  return shared.makeExecSetup(
    'taskgate-ts-sdk1-',
    KEY_VAR,
    tool('work', 'hybrid', 'work.sh', label, ['steps']) +
      tool('ask', 'async', 'ask.sh', label, ['Approve']) +
      tool('sleeper', 'async', 'sleeper.sh', '{ type = "object" }'),
  );
}

function serverEnv() {
  return { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', [KEY_VAR]: KEY, TASKGATE_LOG: 'warn' };
}

/** Starts `taskgate serve` on a free port; resolves once /healthz answers. */
function startHttpServer(setup) {
  return shared.startHttpServer(setup.config, serverEnv());
}

/** A connected client whose elicitation handler records requests and approves. */
async function connect(transport) {
  const client = new Client(
    { name: 'taskgate-ts-sdk1-tests', version: '1.0.0' },
    { capabilities: { elicitation: { form: {} } } },
  );
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    asked.push(request.params);
    return { action: 'accept', content: { ok: true } };
  });
  await client.connect(transport);
  return { client, asked };
}

/** Runs a stream to its end, returning every message. */
async function drain(stream, onMessage = async () => {}) {
  const messages = [];
  for await (const message of stream) {
    messages.push(message);
    await onMessage(message);
  }
  return messages;
}

function flows(transportName, open) {
  describe(`TypeScript SDK over ${transportName}`, () => {
    let setup;
    let ctx;
    before(async () => {
      setup = makeSetup();
      ctx = await open(setup);
      const init = ctx.client.getServerCapabilities();
      assert.ok(init?.tasks?.requests?.tools?.call, `tasks capability: ${JSON.stringify(init)}`);
      assert.equal(ctx.client.getServerVersion()?.name, 'taskgate');
      const { tools } = await ctx.client.listTools();
      const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
      assert.equal(byName.work.execution?.taskSupport, 'optional');
      assert.equal(byName.ask.execution?.taskSupport, 'required');
    });
    after(async () => {
      await ctx?.close();
      setup?.cleanup();
    });

    test('a long-running call completes as a task', async () => {
      const messages = await drain(
        ctx.client.experimental.tasks.callToolStream({ name: 'work', arguments: { label: 'ts1', steps: 4 } }),
      );
      const types = messages.map((m) => m.type);
      assert.equal(types[0], 'taskCreated', JSON.stringify(messages));
      assert.equal(types.at(-1), 'result', JSON.stringify(messages));
      const statuses = messages.filter((m) => m.type === 'taskStatus').map((m) => m.task.status);
      assert.ok(statuses.includes('working'), `saw working: ${statuses}`);
      assert.equal(statuses.at(-1), 'completed');
      const { result } = messages.at(-1);
      assert.equal(result.isError, false);
      assert.deepEqual(result.structuredContent, { label: 'ts1', steps: 4 });
      assert.equal(result._meta?.['io.modelcontextprotocol/related-task']?.taskId, messages[0].task.taskId);
    });

    test('a task is cancelled and its process stops', async () => {
      let taskId;
      let cancelled;
      const messages = await drain(
        ctx.client.experimental.tasks.callToolStream({ name: 'sleeper', arguments: {} }),
        async (m) => {
          if (m.type !== 'taskCreated') return;
          taskId = m.task.taskId;
          // Cancel once the process is really running.
          await waitFor('the sleeper to run', async () => {
            const dir = setup.runsOf('sleeper')[0];
            return dir && existsSync(join(dir, 'sleeper.pids'));
          });
          cancelled = await ctx.client.experimental.tasks.cancelTask(taskId);
        },
      );
      assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled));
      const last = messages.at(-1);
      assert.equal(last.type, 'error', JSON.stringify(messages));
      assert.match(String(last.error.message), /cancelled/);
      const task = await ctx.client.experimental.tasks.getTask(taskId);
      assert.equal(task.status, 'cancelled');
      const pids = readFileSync(join(setup.runsOf('sleeper')[0], 'sleeper.pids'), 'utf8').trim().split(/\s+/).map(Number);
      await waitFor('the sleeper processes to end', () => pids.every((p) => !alive(p)));
      await assert.rejects(ctx.client.experimental.tasks.cancelTask(taskId), /terminal/);
    });

    test('input_required: the elicitation handler answers and the task completes', async () => {
      ctx.asked.length = 0;
      const messages = await drain(
        ctx.client.experimental.tasks.callToolStream({ name: 'ask', arguments: { label: 'ts-ask' } }),
      );
      assert.equal(messages.at(-1).type, 'result', JSON.stringify(messages));
      assert.equal(ctx.asked.length, 1, JSON.stringify(ctx.asked));
      assert.equal(ctx.asked[0].message, 'Approve ts-ask?');
      assert.equal(ctx.asked[0]._meta?.['io.modelcontextprotocol/related-task']?.taskId, messages[0].task.taskId);
      const { result } = messages.at(-1);
      assert.equal(result.isError, false);
      assert.deepEqual(result.structuredContent.answer, { action: 'accept', content: { ok: true } });
      const task = await ctx.client.experimental.tasks.getTask(messages[0].task.taskId);
      assert.equal(task.status, 'completed');
    });
  });
}

flows('stdio', async (setup) => {
  const transport = new StdioClientTransport({
    command: bin,
    args: ['serve', '--stdio', '--config', setup.config],
    env: serverEnv(),
    stderr: 'inherit',
  });
  const { client, asked } = await connect(transport);
  return { client, asked, close: () => client.close() };
});

flows('Streamable HTTP', async (setup) => {
  const server = await startHttpServer(setup);
  const transport = new StreamableHTTPClientTransport(server.url);
  const { client, asked } = await connect(transport);
  assert.ok(transport.sessionId, 'the server set Mcp-Session-Id');
  return {
    client,
    asked,
    close: async () => {
      await client.close();
      server.child.kill('SIGTERM');
    },
  };
});
