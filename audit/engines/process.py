"""The one wrapper around every external program (docker, pip-compile, git, debootstrap).

It prints the command it runs, finds the program, and raises one typed failure
(:class:`audit.core.errors.CommandFailed`). Tests patch :func:`run`, never ``subprocess``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from audit.core.errors import CommandFailed
from audit.engines import console

QUIET_ENV = "AUDIT_QUIET_COMMANDS"


@dataclass(frozen=True)
class Completed:
    """What a finished command left: its arguments, exit code and captured output."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def find_program(name: str, hint: str = "") -> str:
    """Return the absolute path of ``name`` (a path or a program on PATH) or raise."""
    if os.sep in name:
        if os.access(name, os.X_OK):
            return name
    elif found := shutil.which(name):
        return found
    raise CommandFailed(f"program not found: {name}", hint or f"install {name} or put it on PATH")


def _display(args: Sequence[str], redact: Sequence[str]) -> str:
    text = shlex.join(args)
    for secret in redact:
        if secret:
            text = text.replace(secret, "***")
    return text


def run(
    args: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    capture: bool = True,
    check: bool = True,
    input_text: str | None = None,
    timeout: float | None = None,
    redact: Sequence[str] = (),
    hint: str = "",
) -> Completed:
    """Run a program; print it unless quiet; raise :class:`CommandFailed` on failure.

    ``env`` replaces the environment entirely when given (hermetic runs need that).
    ``redact`` lists strings (tokens, URLs with credentials) never to print.
    """
    argv = [str(a) for a in args]
    argv[0] = find_program(argv[0], hint)
    if not os.environ.get(QUIET_ENV):
        from rich.markup import escape  # printing loads rich anyway; quiet runs never do

        console.stderr.print(f"[dim]$ {escape(_display(argv, redact))}[/dim]", markup=True)
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=capture,
            text=True,
            check=False,
            input=input_text,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"timed out after {timeout}s: {_display(argv, redact)}", hint) from exc
    except OSError as exc:
        raise CommandFailed(f"cannot run {argv[0]}: {exc.strerror}", hint) from exc
    done = Completed(tuple(argv), proc.returncode, proc.stdout or "", proc.stderr or "")
    if check and proc.returncode != 0:
        raise CommandFailed(
            f"command failed with exit code {proc.returncode}: {_display(argv, redact)}",
            hint,
            returncode=proc.returncode,
            output=(done.stderr or done.stdout)[-4000:],
        )
    return done
