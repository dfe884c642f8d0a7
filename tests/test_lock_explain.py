"""How each resolver explains its own failures, from logs the real tools print.

Pure logic over log text: pip-tools' failures are read with pip's words, uv's with uv's; the
machine's problems (an index that does not answer) are exit 3 naming the index without
credentials, a base that cannot run the tools is exit 2 naming the fix; no stack frame is shown.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from audit.errors import EnvironmentProblem, LockError, ResolutionConflict
from audit.inimage import lock_driver
from audit.lock.plan import Constraint, LayerInputs, pip_steps
from audit.lock.resolvers import job, piptools, uv
from audit.policy.model import Policy
from audit.recipe.model import PipLayer, Recipe, Stage

INDEX = "https://builder:s3cr3t@pypi.example.org/simple"


def inputs(index: str = INDEX) -> LayerInputs:
    stage = Stage("v1", (PipLayer("requirements/v1.in"),))
    recipe = Recipe(
        "t", Path("images/t"), "b", None, "linux/amd64", "cpu", ("/usr/bin/python3",), "r",
        "{stage}", "latest", index, (), (stage,), Policy(),
    )  # fmt: skip
    step = pip_steps(recipe)[0]
    return LayerInputs(step, "locks/t/v1-01.txt", "requirements/v1.in", {}, index, None, False, {})


WRAPPED_NO_VENV = """\
layer-audit: installing pip-tools 7.6.2
Error: Command '['/cache/pip-tools.partial/bin/python3', '-m', 'ensurepip', '--upgrade',
'--default-pip']' returned non-zero exit status 1.
The virtual environment was not created successfully because ensurepip is not
available.  On Debian/Ubuntu systems, you need to install the python3-venv
package using the following command.
"""

FRAMES = """\
layer-audit: resolving with pip-compile
WARNING: Retrying (Retry(total=1)) after connection broken by 'NewConnectionError(\
'<urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: \
[Errno 111] Connection refused')': /simple/alpha/
ERROR: Could not find a version that satisfies the requirement alpha (from versions: none)
Traceback (most recent call last):
  File "/cache/pip-tools/lib/python3.11/site-packages/piptools/resolver.py", line 642, in resolve
    is_resolved = self._do_resolve(
                  ^^^^^^^^^^^^^^^^^
pip._internal.exceptions.DistributionNotFound: No matching distribution found for alpha
"""


def test_a_wrapped_ensurepip_message_is_bad_input_naming_both_fixes() -> None:
    error = piptools.explain_failure(WRAPPED_NO_VENV, inputs(), {})
    assert isinstance(error, LockError) and error.exit_code == 2
    assert 'resolver = "uv"' in error.hint and "python3-venv" in error.hint
    assert "network" not in error.message + error.hint


def test_the_drivers_own_marker_is_read_the_same_way() -> None:
    marker = f"{lock_driver.STEP_PREFIX}{lock_driver.NO_VENV}\n"
    assert "venv/ensurepip" in piptools.explain_failure(marker, inputs(), {}).message


def test_an_unreachable_index_shows_it_redacted_the_cause_and_pips_last_line() -> None:
    error = piptools.explain_failure(FRAMES, inputs(), {}, "build/x.log")
    assert isinstance(error, EnvironmentProblem) and error.exit_code == 3
    assert "pypi.example.org" in error.message and "s3cr3t" not in error.message
    assert "connection refused" in error.message
    assert "last: ERROR: Could not find a version that satisfies the requirement alpha" in (
        error.message
    )
    assert "File " not in error.message and "Traceback" not in error.message
    assert "full log: build/x.log" in error.hint


def test_retries_while_installing_the_tools_do_not_blame_the_recipes_index() -> None:
    log = (
        "layer-audit: installing pip-tools 7.6.2\n"
        "WARNING: Retrying (Retry(total=4)) after connection broken by 'ReadTimeoutError(): "
        "Read timed out. (read timeout=15)': /simple/pip/\n" + FRAMES.replace(
            "WARNING: Retrying (Retry(total=1)) after connection broken by 'NewConnectionError(",
            "WARNING: ignored (",
        ).replace("Connection refused", "x")
    )  # fmt: skip
    error = piptools.explain_failure(log, inputs("http://127.0.0.1:9/simple"), {})
    assert "connection failed" not in error.message


def test_a_conflict_with_what_is_installed_names_who_installed_it() -> None:
    log = (
        "ERROR: Cannot install gamma because these package versions have conflicting "
        "dependencies.\nThe conflict is caused by:\n    gamma 1.0 depends on alpha<2\n"
    )
    installed = {"alpha": Constraint("alpha", "2.0", "v1 layer 1 (requirements/v1.in)")}
    error = piptools.explain_failure(log, inputs(), installed)
    assert isinstance(error, ResolutionConflict)
    assert "alpha 2.0 was installed earlier by v1 layer 1" in error.message


UV_REFUSED = """\
error: Failed to fetch: `https://builder:s3cr3t@pypi.example.org/simple/alpha/`
  Caused by: Request failed after 3 retries
  Caused by: error sending request for url (https://pypi.example.org/simple/alpha/)
  Caused by: client error (Connect)
  Caused by: tcp connect error: Connection refused (os error 111)
"""
UV_NO_SOLUTION = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because only alpha<=1.0 is available and you require alpha>=2, we can conclude that your
      requirements are unsatisfiable.
"""
UV_NOT_FOUND = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because nosuchpkg was not found in the package registry and you require nosuchpkg, we can
      conclude that your requirements are unsatisfiable.
"""


def test_uv_network_failures_are_exit_3_naming_the_index_without_credentials() -> None:
    error = uv.explain_uv_failure(UV_REFUSED, inputs())
    assert isinstance(error, EnvironmentProblem)
    assert "connection refused" in error.message and "s3cr3t" not in error.message


def test_uv_no_solution_is_told_in_uvs_words() -> None:
    error = uv.explain_uv_failure(UV_NO_SOLUTION, inputs())
    assert type(error) is LockError
    assert "only alpha<=1.0 is available and you require alpha>=2" in error.message


def test_uv_a_name_no_index_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job, "probe_index", lambda url, timeout=10.0: None)  # the index answers
    error = uv.explain_uv_failure(UV_NOT_FOUND, inputs())
    assert type(error) is LockError
    assert "no version of nosuchpkg" in error.message


def test_uv_yanked_warnings() -> None:
    log = 'warning: `alpha==1.1` is yanked (reason: "broken wheel")\n'
    assert uv.yanked_pins(log) == ["alpha 1.1 (broken wheel)"]


def test_tail_drops_python_frames() -> None:
    shown = job.tail(FRAMES)
    assert "File " not in shown and "^^^" not in shown
    assert "DistributionNotFound" in shown
