"""A Dockerfile stage's image configuration (``CMD``, ``ENTRYPOINT``, ``USER``, ``EXPOSE``,
``LABEL``, ``HEALTHCHECK``, ``STOPSIGNAL``, ``SHELL``) gathered into its recipe stage's
``config`` table (the last stage's is ``[config]``): rendered after the stage's layers, and
inherited by the stages built on it, as Docker's is.

Invariants: each value written is one the recipe parser accepts (the same patterns); what does
not fit is returned as a reason, never written. Docker's own rules are kept: the last
instruction of a kind wins, ``EXPOSE`` and ``LABEL`` add up, and an ``ENTRYPOINT`` resets a
``CMD`` that an earlier stage set.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from audit.recipe.located_toml import UNSAFE_TEXT
from audit.recipe.parse import DURATION, LABEL_KEY, OWNER, PORT, SIGNAL

CONFIG_KINDS = (
    "CMD",
    "ENTRYPOINT",
    "USER",
    "EXPOSE",
    "LABEL",
    "HEALTHCHECK",
    "STOPSIGNAL",
    "SHELL",
)
EXPANDED_KINDS = ("USER", "EXPOSE", "LABEL", "STOPSIGNAL")  # Docker substitutes variables here
HEALTH_OPTIONS = {
    "--interval": "interval",
    "--timeout": "timeout",
    "--start-period": "start_period",
}


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@dataclass
class FinalConfig:
    """``[config]`` as TOML values by key, each with the Dockerfile line it came from."""

    values: dict[str, str] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    expose: list[str] = field(default_factory=list)
    cmd_stage: int = 0

    def apply(self, kind: str, value: str, line: int, stage: int) -> str:
        """Take one instruction; '' when kept, else why it cannot be."""
        handlers = {
            "CMD": self._cmd, "ENTRYPOINT": self._entrypoint, "USER": self._user,
            "EXPOSE": self._expose, "LABEL": self._label, "HEALTHCHECK": self._healthcheck,
            "STOPSIGNAL": self._stopsignal, "SHELL": self._shell,
        }  # fmt: skip
        problem, key, text = handlers[kind](value.strip(), stage)
        if not problem and key:
            self.values[key], self.lines[key] = text, line
        return problem

    def _cmd(self, value: str, stage: int) -> tuple[str, str, str]:
        self.cmd_stage = stage
        return _keyed("cmd", *_command(value))

    def _entrypoint(self, value: str, stage: int) -> tuple[str, str, str]:
        if "cmd" in self.values and self.cmd_stage != stage:  # Docker resets an inherited CMD
            del self.values["cmd"]
        return _keyed("entrypoint", *_command(value))

    def _user(self, value: str, stage: int) -> tuple[str, str, str]:
        if not OWNER.fullmatch(value):
            return f"USER {value!r} is not user[:group] of names or ids", "", ""
        return "", "user", _q(value)

    def _expose(self, value: str, stage: int) -> tuple[str, str, str]:
        ports = value.split()
        bad = [port for port in ports if not PORT.fullmatch(port.lower())]
        if bad or not ports:
            return f"EXPOSE {' '.join(bad)}: not a port like 8000 or 8000/tcp", "", ""
        self.expose += [p.lower() for p in ports if p.lower() not in self.expose]
        return "", "expose", "[" + ", ".join(_q(p) for p in self.expose) + "]"

    def _label(self, value: str, stage: int) -> tuple[str, str, str]:
        try:
            words = shlex.split(value)
        except ValueError:
            return "LABEL that does not parse", "", ""
        pairs = _pairs(words)
        for key, text in pairs:
            if not LABEL_KEY.fullmatch(key) or UNSAFE_TEXT.search(text):
                return f"label {key!r}: a key of letters, digits, ._/- and a one-line value", "", ""
        self.labels.update(pairs)
        body = ", ".join(f"{_q(k)} = {_q(v)}" for k, v in self.labels.items())
        return "", "labels", "{ " + body + " }"

    def _stopsignal(self, value: str, stage: int) -> tuple[str, str, str]:
        if not SIGNAL.fullmatch(value):
            return f"STOPSIGNAL {value!r}: not a signal name (SIGTERM) or number", "", ""
        return "", "stopsignal", _q(value)

    def _shell(self, value: str, stage: int) -> tuple[str, str, str]:
        problem, text = _command(value)
        if problem or not text.startswith("["):
            return problem or "SHELL takes a JSON array", "", ""
        return "", "shell", text

    def _healthcheck(self, value: str, stage: int) -> tuple[str, str, str]:
        if value.upper() == "NONE":
            return "", "healthcheck", "{ disable = true }"
        words = value.split(None, 1)
        parts: list[str] = []
        while words and words[0].startswith("--"):
            name, _, setting = words[0].partition("=")
            problem = _health_option(name, setting, parts)
            if problem:
                return problem, "", ""
            words = words[1].split(None, 1) if len(words) > 1 else []
        if len(words) != 2 or words[0].upper() != "CMD":
            return "HEALTHCHECK without CMD", "", ""
        problem, command = _command(words[1])
        return problem, "healthcheck", "{ " + ", ".join([f"cmd = {command}", *parts]) + " }"

    def toml(self, header: str = "[config]", indent: str = "") -> list[str]:
        """The table under ``header`` (empty list when the stage set nothing)."""
        if not self.values:
            return []
        rows = ["", f"{indent}{header}  # rendered after the stage's layers"]
        for key in sorted(self.values, key=lambda k: self.lines[k]):
            rows += [f"{indent}# Dockerfile line {self.lines[key]}"]
            rows += [f"{indent}{key} = {self.values[key]}"]
        return rows


def _keyed(key: str, problem: str, text: str) -> tuple[str, str, str]:
    return problem, key if not problem else "", text


def _command(value: str) -> tuple[str, str]:
    """('', TOML value) of an exec form (a JSON array of strings) or a shell line."""
    if UNSAFE_TEXT.search(value) or not value:
        return "a command with a control character, or none", ""
    if value.startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            return "an exec form that is not a JSON array (Docker would run it as shell)", ""
        if not items or not all(isinstance(i, str) and not UNSAFE_TEXT.search(i) for i in items):
            return "an exec form that is not a list of one-line strings", ""
        return "", "[" + ", ".join(_q(i) for i in items) + "]"
    if value.rstrip().endswith("\\"):
        return "a shell form ending with a backslash", ""
    return "", _q(value)


def _pairs(words: list[str]) -> list[tuple[str, str]]:
    if words and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def _health_option(name: str, setting: str, parts: list[str]) -> str:
    if name in HEALTH_OPTIONS and DURATION.fullmatch(setting):
        parts.append(f"{HEALTH_OPTIONS[name]} = {_q(setting)}")
        return ""
    if name == "--retries" and setting.isdigit() and int(setting) <= 1000:
        parts.append(f"retries = {int(setting)}")
        return ""
    return f"HEALTHCHECK option {name}={setting} has no recipe key"
