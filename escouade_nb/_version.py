"""The package version, from its installed metadata (one source: ``pyproject.toml``)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("escouade_nb")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
