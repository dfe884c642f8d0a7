"""Every error the tool raises on purpose, each carrying the exit code of the contract.

Exit codes: 0 clean, 1 policy violation (the job ran and found a problem), 2 bad input
(recipe, lock, snapshot, arguments), 3 environment (Docker, BuildKit, network, disk).
Errors are raised deep inside and caught only at the command-line boundary (``audit.cli.main``),
which prints ``message`` and ``hint`` and exits with ``exit_code``: never a traceback. Inside
images this module is vendored for the build guard, whose ``main`` is its boundary there.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_BAD_INPUT = 2
EXIT_ENVIRONMENT = 3


class AuditError(Exception):
    """Base class: a message saying what and where, and a hint saying what to do next."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class BadInput(AuditError):
    """Bad input of any kind: the user must change a file or an argument."""

    exit_code = EXIT_BAD_INPUT


class UsageError(BadInput):
    """Bad command-line arguments."""


class RecipeError(BadInput):
    """An image recipe (image.toml, requirements/*.in, templates) is invalid.

    ``where`` is ``<file>: <key path>``, e.g. ``images/x/image.toml: stage[2].layer[1].pip``.
    """

    def __init__(self, where: str, problem: str, hint: str = "") -> None:
        super().__init__(f"{where}: {problem}", hint)
        self.where = where
        self.problem = problem


class ProjectFileError(BadInput):
    """A project input (recipe, requirements, include, lock, template, copy source) is not a
    regular file inside the project: a link out of it, a FIFO, a device, a folder, too big."""

    def __init__(self, path: str, problem: str, hint: str = "") -> None:
        super().__init__(f"{path}: {problem}", hint)
        self.path = path
        self.problem = problem


class SnapshotError(BadInput):
    """A snapshot file is truncated, tampered with, of an unknown schema, or of another
    platform than the recipe targets."""


class LockError(BadInput):
    """A lock file is missing, truncated, hand-edited, or cannot be compiled from its inputs."""


class ResolutionConflict(LockError):
    """A layer can only resolve by moving something an earlier layer or the base installed."""

    exit_code = EXIT_VIOLATION


class ImageFormatError(BadInput):
    """An image given to read (a tarball, an OCI layout, a registry's answer, one of its
    layers) is not what its format says: not an archive, truncated, or naming paths outside
    the image."""


class GitError(BadInput):
    """A git ref or a file at a ref cannot be read."""


class EnvironmentProblem(AuditError):
    """The machine cannot do the job: no Docker daemon, no BuildKit, no network, no disk."""

    exit_code = EXIT_ENVIRONMENT


class CommandFailed(EnvironmentProblem):
    """An external program (docker, pip-compile, git) failed or could not be found."""

    def __init__(
        self, message: str, hint: str = "", *, returncode: int | None = None, output: str = ""
    ) -> None:
        super().__init__(message, hint)
        self.returncode = returncode
        self.output = output


class BuildFailed(AuditError):
    """A build stopped; ``exit_code`` is 1 when the guard stopped it, 3 otherwise."""

    def __init__(self, message: str, hint: str = "", *, exit_code: int = EXIT_ENVIRONMENT) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


class MetadataUnavailable(BadInput):
    """An index carries no wheel (or no such project or version) to read a distribution's
    metadata from: a vendor build, a local version such as ``+cu130``, a VCS requirement."""
