// Helpers shared by the Node client suites (ts-sdk1, ts-client2, inspector):
// the built taskgate binary, the test tool scripts (tests/tools), polling with a
// deadline, process liveness, `taskgate serve` on a free loopback port, and the
// exec spool's run folders. Node built-ins only, so every suite can import this
// file whatever packages it installed.

import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, readdirSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';

const here = dirname(fileURLToPath(import.meta.url));
export const repo = resolve(here, '../../..');
export const bin = resolve(repo, process.env.TASKGATE_BIN ?? 'target/debug/taskgate');
export const toolsDir = join(repo, 'tests/tools');
export const LIMIT_MS = 40_000;

/** Polls `check` every 50 ms until it returns a truthy value; fails after `limit` ms. */
export async function waitFor(what, check, limit = LIMIT_MS) {
  const deadline = Date.now() + limit;
  for (;;) {
    const value = await check();
    if (value) return value;
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

/** A free loopback port (closed again before the server binds it). */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolvePort(port));
    });
  });
}

/**
 * Starts `taskgate serve --config CONFIG` with exactly `env` on a free port
 * (three tries); resolves once /healthz answers with the child, its MCP `url`
 * (a URL) and `stop()` (SIGTERM, resolving when it exited).
 */
export async function startHttpServer(config, env) {
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawn(bin, ['serve', '--config', config, '--listen', `127.0.0.1:${port}`], {
      env,
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
          return (await fetch(`http://127.0.0.1:${port}/healthz`)).ok ? 'up' : false;
        } catch {
          return false;
        }
      },
      20_000,
    );
    if (up === 'up') {
      return {
        child,
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

/** The run folders of `tool` in the exec spool `spool`. */
export function runsOf(spool, tool) {
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
}

/** Ends the process groups the runs in `spool` left (runs outlive servers by design). */
export function endRuns(spool) {
  if (!existsSync(spool)) return;
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

/** One `[[tools]]` table. `target` is `{ engine, toml }` (see `execTarget`). */
export function toolToml(name, { mode = 'hybrid', schema = '{ type = "object" }', target, extra = '', pollInterval = '200ms' }) {
  return (
    `[[tools]]\nname = "${name}"\ndescription = "test tool ${name}"\nengine = "${target.engine}"\nmode = "${mode}"\n` +
    `poll_interval = "${pollInterval}"\nkeep_alive = "1h"\ninput_schema = ${schema}\n${extra}target = ${target.toml}\n\n`
  );
}

/** An exec-engine target running tests/tools/<script> with `args`. */
export function execTarget(script, args = []) {
  return { engine: 'local', toml: `{ command = ${JSON.stringify([join(toolsDir, script), ...args])} }` };
}

/**
 * A temporary folder (named `prefix...`) with a config whose sealing key is in
 * the variable `keyVar` and whose exec engine `local` spools there; `body` is
 * appended (engines and tools). `cleanup()` ends what the runs left, then
 * removes the folder.
 */
export function makeExecSetup(prefix, keyVar, body) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const spool = join(dir, 'spool');
  const config = join(dir, 'taskgate.toml');
  writeFileSync(
    config,
    `[server]\nlisten = "127.0.0.1:0"\ncall_timeout = "10s"\nmax_wait = "30s"\n\n` +
      `[keys]\nseal = [{ id = "k1", secret_env = "${keyVar}" }]\n\n` +
      `[engines.local]\nkind = "exec"\nspool_dir = ${JSON.stringify(spool)}\ngrace_period = "1s"\n\n` +
      body,
  );
  return {
    dir,
    spool,
    config,
    /** The run folders of `tool` in the exec spool. */
    runsOf: (tool) => runsOf(spool, tool),
    cleanup() {
      endRuns(spool);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
