"""One finding: a change or a broken rule, with where it happened and whether it is allowed.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax. The build guard runs this module
inside images (see ``audit/inimage/guard.py``), so it must not import rich, jinja2 or docker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Severities, most serious first. "error" fails the job (exit 1); "warning" and "info" do not.
ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True)
class Finding:
    """A change or a rule violation found by comparing environments.

    ``rule`` is one of: added, removed, upgraded, downgraded, variant, rebuilt, shadowed,
    unparsable-version, lockstep, cuda-suffix, requirement, forbidden, waiver-expired,
    override, lock-mismatch, stale-lock, missing-lock.
    ``where`` locates it for a human: ``"<image> v3 layer 2 (requirements/x.in)"``.
    ``waiver`` says which waiver allowed it and why (then severity is "info"), and
    ``waiver_index`` is that waiver's position in the policy (so a later layer knows it was
    spent); ``override`` rules report a declared ``--no-deps`` re-pin and what it breaks.
    """

    rule: str
    severity: str
    package: str
    before: str | None
    after: str | None
    message: str
    where: str = ""
    hint: str = ""
    waiver: str | None = None
    waiver_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(**data)

    @property
    def fails(self) -> bool:
        return self.severity == ERROR
