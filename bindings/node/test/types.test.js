'use strict';
// index.d.ts, checked with the real TypeScript compiler (tsc --strict):
// the sample passes; the sample with one wrong option fails.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { existsSync, mkdtempSync, readFileSync, writeFileSync } = require('node:fs');
const { join } = require('node:path');
const os = require('node:os');

function tsc() {
  const candidates = [process.env.HARNESS_TSC, join(__dirname, '..', '..', '..', 'target', 'npm', 'node_modules', '.bin', 'tsc')];
  return candidates.find((c) => c && existsSync(c));
}

function check(source) {
  const dir = mkdtempSync(join(os.tmpdir(), 'script-harness-types-'));
  const file = join(dir, 'sample.ts');
  writeFileSync(file, source.replace("from '..'", `from ${JSON.stringify(join(__dirname, '..', 'index'))}`));
  return spawnSync(tsc(), ['--strict', '--noEmit', '--target', 'es2022', '--module', 'nodenext',
    '--moduleResolution', 'nodenext', '--lib', 'es2022,esnext.disposable,dom', file], { encoding: 'utf8' });
}

test('index.d.ts passes tsc --strict on a sample and catches a wrong option', { skip: tsc() ? false : 'SKIPPED: tsc is not installed under target/npm' }, () => {
  const sample = readFileSync(join(__dirname, 'sample.ts'), 'utf8');
  const good = check(sample);
  assert.equal(good.status, 0, good.stdout + good.stderr);
  const bad = check(sample.replace("{ turnId: 't' }", "{ turnID: 't' }"));
  assert.notEqual(bad.status, 0);
  assert.match(bad.stdout, /turnID/);
});
