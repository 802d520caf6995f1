// Merged into @jupyterlab/builder's webpack configuration (package.json: jupyterlab.webpackConfig).
// Module ids by order ("natural") rather than by a hash of each module's identifier: the container
// entry's identifier holds the absolute paths of what it exposes, so hashed ids (and the files'
// content hashes) changed with the folder the build ran in. Ordered ids make the build the same byte
// for byte wherever it runs, so a rebuild anywhere gives the same files.
// ESCOUADE_VIEWS_TAG: the tag of the views' files this build imports (src/views.js), computed as the
// kernel computes it (escouade_nb/widgets/front.py, front_end_tag).
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const webpack = require('webpack');

const widgets = path.join(__dirname, '..', 'widgets');
const tag = crypto.createHash('sha256')
  .update(fs.readFileSync(path.join(widgets, 'escouade.js')))
  .update(Buffer.from([0]))
  .update(fs.readFileSync(path.join(widgets, 'escouade.css')))
  .digest('hex').slice(0, 16);

module.exports = {
  optimization: { moduleIds: 'natural' },
  plugins: [new webpack.DefinePlugin({ ESCOUADE_VIEWS_TAG: JSON.stringify(tag) })]
};
