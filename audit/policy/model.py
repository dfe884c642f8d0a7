"""The policy of one recipe: which changes fail, lockstep groups, CUDA suffix, floors, waivers.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax (the guard runs it inside images).
The recipe parser (``audit.recipe.policy_parse``) builds :class:`Policy` from ``[policy]`` in
``image.toml``; the guard reads it back from JSON with :meth:`Policy.from_json`.
Evaluation (findings from changes) lives in ``audit.policy.verdict``.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

FAIL = "fail"
WARN = "warn"
ALLOW = "allow"
ACTIONS = (FAIL, WARN, ALLOW)

POLICY_SCHEMA = 1


@dataclass(frozen=True)
class Waiver:
    """Allows exactly one change: one rule, one package, ``from_version`` -> ``to_version``
    (``"*"`` matches any), optionally only in one stage (and one layer of it).

    ``rule`` None waives a change rule (downgraded, variant, removed, ...) and never a state rule
    (cuda-suffix, requirement, forbidden, lockstep): those must be named. A waiver without a
    stage waives the first stage its change happens in, never a later one (see
    :class:`audit.policy.verdict.WaiverLedger`). An expired waiver (``expires`` before today)
    allows nothing: it fails with its date.
    """

    package: str  # canonical (PEP 503) name
    from_version: str
    to_version: str
    reason: str
    expires: _dt.date | None = None
    rule: str | None = None
    stage: str | None = None
    layer: int | None = None  # 1-based within ``stage``

    def describe(self) -> str:
        """``nvidia-nccl-cu13 2.30.7 -> 2.29.7 [downgraded, v2 layer 1]``, for reports."""
        scope = [s for s in (self.rule, self.stage) if s]
        if self.layer is not None:
            scope.append(f"layer {self.layer}")
        where = f" [{', '.join(scope)}]" if scope else ""
        return f"{self.package} {self.from_version} -> {self.to_version}{where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "from": self.from_version,
            "to": self.to_version,
            "reason": self.reason,
            "expires": self.expires.isoformat() if self.expires else None,
            "rule": self.rule,
            "stage": self.stage,
            "layer": self.layer,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Waiver:
        expires = data.get("expires")
        return cls(
            package=data["package"],
            from_version=data["from"],
            to_version=data["to"],
            reason=data["reason"],
            expires=_dt.date.fromisoformat(expires) if expires else None,
            rule=data.get("rule"),
            stage=data.get("stage"),
            layer=data.get("layer"),
        )


@dataclass(frozen=True)
class LockstepGroup:
    """Packages that must share one public version; members are canonical names or globs."""

    name: str
    members: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    """What an image's environment may and may not do between layers.

    ``requirements`` holds PEP 508 strings for floors and pins (``nvidia-nccl-cu13>=2.30``);
    ``forbidden`` holds PEP 508 strings (a bare name forbids every version).
    ``cuda`` is the recipe's CUDA tag (``cu130``) used by the suffix rule; None disables it.
    ``native_shadowed`` is the action for a native library whose loaded copy is not the one its
    wheel installed (``shadowed-native``); None means fail in a CUDA image, warn elsewhere.
    ``native_libraries`` adds file name prefixes (``libmooncake``) to the CUDA-family libraries
    whose copies the guard records and resolves.
    ``preset`` names the preset merged in (``audit.policy.presets``), and ``preset_rules`` the ids
    of its rules this policy kept (``lockstep cutlass-dsl``, ``forbid nvidia-nccl-cu13``,
    ``variant``): findings they raise say so.
    """

    downgrade: str = FAIL
    removal: str = FAIL
    variant: str = FAIL
    rebuilt: str = WARN
    shadowed: str = WARN
    cuda: str | None = None
    cuda_suffix: bool = True
    lockstep: tuple[LockstepGroup, ...] = ()
    requirements: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    waivers: tuple[Waiver, ...] = field(default_factory=tuple)
    native_shadowed: str | None = None  # None: fail in CUDA images (cuNNN), warn elsewhere
    native_libraries: tuple[str, ...] = ()  # file name prefixes beyond the CUDA family (libfoo)
    preset: str | None = None
    preset_rules: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": POLICY_SCHEMA,
            "downgrade": self.downgrade,
            "removal": self.removal,
            "variant": self.variant,
            "rebuilt": self.rebuilt,
            "shadowed": self.shadowed,
            "cuda": self.cuda,
            "cuda_suffix": self.cuda_suffix,
            "lockstep": [{"name": g.name, "members": list(g.members)} for g in self.lockstep],
            "requirements": list(self.requirements),
            "forbidden": list(self.forbidden),
            "waivers": [w.to_json() for w in self.waivers],
            **({"native_shadowed": self.native_shadowed} if self.native_shadowed else {}),
            **({"native_libraries": list(self.native_libraries)} if self.native_libraries else {}),
            "preset": self.preset,
            "preset_rules": list(self.preset_rules),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Policy:
        if data.get("schema") != POLICY_SCHEMA:
            raise ValueError(f"policy schema {data.get('schema')!r}, expected {POLICY_SCHEMA}")
        return cls(
            downgrade=data["downgrade"],
            removal=data["removal"],
            variant=data["variant"],
            rebuilt=data["rebuilt"],
            shadowed=data["shadowed"],
            cuda=data["cuda"],
            cuda_suffix=data["cuda_suffix"],
            lockstep=tuple(LockstepGroup(g["name"], tuple(g["members"])) for g in data["lockstep"]),
            requirements=tuple(data["requirements"]),
            forbidden=tuple(data["forbidden"]),
            waivers=tuple(Waiver.from_json(w) for w in data["waivers"]),
            native_shadowed=data.get("native_shadowed"),
            native_libraries=tuple(data.get("native_libraries", ())),
            preset=data.get("preset"),
            preset_rules=tuple(data.get("preset_rules", ())),
        )
