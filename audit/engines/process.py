"""The one layer around every external program (docker, pip-compile, git, debootstrap).

Two ways to run a program, sharing everything but how the output is read: :func:`run`
captures it, :func:`stream` hands each line to a callback as it comes (a build's log). Both
find the program (:func:`find_program`), print the command (:func:`shown_command`: secrets
redacted, ``--label`` pairs counted) unless ``$AUDIT_QUIET_COMMANDS`` is set, return one
:class:`Completed`, and raise one typed failure, :class:`audit.core.errors.CommandFailed`, when
the program cannot start or (``check``) exits non-zero. Tests patch :func:`run` or
:func:`stream`, never ``subprocess``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from audit.core.errors import CommandFailed
from audit.engines import console

QUIET_ENV = "AUDIT_QUIET_COMMANDS"
OUTPUT_TAIL = 4000  # characters of output a failure carries


@dataclass(frozen=True)
class Completed:
    """What a finished program left: its arguments, exit code and output.

    A streamed run has its stdout and stderr merged, in order, in ``stdout``; ``stderr`` is "".
    """

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> tuple[str, ...]:
        """The lines of ``stdout`` (of a streamed run: everything), without their line ends."""
        return tuple(self.stdout.splitlines())


def find_program(name: str, hint: str = "") -> str:
    """Return the absolute path of ``name`` (a path or a program on PATH) or raise."""
    if os.sep in name:
        if os.access(name, os.X_OK):
            return name
    elif found := shutil.which(name):
        return found
    raise CommandFailed(f"program not found: {name}", hint or f"install {name} or put it on PATH")


def shown_command(args: Sequence[str], redact: Sequence[str] = ()) -> str:
    """The command as printed: each ``redact`` string as ``***``; ``--label`` pairs (a build's
    provenance, all kept in its log) counted, not listed. Brackets stay as they are."""
    kept = [a for i, a in enumerate(args) if "--label" not in (a, args[i - 1] if i else "")]
    labels = args.count("--label")
    text = shlex.join(kept)
    if labels:
        text = f"{shlex.join(kept[:-1])} --label … ({labels} labels, in build.log) {kept[-1]}"
    for secret in redact:
        if secret:
            text = text.replace(secret, "***")
    return text


def _prepare(args: Sequence[str | Path], redact: Sequence[str], hint: str) -> list[str]:
    """The argv to start (program resolved, or :class:`CommandFailed`), printed unless quiet."""
    argv = [str(a) for a in args]
    argv[0] = find_program(argv[0], hint)
    if not os.environ.get(QUIET_ENV):
        from rich.markup import escape  # printing loads rich anyway; quiet runs never do

        console.stderr.print(f"[dim]$ {escape(shown_command(argv, redact))}[/dim]", markup=True)
    return argv


def _cannot_start(argv: Sequence[str], exc: OSError, hint: str) -> CommandFailed:
    return CommandFailed(f"cannot run {argv[0]}: {exc.strerror}", hint)


def _finish(done: Completed, *, check: bool, redact: Sequence[str], hint: str) -> Completed:
    """``done`` itself, or (``check`` and a non-zero exit) the failure with the output tail."""
    if check and done.returncode != 0:
        raise CommandFailed(
            f"command failed with exit code {done.returncode}: {shown_command(done.args, redact)}",
            hint,
            returncode=done.returncode,
            output=(done.stderr or done.stdout)[-OUTPUT_TAIL:],
        )
    return done


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
    """Run a program to its end and return what it printed (``capture``) and its exit code.

    ``env`` replaces the environment entirely when given (hermetic runs need that).
    ``redact`` lists strings (tokens, URLs with credentials) never to print. Raises
    :class:`CommandFailed` when the program is missing, cannot start, times out, or (``check``)
    exits non-zero.
    """
    argv = _prepare(args, redact, hint)
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
        shown = shown_command(argv, redact)
        raise CommandFailed(f"timed out after {timeout}s: {shown}", hint) from exc
    except OSError as exc:
        raise _cannot_start(argv, exc, hint) from exc
    done = Completed(tuple(argv), proc.returncode, proc.stdout or "", proc.stderr or "")
    return _finish(done, check=check, redact=redact, hint=hint)


def stream(
    args: Sequence[str | Path],
    on_line: Callable[[str], None],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    redact: Sequence[str] = (),
    hint: str = "",
) -> Completed:
    """Run a program like :func:`run`, handing each line of its output to ``on_line`` at once.

    stderr is merged into stdout, so the lines come in the order the program wrote them; the
    returned :class:`Completed` holds them all in ``stdout``. Failures as in :func:`run`.
    """
    argv = _prepare(args, redact, hint)
    lines: list[str] = []
    try:
        with subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as proc:
            assert proc.stdout is not None  # stdout=PIPE
            for raw in proc.stdout:
                lines.append(raw.rstrip("\n"))
                on_line(lines[-1])
    except OSError as exc:
        raise _cannot_start(argv, exc, hint) from exc
    output = "".join(f"{line}\n" for line in lines)
    done = Completed(tuple(argv), proc.returncode, output, "")
    return _finish(done, check=check, redact=redact, hint=hint)
