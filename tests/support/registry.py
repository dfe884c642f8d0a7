"""A real registry and a real second Docker engine, for the tests that go past one machine.

- :class:`Registry`: Debian's CNCF Distribution registry (``apt-get install docker-registry``),
  ``docker-registry serve CONFIG.yml`` on ``127.0.0.1:PORT`` with filesystem storage in a
  folder of its own. ``stop()`` and ``start()`` again on the same port and storage (a registry
  that goes down and comes back); the Docker engine pushes to a 127.0.0.1 registry without
  TLS settings.
- :class:`SecondEngine`: a second ``dockerd`` beside the machine's: its own ``--data-root``,
  ``--exec-root``, ``--pidfile``, a TCP socket on 127.0.0.1, ``--iptables=false`` and its own
  bridge (``ip link add NAME type bridge``, an address, up, then ``--bridge NAME``). Never
  ``--bridge=none``: that deletes the main engine's ``docker0``. Stopped with SIGTERM (then
  SIGKILL), its bridge removed and its folders deleted; the main engine is never touched.

Everything is named with :data:`TAG` (``$AUDIT_TEST_REPOSITORY``'s suffix, ``test`` by default)
so parallel checkouts on one machine never share a name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REGISTRY_PROGRAM = "docker-registry"
DOCKERD = "dockerd"
TAG = os.environ.get("AUDIT_TEST_REPOSITORY", "layer-audit-test").rsplit("-", 1)[-1][:6]
START_SECONDS = 60


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(
    ready: Callable[[], bool], what: str, log: Path, process: subprocess.Popen[bytes]
) -> None:
    """Poll ``ready()``; fail with the log's tail when the process dies or time runs out."""
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if ready():
            return
        if process.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{what} did not start:\n{tail}")


def _stop(process: subprocess.Popen[bytes] | None, seconds: float = 30) -> None:
    """SIGTERM, wait, then SIGKILL: the process is gone when this returns."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass
class Registry:
    """One Distribution registry on 127.0.0.1; ``host`` is ``127.0.0.1:PORT``."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    htpasswd: str = ""  # "user:bcrypt-hash" lines: the registry then refuses anonymous pushes

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.folder / "config.yml"

    def write_config(self) -> None:
        storage = self.folder / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.htpasswd:
            (self.folder / "htpasswd").write_text(self.htpasswd)
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {self.folder / 'htpasswd'}\n"
        self.config.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n{auth}"
        )

    def answers(self) -> bool:
        """``/v2/`` answers: 200, or 401 when it wants a login."""
        try:
            with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2) as reply:
                return bool(reply.status == 200)
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        """Serve (again) on the same port and storage; returns once ``/v2/`` answers."""
        self.write_config()
        log = self.folder / "registry.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [REGISTRY_PROGRAM, "serve", str(self.config)], stdout=out, stderr=out
            )
        _wait(self.answers, f"docker-registry on {self.host}", log, self.process)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None

    def tags(self, repository: str) -> list[str]:
        """The tags the registry holds for ``repository`` (empty when it has none)."""
        import json

        url = f"http://{self.host}/v2/{repository}/tags/list"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return sorted(json.loads(reply.read()).get("tags") or [])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return []
            raise

    def digest(self, repository: str, tag: str) -> str:
        """The manifest digest the registry serves for ``repository:tag``."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{tag}",
            method="HEAD",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
        )
        with urllib.request.urlopen(request, timeout=5) as reply:
            return str(reply.headers["Docker-Content-Digest"])


@contextlib.contextmanager
def serve_registry(folder: Path, htpasswd: str = "") -> Iterator[Registry]:
    """A running registry storing under ``folder`` (with ``htpasswd``: logins required);
    stopped and its storage removed after."""
    registry = Registry(folder, htpasswd=htpasswd)
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------- second engine


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass
class SecondEngine:
    """A second ``dockerd``; ``host`` is its ``tcp://127.0.0.1:PORT`` for ``DOCKER_HOST``."""

    folder: Path
    bridge: str
    subnet: str  # the bridge's address, e.g. 10.253.5.1/24
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_ping", timeout=2) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", self.subnet, "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for name in ("data", "exec"):
            (self.folder / name).mkdir(parents=True, exist_ok=True)
        config = self.folder / "daemon.json"
        config.write_text("{}\n")
        argv = [
            DOCKERD, "--data-root", str(self.folder / "data"),
            "--exec-root", str(self.folder / "exec"),
            "--pidfile", str(self.folder / "dockerd.pid"),
            "--config-file", str(config),
            "-H", f"tcp://127.0.0.1:{self.port}",
            "-H", f"unix://{self.folder / 'docker.sock'}",
            "--iptables=false", "--ip-masq=false", "--bridge", self.bridge,
        ]  # fmt: skip
        log = self.folder / "dockerd.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=out)
        _wait(self.answers, f"the second dockerd on {self.host}", log, self.process)

    def stop(self) -> None:
        """Stop the engine (its containerd goes with it), remove its bridge and its folders."""
        _stop(self.process, seconds=60)
        self.process = None
        _ip("link", "set", self.bridge, "down", check=False)
        _ip("link", "delete", self.bridge, "type", "bridge", check=False)
        for name in ("exec", "data"):  # left mounted only when dockerd died hard
            path = str(self.folder / name)
            subprocess.run(["umount", "-R", path], check=False, capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


@contextlib.contextmanager
def second_engine(folder: Path) -> Iterator[SecondEngine]:
    """A running second engine; stopped, unbridged and removed afterwards."""
    engine = SecondEngine(folder, bridge=f"br-la{TAG}", subnet=f"10.253.{_octet()}.1/24")
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()


def _octet() -> int:
    """A subnet octet from the process id: two checkouts' engines rarely collide."""
    return 10 + os.getpid() % 240


def main_bridge_present() -> bool:
    """True when the main engine's ``docker0`` exists (a second engine must never remove it)."""
    return Path("/sys/class/net/docker0").exists()
