"""The package build's step for the JavaScript (pyproject.toml, ``[tool.hatch.build.hooks.jupyter-builder]``):
hatch-jupyter-builder's ``npm_builder``, run when one of ``built`` is missing or older than one of ``sources``
(files or folders, paths from the repository's root). The builder's own check takes one source folder; the
build here has two (``labextension/src``, the extension; ``widgets/src``, the views' module it also builds)
and the files that shape it. Nothing is run when all is newer than its sources: a second ``pip install -e .``
costs nothing, and a wheel built from the sdist (which carries what was built) needs no node.
"""

from __future__ import annotations

from typing import Any

from hatch_jupyter_builder.utils import is_stale, npm_builder


def build(target_name: str, version: str, *, built: list[str], sources: list[str], **kwargs: Any) -> None:
    """``npm_builder(target_name, version, **kwargs)`` when any of ``built`` is stale against any of
    ``sources`` (hatch-jupyter-builder's ``is_stale``: by modification time); raises what it raises."""
    if any(is_stale(target, source) for target in built for source in sources):
        npm_builder(target_name, version, force=True, **kwargs)
