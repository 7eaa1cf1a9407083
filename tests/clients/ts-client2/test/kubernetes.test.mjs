// The Kubernetes engine through the TypeScript client 2.4.x with ext-tasks
// 0.2.x on 2026-07-28 over stdio: a tool call creates a Job on the control
// plane (scripts/k8s/cluster-up.sh, kwok); the client opens
// subscriptions/listen for the task and settles the execution from the
// notifications/tasks it carries: after the tools/call it sends no tasks/get
// (the tool's poll interval is 60 s), and the listen request ends with its
// result.
//
// Needs TASKGATE_KUBECONFIG (the cluster's admin kubeconfig): skipped without
// it, failed when TASKGATE_REQUIRE_E2E=1.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { makeSetup, toolToml, connectModern, stdioTransport, settleAll } from '../lib/support.mjs';

const kubeconfig = process.env.TASKGATE_KUBECONFIG;
const required = process.env.TASKGATE_REQUIRE_E2E === '1';
const skip = !kubeconfig && !required && 'TASKGATE_KUBECONFIG is not set (start the cluster with scripts/k8s/cluster-up.sh)';

const JOB = `apiVersion: batch/v1
kind: Job
metadata:
  labels: { app: taskgate-ts2 }
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        taskgate.test/duration: 3s
        taskgate.test/termination-message: '{"rows": 7}'
    spec:
      restartPolicy: Never
      containers:
      - { name: main, image: "busybox:fake", command: [sh, -c, run] }
`;

describe('a Kubernetes Job through the TypeScript client 2.4, settled from notifications', { timeout: 120_000 }, () => {
  let setup;
  let dir;
  before(() => {
    if (skip) return;
    assert.ok(kubeconfig, 'TASKGATE_REQUIRE_E2E=1 and TASKGATE_KUBECONFIG is not set: start the cluster with scripts/k8s/cluster-up.sh');
    dir = mkdtempSync(join(tmpdir(), 'taskgate-ts2-k8s-'));
    const template = join(dir, 'job.yaml');
    writeFileSync(template, JOB);
    setup = makeSetup(
      `[engines.k8s]\nkind = "kubernetes"\nkubeconfig = ${JSON.stringify(kubeconfig)}\nnamespace = "default"\n\n` +
        toolToml('k8s_job', {
          mode: 'async',
          schema: '{ type = "object" }',
          target: { engine: 'k8s', toml: `{ template_file = ${JSON.stringify(template)} }` },
          pollInterval: '60s',
        }),
    );
  });
  after(() => {
    setup?.cleanup();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('the Job completes and the client learns it without tasks/get', { skip }, async () => {
    const c = await connectModern(stdioTransport(setup));
    try {
      const execution = await c.session.callTool('k8s_job', {});
      assert.equal(execution.kind, 'task');
      const taskId = execution.handle.taskId;
      const afterStart = c.sent.length;
      const listening = c.rawDispatch({
        method: 'subscriptions/listen',
        params: { notifications: { taskIds: [taskId] }, _meta: c.meta },
      });
      const { outcome } = await settleAll(execution);
      assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
      assert.deepEqual(outcome.result.structuredContent, { rows: 7 });
      const closing = await listening;
      assert.equal(closing.kind, 'result', JSON.stringify(closing));
      assert.equal(closing.result.resultType, 'complete');
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
