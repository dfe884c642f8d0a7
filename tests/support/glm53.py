"""The seed's two GLM-5.3-Flash routes as the tests use them: where each lives, a throw-away
copy of the project, the later stage that installs the FlashInfer nightly again without the
re-pin, and the nightly's stand-in index served where the recipes name it (127.0.0.1:8647)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from audit.lock.files import lock_relpath, parse_lock, render_lock
from audit.lock.plan import after_inputs, layer_inputs, pip_steps, read_base_digest, resolver_label
from audit.project.sources import DirectorySource
from audit.recipe.parse import load_recipe

__all__ = ["ROOT", "ROUTES", "Route", "add_later_stage", "copy_project", "nightly_index"]

ROOT = Path(__file__).resolve().parents[2]
NIGHTLY = ROOT / "images" / "glm53-flash-vllm" / "replica" / "flashinfer-nightly"
NIGHTLY_URL = "http://127.0.0.1:8647/simple/"
FIXTURE = ROOT / "tests" / "data" / "glm53"


@dataclass(frozen=True)
class Route:
    """One route: its recipe, replica list and stand-ins, its nightly stage and a later one."""

    image: str
    pins: str  # images/<image>/replica/<pins>.txt
    standins: tuple[str, ...]  # what no reachable index carries, as the record names them
    nightly_stage: str  # the stage whose layer installs the nightly (with the override)
    nightly_in: str  # that layer's requirements file
    later_stage: str  # the next stage after the recipe's last

    @property
    def folder(self) -> Path:
        return ROOT / "images" / self.image

    @property
    def pin_list(self) -> Path:
        return self.folder / "replica" / f"{self.pins}.txt"

    @property
    def standins_file(self) -> Path:
        return self.folder / "replica" / f"{self.pins}.standins.json"


ROUTES = {
    "glm53-flash-vllm": Route(
        "glm53-flash-vllm",
        "vllm-glm53-day0",
        ("flashinfer-cubin==0.6.17", "flashinfer-jit-cache==0.6.17+cu130",
         "vllm==0.28.1rc1.dev0+pr53906.cu130.standin"),
        "v2",
        "requirements/v2-flashinfer-nightly.in",
        "v9",
    ),
    "glm53-flash-sglang": Route(
        "glm53-flash-sglang",
        "sglang-glm53-day0",
        ("cuda-tile==1.6.0rc5", "flashinfer-cubin==0.6.17", "flashinfer-jit-cache==0.6.17+cu130"),
        "v1",
        "requirements/v1-flashinfer-nightly.in",
        "v5",
    ),
}  # fmt: skip


def copy_project(root: Path, route: Route) -> Path:
    """The route's recipe, locks and the project's templates under ``root``."""
    for part in (f"images/{route.image}", f"locks/{route.image}", "templates"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns(".lock"))
    return root


def later_stage_toml(route: Route) -> str:
    """A stage after the last that installs the nightly again, without the override."""
    return (
        f'\n[[stage]]\nname = "{route.later_stage}"\n'
        'description = "the FlashInfer nightly again, without the re-pin"\n\n'
        f'  [[stage.layer]]\n  pip = "{route.nightly_in}"\n'
        '  index = "flashinfer-nightly"\n  pre = true\n'
    )


def add_later_stage(root: Path, route: Route, *, lock: bool = True) -> None:
    """Append the later stage to the copy's recipe (before ``[policy]``) and, with ``lock``,
    its lock: the committed fixture body, rendered fresh for this copy's inputs (what lock
    writes when told to waive the field's failure; tests/data/glm53/README.md)."""
    toml = root / "images" / route.image / "image.toml"
    text = toml.read_text()
    at = text.index("[policy]")
    toml.write_text(text[:at] + later_stage_toml(route).lstrip("\n") + "\n" + text[at:])
    if not lock:
        return
    source = DirectorySource(root)
    recipe = load_recipe(source, route.image)
    steps = pip_steps(recipe)
    found = read_base_digest(source, recipe)
    assert found is not None
    earlier, _ = after_inputs(
        {s.slug: parse_lock(source.read_bytes(lock_relpath(recipe, s)), s.slug) for s in steps[:-1]}
    )
    inputs = layer_inputs(source, recipe, steps[-1], found[1], earlier)
    body = (FIXTURE / "nightly-again.body.txt").read_text()
    text = render_lock(route.image, steps[-1], resolver_label(recipe), inputs.digests, body)
    (root / lock_relpath(recipe, steps[-1])).write_text(text)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _serving_it() -> bool:
    """Whether 127.0.0.1:8647 already serves this stand-in index (another test's server)."""
    expected = (NIGHTLY / "simple" / "flashinfer-python" / "index.html").read_bytes()
    try:
        with urllib.request.urlopen(f"{NIGHTLY_URL}flashinfer-python/", timeout=5) as answer:
            return bool(answer.read() == expected)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def nightly_index() -> Iterator[str]:
    """The FlashInfer nightly's stand-in index, served where the recipes name it."""
    if _serving_it():
        yield NIGHTLY_URL
        return
    handler = functools.partial(_Quiet, directory=str(NIGHTLY))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 8647), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield NIGHTLY_URL
    finally:
        server.shutdown()
        server.server_close()
