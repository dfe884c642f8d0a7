"""Resolvers: what compiles one pip layer's lock, behind one Protocol, and which one a recipe gets.

:class:`Resolver` is the public face the lock runner sees: a label (part of every lock's inputs),
whether it merges indexes (pip: the highest version from any index, so the runner checks where
each moved file came from), ``compile`` one :class:`~audit.lock.resolvers.job.CompileJob`, and
each backend's own reading of its output: ``explain`` a failure in its own words, ``yanked``
releases it warned about. "What moved" is the runner's, from the locks (backend-neutral).

Backends: :class:`~audit.lock.resolvers.piptools.PipTools` (pip-compile in the base image or
on a matching host) and :class:`~audit.lock.resolvers.uv.Uv` (uv on this machine for the
base's Python and platform). :func:`select` picks one from the recipe's ``resolver``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from audit.errors import EnvironmentProblem, LockError
from audit.lock.files import BaseRecord
from audit.lock.host_builds import WHEELS_ONLY, HostBuilds
from audit.lock.plan import Constraint, LayerInputs
from audit.lock.resolvers.job import CompileJob, OnLine, Outcome
from audit.recipe.model import Recipe


class Resolver(Protocol):
    """Compiles one layer's job and reads its own output."""

    @property
    def label(self) -> str:
        """``pip-tools==… pip==…`` / ``uv==…``: recorded in each lock's inputs."""
        ...

    @property
    def merges_indexes(self) -> bool:
        """True when the resolver takes a package from whichever index has the highest
        version (pip): the run then checks where each moved file came from."""
        ...

    def compile(self, job: CompileJob, on_line: OnLine) -> Outcome: ...

    def warm(
        self, layers: Sequence[LayerInputs], installed: Collection[tuple[str, str]]
    ) -> AbstractContextManager[None]:
        """Read ahead, while the block runs, for the run's stale ``layers`` (``installed``:
        the base's (canonical name, version) pairs); a no-op where nothing is gained."""
        ...

    def explain(
        self, log: str, inputs: LayerInputs, installed: Mapping[str, Constraint], log_path: str
    ) -> LockError | EnvironmentProblem:
        """A failed :meth:`compile` as one error with the right exit code."""
        ...

    def yanked(self, log: str) -> list[str]:
        """``name version (reason)`` of each yanked release the resolver chose."""
        ...


def select(
    recipe: Recipe, record: BaseRecord, *, host: bool, builds: HostBuilds = WHEELS_ONLY
) -> Resolver:
    """uv on this machine for the target, or pip-tools in the image (or on a matching host).

    ``builds``: the source distributions a resolver running on this machine may build here
    (:mod:`audit.lock.host_builds`); pip-tools in the image builds inside the container.
    """
    if recipe.resolver == "uv":
        from audit.lock.resolvers.uv import Uv, uv_target

        return Uv(uv_target(record, recipe.interpreters[0], recipe.platform), builds)
    from audit.lock.resolvers.piptools import PipTools, host_target, image_target

    if host:
        return PipTools(host_target(recipe.platform, record, recipe.interpreters[0], builds))
    return PipTools(image_target(recipe, record))
