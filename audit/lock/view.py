"""What a lock run shows when it is done: the table of layers, and what moved on purpose."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from audit.host import console
from audit.lock.plan import LockState, Upgrade

Move = tuple[str, str, str | None, str | None]  # layer label, name, old, new


def direction(name: str, old: str | None, new: str | None) -> str:
    """upgraded, downgraded, variant...; a pin gone from the lock now stays as installed."""
    from audit.history.diff import diff
    from audit.history.snapshot import Distribution

    if new is None:
        return "no longer pinned: what is installed stays"
    before = {name: Distribution(name, old)} if old else {}
    changes = diff(before, {name: Distribution(name, new)})
    return changes[0].kind if changes else "unchanged"


def print_moves(moves: list[Move], upgrade: Upgrade) -> None:
    """What this run moved on purpose, with the direction (the gate shows it too)."""
    if not upgrade.active:
        return
    for label, name, old, new in moves:
        kind = direction(name, old, new)
        console.stdout.print(
            f"moved: {escape(label)}: {name} {old or '-'} -> {new or '-'} ({kind})"
        )
    missing = sorted(set(upgrade.packages) - {name for _, name, _, _ in moves})
    for name in missing:
        console.stderr.print(f"[yellow]note:[/] --upgrade-package {name}: nothing moved")


def print_summary(done: list[tuple[LockState, str]]) -> None:
    """One row per layer: kept or compiled, and why it was compiled."""
    table = Table("lock", "layer", "action", "why")
    for state, action in done:
        reason = state.reason if action == "compiled" else ""
        table.add_row(state.relpath, escape(state.step.label), action, escape(reason))
    console.stdout.print(table)
