// Builds, in this order:
// 1. the views' module, widgets/escouade.js (git-ignored), from its sources widgets/src/*.js: webpack (the
//    bundler @jupyterlab/builder already brings) bundles them into ONE ES module, as anywidget needs (a
//    view's `_esm` is loaded from a blob URL, where relative imports do not resolve), unminified: what the
//    page runs reads as the sources do. The extension below imports it, and the kernel serves it
//    (escouade_nb/widgets/front.py): one file, so its tag names what both carry.
// 2. the prebuilt extension (prebuilt/) with @jupyterlab/builder, against the JupyterLab core
//    described by @jupyterlab/core-meta (its core.package.json): node and this folder's node_modules
//    are all it needs, no Python JupyterLab. The builder reads the core's metadata as the package.json
//    of the folder given as --core-path: a copy in .core-meta/ here, removed after. (The build is the
//    same byte for byte wherever this folder is: see webpack.config.js.)
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, 'package.json'));
const coreMeta = join(dirname(require.resolve('@jupyterlab/core-meta/package.json')), 'core.package.json');
const builder = join(dirname(require.resolve('@jupyterlab/builder/package.json')), 'lib', 'build-labextension.js');

const webpack = require('webpack');
const widgets = join(here, '..', 'widgets');
const views = await new Promise((resolve) => webpack({
  mode: 'production',
  context: widgets,
  entry: './src/index.js',
  target: ['web', 'es2022'],
  devtool: false,
  experiments: { outputModule: true },
  // always written (compareBeforeEmit off): its time says it is newer than its sources (labextension/stale.py)
  output: { path: widgets, filename: 'escouade.js', module: true, library: { type: 'module' }, compareBeforeEmit: false },
  // modules concatenated (one scope, no loader runtime), ids by order: the same bytes wherever it runs
  optimization: { minimize: false, concatenateModules: true, moduleIds: 'natural' },
  performance: { hints: false },
  plugins: [new webpack.BannerPlugin({
    raw: true,
    banner: '// escouade_nb\'s views, built by labextension/build.mjs from widgets/src/*.js: edit those, then build'
  })]
}, (err, stats) => {
  if (err || stats.hasErrors() || stats.hasWarnings()) {
    console.error(err || stats.toString({ all: false, errors: true, warnings: true }));
    resolve(false);
  } else resolve(true);
}));
if (!views) process.exit(1);

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
