// Builds the prebuilt extension (prebuilt/) with @jupyterlab/builder, against the JupyterLab core
// described by @jupyterlab/core-meta (its core.package.json): node and this folder's node_modules
// are all it needs, no Python JupyterLab. The builder reads the core's metadata as the package.json
// of the folder given as --core-path: a copy in .core-meta/ here, removed after. (The build is the
// same byte for byte wherever this folder is: see webpack.config.js.)
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, 'package.json'));
const coreMeta = join(dirname(require.resolve('@jupyterlab/core-meta/package.json')), 'core.package.json');
const builder = join(dirname(require.resolve('@jupyterlab/builder/package.json')), 'lib', 'build-labextension.js');
const core = join(here, '.core-meta');
rmSync(core, { recursive: true, force: true });
mkdirSync(core);
try {
  copyFileSync(coreMeta, join(core, 'package.json'));
  const run = spawnSync(process.execPath, [builder, '--core-path', core, here], { stdio: 'inherit' });
  process.exitCode = run.status ?? 1;
} finally {
  rmSync(core, { recursive: true, force: true });
}
