// taskgate against the command-line clients of MCP Inspector 2.12
// (@modelcontextprotocol/inspector 2.12.x, on Node 22), over Streamable HTTP
// and stdio (the Inspector spawns the server), asserting the JSON they print.
//
// mcpdo, 2026-07-28 with the tasks extension (`connect --era modern`):
//   - `tools/call --task` runs a long-running tool to its result;
//   - a task's question: `tools/call --task` parks and prints
//     elicitationPending (origin task-input-required), `elicitation/respond`
//     answers it (the Inspector sends tasks/update) and prints the result;
//   - `tasks/get` shows input_required with the request, `tasks/update
//     --input-responses` answers it, `tasks/result` waits for the result;
//   - `tasks/get` / `tasks/cancel`: the run's process group stops.
//   mcpdo never prints the id of a task it started itself, so the last two
//   work on tasks started by a plain request (see startTask).
// mcpdo on 2025-11-25 (`--era legacy`): `tools/call --task` to a result (its
//   input round trip hangs in the client: see the skipped test).
// mcp-inspector --cli (one shot): tools/call of an async-only tool on
//   2026-07-28 (HTTP, stdio) and 2025-11-25 (HTTP).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

import {
  makeSetup,
  startHttpServer,
  mcpdo,
  inspectorCli,
  stopDaemon,
  startTask,
  shown,
  waitFor,
  alive,
  KEY_VAR,
} from '../lib/support.mjs';

/** The JSON a command printed, once it exited 0. */
function ok(r) {
  assert.equal(r.code, 0, shown(r));
  assert.ok(r.json !== undefined, `not JSON: ${shown(r)}`);
  return r.json;
}

function assertWorkResult(result, label, seconds) {
  assert.equal(result.isError, false, JSON.stringify(result));
  assert.deepEqual(result.structuredContent, { label, seconds, rows: 42 });
}

describe('MCP Inspector 2.12 CLIs', { timeout: 300_000 }, () => {
  let setup;
  let server;
  const transports = {};

  before(async () => {
    setup = makeSetup();
    server = await startHttpServer(setup);
    transports.http = { kind: 'http', url: server.url, target: [server.url] };
    transports.stdio = { kind: 'stdio', target: ['-e', `${KEY_VAR}=${setup.key}`, '--', ...setup.stdioCommand] };
  });
  after(async () => {
    if (setup) await stopDaemon(setup);
    await server?.stop();
    setup?.cleanup();
  });

  for (const kind of ['http', 'stdio']) {
    describe(`mcpdo, 2026-07-28 + tasks extension, over ${kind === 'http' ? 'Streamable HTTP' : 'stdio'}`, () => {
      const conn = `tg-modern-${kind}`;
      const at = `@${conn}`;

      test('connect negotiates 2026-07-28 and sees the tasks extension', async () => {
        const t = transports[kind];
        const connected = ok(await mcpdo(setup, 'connect', '--era', 'modern', '--connection', conn, ...t.target));
        assert.equal(connected.protocolEra, 'modern', JSON.stringify(connected));
        const info = ok(await mcpdo(setup, 'connections/show', at));
        assert.equal(info.protocolVersion, '2026-07-28');
        assert.deepEqual(info.capabilities?.extensions?.['io.modelcontextprotocol/tasks'], {});
        assert.equal(info.serverInfo?.name, 'taskgate');
        const { tools } = ok(await mcpdo(setup, at, 'tools/list'));
        assert.deepEqual(tools.map((x) => x.name).sort(), ['ask', 'sleeper', 'slow', 'taskgate_logs']);
      });

      test('tools/call --task: a long-running call completes', async () => {
        const result = ok(await mcpdo(setup, at, 'tools/call', 'slow', `label:=insp-${kind}`, 'seconds:=2', '--task'));
        assertWorkResult(result, `insp-${kind}`, 2);
      });

      test("a task's question: elicitationPending, then elicitation/respond gives the result", async () => {
        const parked = ok(await mcpdo(setup, at, 'tools/call', 'ask', `label:=ask-${kind}`, '--task'));
        const pending = parked.elicitationPending;
        assert.ok(pending, JSON.stringify(parked));
        assert.equal(pending.origin, 'task-input-required');
        assert.equal(pending.message, `Deploy ask-${kind}?`);
        assert.deepEqual(pending.requestedSchema.required, ['ok']);
        const result = ok(await mcpdo(setup, at, 'elicitation/respond', pending.elicitationId, 'ok:=true'));
        assert.equal(result.isError, false, JSON.stringify(result));
        assert.deepEqual(result.structuredContent, {
          label: `ask-${kind}`,
          answer: { action: 'accept', content: { ok: true } },
        });
      });

      test('tasks/get shows input_required, tasks/update answers, tasks/result waits for the result', async () => {
        const taskId = await startTask(setup, transports[kind], 'ask', { label: `upd-${kind}` });
        const asking = await waitFor('input_required', async () => {
          const { task } = ok(await mcpdo(setup, at, 'tasks/get', taskId));
          return task.status === 'input_required' && task;
        });
        assert.equal(asking.taskId, taskId);
        const request = asking.raw.inputRequests.approve;
        assert.equal(request.method, 'elicitation/create');
        assert.equal(request.params.message, `Deploy upd-${kind}?`);
        const updated = ok(
          await mcpdo(setup, at, 'tasks/update', '--task-id', taskId, '--input-responses', JSON.stringify({ approve: { action: 'accept', content: { ok: true } } })),
        );
        assert.deepEqual(updated, { updated: true, taskId });
        const result = ok(await mcpdo(setup, at, 'tasks/result', taskId));
        assert.equal(result.isError, false, JSON.stringify(result));
        assert.deepEqual(result.structuredContent.answer, { action: 'accept', content: { ok: true } });
        const { task } = ok(await mcpdo(setup, at, 'tasks/get', taskId));
        assert.equal(task.status, 'completed');
        assert.equal(task.raw.result.structuredContent.label, `upd-${kind}`);
      });

      test('tasks/cancel stops the run and its process group', async () => {
        const before = new Set(setup.runsOf('sleeper'));
        const taskId = await startTask(setup, transports[kind], 'sleeper', {});
        const pidFile = await waitFor('the sleeper to start its grandchild', () => {
          const run = setup.runsOf('sleeper').find((d) => !before.has(d) && existsSync(join(d, 'grandchild.pid')));
          return run && join(run, 'grandchild.pid');
        });
        const grandchild = Number(readFileSync(pidFile, 'utf8').trim());
        const { task } = ok(await mcpdo(setup, at, 'tasks/get', taskId));
        assert.equal(task.status, 'working', JSON.stringify(task));
        assert.equal(task.statusMessage, 'sleeping');
        const cancelled = ok(await mcpdo(setup, at, 'tasks/cancel', '--task-id', taskId));
        assert.deepEqual(cancelled, { cancelled: true, taskId });
        await waitFor('the grandchild to end', () => !alive(grandchild));
        const after = ok(await mcpdo(setup, at, 'tasks/get', taskId));
        assert.equal(after.task.status, 'cancelled');
      });
    });
  }

  describe('mcpdo, 2025-11-25 tasks (--era legacy), over Streamable HTTP', () => {
    const at = '@tg-legacy-http';

    test('connect negotiates 2025-11-25 with tasks', async () => {
      const connected = ok(await mcpdo(setup, 'connect', '--era', 'legacy', '--connection', 'tg-legacy-http', server.url));
      assert.equal(connected.protocolEra, 'legacy');
      const info = ok(await mcpdo(setup, 'connections/show', at));
      assert.equal(info.protocolVersion, '2025-11-25');
      assert.ok(info.capabilities?.tasks?.requests?.tools?.call, JSON.stringify(info.capabilities));
    });

    test('tools/call --task completes', async () => {
      assertWorkResult(ok(await mcpdo(setup, at, 'tools/call', 'slow', 'label:=legacy', 'seconds:=1', '--task')), 'legacy', 1);
    });

    // The Inspector's 2025-11-25 task driver (ext-tasks 0.2.2, V1) only polls
    // tasks/get while a task is input_required and calls tasks/result only once
    // the task is terminal, so it never receives the elicitation/create that a
    // 2025-11-25 server sends on the tasks/result stream ("When the requestor
    // encounters the input_required status, it SHOULD preemptively call
    // tasks/result"): the call hangs. A client bug; the same round trip passes
    // with the TypeScript SDK 1.32 and Python mcp 1.30 clients.
    test("a task's question through elicitation/respond", { skip: 'ext-tasks 0.2.2 V1 driver never calls tasks/result on input_required (client bug)' }, async () => {
      const parked = ok(await mcpdo(setup, at, 'tools/call', 'ask', 'label:=legacy-ask', '--task'));
      const pending = parked.elicitationPending;
      assert.ok(pending, JSON.stringify(parked));
      assert.equal(pending.message, 'Deploy legacy-ask?');
      const result = ok(await mcpdo(setup, at, 'elicitation/respond', pending.elicitationId, 'ok:=true'));
      assert.deepEqual(result.structuredContent?.answer, { action: 'accept', content: { ok: true } }, JSON.stringify(result));
    });
  });

  describe('mcp-inspector --cli (one shot)', () => {
    test('2026-07-28 over Streamable HTTP: an async-only tool runs to its result', async () => {
      const { result } = ok(
        await inspectorCli(setup, server.url, '--protocol-era', 'modern', '--method', 'tools/call', '--tool-name', 'slow', '--tool-arg', 'label=cli-http', 'seconds=1'),
      );
      assertWorkResult(result, 'cli-http', 1);
    });

    test('2026-07-28 over stdio', async () => {
      const { result } = ok(
        await inspectorCli(setup, '--protocol-era', 'modern', '--method', 'tools/call', '--tool-name', 'slow', '--tool-arg', 'label=cli-stdio', 'seconds=1', ...transports.stdio.target),
      );
      assertWorkResult(result, 'cli-stdio', 1);
    });

    test('2025-11-25 over Streamable HTTP (a task-required tool becomes a task)', async () => {
      const { result } = ok(
        await inspectorCli(setup, server.url, '--protocol-era', 'legacy', '--method', 'tools/call', '--tool-name', 'slow', '--tool-arg', 'label=cli-legacy', 'seconds=1'),
      );
      assertWorkResult(result, 'cli-legacy', 1);
    });
  });
});
