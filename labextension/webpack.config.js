// Merged into @jupyterlab/builder's webpack configuration (package.json: jupyterlab.webpackConfig).
// Module ids by order ("natural") rather than by a hash of each module's identifier: the container
// entry's identifier holds the absolute paths of what it exposes, so hashed ids (and the files'
// content hashes) changed with the folder the build ran in. Ordered ids make the build the same byte
// for byte wherever it runs, so a rebuild anywhere gives the same files.
module.exports = {
  optimization: { moduleIds: 'natural' }
};
