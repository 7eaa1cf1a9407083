// taskgate against the TypeScript MCP client 2.4.x (@modelcontextprotocol/client)
// with the tasks extension client (@modelcontextprotocol/ext-tasks 0.2.x), on
// 2026-07-28 over stdio and Streamable HTTP, with the exec engine running
// tests/tools/*.sh:
//   - createTaskSessionFromClient → session.callTool → execution.settle: a
//     long-running call as a task, polled with tasks/get to completion;
//   - execution.cancel (tasks/cancel): the run's whole process group stops;
//   - input: a task's inputRequests answered by onInputRequest through
//     tasks/update, and a question asked before the task exists (input_required
//     result + requestState, answered by the extension's retry);
//   - handoff / resumeTask: a task outlives its connection (over stdio, its
//     server process too);
//   - the plain SDK client without the extension: hybrid tools run
//     synchronously, async-only tools are refused (-32021).

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

import {
  makeSetup,
  toolToml,
  execTarget,
  LABEL_SCHEMA,
  startHttpServer,
  connectModern,
  stdioTransport,
  httpTransport,
  settleAll,
  waitFor,
  alive,
  TASKS,
} from '../lib/support.mjs';

const TOOLS =
  toolToml('work', { mode: 'hybrid', schema: LABEL_SCHEMA, target: execTarget('work.sh') }) +
  toolToml('fail', { mode: 'hybrid', schema: LABEL_SCHEMA, target: execTarget('fail.sh') }) +
  toolToml('ask', { mode: 'async', schema: LABEL_SCHEMA, target: execTarget('ask.sh') }) +
  toolToml('ask_first', { mode: 'async', schema: LABEL_SCHEMA, target: execTarget('ask.sh'), extra: 'input_wait = "10s"\n' }) +
  toolToml('sleeper', { mode: 'async', target: execTarget('sleeper.sh') });

/** An input handler that records what it was asked and answers with `answer(request)`. */
function recorder(answer = () => ({ action: 'accept', content: { ok: true } })) {
  const asked = [];
  const handle = async (request, context) => {
    asked.push({ request, context });
    return answer(request, context);
  };
  return { asked, handle };
}

function flows(transportName, makeTransport) {
  describe(`TypeScript client 2.4 + ext-tasks 0.2 over ${transportName}`, { timeout: 300_000 }, () => {
    let setup;
    let server;
    const open = (options) => connectModern(makeTransport(setup, server), options);

    before(async () => {
      setup = makeSetup(TOOLS);
      if (transportName === 'Streamable HTTP') server = await startHttpServer(setup);
    });
    after(async () => {
      await server?.stop();
      setup.cleanup();
    });

    test('2026-07-28 is negotiated and the tasks extension is offered', async () => {
      const c = await open();
      try {
        assert.equal(c.client.getProtocolEra(), 'modern');
        assert.equal(c.client.getNegotiatedProtocolVersion(), '2026-07-28');
        assert.deepEqual(c.client.getServerCapabilities()?.extensions?.[TASKS], {});
        assert.equal(c.client.getServerVersion()?.name, 'taskgate');
        assert.equal(c.session.capabilities.execution, true);
        assert.equal(c.session.capabilities.cancellation, true);
        assert.equal(c.session.capabilities.inputResponses, true);
        const { tools } = await c.client.listTools();
        assert.deepEqual(tools.map((t) => t.name).sort(), ['ask', 'ask_first', 'fail', 'sleeper', 'taskgate_logs', 'work']);
      } finally {
        await c.close();
      }
    });

    test('a long-running call is a task that completes with its result', async () => {
      const c = await open();
      try {
        const execution = await c.session.callTool('work', { label: 'ts2-work', seconds: 2 });
        assert.equal(execution.kind, 'task');
        assert.match(execution.handle.taskId, /^tg3\./);
        const { outcome, views } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        const messages = views.map((v) => v.statusMessage).filter(Boolean);
        assert.ok(
          messages.some((m) => /^step [01] of 2$/.test(m)),
          `progress seen while working: ${JSON.stringify(views.map((v) => [v.status, v.statusMessage]))}`,
        );
        assert.ok(views.some((v) => v.status === 'working'));
        assert.equal(outcome.result.isError, false);
        assert.deepEqual(outcome.result.structuredContent, { label: 'ts2-work', seconds: 2, rows: 42 });
        assert.equal(outcome.task?.status, 'completed');
        const again = await c.session.task(execution.handle.taskId).snapshot();
        assert.equal(again.status, 'completed');
        assert.equal(again.raw.result.structuredContent.rows, 42);
      } finally {
        await c.close();
      }
    });

    test('a failing pipeline completes as a tool error (isError), not a failed task', async () => {
      const c = await open();
      try {
        const execution = await c.session.callTool('fail', { label: 'missing' });
        const { outcome } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.equal(outcome.result.isError, true);
        assert.match(JSON.stringify(outcome.result.content), /missing not found/);
      } finally {
        await c.close();
      }
    });

    test('cancel stops the run and its whole process group', async () => {
      const c = await open();
      try {
        const execution = await c.session.callTool('sleeper', {});
        assert.equal(execution.kind, 'task');
        const pidFile = await waitFor('the sleeper to start its grandchild', () => {
          const run = setup.runsOf('sleeper').find((d) => existsSync(join(d, 'grandchild.pid')));
          return run && join(run, 'grandchild.pid');
        });
        const grandchild = Number(readFileSync(pidFile, 'utf8').trim());
        assert.ok(alive(grandchild));
        const settling = settleAll(execution);
        await execution.cancel();
        const { outcome } = await settling;
        assert.equal(outcome.status, 'cancelled', JSON.stringify(outcome));
        await waitFor('the grandchild to end', () => !alive(grandchild));
        const view = await c.session.task(execution.handle.taskId).snapshot();
        assert.equal(view.status, 'cancelled');
      } finally {
        await c.close();
      }
    });

    test('input_required: onInputRequest answers through tasks/update and the task completes', async () => {
      const input = recorder();
      const c = await open({ onInputRequest: input.handle });
      try {
        const execution = await c.session.callTool('ask', { label: 'ts2-ask' });
        assert.equal(execution.kind, 'task');
        const { outcome, views } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.ok(views.some((v) => v.status === 'input_required'), JSON.stringify(views.map((v) => v.status)));
        assert.equal(input.asked.length, 1, JSON.stringify(input.asked));
        const [{ request, context }] = input.asked;
        assert.equal(request.kind, 'elicitation');
        assert.equal(request.params.message, 'Deploy ts2-ask?');
        assert.deepEqual(request.params.requestedSchema.required, ['ok']);
        assert.equal(context.scope, 'task');
        assert.equal(context.delivery, 'task-update');
        assert.equal(context.taskId, execution.handle.taskId);
        assert.equal(context.inputId, 'approve');
        assert.deepEqual(outcome.result.structuredContent, {
          label: 'ts2-ask',
          answer: { action: 'accept', content: { ok: true } },
        });
      } finally {
        await c.close();
      }
    });

    test('a decline reaches the pipeline as a decline', async () => {
      const input = recorder(() => ({ action: 'decline' }));
      const c = await open({ onInputRequest: input.handle });
      try {
        const { outcome } = await settleAll(await c.session.callTool('ask', { label: 'ts2-no' }));
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.equal(input.asked.length, 1);
        assert.equal(outcome.result.structuredContent.answer.action, 'decline');
      } finally {
        await c.close();
      }
    });

    test('a question asked before the task exists is answered by the retried call (input_required + requestState)', async () => {
      const input = recorder();
      const c = await open({ onInputRequest: input.handle });
      try {
        const execution = await c.session.callTool('ask_first', { label: 'ts2-mrtr' });
        const { outcome } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.equal(input.asked.length, 1, JSON.stringify(input.asked));
        const [{ request, context }] = input.asked;
        assert.equal(request.params.message, 'Deploy ts2-mrtr?');
        assert.equal(context.scope, 'request');
        assert.equal(context.delivery, 'request-retry');
        assert.deepEqual(outcome.result.structuredContent.answer, { action: 'accept', content: { ok: true } });
      } finally {
        await c.close();
      }
    });

    test('a task outlives its connection: handoff, reconnect, resumeTask', async () => {
      const first = await open();
      let reference;
      const execution = await first.session.callTool('work', { label: 'ts2-resume', seconds: 2 });
      assert.equal(execution.kind, 'task');
      await execution.handoff((r) => {
        reference = r;
      });
      // ext-tasks 0.2.2: session.close() closes every execution still tracked,
      // and close() on a detached execution whose poll loop has not unwound yet
      // sends tasks/cancel (it checks `settled`, not `closed`). Waiting for the
      // detached execution's local outcome first keeps the handoff a handoff.
      await execution.result().catch(() => {});
      await first.close();
      assert.equal(reference.generation, 'v2');
      assert.equal(reference.taskId, execution.handle.taskId);
      // Over stdio this is a new server process.
      const second = await open();
      try {
        const resumed = await second.session.resumeTask(JSON.parse(JSON.stringify(reference)));
        const { outcome } = await settleAll(resumed);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.deepEqual(outcome.result.structuredContent, { label: 'ts2-resume', seconds: 2, rows: 42 });
      } finally {
        await second.close();
      }
    });

    test('without the tasks extension: a hybrid tool runs synchronously, an async-only tool is refused', async () => {
      const c = await open({ tasks: false });
      try {
        const result = await c.client.callTool({ name: 'work', arguments: { label: 'ts2-sync', seconds: 1 } });
        assert.equal(result.isError, false);
        assert.deepEqual(result.structuredContent, { label: 'ts2-sync', seconds: 1, rows: 42 });
        await assert.rejects(c.client.callTool({ name: 'sleeper', arguments: {} }), (error) => {
          assert.equal(error.code, -32021, String(error));
          return true;
        });
      } finally {
        await c.close();
      }
    });
  });
}

flows('stdio', (setup) => stdioTransport(setup));
flows('Streamable HTTP', (setup, server) => httpTransport(server.url));
