"""The facts of one environment, bundled: what the loader model needs to predict a process.

PURE: standard library only, Python 3.9 syntax.

A :class:`Scene` is a filesystem view, the loader settings, who owns each library file, and
the Python interpreter (when there is one). Readers make it (``gather`` on a live filesystem,
the in-image script in an image); :mod:`audit.native.pyrules` turns it into a predicted
process; :func:`agreement` compares a prediction with a recorded ``/proc/self/maps``.

JSON (``Scene.to_json``)::

    {"view": FileSystemView.to_json(), "settings": {...LoaderSettings fields...},
     "owners": {"/real/path": {"kind": "wheel", "name": "nvidia-cudnn-cu13",
                               "version": "9.19.0.56"}},
     "python": {"executable": "/usr/bin/python3.12", "sites": [...], "ctypes": "..."} | null}
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from audit.native.catalog import Owner, family_of, version_of
from audit.native.fsview import FileSystemView, view_from_json
from audit.native.search import LoaderSettings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from audit.native.process import Load, Outcome

SCHEMA = "layer-audit.native-scene/1"


@dataclass(frozen=True)
class PythonFacts:
    """The interpreter: its real executable, its site folders in ``sys.path`` order, and the
    ``_ctypes`` extension module (the caller of every ``ctypes.CDLL``)."""

    executable: str
    sites: tuple[str, ...]
    ctypes: str = ""


@dataclass(frozen=True)
class Copy:
    """One file of a CUDA-family library present in the scene."""

    path: str
    soname: str
    family: str
    owner: str
    version: str


@dataclass(frozen=True)
class Scene:
    view: FileSystemView
    settings: LoaderSettings
    owners: Mapping[str, Owner] = field(default_factory=dict)
    python: PythonFacts | None = None

    def copies(self, soname: str) -> tuple[Copy, ...]:
        """Every file present whose SONAME is ``soname`` (by facts, else by file name)."""
        return tuple(c for c in self.family_copies() if c.soname == soname)

    def family_copies(self) -> tuple[Copy, ...]:
        found = []
        for path, facts in sorted(self.view.files.items()):
            soname = getattr(facts, "soname", "") or path.rsplit("/", 1)[-1]
            family = family_of(soname)
            if family is not None:
                owner = self.owners.get(path)
                found.append(Copy(path, soname, family.key, owner.label() if owner else "",
                                  version_of(path, soname, owner)))  # fmt: skip
        return tuple(found)

    def to_json(self) -> dict[str, Any]:
        settings = {f.name: getattr(self.settings, f.name) for f in fields(LoaderSettings)}
        cache = self.settings.cache
        settings["cache"] = (
            None if cache is None else {k: list(v) for k, v in sorted(cache.items())}
        )
        for name in ("conf_folders", "system_folders", "hwcaps"):
            settings[name] = list(settings[name])
        python = self.python
        return {
            "view": self.view.to_json(),
            "settings": settings,
            "owners": {
                p: {"kind": o.kind, "name": o.name, "version": o.version}
                for p, o in sorted(self.owners.items())
            },
            "python": None
            if python is None
            else {
                "executable": python.executable,
                "sites": list(python.sites),
                "ctypes": python.ctypes,
            },
        }


def scene_from_json(data: Any, where: str = "scene") -> Scene:
    """:meth:`Scene.to_json` back; ``ValueError`` naming ``where`` when malformed."""
    if not isinstance(data, dict) or set(data) != {"view", "settings", "owners", "python"}:
        raise ValueError(f"{where}: expected an object with view, settings, owners, python")
    raw = dict(data["settings"])
    names = {f.name for f in fields(LoaderSettings)}
    if set(raw) - names:
        raise ValueError(f"{where}.settings: unknown keys {sorted(set(raw) - names)}")
    if raw.get("cache") is not None:
        raw["cache"] = {str(k): tuple(v) for k, v in raw["cache"].items()}
    for name in ("conf_folders", "system_folders", "hwcaps"):
        raw[name] = tuple(raw.get(name, ()))
    owners = {str(p): Owner(str(o["kind"]), str(o["name"]), str(o["version"]))
              for p, o in data["owners"].items()}  # fmt: skip
    python = data["python"]
    return Scene(
        view_from_json(data["view"], f"{where}.view"),
        LoaderSettings(**raw),
        owners,
        None if python is None else PythonFacts(str(python["executable"]),
                                                tuple(python["sites"]), str(python["ctypes"])),
    )  # fmt: skip


@dataclass(frozen=True)
class Agreement:
    """A prediction against a recorded process, on the CUDA family: ``right`` sonames mapped
    from the predicted file, ``wrong`` (soname, predicted, mapped), ``missing`` sonames mapped
    but not predicted, ``extra`` predicted non-lazy loads the process did not map."""

    right: tuple[str, ...]
    wrong: tuple[tuple[str, str, str], ...]
    missing: tuple[tuple[str, str], ...]
    extra: tuple[tuple[str, str], ...]

    @property
    def total(self) -> int:
        return len(self.right) + len(self.wrong) + len(self.missing)


def agreement(outcome: Outcome, mapped: Iterable[str], soname_of: Mapping[str, str]) -> Agreement:
    """Compare on every CUDA-family file in ``mapped`` (real paths from /proc/self/maps);
    ``soname_of`` names each mapped path's SONAME (from the scene's facts)."""
    truth: dict[str, str] = {}
    for path in mapped:
        soname = soname_of.get(path) or path.rsplit("/", 1)[-1]
        if family_of(soname) is not None:
            truth[soname] = path
    predicted: dict[str, Load] = {}
    for load in outcome.loads:
        soname = load.soname or load.path.rsplit("/", 1)[-1]
        if family_of(soname) is not None:
            predicted.setdefault(soname, load)
    right = tuple(sorted(s for s, p in truth.items() if s in predicted and predicted[s].path == p))
    wrong = tuple(sorted((s, predicted[s].path, p) for s, p in truth.items()
                         if s in predicted and predicted[s].path != p))  # fmt: skip
    missing = tuple(sorted((s, p) for s, p in truth.items() if s not in predicted))
    extra = tuple(sorted((s, load.path) for s, load in predicted.items()
                         if s not in truth and not load.lazy))  # fmt: skip
    return Agreement(right, wrong, missing, extra)
