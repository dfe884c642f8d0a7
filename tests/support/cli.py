"""The command line as tests drive it: in-process for exit codes and messages, or as a process.

- :func:`edit`: replace the first ``old`` in a project file (failing when the fixture lacks it).
- :func:`fails`: ``audit.cli.main.main(argv)`` must return ``code``; its stderr, never a traceback.
- :func:`run_lock`: the lock command in-process, its exit code.
- :func:`spawn_audit`: ``python -m audit ARGV`` as a process of its own group, for tests that
  kill it, interrupt it (Ctrl-C raises KeyboardInterrupt there, as at a terminal) or run two.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from audit.cli.main import main

REPO = Path(__file__).resolve().parents[2]

# A shell's background jobs (CI runners, this test's parents) may start with SIGINT ignored:
# restore Python's own handler, then run ``audit/__main__.py`` as ``python -m audit`` would.
_AS_AT_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'audit'; runpy.run_module('audit', run_name='__main__', alter_sys=True)"
)


def edit(root: Path, relpath: str, old: str, new: str) -> None:
    """Replace the first ``old`` in ``root/relpath`` with ``new``."""
    path = root / relpath
    text = path.read_text()
    assert old in text, f"fixture lacks {old!r}"
    path.write_text(text.replace(old, new, 1))


def fails(capsys: pytest.CaptureFixture[str], code: int, *argv: str) -> str:
    """Run the CLI in-process, expect ``code``, return stderr (never a traceback)."""
    assert main(list(argv)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def spawn_audit(cwd: Path, *argv: str, **env: str) -> subprocess.Popen[str]:
    """``python -m audit ARGV`` in ``cwd`` with this environment plus ``env``; pipes as text.

    The process leads a new session, so ``os.killpg(process.pid, SIGINT)`` is a terminal's
    Ctrl-C reaching it and everything it started (pip-compile included).
    """
    return subprocess.Popen(
        [sys.executable, "-c", _AS_AT_A_TERMINAL, *argv],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_lock(*argv: str) -> int:
    """The lock command in-process, through the command line's error boundary."""
    return main(["lock", *argv])
