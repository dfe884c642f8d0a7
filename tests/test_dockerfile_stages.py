"""A Dockerfile's stages, and the stage and line of each entry of a built image's history.

The history texts below are what BuildKit (dockerd 20.10) wrote for the Dockerfile beside them
(``docker history --no-trunc``, oldest first), captured from a real build of it on the
offline base.
"""

from __future__ import annotations

import pytest

from audit.dockerfile.layout import chain_of
from audit.dockerfile.stages import attribute, find_stage, parse_stages, stage_name
from audit.errors import RecipeError

DOCKERFILE = b"""\
ARG GLOBAL=1
FROM layer-audit/base:bookworm-amd64 AS base
ARG VERSION=2.0
ENV A=b
WORKDIR /work
RUN --mount=type=cache,target=/root/.cache echo $VERSION > /v.txt
COPY Dockerfile /d
LABEL x=y

FROM base AS runtime
ARG TARGETPLATFORM
RUN echo $TARGETPLATFORM > /tp && if [ "$TARGETPLATFORM" = linux/arm64 ]; then echo arm; fi
COPY --from=base /v.txt /v2.txt
USER root
CMD ["python3"]
"""
HISTORY = [
    "ADD rootfs.tar / # buildkit",
    "ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LABEL io.layer-audit.base.suite=bookworm io.layer-audit.base.arch=amd64",
    'CMD ["/bin/bash"]',
    "ARG VERSION=2.0",
    "ENV A=b",
    "WORKDIR /work",
    "RUN |1 VERSION=2.0 /bin/sh -c echo $VERSION > /v.txt # buildkit",
    "COPY Dockerfile /d # buildkit",
    "LABEL x=y",
    "ARG TARGETPLATFORM",
    "RUN |1 TARGETPLATFORM=linux/amd64 /bin/sh -c echo $TARGETPLATFORM > /tp # buildkit",
    "COPY /v.txt /v2.txt # buildkit",
    "USER root",
    'CMD ["python3"]',
]


def test_stages_and_their_chain() -> None:
    stages = parse_stages(DOCKERFILE, {}, "Dockerfile")
    assert [(stage_name(s), s.reference, s.parent, len(s.items)) for s in stages] == [
        ("base", "layer-audit/base:bookworm-amd64", None, 6),
        ("runtime", "base", 0, 5),
    ]
    target = find_stage(stages, "runtime", "x")
    assert [stage_name(s) for s in chain_of(stages, target.index)] == [
        "base",
        "runtime",
    ]


def test_each_history_entry_gets_its_stage_position_and_line() -> None:
    stages = parse_stages(DOCKERFILE, {}, "Dockerfile")
    found = attribute(HISTORY, stages, find_stage(stages, None, "Dockerfile"))
    assert found[:4] == [None] * 4  # the base image's own entries
    located = [(a.stage, a.position, a.line) for a in found[4:] if a is not None]
    assert located[3] == ("base", 4, 6)  # the RUN with the cache mount, line 6
    assert located[7] == ("runtime", 2, 12)  # the RUN on TARGETPLATFORM, line 12
    assert len(located) == 11


def test_a_target_earlier_in_the_file_is_attributed_alone() -> None:
    stages = parse_stages(DOCKERFILE, {}, "Dockerfile")
    found = attribute(HISTORY[:10], stages, find_stage(stages, "base", "Dockerfile"))
    assert [a.stage if a else None for a in found] == [None] * 4 + ["base"] * 6


def test_a_history_that_does_not_match_the_file_is_not_attributed() -> None:
    stages = parse_stages(DOCKERFILE, {}, "Dockerfile")
    shifted = [*HISTORY[:-1], "RUN /bin/sh -c echo other"]  # CMD replaced by a RUN
    assert attribute(shifted, stages, stages[-1]) == [None] * len(shifted)
    assert attribute(HISTORY[:3], stages, stages[-1]) == [None] * 3  # fewer than it made


def test_from_takes_global_args_and_build_args() -> None:
    text = b"ARG BASE=nvidia/cuda:13.0.1-devel-ubuntu24.04\nFROM ${BASE} AS build\nRUN true\n"
    assert parse_stages(text, {}, "D")[0].reference == "nvidia/cuda:13.0.1-devel-ubuntu24.04"
    assert parse_stages(text, {"BASE": "x:1"}, "D")[0].reference == "x:1"
    defaulted = b"FROM ${MISSING:-img:2}\n"
    assert parse_stages(defaulted, {}, "D")[0].reference == "img:2"


def test_a_stage_chosen_by_the_target_arch_is_the_parent_for_that_platform() -> None:
    """vLLM's Dockerfile.cpu: ``FROM base-${TARGETARCH} AS base-arch``, as BuildKit fills it."""
    text = b"FROM x AS base-amd64\nFROM y AS base-arm64\nFROM base-${TARGETARCH} AS base-arch\n"
    arm = parse_stages(text, {}, "D", "linux/arm64")
    assert (arm[2].reference, arm[2].parent) == ("base-arm64", 1)
    assert parse_stages(text, {}, "D", "linux/amd64")[2].parent == 0


def test_stages_by_index_and_errors() -> None:
    text = b"FROM a\nRUN one\nFROM 0\nRUN two\n"
    stages = parse_stages(text, {}, "D")
    assert stages[1].parent == 0 and find_stage(stages, "1", "D") is stages[1]
    with pytest.raises(RecipeError, match="no stage 'nope'"):
        find_stage(stages, "nope", "D")
    with pytest.raises(RecipeError, match="no FROM"):
        parse_stages(b"RUN true\n", {}, "D")
