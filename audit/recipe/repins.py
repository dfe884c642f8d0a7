"""No-deps re-pins folded into the resolving layer before them, as overrides.

A stage that installs a nightly and then forces NCCL back with ``no_deps = true`` would otherwise
leave the nightly's versions in one image layer and the re-pinned ones in the next. Folded, the
nightly's lock already holds the re-pinned versions and reports each as an override; the re-pin
layer installs nothing more. The recipe parser applies this to every stage it reads.
"""

from __future__ import annotations

import dataclasses

from audit.recipe.located_toml import Node
from audit.recipe.model import Layer, PipLayer


def fold_repins(node: Node, layers: tuple[Layer, ...]) -> tuple[Layer, ...]:
    """``layers`` of the stage at ``node``, each no_deps re-pin's pins merged into the override of
    the nearest resolving pip layer before it (none before it: the re-pin stays as it is).

    A package pinned one way by that layer's override and another by the re-pin is an error,
    located at the override.
    """
    found = list(layers)
    for index, layer in enumerate(layers):
        if isinstance(layer, PipLayer) and layer.no_deps:
            target = _resolving_layer_before(found, index)
            if target is not None:
                found[target] = _merged(node, found[target], layer, target)
    return tuple(found)


def _resolving_layer_before(layers: list[Layer], index: int) -> int | None:
    for earlier in range(index - 1, -1, -1):
        layer = layers[earlier]
        if isinstance(layer, PipLayer) and not layer.no_deps:
            return earlier
    return None


def _merged(node: Node, layer: Layer, repin: PipLayer, index: int) -> PipLayer:
    assert isinstance(layer, PipLayer)
    pins = {pin.split("==", 1)[0]: pin for pin in layer.override}
    for pin in repin.override:
        name = pin.split("==", 1)[0]
        if pins.get(name, pin) != pin:
            raise node.error(
                f"layer[{index + 1}].override",
                f"{name} is overridden as {pins[name]} here and re-pinned as {pin} by "
                f"{repin.requirements}",
                "keep one version of it",
            )
        pins[name] = pin
    return dataclasses.replace(layer, override=tuple(pins.values()))
