// taskgate's task notifications with the TypeScript client 2.4.x and
// ext-tasks 0.2.x, on 2026-07-28 over stdio and Streamable HTTP, exec engine:
//   - the client starts a long task, opens subscriptions/listen for it, and
//     settles the execution from the notifications/tasks the stream carries:
//     after the tools/call it sends no tasks/get at all (the tool's poll
//     interval is 60 s, so the extension would only poll after a minute of
//     silence), and the listen request ends with its result.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';

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
} from '../lib/support.mjs';

const SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';

const TOOLS = toolToml('long_work', {
  mode: 'async',
  schema: LABEL_SCHEMA,
  target: execTarget('work.sh'),
  pollInterval: '60s',
});

function flows(transportName, makeTransport) {
  describe(`task notifications to the TypeScript client 2.4 over ${transportName}`, { timeout: 120_000 }, () => {
    let setup;
    let server;
    before(async () => {
      setup = makeSetup(TOOLS);
      if (transportName === 'Streamable HTTP') server = await startHttpServer(setup);
    });
    after(async () => {
      await server?.stop();
      setup.cleanup();
    });

    test('a long exec task settles from notifications, without tasks/get', async () => {
      const c = await connectModern(makeTransport(setup, server));
      try {
        const execution = await c.session.callTool('long_work', { label: 'pushed', seconds: 3 });
        assert.equal(execution.kind, 'task');
        const taskId = execution.handle.taskId;
        const afterStart = c.sent.length;
        const listening = c.rawDispatch({
          method: 'subscriptions/listen',
          params: { notifications: { taskIds: [taskId] }, _meta: c.meta },
        });
        const { outcome, views } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.deepEqual(outcome.result.structuredContent, { label: 'pushed', seconds: 3, rows: 42 });
        assert.ok(
          views.some((v) => v.status === 'working' && /^step \d of 3$/.test(v.statusMessage ?? '')),
          `working steps seen: ${JSON.stringify(views.map((v) => [v.status, v.statusMessage]))}`,
        );
        const closing = await listening;
        assert.equal(closing.kind, 'result', JSON.stringify(closing));
        assert.equal(closing.result.resultType, 'complete');
        assert.ok(closing.result._meta?.[SUBSCRIPTION_ID] !== undefined, JSON.stringify(closing));
        const methods = c.sent.slice(afterStart).map((m) => m.method);
        assert.deepEqual(
          methods.filter((m) => m !== undefined && m !== 'subscriptions/listen'),
          [],
          `sent after the start: ${JSON.stringify(methods)}`,
        );
      } finally {
        await c.close();
      }
    });
  });
}

flows('stdio', (setup) => stdioTransport(setup));
flows('Streamable HTTP', (_setup, server) => httpTransport(server.url));
