// The npm that the package build (hatch-jupyter-builder's npm_builder, pyproject.toml) runs here. That
// builder runs `npm install` then `npm run build`; this runs `npm ci` in place of `npm install` (the exact
// tree of package-lock.json, which it never rewrites) — and not at all when node_modules was installed
// from the lock file as it is now — and passes anything else to npm unchanged.
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const npm = args => {
  const run = spawnSync('npm', args, { cwd: here, stdio: 'inherit', shell: process.platform === 'win32' });
  return run.status ?? 1;
};
const args = process.argv.slice(2);
if (args.length === 1 && args[0] === 'install') {
  const installed = join(here, 'node_modules', '.package-lock.json');
  const lock = join(here, 'package-lock.json');
  if (existsSync(installed) && statSync(installed).mtimeMs >= statSync(lock).mtimeMs) {
    console.log('escouade-nb: labextension/node_modules is installed from package-lock.json (npm ci skipped)');
  } else {
    process.exitCode = npm(['ci', '--no-audit', '--no-fund', '--loglevel=error']);
  }
} else {
  process.exitCode = npm(args);
}
