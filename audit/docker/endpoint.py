"""Which Docker engine every Docker call talks to: ``--docker-host``, ``DOCKER_HOST``, a context.

One answer for the whole command, used alike by the docker *client* programs we run (their
environment gets ``DOCKER_HOST``: :func:`client_environment`) and by the docker SDK
(``docker.DockerClient(base_url=...)``: :func:`sdk_environment`). The order is the docker
CLI's own:

1. ``--docker-host URL`` (any command; :func:`use_host`, set by ``audit/cli/main.py``);
2. ``$DOCKER_HOST``;
3. ``$DOCKER_CONTEXT``, else ``currentContext`` in ``$DOCKER_CONFIG/config.json``
   (``~/.docker/config.json``): the context's ``Endpoints.docker.Host`` read from
   ``$DOCKER_CONFIG/contexts/meta/<sha256 of its name>/meta.json``; ``default`` is the local
   socket;
4. the local socket, ``unix:///var/run/docker.sock``.

Invariants: pure file reading, no network; a named context that does not exist, or has no
docker endpoint, is bad input (exit 2), never a silent fall back to the local engine. The
docker client's TLS variables (``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``) pass through as
they are; a context's own TLS material is not read (use those variables for a TLS engine).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from audit.errors import UsageError

LOCAL_SOCKET = "unix:///var/run/docker.sock"
DEFAULT_CONTEXT = "default"
SCHEMES = ("unix://", "tcp://", "ssh://", "npipe://", "http://", "https://", "fd://")

_chosen: list[str] = []  # at most one entry: the --docker-host of this command


@dataclass(frozen=True)
class Endpoint:
    """The engine chosen and why: ``host`` a URL, ``source`` how it was chosen (for messages)."""

    host: str
    source: str

    @property
    def is_local_default(self) -> bool:
        return self.source == "default"


def use_host(url: str | None) -> None:
    """Make ``url`` the engine of every Docker call of this command (None: choose again).

    Refuses a URL without a known scheme (exit 2): ``--docker-host 10.0.0.5`` is a typo for
    ``tcp://10.0.0.5:2375``, and must not reach the docker client as a host name.
    """
    _chosen.clear()
    if url is None:
        return
    check_url(url, "--docker-host")
    _chosen.append(url)


def check_url(url: str, where: str) -> None:
    """Exit 2 unless ``url`` starts with one of the docker client's schemes."""
    if not url.startswith(SCHEMES):
        raise UsageError(
            f"{where} {url}: not a Docker engine URL",
            "write it as the docker CLI does: tcp://HOST:2375, ssh://user@host or "
            "unix:///path/docker.sock",
        )


def config_dir(environ: Mapping[str, str], home: Path) -> Path:
    """The docker CLI's configuration folder: ``$DOCKER_CONFIG`` or ``~/.docker``."""
    return Path(environ["DOCKER_CONFIG"]) if environ.get("DOCKER_CONFIG") else home / ".docker"


def current_context(folder: Path, environ: Mapping[str, str]) -> str:
    """``$DOCKER_CONTEXT``, else ``currentContext`` of ``config.json``, else ``default``."""
    if environ.get("DOCKER_CONTEXT"):
        return environ["DOCKER_CONTEXT"]
    try:
        config = json.loads((folder / "config.json").read_text())
    except FileNotFoundError:
        return DEFAULT_CONTEXT
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"{folder / 'config.json'}: not readable as JSON ({exc})",
            "fix or remove the docker CLI configuration, or pass --docker-host URL",
        ) from exc
    name = config.get("currentContext") if isinstance(config, dict) else None
    return name if isinstance(name, str) and name else DEFAULT_CONTEXT


def context_host(folder: Path, name: str) -> str:
    """The docker endpoint of context ``name``, as ``docker context inspect`` shows it."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = folder / "contexts" / "meta" / digest / "meta.json"
    hint = "list them with docker context ls, or pass --docker-host URL"
    try:
        document = json.loads(meta.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"docker context {name!r}: not found ({meta})", hint) from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"docker context {name!r}: {meta} is not readable ({exc})", hint) from exc
    host = ((document.get("Endpoints") or {}).get("docker") or {}).get("Host")
    if not isinstance(host, str) or not host:
        raise UsageError(f"docker context {name!r}: no docker endpoint in {meta}", hint)
    return host


def resolve(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Endpoint:
    """The engine this command talks to (see the module's order)."""
    env = os.environ if environ is None else environ
    if _chosen:
        return Endpoint(_chosen[0], "--docker-host")
    if env.get("DOCKER_HOST"):
        return Endpoint(env["DOCKER_HOST"], "$DOCKER_HOST")
    folder = config_dir(env, home or Path.home())
    name = current_context(folder, env)
    if name == DEFAULT_CONTEXT:
        return Endpoint(LOCAL_SOCKET, "default")
    return Endpoint(context_host(folder, name), f"docker context {name}")


def client_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``DOCKER_HOST`` set to the engine this command chose (resolved from this
    process's environment: one choice per command), for a docker client program.

    ``DOCKER_CONTEXT`` is dropped: the client must not pick a context over the resolved host.
    """
    env = dict(base)
    endpoint = resolve()
    env.pop("DOCKER_CONTEXT", None)
    if endpoint.is_local_default:
        env.pop("DOCKER_HOST", None)
    else:
        env["DOCKER_HOST"] = endpoint.host
    return env


def sdk_environment() -> dict[str, str]:
    """The environment to build the docker SDK's client from (``docker.from_env``)."""
    env = client_environment(os.environ)
    env.setdefault("DOCKER_HOST", LOCAL_SOCKET)
    return env
