"""No secret in any output, at the command line: errors, hints, reports (real CLI, in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli.main import report_error
from audit.errors import EXIT_BAD_INPUT, BadInput
from audit.gate.markdown import gate_markdown
from audit.policy.findings import ERROR, Finding
from audit.report.findings import Report, Section, render_text
from tests.support.cli import edit, fails

REPO = Path(__file__).resolve().parents[1]
TOML = "images/demo/image.toml"
SECRET = "pa55w0rdXYZ"
LINE = 'repository = "layer-audit/demo"'


@pytest.mark.parametrize(
    "url",
    [
        f"ftp://user:{SECRET}@example.org/simple",
        f"https://user:{SECRET}@example.org:99999/simple",
        f"https://user:{SECRET}@example.org/simple",
    ],
)
def test_an_index_url_with_a_password_is_never_echoed(
    demo: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    edit(demo, TOML, LINE, f'{LINE}\nindex_url = "{url}"')
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "image.index_url" in err
    assert SECRET not in err and f"user:{SECRET}" not in err


def test_an_undeclared_index_with_a_token_is_named_without_it(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (demo / "images/demo/requirements/v1-http.in").write_text(
        f"--extra-index-url https://bot:{SECRET}@evil.example/simple\nrequests\n"
    )
    err = fails(capsys, EXIT_BAD_INPUT, "render", "demo")
    assert "v1-http.in:1" in err and "credentials" in err
    assert SECRET not in err


def test_errors_print_their_text_exactly_no_emoji_no_markup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report_error(BadInput("foo:x:bar [bold]b[/bold] :thumbs_up:", f"token=ghp_{'a' * 30}"))
    err = capsys.readouterr().err
    assert "foo:x:bar [bold]b[/bold] :thumbs_up:" in err
    assert "❌" not in err and "👍" not in err
    assert "ghp_" not in err


def test_reports_in_every_format_carry_no_secret() -> None:
    url = f"https://ci-token:{SECRET}@gitlab.example.com/team/images.git"
    finding = Finding("downgraded", ERROR, "alpha", "2.0", "1.0", f"from {url}", "where", url)
    report = Report("t", (Section(f"demo {url}", (finding,)),))
    for fmt in ("json", "markdown", "terminal"):
        text = render_text(report, fmt)
        assert SECRET not in text and "gitlab.example.com" in text, fmt
    assert SECRET not in json.dumps(render_text(report, "json"))
    assert SECRET not in gate_markdown(report)


def test_the_live_view_and_every_console_line_are_redacted() -> None:
    from io import StringIO

    from audit.build.progress import LiveView
    from audit.host import console

    buffer = StringIO()
    made = console._redacting_console()(file=buffer, width=200, emoji=False)
    url = f"https://ci-token:{SECRET}@gitlab.example.com/x.git"
    with LiveView(made, "demo v1") as view:
        view.feed(f"#5 [v1 2/2] RUN pip install --index-url {url} alpha")
        view.feed("#5 DONE 0.1s")
    made.print(f"token=ghp_{'b' * 30} and {url}")
    shown = buffer.getvalue()
    assert "gitlab.example.com" in shown and SECRET not in shown and "ghp_" not in shown
