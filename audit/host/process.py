"""The one layer around every external program (docker, pip-compile, git, debootstrap).

Two ways to run a program, sharing everything but how the output is read: :func:`run`
captures it, :func:`stream` hands each line to a callback as it comes (a build's log); and
:class:`Pipe` keeps one running to answer many requests (``git cat-file --batch``). All
find the program (:func:`find_program`), echo the command with ``-v`` (:func:`echoing`,
:func:`shown_command`: secrets redacted, ``--label`` pairs counted), return one
:class:`Completed`, and raise one typed failure, :class:`audit.errors.CommandFailed`, when
the program cannot start or (``check``) exits non-zero. Tests patch :func:`run` or
:func:`stream`, never ``subprocess``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from audit.errors import CommandFailed
from audit.host import console

QUIET_ENV = "AUDIT_QUIET_COMMANDS"  # set: never echo, even with -v (benchmarks, spawned tests)
# The programs a command runs, as they are started: echoed on stderr only with -v (:func:`echoing`)
ECHO = logging.getLogger("layer_audit.commands")
ECHO.propagate = False  # never through a root handler someone else set up
ECHO.setLevel(logging.WARNING)  # quiet, whatever the root logger's level
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
    """The argv to start (program resolved, or :class:`CommandFailed`), echoed with ``-v``."""
    argv = [str(a) for a in args]
    argv[0] = find_program(argv[0], hint)
    if ECHO.isEnabledFor(logging.INFO) and not os.environ.get(QUIET_ENV):
        ECHO.info(shown_command(argv, redact))
    return argv


class _Echo(logging.Handler):
    """Prints each command as ``$ …`` on stderr, dim (redacted as everything printed is)."""

    def emit(self, record: logging.LogRecord) -> None:
        from rich.markup import escape  # echoing loads rich anyway; quiet runs never do

        console.stderr.print(f"[dim]$ {escape(record.getMessage())}[/dim]", markup=True)


@contextlib.contextmanager
def echoing(verbose: bool) -> Iterator[None]:
    """While inside, every program run is echoed on stderr when ``verbose`` (``-v``); quiet
    otherwise. The command line enters it once per command, with its run context's choice."""
    if not verbose:
        yield
        return
    handler, level = _Echo(), ECHO.level
    ECHO.addHandler(handler)
    ECHO.setLevel(logging.INFO)
    try:
        yield
    finally:
        ECHO.removeHandler(handler)
        ECHO.setLevel(level)


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
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    keep: int | None = None,
) -> Completed:
    """Run a program like :func:`run`, handing each line of its output to ``on_line`` at once.

    stderr is merged into stdout, so the lines come in the order the program wrote them; the
    returned :class:`Completed` holds them all in ``stdout``. Failures as in :func:`run`. A
    program still running after ``timeout`` seconds, or when ``cancel`` is set, is killed with
    the processes it started (its own process group): its exit code is then negative (the
    signal), and with ``check`` that is a failure as any other. ``keep``: only the last
    ``keep`` lines are kept for the result (a verbose program's log, read as it comes).
    """
    argv = _prepare(args, redact, hint)
    lines: deque[str] = deque(maxlen=keep)
    watched = timeout is not None or cancel is not None
    try:
        with subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            process_group=0 if watched else None,  # killed with whatever it started
        ) as proc:
            assert proc.stdout is not None  # stdout=PIPE
            with _watchdog(proc, timeout, cancel):
                for raw in proc.stdout:
                    line = raw.rstrip("\n")
                    lines.append(line)
                    on_line(line)
    except OSError as exc:
        raise _cannot_start(argv, exc, hint) from exc
    output = "".join(f"{line}\n" for line in lines)
    done = Completed(tuple(argv), proc.returncode, output, "")
    return _finish(done, check=check, redact=redact, hint=hint)


@contextlib.contextmanager
def _watchdog(
    proc: subprocess.Popen[str], timeout: float | None, cancel: threading.Event | None
) -> Iterator[None]:
    """Kill ``proc``'s process group after ``timeout`` seconds, once ``cancel`` is set, or when
    the block fails (Ctrl-C: the group does not get the terminal's signal), while the block runs;
    nothing watches when neither is given (the program then shares our process group)."""
    if timeout is None and cancel is None:
        yield
        return
    done = threading.Event()
    stop = cancel if cancel is not None else threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while not done.wait(0.05):
            if stop.is_set() or time.monotonic() > deadline:
                _kill_group(proc)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        done.set()
        watcher.join()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class Pipe:
    """A program kept running to answer requests on its stdin, bytes in and bytes out
    (``git cat-file --batch``): one start for many answers.

    Started like :func:`run` (the program found, the command printed unless quiet); a program
    that cannot start is :class:`CommandFailed`. :meth:`ask` writes a request, :meth:`read_line`
    and :meth:`read_exactly` read the answer; one that ends early (the program died) raises
    :class:`CommandFailed` with its stderr. :meth:`close` ends stdin, waits, and raises like
    ``run(check=True)`` on a non-zero exit; it is also called when the object is collected.
    """

    def __init__(
        self,
        args: Sequence[str | Path],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        hint: str = "",
    ) -> None:
        self.argv = _prepare(args, (), hint)
        self.hint = hint
        # stderr goes to a file, so it never fills a pipe nobody reads; closed by _end
        errors = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        except OSError as exc:
            errors.close()
            raise _cannot_start(self.argv, exc, hint) from exc
        self._proc = proc
        self._errors = errors
        self._finalizer = weakref.finalize(self, _end, proc, errors)

    def ask(self, request: bytes) -> None:
        """Write ``request`` and flush it to the program."""
        assert self._proc.stdin is not None  # stdin=PIPE
        try:
            self._proc.stdin.write(request)
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise self._ended("stopped reading") from exc

    def read_line(self) -> bytes:
        """The next line of output, with its line end; the program ending first is a failure."""
        assert self._proc.stdout is not None  # stdout=PIPE
        line = self._proc.stdout.readline()
        if not line.endswith(b"\n"):
            raise self._ended("ended in the middle of an answer")
        return line

    def read_exactly(self, size: int) -> bytes:
        """The next ``size`` bytes of output; fewer (the program ended) is a failure."""
        assert self._proc.stdout is not None  # stdout=PIPE
        data = self._proc.stdout.read(size)
        if len(data) != size:
            raise self._ended("ended in the middle of an answer")
        return data

    def close(self) -> Completed:
        """End the conversation; :class:`CommandFailed` when the program exits non-zero."""
        code, errors = _end(self._proc, self._errors)
        self._finalizer.detach()
        done = Completed(tuple(self.argv), code, "", errors)
        return _finish(done, check=True, redact=(), hint=self.hint)

    def _ended(self, problem: str) -> CommandFailed:
        code, errors = _end(self._proc, self._errors)
        self._finalizer.detach()
        return CommandFailed(
            f"{problem} (exit code {code}): {shown_command(self.argv)}",
            self.hint,
            returncode=code,
            output=errors[-OUTPUT_TAIL:],
        )


def _end(proc: subprocess.Popen[bytes], errors: IO[bytes]) -> tuple[int, str]:
    """Close ``proc``'s stdin, wait for it, and return its exit code and stderr (idempotent).

    A program that died leaves unread bytes in our stdin buffer: closing flushes them into a
    broken pipe, which is the end being reported here, not a second error."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None and not stream.closed:
            with contextlib.suppress(BrokenPipeError):
                stream.close()
    code = proc.wait()
    if errors.closed:
        return code, ""
    errors.seek(0)
    text = errors.read().decode("utf-8", "replace")
    errors.close()
    return code, text
