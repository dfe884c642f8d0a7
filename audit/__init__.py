"""Dependency-auditing container builds.

Render Dockerfile stages from image recipes, compile hermetic pip-tools locks per pip layer,
snapshot the Python environment after every layer and fail the build at the layer that
downgrades, skews or replaces what an earlier layer installed.
"""

__version__ = "0.1.0"
