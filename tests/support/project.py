"""Tiny projects on disk for tests and benchmarks: recipe TOML, requirements, base.json, locks.

Base records and locks are written through :mod:`audit.lock.files`'s own writers, and each lock
records the digests of the inputs beside it, so a project written here holds *fresh* locks:
``lock --check`` passes and ``audit-deps``/``gate`` read them as a compiling run left them.

- :func:`pip_recipe_toml`: a recipe whose every stage is one pip layer.
- :func:`base_record`, :func:`system_base`, :func:`installed`: base records (``base.json``).
- :func:`pinned`, :func:`lock_body`: requirement lines, and a pip-compile body with fake hashes.
- :class:`ProjectSpec` (``ProjectSpec.locked`` for pinned stages) + :func:`write_project`: all
  of it in ``root/images/<image>`` and ``root/locks/<image>``; :func:`write_base` and
  :func:`write_fresh_locks` write the parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from audit.history.snapshot import Distribution, Environment
from audit.lock.files import BaseRecord, Lock, parse_lock, render_base, render_lock
from audit.lock.plan import RESOLVER, after_inputs, layer_inputs, pip_steps, read_base_digest
from audit.project.sources import DirectorySource
from audit.recipe.model import Recipe
from audit.recipe.parse import load_recipe

VENV_PYTHON = "/opt/venv/bin/python"
BOOKWORM_AMD64 = "layer-audit/base:bookworm-amd64"
SYSTEM_PYTHON = "/usr/bin/python3"
SYSTEM_SITE = "/usr/lib/python3/dist-packages"
ZERO_DIGEST = "sha256:" + "0" * 64
ONE_DIGEST = "sha256:" + "1" * 64


def pip_recipe_toml(
    stages: Iterable[str],
    *,
    base: str = BOOKWORM_AMD64,
    platform: str = "linux/amd64",
    cuda: str = "cpu",
    interpreter: str = VENV_PYTHON,
    repository: str = "local/t",
    index_url: str | None = None,
    pre: bool = False,
    extra: str = "",
) -> str:
    """A recipe whose stages each install ``requirements/<stage>.in`` as one pip layer.

    ``extra`` is TOML that goes after the ``[image]`` table (``[indexes]``, ``[policy]``...).
    """
    head = (
        f'[image]\nbase = "{base}"\nplatform = "{platform}"\ncuda = "{cuda}"\n'
        f'interpreters = ["{interpreter}"]\nrepository = "{repository}"\n'
    )
    if index_url is not None:
        head += f'index_url = "{index_url}"\n'
    layer_pre = "  pre = true\n" if pre else ""
    body = "".join(
        f'\n[[stage]]\nname = "{name}"\n  [[stage.layer]]\n  pip = "requirements/{name}.in"\n'
        + layer_pre
        for name in stages
    )
    return head + extra + body


def installed(packages: Mapping[str, str], site: str) -> tuple[Distribution, ...]:
    """Distributions as a snapshot of a real image records them (location, installer, digest)."""
    return tuple(
        Distribution(name, version, site, "pip", ZERO_DIGEST, name, requires_dist=())
        for name, version in sorted(packages.items())
    )


def base_record(
    *dists: Distribution,
    interpreter: str = VENV_PYTHON,
    python: str = "3.11.7",
    paths: tuple[str, ...] = ("/opt/venv",),
    markers: Mapping[str, str] | None = None,
    image: str = BOOKWORM_AMD64,
    image_id: str = "sha256:test",
) -> BaseRecord:
    """A base record of one interpreter holding ``dists``."""
    env = Environment(interpreter, python, dict(markers or {}), paths, dists)
    return BaseRecord(image, image_id, None, (env,))


def system_base(
    packages: Mapping[str, str],
    *,
    site: str = SYSTEM_SITE,
    python: str = "3.11.2",
    interpreter: str = SYSTEM_PYTHON,
    markers: Mapping[str, str] | None = None,
    image: str = "example/base:1",
    image_id: str = ONE_DIGEST,
) -> BaseRecord:
    """A base record of one interpreter with ``packages`` installed in ``site``."""
    dists = installed(packages, site)
    return base_record(
        *dists, interpreter=interpreter, python=python, paths=(site,), markers=markers,
        image=image, image_id=image_id,
    )  # fmt: skip


def pinned(pins: Mapping[str, str], operator: str = "==") -> str:
    """Requirement lines ``name<operator>version``, sorted by name."""
    return "".join(f"{name}{operator}{version}\n" for name, version in sorted(pins.items()))


def lock_body(pins: Mapping[str, str]) -> str:
    """What pip-compile would write for ``pins``: one hashed pin each, fake but stable hashes."""
    lines = []
    for name, version in sorted(pins.items()):
        digest = hashlib.sha256(f"{name}-{version}".encode()).hexdigest()
        lines.append(f"{name}=={version} \\\n    --hash=sha256:{digest}\n")
    return "".join(lines)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, creating its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_base(root: Path, image: str, record: BaseRecord) -> None:
    """``locks/<image>/base.json`` as ``lock --record-base`` writes it."""
    write_text(root / "locks" / image / "base.json", render_base(record))


def write_fresh_locks(
    root: Path,
    recipe: Recipe | str,
    bodies: Mapping[str, str],
    resolver: str = RESOLVER,
) -> None:
    """A lock per pip layer, with ``bodies[stage name]`` as its pins, recording current inputs.

    ``recipe`` is a recipe (or the name of one under ``root/images``) whose base record is
    already written: each lock records its digest and the content of every earlier lock.
    """
    source = DirectorySource(root)
    loaded = load_recipe(source, recipe) if isinstance(recipe, str) else recipe
    found = read_base_digest(source, loaded)
    assert found is not None, f"write the base record of {loaded.name} first"
    earlier: dict[str, Lock | None] = {}
    for step in pip_steps(loaded):
        after, _ = after_inputs(earlier)
        inputs = layer_inputs(source, loaded, step, found[1], after)
        body = bodies[step.stage.name]
        text = render_lock(loaded.name, step, resolver, inputs.digests, body)
        write_text(root / inputs.relpath, text)
        earlier[step.slug] = parse_lock(text.encode(), inputs.relpath)


@dataclass(frozen=True)
class ProjectSpec:
    """One recipe's files: what :func:`write_project` puts on disk.

    ``requirements`` maps a file name under ``images/<image>/requirements`` to its text;
    ``locks`` maps a stage name to its lock body (None: no locks, ``lock`` is to make them);
    ``base`` None leaves the base record for ``lock`` to record from the image.
    """

    image: str
    recipe: str
    requirements: Mapping[str, str] = field(default_factory=dict)
    base: BaseRecord | None = None
    locks: Mapping[str, str] | None = None

    @classmethod
    def locked(
        cls,
        image: str,
        recipe: str,
        base: BaseRecord,
        pins: Mapping[str, Mapping[str, str]],
        operator: str = "==",
    ) -> ProjectSpec:
        """Each stage's ``<stage>.in`` asks for its ``pins`` by ``operator``; its lock pins them."""
        return cls(
            image,
            recipe,
            {f"{stage}.in": pinned(wanted, operator) for stage, wanted in pins.items()},
            base,
            {stage: lock_body(wanted) for stage, wanted in pins.items()},
        )


def write_project(root: Path, spec: ProjectSpec) -> Path:
    """Write ``spec`` below ``root`` (folders created, files overwritten); return ``root``."""
    folder = root / "images" / spec.image
    write_text(folder / "image.toml", spec.recipe)
    for name, text in spec.requirements.items():
        write_text(folder / "requirements" / name, text)
    if spec.base is not None:
        write_base(root, spec.image, spec.base)
    if spec.locks is not None:
        write_fresh_locks(root, spec.image, spec.locks)
    return root
