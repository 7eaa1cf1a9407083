// The Step Functions engine through a real client: the TypeScript MCP client
// 2.4.x with ext-tasks 0.2.x on 2026-07-28, over Streamable HTTP and stdio,
// against taskgate whose engine points at moto (scripts/moto/up.sh, execution
// of state machines on). Each test creates its own state machine (and SQS
// queue) in moto and checks the upstream effect there:
//   - a Pass → Wait → Succeed machine: a task that completes with the
//     execution's output as structuredContent;
//   - a long Wait (with state_in_status, so the status names the state):
//     execution.cancel → tasks/cancel → the execution is ABORTED;
//   - a human step (sqs:sendMessage.waitForTaskToken): the task asks, the
//     client's onInputRequest answers, taskgate sends SendTaskSuccess (accept)
//     or SendTaskFailure (decline), and the execution goes on.
//
// Needs TASKGATE_MOTO_URL: skipped without it, failed when TASKGATE_REQUIRE_E2E=1.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  makeSetup,
  toolToml,
  startHttpServer,
  connectModern,
  stdioTransport,
  httpTransport,
  settleAll,
  aws,
} from '../lib/support.mjs';

const moto = process.env.TASKGATE_MOTO_URL;
const required = process.env.TASKGATE_REQUIRE_E2E === '1';
const skip = !moto && !required && 'TASKGATE_MOTO_URL is not set (start moto with scripts/moto/up.sh)';
const ROLE = 'arn:aws:iam::123456789012:role/taskgate-tests';
let unique = 0;
const name = (prefix) => `ts2-${prefix}-${process.pid}-${Date.now()}-${++unique}`;

async function stateMachine(prefix, definition) {
  const r = await aws('states', 'AWSStepFunctions.CreateStateMachine', {
    name: name(prefix),
    definition: JSON.stringify(definition),
    roleArn: ROLE,
    type: 'STANDARD',
  });
  return r.stateMachineArn;
}

/** Status of the only execution of `machine`, as DescribeExecution says. */
async function onlyExecutionStatus(machine) {
  const { executions } = await aws('states', 'AWSStepFunctions.ListExecutions', { stateMachineArn: machine });
  assert.equal(executions.length, 1, JSON.stringify(executions));
  const described = await aws('states', 'AWSStepFunctions.DescribeExecution', { executionArn: executions[0].executionArn });
  return described.status;
}

const SCHEMA = '{ type = "object", required = ["dataset"], properties = { dataset = { type = "string" } } }';
const HUMAN_STEP =
  'human_step = { state = "Approve", message = "Approve the analysis?", schema = { type = "object", required = ["approved"], ' +
  'properties = { approved = { type = "boolean" }, note = { type = "string" } } } }';
const sfnTarget = (arn, extra = '') => ({
  engine: 'aws',
  toml: `{ state_machine_arn = "${arn}", input_key = "args"${extra ? `, ${extra}` : ''} }`,
});

/** Machines for one transport's tests: created upstream, then one config naming them all. */
async function machines() {
  const { QueueUrl } = await aws('sqs', 'AmazonSQS.CreateQueue', { QueueName: name('approvals') });
  const human = () =>
    stateMachine('human', {
      StartAt: 'Prepare',
      States: {
        Prepare: { Type: 'Pass', Next: 'Approve' },
        Approve: {
          Type: 'Task',
          Resource: 'arn:aws:states:::sqs:sendMessage.waitForTaskToken',
          Parameters: { QueueUrl, MessageBody: { 'taskToken.$': '$$.Task.Token', 'input.$': '$' } },
          ResultPath: '$.approval',
          Next: 'Done',
        },
        Done: { Type: 'Succeed' },
      },
    });
  return {
    analyze: await stateMachine('analyze', {
      StartAt: 'Prepare',
      States: {
        Prepare: { Type: 'Pass', Result: { prepared: true }, ResultPath: '$.prep', Next: 'Pause' },
        Pause: { Type: 'Wait', Seconds: 2, Next: 'Done' },
        Done: { Type: 'Succeed' },
      },
    }),
    sleep: await stateMachine('sleep', { StartAt: 'Sleep', States: { Sleep: { Type: 'Wait', Seconds: 300, End: true } } }),
    approve: await human(),
    decline: await human(),
  };
}

function flows(transportName, makeTransport) {
  describe(`Step Functions (moto) through TypeScript client 2.4 + ext-tasks 0.2 over ${transportName}`, { timeout: 300_000 }, () => {
    let setup;
    let server;
    let arns;
    const open = (options) => connectModern(makeTransport(setup, server), options);

    before(async () => {
      if (skip) return;
      assert.ok(moto, 'TASKGATE_REQUIRE_E2E=1 and TASKGATE_MOTO_URL is not set: start moto with scripts/moto/up.sh');
      arns = await machines();
      setup = makeSetup(
        `[engines.aws]\nkind = "stepfunctions"\nregion = "us-east-1"\nendpoint_url = "${moto}"\n\n` +
          toolToml('analyze', { schema: SCHEMA, target: sfnTarget(arns.analyze) }) +
          toolToml('sleep', { schema: SCHEMA, target: sfnTarget(arns.sleep, 'state_in_status = true') }) +
          toolToml('approve', { schema: SCHEMA, target: sfnTarget(arns.approve, HUMAN_STEP) }) +
          toolToml('approve_declined', { schema: SCHEMA, target: sfnTarget(arns.decline, HUMAN_STEP) }),
        {
          AWS_ACCESS_KEY_ID: 'testing',
          AWS_SECRET_ACCESS_KEY: 'testing',
          AWS_REGION: 'us-east-1',
          AWS_EC2_METADATA_DISABLED: 'true',
        },
      );
      if (transportName === 'Streamable HTTP') server = await startHttpServer(setup);
    });
    after(async () => {
      await server?.stop();
      setup?.cleanup();
    });

    test('an execution runs as a task and completes with its output', { skip }, async () => {
      const c = await open();
      try {
        const execution = await c.session.callTool('analyze', { dataset: 's3://bucket/d1.csv' });
        assert.equal(execution.kind, 'task');
        const { outcome, views } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.ok(views.some((v) => v.status === 'working'), JSON.stringify(views));
        assert.equal(outcome.result.isError, false);
        assert.deepEqual(outcome.result.structuredContent, {
          args: { dataset: 's3://bucket/d1.csv' },
          prep: { prepared: true },
        });
        assert.equal(await onlyExecutionStatus(arns.analyze), 'SUCCEEDED');
      } finally {
        await c.close();
      }
    });

    test('cancel stops the execution upstream (ABORTED)', { skip }, async () => {
      const c = await open();
      try {
        const execution = await c.session.callTool('sleep', { dataset: 'd2' });
        assert.equal(execution.kind, 'task');
        let cancelling;
        const { outcome, views } = await settleAll(execution, async (view) => {
          // Cancel once taskgate reads the execution in its Wait state.
          if (!cancelling && /Sleep/.test(view.statusMessage ?? '')) cancelling = execution.cancel();
        });
        await cancelling;
        assert.ok(cancelling, `never saw the Sleep state: ${JSON.stringify(views)}`);
        assert.equal(outcome.status, 'cancelled', JSON.stringify(outcome));
        assert.equal(await onlyExecutionStatus(arns.sleep), 'ABORTED');
        const view = await c.session.task(execution.handle.taskId).snapshot();
        assert.equal(view.status, 'cancelled');
      } finally {
        await c.close();
      }
    });

    test('the human step: the client answers, SendTaskSuccess resumes the execution', { skip }, async () => {
      const asked = [];
      const c = await open({
        onInputRequest: async (request, context) => {
          asked.push({ request, context });
          return { action: 'accept', content: { approved: true, note: 'fine' } };
        },
      });
      try {
        const execution = await c.session.callTool('approve', { dataset: 'd3' });
        const { outcome, views } = await settleAll(execution);
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.ok(views.some((v) => v.status === 'input_required'), JSON.stringify(views.map((v) => v.status)));
        assert.equal(asked.length, 1, JSON.stringify(asked));
        const [{ request, context }] = asked;
        assert.equal(request.kind, 'elicitation');
        assert.equal(request.params.message, 'Approve the analysis?');
        assert.deepEqual(request.params.requestedSchema.required, ['approved']);
        assert.equal(context.delivery, 'task-update');
        assert.match(context.inputId, /^Approve#/);
        assert.doesNotMatch(JSON.stringify(request), /taskToken|:execution:/, 'no token or ARN reaches the client');
        assert.deepEqual(outcome.result.structuredContent.approval, { approved: true, note: 'fine' });
        assert.equal(await onlyExecutionStatus(arns.approve), 'SUCCEEDED');
      } finally {
        await c.close();
      }
    });

    test('the human step declined: SendTaskFailure, the execution fails, the result is a tool error', { skip }, async () => {
      const c = await open({ onInputRequest: async () => ({ action: 'decline' }) });
      try {
        const { outcome } = await settleAll(await c.session.callTool('approve_declined', { dataset: 'd4' }));
        assert.equal(outcome.status, 'completed', JSON.stringify(outcome));
        assert.equal(outcome.result.isError, true, JSON.stringify(outcome.result));
        assert.match(JSON.stringify(outcome.result), /taskgate\.Declined/);
        assert.equal(await onlyExecutionStatus(arns.decline), 'FAILED');
      } finally {
        await c.close();
      }
    });
  });
}

flows('Streamable HTTP', (setup, server) => httpTransport(server.url));
flows('stdio', (setup) => stdioTransport(setup));
