"""One finding: a change or a broken rule, with where it happened and whether it is allowed.

PURE CORE: stdlib + ``packaging`` only, Python 3.9 syntax. The build guard runs this module
inside images (see ``audit/inimage/guard.py``), so it must not import rich, jinja2 or docker.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from audit.policy.rules import CHANGE_RULES

# Severities, most serious first. "error" fails the job (exit 1); "warning" and "info" do not.
ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)
LOCATION_KEYS = ("image", "stage", "layer")
OPTIONAL_KEYS = (*LOCATION_KEYS, "preset_rule")  # left out of JSON when None


@dataclass(frozen=True)
class UnmetSymbol:
    """What a ``missing-symbol`` finding is about, typed: ``requirer`` (a loaded library's real
    path) needs ``symbol`` at ``version`` from its DT_NEEDED ``needed`` (``symbol`` "": the
    version node itself is missing); ``loaded`` is the copy the process maps for it,
    ``reason`` why the loader took that copy (``ld_library_path``, ``cache``, ``preload``,
    ``runpath``, ...), ``entry`` the search-list entry or folder that found it and ``asked_by``
    the object or step that mapped it first; ``satisfying`` the copies present that define
    it (real paths, sorted)."""

    requirer: str
    needed: str
    version: str
    symbol: str
    loaded: str
    reason: str
    entry: str = ""
    asked_by: str = ""
    satisfying: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in _SYMBOL_FIELDS},
                "satisfying": list(self.satisfying)}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UnmetSymbol:
        return cls(**{**data, "satisfying": tuple(data.get("satisfying", ()))})


_SYMBOL_FIELDS = ("requirer", "needed", "version", "symbol", "loaded", "reason", "entry",
                  "asked_by")  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """A change or a rule violation found by comparing environments.

    ``rule`` is a name of :data:`audit.policy.rules.RULES` (the one list of rule names).
    ``where`` locates it for a human: ``"<image> v3 layer 2 (requirements/x.in)"``.
    ``waiver`` says which waiver allowed it and why (then severity is "info"), and
    ``waiver_index`` is that waiver's position in the policy (so a later layer knows it was
    spent); ``override`` rules report a declared ``--no-deps`` re-pin and what it breaks.
    ``image``, ``stage`` and ``layer`` (1-based, within the stage) say in structured form
    what ``where`` says for a human, where it is known (None otherwise). ``askers`` are the
    installed requirements that pin a failing downgrade or variant to its new version
    (``torch 2.13.0 requires nvidia-nccl-cu13==2.29.7``); ``preset_rule`` is the id of the
    policy preset's rule that raised it (``lockstep cutlass-dsl``), None for the recipe's own.
    Every renderer shows these fields; none reads them back out of ``message``.
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
    image: str | None = None
    stage: str | None = None
    layer: int | None = None
    askers: tuple[str, ...] = ()
    preset_rule: str | None = None
    symbol: UnmetSymbol | None = None

    def located(self, image: str, stage: str | None = None, layer: int | None = None) -> Finding:
        """This finding with its structured location (``where`` is left as it is)."""
        return self.placed(where=self.where, image=image, stage=stage, layer=layer)

    def placed(
        self, *, where: str, image: str | None, stage: str | None, layer: int | None
    ) -> Finding:
        """This finding at ``where`` in ``image``, ``stage`` and ``layer``; built directly, as
        ``dataclasses.replace`` would, without its per-field walk (the gate places every
        finding of a fleet)."""
        return Finding(
            rule=self.rule,
            severity=self.severity,
            package=self.package,
            before=self.before,
            after=self.after,
            message=self.message,
            where=where,
            hint=self.hint,
            waiver=self.waiver,
            waiver_index=self.waiver_index,
            image=image,
            stage=stage,
            layer=layer,
            askers=self.askers,
            preset_rule=self.preset_rule,
            symbol=self.symbol,
        )

    def to_json(self) -> dict[str, Any]:
        """Every field; the location fields, ``askers``, ``preset_rule`` and ``symbol`` only
        where known (a JSON key is never null or empty for them, so older readers and
        documents stay as they were)."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}  # all scalars: no deep copy
        for key in OPTIONAL_KEYS:
            if data[key] is None:
                del data[key]
        if self.askers:
            data["askers"] = list(self.askers)
        else:
            del data["askers"]
        if self.symbol is not None:
            data["symbol"] = self.symbol.to_json()
        else:
            del data["symbol"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        """A finding :meth:`to_json` wrote (also one from before ``askers`` existed)."""
        symbol = data.get("symbol")
        return cls(**{**data, "askers": tuple(data.get("askers", ())),
                      "symbol": UnmetSymbol.from_json(symbol) if symbol else None})  # fmt: skip

    @property
    def asked_for(self) -> str:
        """``asked for by: torch 2.13.0 requires nvidia-nccl-cu13==2.29.7`` ("" with no asker)."""
        return f"asked for by: {'; '.join(self.askers)}" if self.askers else ""

    @property
    def told(self) -> str:
        """The message as a reader should see it where only one text fits: with its askers."""
        return f"{self.message} ({self.asked_for})" if self.askers else self.message

    @property
    def fails(self) -> bool:
        return self.severity == ERROR

    def summary(self) -> str:
        """One line for a terminal, after the rule's name: a change's ``package before ->
        after``; any other rule's message, which names the members and versions that break it
        (``lockstep group x: members must share one version: a 1.0, b 2.0``), where the
        versions alone would read ``(none) -> (none)``."""
        if self.rule in CHANGE_RULES:
            return f"{self.package} {self.before or '(none)'} -> {self.after or '(none)'}"
        return self.message


_FIELD_NAMES = tuple(field.name for field in fields(Finding))  # in declaration order
