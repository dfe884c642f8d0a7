"""The one redaction rule: URL userinfo, token shapes, secret query values (pure logic)."""

from __future__ import annotations

import random
import re
import sys
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import redact as redact_module
from audit.redact import MASK, public_source_url, redact, redact_json

SECRET = "S3cr3tValue"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"https://ci-token:{SECRET}@gitlab.example.com/team/images.git",
            "https://gitlab.example.com/team/images.git",
        ),
        (
            f"see http://user:{SECRET}@127.0.0.1:8080/simple now",
            "see http://127.0.0.1:8080/simple now",
        ),
        (f"'ftp://me:{SECRET}@host/x'", "'ftp://host/x'"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123", MASK),
        ("token gho_ABCDEFGHIJKLMNOPQRSTUV here", f"token {MASK} here"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijkl", MASK),
        ("glpat-abcdefghijKLMNOPQRST12", MASK),
        ("Authorization: Bearer abc.def.ghi-123", f"Authorization: Bearer {MASK}"),
        (f"https://h/x?a=1&token={SECRET}&b=2", f"https://h/x?a=1&token={MASK}&b=2"),
        (f"https://h/x?PASSWORD={SECRET}", f"https://h/x?PASSWORD={MASK}"),
        (f"machine h login u password {SECRET}", f"machine h login u password {MASK}"),
        (f"ENV HF_TOKEN={SECRET} A=1", f"ENV HF_TOKEN={MASK} A=1"),
        (f'ARG db_password="{SECRET} x"', f"ARG db_password={MASK}"),
        (f"curl --api-key-x --apikey={SECRET} h", f"curl --api-key-x --apikey={MASK} h"),
        (
            f"https://bot:{MASK}@h/x and https://{SECRET}@h/y",
            f"https://bot:{MASK}@h/x and https://h/y",
        ),
    ],
)
def test_secrets_are_taken_out(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert SECRET not in redact(text)
    assert redact(redact(text)) == redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "foo:x:bar",
        "https://pypi.org/simple",
        "Basic authentication failed; the token expired",
        "images/x/image.toml: stage[2].layer[1].pip: alpha==1.0",
        "git@ is not a URL",
        "ENV TOKENIZERS_PARALLELISM=false A=1 HF_HOME=/models",
        "",
    ],
)
def test_text_without_a_secret_is_unchanged(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "in the workflow: env: GITHUB_TOKEN: ${{ github.token }}",
        "api_key: ${{ secrets.INDEX_KEY }}",
        "ENV HF_TOKEN=$HF_TOKEN A=1",
        "--password=${REGISTRY_PASSWORD} --user=bot",
        '{"token": "$TOKEN"}',
    ],
)
def test_a_value_that_names_where_a_secret_comes_from_is_kept(text: str) -> None:
    """A CI expression or a whole shell variable is a reference, not a secret: hints that say
    how to pass one stay readable (the pr-comment hint read GITHUB_TOKEN: *** github.token }})."""
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password: $3cr3t-v4lue", f"password: {MASK}"),  # starts with $, but no variable
        ("HF_TOKEN=$uper$ecret", f"HF_TOKEN={MASK}"),
        ("HF_TOKEN=${X:-hf_literal}", f"HF_TOKEN={MASK}"),  # a default may be the secret
        ("GITHUB_TOKEN: ghp_abcdefghijklmnopqrstuvwxyz0123", f"GITHUB_TOKEN: {MASK}"),
    ],
)
def test_a_literal_beside_a_reference_shape_is_still_masked(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        (
            f"https://ci-token:{SECRET}@gitlab.example.com/team/images.git",
            "https://gitlab.example.com/team/images",
        ),
        ("git@github.com:org/repo.git", "https://github.com/org/repo"),
        ("ssh://git@host.example:22/a/b.git", "https://host.example/a/b"),
        ("https://host.example:8443/a", "https://host.example:8443/a"),
        ("/srv/git/images", ""),
        ("../images", ""),
        ("file:///srv/git/images", ""),
        ("", ""),
    ],
)
def test_public_source_url(remote: str, expected: str) -> None:
    assert public_source_url(remote) == expected


# what secrets are made of, non-ASCII letters a case-blind pattern reads as ASCII, a lone
# surrogate (as os.fsdecode makes of a byte that is not UTF-8) and an emoji
PIECES = ["https://", "user:pw@", "ghp_", "A" * 20, "github_pat_", "glpat-", "Bearer ",
          "Authorization: Basic ", "?token=", "&password=", "login bob password ",
          "machine h password ", "x:y@", "host", ":", "=", "@", " ", "\n", '"auth": "',
          "api_key=", "HF_TOKEN=", "--password=", "secret", "\u212a", "ſ", "paſſword=",
          "TO\u212aEN=", "pwd=", "credentials=", "api-key:", "Token", "SECRET:", "abc123xyz",
          "/", "'", '"', MASK, "registry:5000/", "é", "→", "\u0130", "\u0131",
          "AUTHOR\u0130ZATION: Basic ", "credent\u0131als=", "Bearer\u2003",
          "\udcff", "\U0001f642"]  # fmt: skip


def every_rule(text: str) -> str:
    """The rule without its shortcut: every pattern applied in turn, whatever the text holds."""
    for pattern, replacement in redact_module._RULES:
        text = pattern.sub(replacement, text)
    return text


def test_skipping_a_pattern_the_text_cannot_match_changes_nothing() -> None:
    """A pattern is skipped when a character or word every match needs is absent; the result
    is the same as applying every pattern, on texts built from the pieces secrets are made of
    (non-ASCII letters included: a case-blind pattern matches the Kelvin sign as ``k``)."""
    rng = random.Random(22)
    for _ in range(20000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 8)))
        assert redact_module._redact(text) == every_rule(text), text


def test_the_fold_table_holds_every_non_ascii_letter_a_case_blind_pattern_reads_as_ascii() -> None:
    """The word checks fold a non-ASCII text through ``_FOLD``: every character that a
    case-blind pattern matches as an ASCII letter must be in it, or a check could say "no"
    where a pattern matches."""
    letter = re.compile("[a-z]", re.IGNORECASE)
    found = {code for code in range(128, sys.maxunicode + 1) if letter.match(chr(code))}
    assert found == set(redact_module._FOLD)
    assert all(letter.fullmatch(ascii) for ascii in redact_module._FOLD.values())


class Text(str):
    """A str subclass (an enum's value, a path's text): redacted like any string."""


def reference_redact_json(value: Any) -> Any:
    """The plain recursive rule :func:`redact_json` must keep to."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {reference_redact_json(k): reference_redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [reference_redact_json(item) for item in value]
    return value


SECRETISH = st.sampled_from(PIECES).map(str) | st.text(max_size=12)
LEAVES = (
    SECRETISH
    | SECRETISH.map(Text)
    | st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
)
JSONISH = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(SECRETISH, inner, max_size=4)
        | st.dictionaries(SECRETISH, inner, max_size=4).map(OrderedDict)
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(JSONISH)
def test_redact_json_is_the_plain_recursive_rule(value: Any) -> None:
    """Every string redacted, keys included, whatever the container or leaf type."""
    got, want = redact_json(value), reference_redact_json(value)
    assert got == want and type(got) is type(want)
