// Stands in for npm in an editable install (`pip install -e .`): hatch-jupyter-builder runs
// `npm install` and `npm run build` there even when the committed build is present (its
// skip-if-exists counts for wheels only). This runs npm with the same arguments only when
// prebuilt/package.json is missing, so an editable install needs no node_modules, nor the network.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
if (existsSync(join(here, 'prebuilt', 'package.json'))) {
  console.log(`escouade-nb: labextension/prebuilt is there, not rebuilt (npm ${process.argv.slice(2).join(' ')} skipped)`);
} else {
  const run = spawnSync('npm', process.argv.slice(2), { cwd: here, stdio: 'inherit', shell: process.platform === 'win32' });
  process.exitCode = run.status ?? 1;
}
