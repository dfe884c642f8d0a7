"""Dependency-auditing container builds.

Render Dockerfile stages from image recipes, compile hermetic pip-tools locks per pip layer,
snapshot the Python environment after every layer and fail the build at the layer that
downgrades, skews or replaces what an earlier layer installed.
"""

try:  # written by the build from the git tag (hatch-vcs; pyproject.toml)
    from audit._version import __version__ as __version__  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # sources nobody built or installed (a copy of the folder): no tag to read
    __version__ = "0+unknown"
