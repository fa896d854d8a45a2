// Builds the native addon when it is missing (npm install ./bindings/node
// on a machine with Rust): `napi build --release` from @napi-rs/cli, the
// package's dependency, or through npx when npm has not installed it yet
// (a folder install runs this script before the folder's dependencies).
'use strict';
const { copyFileSync, existsSync, mkdirSync } = require('node:fs');
const { join } = require('node:path');
const { spawnSync } = require('node:child_process');

const NAPI_CLI = '@napi-rs/cli@3.10.12';
const native = join(__dirname, 'native', 'script-harness.node');

// The WASI guest (the wasi engine's), from the repository it is built in.
function copyGuest() {
  const guest = join(__dirname, 'native', 'quickjs.wasm');
  const built = join(__dirname, '..', '..', 'bin', 'quickjs.wasm');
  if (!existsSync(guest) && existsSync(built)) {
    mkdirSync(join(__dirname, 'native'), { recursive: true });
    copyFileSync(built, guest);
  }
}

if (existsSync(native) && !process.env.SCRIPT_HARNESS_REBUILD) {
  copyGuest();
  process.exit(0);
}

const buildArgs = ['build', '--manifest-path', join(__dirname, 'Cargo.toml'), '--output-dir', join(__dirname, 'native')];
if (process.env.SCRIPT_HARNESS_PROFILE !== 'dev') buildArgs.push('--release', '--strip');

let command;
let args;
try {
  const pkg = require.resolve('@napi-rs/cli/package.json', { paths: [__dirname] });
  command = process.execPath;
  args = [join(pkg, '..', 'dist', 'cli.js'), ...buildArgs];
} catch {
  command = process.platform === 'win32' ? 'npx.cmd' : 'npx';
  args = ['--yes', '--package', NAPI_CLI, 'napi', ...buildArgs];
}
console.error(`script-harness: building the native addon (${args.includes('--release') ? 'release' : 'dev'}); this needs Rust and takes a few minutes the first time`);
const r = spawnSync(command, args, { stdio: 'inherit', cwd: __dirname });
if (r.status !== 0 || !existsSync(native)) {
  console.error('script-harness: building the native addon failed; it needs Rust (https://rustup.rs) and a C compiler.');
  process.exit(r.status || 1);
}
copyGuest();
