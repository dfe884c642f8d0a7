"""The project's JSON Schemas as tests read them: a validator per schema and a document's problems,
one line each."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

from jsonschema import Draft7Validator, FormatChecker


def schema_of(name: str) -> dict[str, Any]:
    """The packaged schema ``<name>.schema.json``."""
    data: dict[str, Any] = json.loads(
        (files("audit") / "schemas" / f"{name}.schema.json").read_text()
    )
    return data


def validator(name: str) -> Draft7Validator:
    """A validator of the packaged schema, itself checked against draft-07."""
    schema = schema_of(name)
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema, format_checker=FormatChecker())


def problems(name: str, document: object) -> list[str]:
    found = validator(name).iter_errors(document)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]
