"""One command's run context: made once by :func:`audit.cli.main.main`, handed to the handler.

Everything a command needs beyond its own options lives here and is passed on explicitly: the
project (``--project``, else found above the working folder), the memo of what the command
has parsed (its sources share it: see :mod:`audit.project.memo`), the Docker engine it talks
to (``--docker-host``) and whether it echoes the programs it runs (``-v``). Nothing below the
command line keeps state between two commands; a test running two commands in one process
gets two contexts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from audit.errors import UsageError
from audit.project.frontdoor import FrontDoor
from audit.project.memo import Memo
from audit.project.paths import find_root
from audit.project.sources import DirectorySource


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """The project, the memo, the engine and the verbosity of one command."""

    project: Path | None = None  # --project DIR, resolved (it holds images/)
    cwd: Path = field(default_factory=Path.cwd)
    docker_host: str | None = None  # --docker-host URL
    verbose: bool = False  # -v: echo every program run
    memo: Memo = field(default_factory=Memo)

    @classmethod
    def of_command_line(
        cls, project: Path | None, *, docker_host: str | None, verbose: bool
    ) -> RunContext:
        """The context of a command line naming ``project`` (checked: exit 2 without
        ``images/``, so a typo never falls back to walking up)."""
        resolved = None
        if project is not None:
            resolved = project.expanduser().resolve()
            if not (resolved / "images").is_dir():
                raise UsageError(
                    f"--project {project}: no images/ folder in {resolved}",
                    "name the folder that holds images/ (or run `layer-audit init` there first)",
                )
        return cls(project=resolved, docker_host=docker_host, verbose=verbose)

    def root(self) -> Path:
        """The project root: ``--project``, else the nearest folder at or above the working
        folder holding ``images/`` (exit 2 when there is none)."""
        return self.project if self.project is not None else find_root(self.cwd)

    def root_or_none(self) -> Path | None:
        """:meth:`root`, or None outside a project."""
        try:
            return self.root()
        except UsageError:
            return None

    def source(self) -> DirectorySource:
        """The project's working tree, read through this command's memo."""
        return DirectorySource(self.root(), self.memo)

    def front(self) -> FrontDoor:
        """The commands this project's users run (hints name them)."""
        return FrontDoor.of(self.root_or_none())
