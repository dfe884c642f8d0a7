"""``Finding.located`` builds the finding field by field (it is hot in the gate): it must
carry every field, including any added later, exactly as ``dataclasses.replace`` does."""

from __future__ import annotations

import dataclasses
from typing import Any

from audit.policy.findings import LOCATION_KEYS, Finding


def test_located_keeps_every_field_and_sets_only_the_location() -> None:
    values: dict[str, Any] = {
        field.name: (7 if "int" in str(field.type) else f"{field.name}-value")
        for field in dataclasses.fields(Finding)
    }
    finding = Finding(**values)
    located = finding.located("img", "v2", 3)
    assert located == dataclasses.replace(finding, image="img", stage="v2", layer=3)
    unchanged = [f.name for f in dataclasses.fields(Finding) if f.name not in LOCATION_KEYS]
    assert all(getattr(located, name) == values[name] for name in unchanged)
    assert finding.located("img") == dataclasses.replace(
        finding, image="img", stage=None, layer=None
    )
