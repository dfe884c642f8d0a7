"""What a killed run leaves, found and removed by the next one: labelled containers, work folders.

Every container a ``lock`` run starts carries :data:`LABEL` = ``HOST:PID`` of the run, and every
work folder it makes is named ``<prefix><PID>-…`` in the system's temporary folder. A SIGKILL
leaves both behind; :func:`sweep` removes those whose run, on this host, is gone. A live run's
containers and folders are never touched (its process still exists).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path

LABEL = "layer-audit.lock-run"


def this_run() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_labels() -> dict[str, str]:
    """The labels of every container this run starts."""
    return {LABEL: this_run()}


def work_prefix(prefix: str) -> str:
    """``prefix`` with this run's process id: a folder a killed run left is found by it."""
    return f"{prefix}{os.getpid()}-"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def gone(owner: str) -> bool:
    """True when ``HOST:PID`` names a run on this host that no longer exists."""
    host, _, pid = owner.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not alive(int(pid))


def sweep_folders(prefix: str, folder: Path | None = None) -> list[Path]:
    """Remove ``<prefix><PID>-*`` folders of runs that are gone; what was removed."""
    where = folder or Path(tempfile.gettempdir())
    removed = []
    for path in where.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def sweep_containers() -> list[str]:
    """Remove containers labelled by runs on this host that are gone; their ids."""
    import docker

    from audit.docker.container import daemon

    removed = []
    with contextlib.suppress(docker.errors.DockerException):
        api = daemon().api  # one list call: the SDK's list inspects each box after, racing removals
        for box in api.containers(all=True, filters={"label": LABEL}):
            if gone(str((box.get("Labels") or {}).get(LABEL, ""))):
                with contextlib.suppress(docker.errors.DockerException):
                    api.remove_container(box["Id"], force=True)
                    removed.append(str(box["Id"]))
    return removed
