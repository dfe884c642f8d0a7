"""The lock-line reader's fast path for pip-compile's layout agrees with the line reader.

``parse_pins`` reads a body block by block when it is exactly in the layout pip-compile and
uv write, and line by line otherwise; the two must never disagree on a text the fast path
accepts, including texts built to look almost like that layout.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from audit.lock.format import LockFormatError, _layout_pins, _line_pins, parse_pins
from tests.support.project import lock_body

HASH = "--hash=sha256:" + "ab" * 32
FRAGMENTS = [
    "numpy==1.26.4 \\\n",
    "Foo_Bar.baz==2.0 \\\n",
    "torch==2.9.0+cu130 \\\n",
    "alpha==1.0 ; python_version >= '3.9' \\\n",
    f"    {HASH} \\\n",
    f"    {HASH}\n",
    f"\t{HASH}\n",
    f"  {HASH}  \\\n",
    "    # via -r requirements/v1.in\n",
    "# requires numpy: {}\n",
    "#   torch\n",
    "\n",
    "   \n",
    "numpy==1.26.4\n",
    f"beta==3 {HASH}\n",
    "gamma==1.0 \\\n\n",
    "# comment\rdelta==1.0 --hash=sha256:aa\n",
    "\x0c# form feed\n",
    f"    {HASH} \\\n# a comment ends the line\n",
    "numpy==1.26.4 \\\n",  # a duplicate
]


def outcome(reader: object, text: str) -> object:
    try:
        return reader(text)  # type: ignore[operator]
    except LockFormatError as exc:
        return f"error: {exc}"


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=12))
@example(["numpy==1.26.4 \\\n", f"\t{HASH}\n"])  # a tab before an option: found by Hypothesis
@example(["numpy==1.26.4 \\\n", f"    {HASH} \\\n", f"\t{HASH}\n"])
def test_the_fast_path_agrees_wherever_it_reads(pieces: list[str]) -> None:
    text = "".join(pieces)
    fast = _layout_pins(text)
    if fast is not None:
        assert fast == _line_pins(text)
    assert outcome(parse_pins, text) == outcome(_line_pins, text)


def test_a_compiled_lock_takes_the_fast_path() -> None:
    body = lock_body({"numpy": "1.26.4", "scipy": "1.14.1", "Foo_Bar": "2.0"})
    body += "    # via -r requirements/v1.in\n# requires numpy: {}\n"
    fast = _layout_pins(body)
    assert fast is not None and fast == _line_pins(body)
    assert set(fast) == {"numpy", "scipy", "foo-bar"}


@pytest.mark.parametrize(
    "text",
    [
        "numpy==1.26.4 \\\n    --hash=sha256:ab\nnumpy==1.26.4 \\\n    --hash=sha256:cd\n",
        "numpy==1.26.4\n",
        "numpy==1.26.4 \\\n    --hash=md5:ab\n",
    ],
)
def test_what_the_fast_path_leaves_fails_with_its_line(text: str) -> None:
    assert _layout_pins(text) is None
    with pytest.raises(LockFormatError, match=r"^line \d+:"):
        parse_pins(text)
