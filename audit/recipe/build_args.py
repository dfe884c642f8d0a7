"""Build arguments: the ``[args]`` table (names and defaults) and ``arg`` layers (a stage's
``ARG NAME`` declarations).

Invariants: names are shell identifiers that say neither secret nor index (a build argument
lands in the image history: secrets reach a build only as BuildKit secrets, indexes only as the
recipe declares them); the platform arguments BuildKit fills per platform take no default here
(they are declared in a stage, never substituted); a default is one line whose ``$`` only starts
a reference to an argument declared above it (Docker expands those, and nothing else).
"""

from __future__ import annotations

import re

from audit.recipe.located_toml import Node
from audit.recipe.model import PLATFORM_ARGS, ArgLayer

ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ARG_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIALS?|API_?KEY)S?(?:_|$)", re.IGNORECASE
)
INDEX_SETTINGS = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST",
    "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INDEX", "UV_DEFAULT_INDEX", "UV_FIND_LINKS",
)  # fmt: skip
RESERVED_PREFIXES = ("LAYER_AUDIT_", "BUILDKIT_")


def arg_name_problem(name: str) -> str:
    """Why ``name`` cannot be a recipe build argument ('' when it can)."""
    if not ARG_NAME.fullmatch(name):
        return f"{name!r} is not a build argument name (letters, digits, _)"
    if SECRET_NAME.search(name):
        return f"{name} looks like a secret (a build argument stays in the image history)"
    if name.upper() in INDEX_SETTINGS:
        return f"{name} would change where pip looks for packages: declare indexes instead"
    if name.upper().startswith(RESERVED_PREFIXES):
        return f"{name} is reserved for layer-audit and BuildKit"
    return ""


def parse_args(table: Node) -> tuple[tuple[str, str], ...]:
    """``[args]``: ``NAME = "default"`` in order, each checked."""
    found: list[tuple[str, str]] = []
    for name in table.data:
        problem = arg_name_problem(name) or (
            f"{name} is BuildKit's, filled per platform: declare it in a stage with an arg "
            "layer, without a default"
            if name in PLATFORM_ARGS
            else ""
        )
        if problem:
            raise table.error(name, problem, "see docs/recipes.md, [args]")
        value: str = table.value(name, str, "a string")
        text = table.text(name) if value else value
        _check_references(table, name, text, [n for n, _ in found])
        found.append((name, text))
    return tuple(found)


def _check_references(table: Node, name: str, text: str, known: list[str]) -> None:
    if "$" in ARG_REFERENCE.sub("", text):
        raise table.error(name, "a '$' that starts no ${NAME} reference", "write the value out")
    for match in ARG_REFERENCE.finditer(text):
        other = match.group(1) or match.group(2)
        if other not in known:
            raise table.error(
                name,
                f"names ${{{other}}}, which no argument above it declares",
                "a default may name only arguments declared before it in [args]",
            )


def parse_arg_layer(node: Node) -> ArgLayer:
    """``arg = "NAME"`` or ``arg = ["A", "B"]``: the stage declares these here."""
    names = node.texts("arg") if isinstance(node.data["arg"], list) else [node.text("arg")]
    if not names:
        raise node.error("arg", "names no build argument")
    for name in names:
        problem = arg_name_problem(name)
        if problem:
            raise node.error("arg", problem, "see docs/recipes.md, [args]")
    return ArgLayer(tuple(names))
