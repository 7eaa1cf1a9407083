// Summarises one suite run from the checks.json files that `conformance server
// -o DIR` saves: one line per scenario (passed/failed/warnings), then every
// failing or warning check with its message. Usage: node summary.mjs DIR [--brief]
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
const brief = process.argv.includes('--brief');
const rows = [];
for (const entry of readdirSync(dir).sort()) {
  const file = join(dir, entry, 'checks.json');
  if (!existsSync(file)) continue;
  const scenario = entry.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
  const checks = JSON.parse(readFileSync(file, 'utf8'));
  const count = (s) => checks.filter((c) => c.status === s).length;
  rows.push({ scenario, checks, ok: count('SUCCESS'), failed: count('FAILURE'), warn: count('WARNING'), skipped: count('SKIPPED') });
}
let pass = 0, fail = 0;
for (const r of rows) {
  const good = r.failed === 0 && r.warn === 0;
  good ? pass++ : fail++;
  console.log(`${good ? 'PASS' : 'FAIL'}  ${r.scenario.padEnd(48)} ${r.ok} ok, ${r.failed} failed, ${r.warn} warnings${r.skipped ? `, ${r.skipped} skipped` : ''}`);
}
console.log(`${rows.length} scenarios: ${pass} without and ${fail} with failing checks (expected failures included)`);
if (!brief) {
  for (const r of rows) {
    for (const c of r.checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING')) {
      console.log(`\n[${c.status}] ${r.scenario} / ${c.id}: ${c.description ?? ''}\n    ${String(c.errorMessage ?? '').split('\n').join('\n    ').slice(0, 1500)}`);
    }
  }
}
