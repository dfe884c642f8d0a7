"""The indented JSON writer writes exactly what ``json.dumps(indent=2, sort_keys=True,
ensure_ascii=False)`` writes, for report-shaped data and for what it hands back to json."""

from __future__ import annotations

import enum
import json
import random
from typing import Any

import pytest

from audit.redact import redact_json
from audit.report import json_text

TEXTS = ["", "a", "é", '"quoted"', "back\\slash", "tab\t", "line\nbreak", "\u2028", "\x00",
         "🙂", "ü → x", "</script>", "null"]  # fmt: skip


class Level(enum.IntEnum):
    LOW = 1


def reference(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def generated(rng: random.Random, texts: list[str] = TEXTS, depth: int = 0) -> Any:
    """A random JSON-like value: nested dicts, lists and tuples of report scalars, its strings
    and keys drawn from ``texts``."""
    roll = rng.random()
    if depth > 4 or roll < 0.35:
        return rng.choice([rng.choice(texts), rng.randint(-5, 10**20), True, False, None])
    if roll < 0.7:
        return {rng.choice(texts) + str(rng.randint(0, 3)): generated(rng, texts, depth + 1)
                for _ in range(rng.randint(0, 4))}  # fmt: skip
    items = [generated(rng, texts, depth + 1) for _ in range(rng.randint(0, 4))]
    return items if rng.random() < 0.8 else tuple(items)


def test_random_report_shaped_values_are_written_as_json_writes_them() -> None:
    rng = random.Random(22)
    for _ in range(3000):
        value = generated(rng)
        assert json_text.dumps(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"ratio": 1.5, "items": [1, 2]},  # a float: handed to json
        {"nan": float("nan"), "inf": [float("inf")]},
        {2: "int keys", 10: "sorted as numbers"},  # non-string keys: json converts them
        {"level": Level.LOW},  # an int subclass
        [],
        {},
        [[], {}, [[]]],
        "top-level text",
        None,
    ],
)
def test_unusual_values_come_out_exactly_as_json_writes_them(value: object) -> None:
    assert json_text.dumps(value) == reference(value)


def test_a_gate_report_document_round_trips() -> None:
    document = {
        "schema": "layer-audit.report/1",
        "sections": [{"title": "img: v1", "findings": [{"before": None, "layer": 1}]}],
        "changes": [{"image": "img", "review": [], "stages": [{"unchanged": 3}]}],
    }
    text = json_text.dumps(document)
    assert text == reference(document) and json.loads(text) == document


# texts a redaction changes, and what some of them become (a key collision after redaction)
SECRETS = ["https://user:tok@host/x", "https://host/x", "token=abc123", "ghp_" + "a" * 20,
           "Bearer abcdefgh12", "a\nb password: hunter2", "user:pw@registry:5000/x"]  # fmt: skip


def test_redacted_dumps_writes_what_dumps_writes_for_the_redacted_value() -> None:
    rng = random.Random(2222)
    for _ in range(3000):
        value = generated(rng, TEXTS + SECRETS)  # keys too, two raw keys redacting to one
        assert json_text.redacted_dumps(value) == json_text.dumps(redact_json(value))


def test_redacted_dumps_merges_keys_that_redact_to_one_as_redact_json_does() -> None:
    value = {"https://u:p@host/x": 1, "https://host/x": 2, "z": ["https://u:p@host/x"]}
    text = json_text.redacted_dumps(value)
    assert json.loads(text) == {"https://host/x": 2, "z": ["https://host/x"]}
    assert text == reference(redact_json(value)) and "u:p" not in text


@pytest.mark.parametrize(
    "value",
    [
        {"token=abc": 1.5, "items": ["https://u:p@h/x"]},  # a float: the general path
        {2: "https://u:p@h/x"},  # a non-string key
        {"level": Level.LOW, "url": "https://u:p@h/x"},
        "ghp_" + "b" * 20,
    ],
)
def test_redacted_dumps_of_unusual_values_redacts_them_too(value: object) -> None:
    text = json_text.redacted_dumps(value)
    assert text == reference(redact_json(value)) and "u:p" not in text and "bbbb" not in text
