"""Registries through the docker client: pushing the tags a build moved, pulling a missing base.

Both go through the chosen docker client program (``audit.host.process``) with the
environment of :func:`audit.docker.host.client_env`, so ``--docker-host``,
``$DOCKER_HOST`` or the active context names the engine, exactly as for the build.

Invariants:

- a push happens only after every tag moved (the build, its guard and its smoke test
  passed); a push failure raises :class:`PushFailed` (exit 3) naming the tags pushed and the
  tags that are local only, and the local tags stay as they are: a rerun with ``--push``
  pushes them;
- a pull is never silent: it is printed with the reason, and only for an image the engine
  lacks; an offline base that ``base-image`` makes is never pulled (its error says how to
  make it);
- no credential is printed: every line shown goes through :func:`audit.redact.redact`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from audit.base.offline import make_command
from audit.build.plan import DockerClient
from audit.docker import endpoint as docker_endpoint
from audit.docker import host as docker_host
from audit.errors import CommandFailed, EnvironmentProblem
from audit.host import atomic, console, process
from audit.redact import redact

PUSH_REPORT = "push.json"
PUSH_SCHEMA = "layer-audit.push/1"
_DIGEST = re.compile(r"digest: (?P<digest>sha256:[0-9a-f]{64})")
PUSH_HINT = (
    "the build passed and every tag moved locally; check the registry (is it up? "
    "docker login REGISTRY), then run the same build with --push again (it comes from the "
    "cache and pushes them)"
)


@dataclass(frozen=True)
class Pushed:
    """One tag after a push attempt: its manifest digest when the registry took it."""

    tag: str
    digest: str  # sha256:… of the manifest, "" when not pushed or not reported
    pushed: bool


class PushFailed(EnvironmentProblem):
    """A registry refused or could not be reached; ``results`` says what it has and has not."""

    def __init__(self, message: str, hint: str, results: Sequence[Pushed], output: str) -> None:
        super().__init__(message, hint)
        self.results = tuple(results)
        self.output = output


def pushed_digest(output: str) -> str:
    """The manifest digest ``docker push`` reports (``TAG: digest: sha256:… size: N``)."""
    found = _DIGEST.findall(output)
    return str(found[-1]) if found else ""


def push_tags(client: DockerClient, tags: Sequence[str]) -> tuple[Pushed, ...]:
    """Push every tag in order; print each digest. Raises :class:`PushFailed` at the first
    refusal, the tags not yet pushed listed as local only."""
    env = docker_host.client_env(client)
    results: list[Pushed] = []
    for index, ref in enumerate(tags):
        try:
            done = process.run([client.path, "push", ref], env=env)
        except CommandFailed as exc:
            local = [*(r.tag for r in results if not r.pushed), *tags[index:]]
            failed = [*results, *(Pushed(tag, "", False) for tag in tags[index:])]
            raise _push_failure(ref, local, failed, exc) from exc
        digest = pushed_digest(done.stdout)
        results.append(Pushed(ref, digest, True))
        console.stdout.print(f"pushed {redact(ref)} {digest or '(digest not reported)'}")
    return tuple(results)


def _push_failure(
    ref: str, local: Sequence[str], results: Sequence[Pushed], exc: CommandFailed
) -> PushFailed:
    where = docker_endpoint.resolve().host
    pushed = [r.tag for r in results if r.pushed]
    lines = [f"push of {ref} failed (engine {where}): local only, not in the registry:"]
    lines += [f"  {tag}" for tag in local]
    if pushed:
        lines.append("pushed before the failure:")
        lines += [f"  {tag}" for tag in pushed]
    return PushFailed(redact("\n".join(lines)), PUSH_HINT, results, exc.output)


def write_push_report(folder: Path, results: Sequence[Pushed]) -> Path:
    """``push.json`` in the image's reports folder: every tag, its digest, pushed or not."""
    path = folder / PUSH_REPORT
    document = {"schema": PUSH_SCHEMA, "tags": [asdict(result) for result in results]}
    atomic.write_text(path, json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


# ----------------------------------------------------------------------------- pulling


def ensure_image(ref: str, why: str, client: DockerClient | None = None) -> bool:
    """Pull ``ref`` when the engine lacks it, saying so; True when it pulled.

    An offline base (``python -m audit base-image`` makes it) is never pulled: its missing
    image error names the command. ``ref`` with ``@sha256:`` is pulled by digest.
    """
    if docker_host.image_exists(ref):
        return False
    if make_command(ref):
        docker_host.image_info(ref)  # raises the "make it offline" error
    chosen = client or docker_host.detect_client()
    where = docker_endpoint.resolve()
    console.stderr.print(
        f"pulling {redact(ref)} ({why}; the engine at {redact(where.host)} does not have it)",
        markup=False,
    )
    try:
        process.run([chosen.path, "pull", ref], env=docker_host.client_env(chosen))
    except CommandFailed as exc:
        raise EnvironmentProblem(
            f"cannot pull {redact(ref)} into the engine at {redact(where.host)}",
            "check the registry (is it up? docker login REGISTRY) and the reference, or "
            "docker load a saved copy",
        ) from exc
    return True


def repository_digest(base: str, repo_digests: Sequence[str]) -> str | None:
    """The repository digest of ``base``'s own repository (``repo@sha256:…``) among an image's,
    else its first one, else None: an image pulled from two registries has one for each."""
    name = base.partition("@")[0]
    last = name.rpartition("/")[2]
    repository = name.rpartition(":")[0] if ":" in last else name
    for found in repo_digests:
        if found.partition("@")[0] == repository:
            return found
    return next(iter(repo_digests), None)
