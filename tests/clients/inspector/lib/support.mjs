// Helpers of the MCP Inspector CLI tests: the taskgate binary (HTTP on a free
// loopback port, or stdio spawned by the Inspector), a temporary config whose
// exec tools are tests/tools/*.sh, and the two command-line clients of
// @modelcontextprotocol/inspector 2.12, each run as a child process whose JSON
// output the tests assert:
//   - `mcp-inspector --cli` (one shot: connect, one method, exit);
//   - `mcpdo` (connect once, then one command per process against a named
//     connection held by its daemon): `tools/call --task`, `tasks/get`,
//     `tasks/update --input-responses`, `tasks/cancel`, `tasks/result`,
//     `elicitation/respond`. Every run gets its own HOME and a private daemon
//     (its own folder and token), stopped at the end.

import { spawn, execFile } from 'node:child_process';
import { mkdirSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';

import * as shared from '../../shared/taskgate.mjs';

export { repo, bin, waitFor, alive, LIMIT_MS } from '../../shared/taskgate.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const { bin, toolsDir, waitFor } = shared;
const inspector = join(here, '..', 'node_modules', '@modelcontextprotocol', 'inspector');
const MCPDO = join(inspector, 'clients/mcpdo/build/mcp-bin.js');
const LAUNCHER = join(inspector, 'clients/launcher/build/index.js');
/** Node 22 (the Inspector needs >= 22.19): the one running these tests. */
const node = process.env.TASKGATE_INSPECTOR_NODE ?? process.execPath;
export const KEY_VAR = 'TASKGATE_INSPECTOR_TEST_KEY';
const KEY = '2/JRWCOQDvZWE937Cou811AcHLfjtfjsMcqguLOxASU=';

const LABEL_SCHEMA =
  '{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }, seconds = { type = "integer", minimum = 0, maximum = 60 } } }';

/**
 * A temporary folder: the config (async tools, so a result proves a task was
 * used: without one they are refused or hidden), the exec spool, and the
 * Inspector's HOME and daemon folder.
 */
export function makeSetup() {
  const tool = (name, mode, script, schema = LABEL_SCHEMA) =>
    shared.toolToml(name, { mode, schema, target: shared.execTarget(script) });
  const base = shared.makeExecSetup(
    'tg-insp-',
    KEY_VAR,
    tool('slow', 'async', 'work.sh') +
      tool('ask', 'async', 'ask.sh', '{ type = "object", required = ["label"], properties = { label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" } } }') +
      tool('sleeper', 'async', 'sleeper.sh', '{ type = "object" }'),
  );
  const { dir, config } = base;
  const home = join(dir, 'home');
  mkdirSync(home);
  return {
    dir,
    config,
    key: KEY,
    serverEnv: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, [KEY_VAR]: KEY, TASKGATE_LOG: 'warn' },
    /** The environment of every Inspector process: its own HOME and a private daemon. */
    inspectorEnv: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: home,
      MCP_INSPECTOR_DAEMON_DIR: join(dir, 'd'),
      MCP_INSPECTOR_DAEMON_TOKEN: randomBytes(32).toString('hex'),
      MCP_INSPECTOR_SECRET_STORE: 'file',
      NO_COLOR: '1',
    },
    /** The stdio server command line, for the Inspector to spawn. */
    stdioCommand: [bin, 'serve', '--stdio', '--config', config],
    runsOf: base.runsOf,
    /** Ends what the runs left (they outlive servers by design), then removes the folder. */
    cleanup: base.cleanup,
  };
}

/** Starts `taskgate serve` on a free port; resolves once /healthz answers (`url` as text). */
export async function startHttpServer(setup) {
  const server = await shared.startHttpServer(setup.config, setup.serverEnv);
  return { url: server.url.href, stop: server.stop };
}

function run(args, env) {
  return new Promise((resolveRun) => {
    execFile(node, args, { env, timeout: 60_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
      let json;
      try {
        json = JSON.parse(stdout);
      } catch {
        json = undefined;
      }
      resolveRun({ code, stdout, stderr, json, args });
    });
  });
}

/** What a command printed, for assertion messages. */
export function shown(r) {
  return `exit ${r.code}; ${r.args.slice(1).join(' ')}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

/** `mcpdo --format json ARGS…` with the setup's private daemon. */
export function mcpdo(setup, ...args) {
  return run([MCPDO, '--format', 'json', ...args], setup.inspectorEnv);
}

/** `mcp-inspector --cli ARGS… --format json -q` (one shot). */
export function inspectorCli(setup, ...args) {
  const dash = args.indexOf('--');
  const head = dash < 0 ? args : args.slice(0, dash);
  const tail = dash < 0 ? [] : args.slice(dash);
  return run([LAUNCHER, '--cli', ...head, '--format', 'json', '-q', ...tail], setup.inspectorEnv);
}

/** Stops the private daemon (and with it the stdio servers it spawned). */
export async function stopDaemon(setup) {
  const socket = join(setup.inspectorEnv.MCP_INSPECTOR_DAEMON_DIR, 'mcpdod.sock');
  if (!existsSync(socket)) return;
  await run([MCPDO, 'daemon', 'stop'], setup.inspectorEnv);
  await waitFor('the mcpdo daemon to stop', () => !existsSync(socket), 20_000);
}

const MODERN_META = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'taskgate-inspector-test-starter', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } },
};

function createTaskRequest(name, args) {
  return { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args, _meta: MODERN_META } };
}

function taskIdOf(response) {
  const result = response?.result;
  if (result?.resultType !== 'task' || typeof result.taskId !== 'string') {
    throw new Error(`expected a task: ${JSON.stringify(response)}`);
  }
  return result.taskId;
}

/**
 * Starts a task with a plain 2026-07-28 request outside the Inspector (its
 * CLI never prints the id of a task it started), for the Inspector's
 * tasks/get, tasks/update, tasks/cancel and tasks/result to work on. Over
 * stdio the request goes to a separate `taskgate serve --stdio` process: the
 * handle is sealed and the run lives in the engine, so the Inspector's own
 * server process answers for it.
 */
export async function startTask(setup, transport, name, args) {
  const request = createTaskRequest(name, args);
  if (transport.kind === 'http') {
    const r = await fetch(transport.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'tools/call',
        'mcp-name': name,
      },
      body: JSON.stringify(request),
    });
    return taskIdOf(await r.json());
  }
  const child = spawn(bin, ['serve', '--stdio', '--config', setup.config], {
    env: setup.serverEnv,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise((done) => child.once('exit', done));
  const lines = createInterface({ input: child.stdout });
  child.stdin.write(`${JSON.stringify(request)}\n`);
  let response;
  for await (const line of lines) {
    response = JSON.parse(line);
    if (response.id === 1) break;
  }
  child.stdin.end();
  await exited;
  return taskIdOf(response);
}
