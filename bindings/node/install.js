// Builds the native addon when it is missing (npm install ./bindings/node
// on a machine with Rust): `napi build --release` from @napi-rs/cli.
'use strict';
const { existsSync } = require('node:fs');
const { join } = require('node:path');
const { spawnSync } = require('node:child_process');

const native = join(__dirname, 'native', 'script-harness.node');
if (existsSync(native) && !process.env.SCRIPT_HARNESS_REBUILD) process.exit(0);
const cli = require.resolve('@napi-rs/cli/package.json', { paths: [__dirname] });
const bin = join(cli, '..', 'dist', 'cli.js');
const args = [bin, 'build', '--manifest-path', join(__dirname, 'Cargo.toml'), '--output-dir', join(__dirname, 'native')];
if (process.env.SCRIPT_HARNESS_PROFILE !== 'dev') args.push('--release');
const r = spawnSync(process.execPath, args, { stdio: 'inherit', cwd: __dirname });
if (r.status !== 0) {
  console.error('script-harness: building the native addon failed; it needs Rust (https://rustup.rs) and a C compiler.');
  process.exit(r.status ?? 1);
}
