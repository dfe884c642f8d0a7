"""One model of an image's history: the state after every layer, and where each came from.

PURE: standard library only, Python 3.9 syntax (vendored with the judge).

Three producers make a :class:`History` and one judge (:func:`audit.policy.judge.judge_history`)
reads it:

- ``predicted``: from the base record and the locks (:mod:`audit.history.predict`), no Docker;
- ``guard``: observed inside the build after every guarded layer (``audit/inimage/guard.py``);
- ``walk``: read from the image's own layers (:mod:`audit.history.walk`), no container.

Invariants: ``states[0]`` is the state the first judged layer starts from (the base image,
or an empty image for ``FROM scratch``); every later state is the whole image after its
layer, never a delta. Environments are matched across states by :attr:`Environment.interpreter`
(a walk with no interpreter to name uses the environment's first site folder instead).
"""

from __future__ import annotations

from dataclasses import dataclass

from audit.history.snapshot import Environment
from audit.history.system import System

PREDICTED = "predicted"
GUARD = "guard"
WALK = "walk"
PRODUCERS = (PREDICTED, GUARD, WALK)


@dataclass(frozen=True)
class LayerRef:
    """Where a state came from.

    ``index`` is the 0-based position in the image's history (every instruction, empty ones
    included; the base is 0 when it has no history of its own); ``instruction`` the history
    entry's ``created_by`` or the recipe step, already redacted; ``stage`` and ``layer`` (1-based
    within the stage) scope waivers and are None where unknown; ``digest`` is the layer's
    diff-id (``sha256:…`` of its uncompressed tar), "" for an empty layer or a prediction;
    ``origin`` where the instruction was written (``Dockerfile:42``, a recipe's key path), ""
    when unknown.
    """

    index: int
    instruction: str
    stage: str | None = None
    layer: int | None = None
    digest: str = ""
    empty: bool = False
    origin: str = ""


@dataclass(frozen=True)
class LayerState:
    """The whole image after ``ref``'s layer: its Python environments and what lies below."""

    ref: LayerRef
    environments: tuple[Environment, ...]
    system: System | None = None

    def environment(self, key: str) -> Environment | None:
        """The environment of interpreter ``key`` in this state, if any."""
        return next((env for env in self.environments if env.interpreter == key), None)


@dataclass(frozen=True)
class History:
    """An image's states in build order, and which producer saw them."""

    image: str
    producer: str
    states: tuple[LayerState, ...]

    def steps(self) -> tuple[tuple[LayerState, LayerState], ...]:
        """Every (before, after) pair in order: what each layer after the first changed."""
        states = self.states
        return tuple((states[i - 1], states[i]) for i in range(1, len(states)))
