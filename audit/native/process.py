"""A process as the dynamic loader builds it: which file is mapped for each name, and why.

PURE: standard library only, Python 3.9 syntax.

A process is an executable and the :class:`Step` s it takes afterwards: ``dlopen`` calls by
path (Python importing an extension module, a package preloading a library with
``ctypes.CDLL``) or by name (a library opening another at run time, such as cuDNN opening its
engines). Each step maps one object and then its DT_NEEDED breadth first, the order of glibc's
``_dl_map_object_deps``. Before any search, a name is matched against the objects already
mapped: the names they were requested by, the paths they were opened as, and their SONAME (so
a library torch preloaded by path answers a later DT_NEEDED of its SONAME); a file opened by
another path than an object already mapped is that object again (glibc compares the file's
device and inode). A step whose object or dependency is not found maps nothing: ``dlopen`` is
all or nothing, and what it mapped is unmapped again.

The caller of a ``dlopen`` matters: its RUNPATH (or its RPATH chain) is searched. A step names
its caller by path; one not mapped yet is mapped first (Python imports the module that calls).
``opens`` (optional) gives, for each new object, the steps it takes itself later (lazy), run
after the explicit steps until nothing new is mapped.

The outcome is data: every mapped file with the reason and the requester (:class:`Load`),
every request with the file it got (:class:`Use`), every failure (:class:`Failure`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

from audit.native.elf import ElfFacts
from audit.native.search import Hit, Miss, Reason, Requester, check, search

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from audit.native.fsview import FileSystemView, Found
    from audit.native.search import LoaderSettings


@dataclass(frozen=True)
class Step:
    """One ``dlopen`` (or the executable itself, reason ``EXEC``). ``target`` is a path (a slash
    in it) or a name; ``caller`` the path of the calling object ("" the executable);
    ``reason`` what a load by path is called (``PATH`` or ``PRELOAD``).

    What package code decides around the call: ``fallbacks`` are tried in order when the target
    fails (cuDNN's ``.so.9.19.0``, ``.so.9.19``, ``.so.9``); the step is skipped when one of
    ``unless_mapped`` is mapped already (cuda-pathfinder's check), unless some mapped path
    contains ``only_if_maps`` (torch reads ``/proc/self/maps``) or the step labelled
    ``after_failure_of`` failed; a failed step skips the later steps of its ``group`` (one
    ``try`` around several loads)."""

    target: str
    caller: str = ""
    reason: Reason = Reason.PATH
    label: str = ""
    lazy: bool = False
    fallbacks: tuple[str, ...] = ()
    unless_mapped: tuple[str, ...] = ()
    only_if_maps: str = ""
    after_failure_of: str = ""
    group: str = ""


@dataclass(frozen=True)
class Load:
    """One mapped file: ``path`` is its real path (what ``/proc/self/maps`` shows),
    ``opened_as`` the path the loader opened (its ``$ORIGIN``), ``requirer`` the opened path of
    the object whose DT_NEEDED or ``dlopen`` mapped it ("" the executable), ``entry`` the search
    list entry or folder that found it (``$ORIGIN/../lib``) and ``list_of`` whose list that was."""

    path: str
    opened_as: str
    soname: str
    reason: Reason
    requirer: str
    entry: str
    list_of: str
    step: str
    lazy: bool = False


@dataclass(frozen=True)
class Use:
    """``requirer`` asked for ``name`` and got ``path`` ("" none): the per-requirer view."""

    name: str
    requirer: str
    path: str
    reason: Reason | None


@dataclass(frozen=True)
class Failure:
    """A step that mapped nothing: the name not mapped, who asked, why, where it looked."""

    name: str
    requirer: str
    step: str
    why: str
    tried: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    loads: tuple[Load, ...]
    uses: tuple[Use, ...]
    failures: tuple[Failure, ...]

    def by_path(self) -> dict[str, Load]:
        return {load.path: load for load in self.loads}

    def loaded(self, soname: str) -> tuple[Load, ...]:
        """Every mapped file that answers to ``soname`` (more than one: two copies mapped)."""
        return tuple(
            load for load in self.loads
            if load.soname == soname or posixpath.basename(load.opened_as) == soname
        )  # fmt: skip


class _Object:
    """A mapped object while the process is built (mutable, local to one run)."""

    def __init__(self, found: Found, opened_as: str, loader: _Object | None) -> None:
        self.path, self.opened_as, self.loader = found.path, opened_as, loader
        self.facts = found.facts if isinstance(found.facts, ElfFacts) else None
        self.soname = self.facts.soname if self.facts else ""
        self.names = {opened_as}

    def answers(self, name: str) -> bool:
        return name in self.names or (self.soname != "" and name == self.soname)

    def requester(self) -> Requester:
        return Requester(self.opened_as, self.facts)


class _Process:
    def __init__(self, view: FileSystemView, settings: LoaderSettings,
                 opens: Callable[[Load], Sequence[Step]] | None) -> None:  # fmt: skip
        self.view, self.settings, self.opens = view, settings, opens
        self.objects: list[_Object] = []
        self.loads: list[Load] = []
        self.uses: list[Use] = []
        self.failures: list[Failure] = []
        self.lazy: list[Step] = []
        self.failed: set[str] = set()  # labels of failed steps and groups

    @property
    def main(self) -> _Object | None:
        return self.objects[0] if self.objects else None

    def run(self, step: Step) -> None:
        """Run ``step`` if its conditions hold: the first of its names that maps wins."""
        if not self._due(step):
            return
        first = last = len(self.failures)
        for target in (step.target, *step.fallbacks):
            last = len(self.failures)
            if self._attempt(target, step):
                del self.failures[first:]  # earlier attempts were expected to miss
                return
        del self.failures[first:last]  # the last attempt's failure says why
        self.failed.update({step.label, f"group:{step.group}"} if step.group else {step.label})

    def _due(self, step: Step) -> bool:
        if step.group and f"group:{step.group}" in self.failed:
            return False
        if step.unless_mapped and any(self._mapped(n) for n in step.unless_mapped):
            return False
        conditions = []
        if step.only_if_maps:
            conditions.append(any(step.only_if_maps in o.path for o in self.objects))
        if step.after_failure_of:
            conditions.append(step.after_failure_of in self.failed)
        return all(conditions) if len(conditions) < 2 else any(conditions)

    def _attempt(self, target: str, step: Step) -> bool:
        """Map ``target`` and its dependencies, or nothing (all or nothing)."""
        marks = (len(self.objects), len(self.loads), len(self.uses), len(self.lazy))
        ready, caller = self._caller(step)
        if ready and self._tree(target, caller, step):
            return True
        del self.objects[marks[0] :], self.loads[marks[1] :], self.uses[marks[2] :]
        del self.lazy[marks[3] :]
        return False

    def _caller(self, step: Step) -> tuple[bool, _Object | None]:
        """(whether the step can run, the object that calls ``dlopen``; None: none)."""
        if step.reason == Reason.EXEC:
            return True, None
        if not step.caller:
            return True, self.main
        known = self._mapped(step.caller)
        if known is None:
            self.run(Step(step.caller, "", Reason.PATH, f"{step.label} (its caller)"))
            known = self._mapped(step.caller)
        return known is not None, known

    def _mapped(self, name: str) -> _Object | None:
        return next((o for o in self.objects if o.answers(name)), None)

    def _tree(self, target: str, caller: _Object | None, step: Step) -> bool:
        first = self._map(target, caller, step)
        if not isinstance(first, _Object):
            return first is True
        queue = [first]
        while queue:
            current = queue.pop(0)
            for needed in current.facts.needed if current.facts else ():
                mapped = self._map(needed, current, step)
                if mapped is None:
                    return False
                if isinstance(mapped, _Object):
                    queue.append(mapped)
        return True

    def _map(self, name: str, requester: _Object | None, step: Step) -> _Object | bool | None:
        """The new object for ``name`` (True: already mapped, None: failed)."""
        who = requester.opened_as if requester else ""
        known = self._mapped(name)
        if known is not None:
            self.uses.append(Use(name, who, known.path, Reason.ALREADY_MAPPED))
            return True
        hit = self._find(name, requester, step)
        if isinstance(hit, Miss):
            self.failures.append(Failure(name, who, step.label, hit.why, hit.tried))
            self.uses.append(Use(name, who, "", None))
            return None
        same = next((o for o in self.objects if o.path == hit.found.path), None)
        if same is not None:
            same.names.add(name)
            self.uses.append(Use(name, who, same.path, Reason.ALREADY_MAPPED))
            return True
        return self._add(name, hit, requester, step)

    def _add(self, name: str, hit: Hit, requester: _Object | None, step: Step) -> _Object:
        obj = _Object(hit.found, hit.opened_as, requester)
        obj.names.add(name)
        self.objects.append(obj)
        who = requester.opened_as if requester else ""
        load = Load(obj.path, obj.opened_as, obj.soname, hit.reason, who, hit.entry,
                    hit.list_of, step.label, step.lazy)  # fmt: skip
        self.loads.append(load)
        self.uses.append(Use(name, who, obj.path, hit.reason))
        if self.opens is not None:
            self.lazy.extend(self.opens(load))
        return obj

    def _find(self, name: str, requester: _Object | None, step: Step) -> Hit | Miss:
        if "/" not in name:
            chain = []
            while requester is not None:
                chain.append(requester.requester())
                requester = requester.loader
            main = self.main.requester() if self.main else None
            return search(name, chain, main, self.view, self.settings)
        path = posixpath.normpath(posixpath.join(self.settings.cwd or "/", name))
        found = self.view.lookup(path)
        if found is None:
            return Miss("no such file", (path,))
        verdict = check(found, self.settings)
        if verdict:
            why = "wrong ELF class or machine" if verdict == "other" else verdict
            return Miss(why, (path,))
        return Hit(found, path, step.reason)

    def drain(self) -> None:
        while self.lazy:
            self.run(self.lazy.pop(0))


def run_process(
    view: FileSystemView,
    settings: LoaderSettings,
    executable: str,
    phases: Sequence[Sequence[Step]],
    opens: Callable[[Load], Sequence[Step]] | None = None,
) -> Outcome:
    """The process that runs ``executable`` and then each phase's steps; after each phase, the
    lazy steps ``opens`` gives for what got mapped (the work that follows an import)."""
    process = _Process(view, settings, opens)
    process.run(Step(executable, "", Reason.EXEC, "exec " + executable))
    for steps in phases:
        for step in steps:
            process.run(step)
        process.drain()
    return Outcome(tuple(process.loads), tuple(process.uses), tuple(process.failures))
