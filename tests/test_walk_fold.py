"""Deltas folded into layer states: whiteouts, environments as Python sees them, the system,
and the judge reading the walk's history."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

from audit.history.model import History
from audit.history.snapshot import Distribution
from audit.history.walk import fold as folding
from audit.history.walk.config import parse_config
from audit.history.walk.delta import LayerDelta
from audit.history.walk.layer import LayerScanner
from audit.inimage import snapshot as script
from audit.policy.judge import judge_history
from audit.policy.model import Policy
from tests.support.walk_images import (
    Layer,
    config,
    debian_python,
    dist_info,
    dpkg_status,
    egg_info,
    sha256,
)

SITE = "/usr/local/lib/python3.11/site-packages"
VENV_SITE = "/opt/venv/lib/python3.11/site-packages"
TODAY = datetime.date(2026, 12, 1)


def delta(layer: Layer) -> LayerDelta:
    scanner = LayerScanner()
    scanner.feed(layer.tar())
    return scanner.finish()


def history_of(
    layers: list[Layer], history: list[tuple[str, bool]] | None = None, architecture: str = "amd64"
) -> History:
    tars = [layer.tar() for layer in layers]
    image_config = parse_config(config(tars, history, architecture=architecture))
    deltas = {sha256(tar): delta(layer) for tar, layer in zip(tars, layers, strict=True)}
    return folding.fold("img", image_config, deltas)


def python_image() -> Layer:
    """An official-python-like image: /usr/local prefix, patchlevel.h, site-packages."""
    return Layer(
        links={"/usr/local/bin/python3": "python3.11", "/usr/local/bin/python": "python3"}
    ).add(
        {
            "/usr/local/bin/python3.11": b"\x7fELF",
            "/usr/local/lib/python3.11/os.py": "",
            "/usr/local/include/python3.11/patchlevel.h": '#define PY_VERSION        "3.11.9"\n',
            **dist_info(SITE, "pip", "24.0"),
        }
    )


def names(dists: tuple[Distribution, ...]) -> list[tuple[str, str]]:
    return [(d.name, d.version) for d in dists]


def test_the_first_state_is_the_empty_image_and_empty_layers_repeat_states() -> None:
    history = history_of(
        [python_image(), Layer().add(dist_info(SITE, "alpha", "1.0"))],
        [
            ("FROM x", False),
            ("ENV A=1", True),
            ("RUN pip install alpha HF_TOKEN=hf_secret1234", False),
        ],
    )
    assert [s.ref.index for s in history.states] == [-1, 0, 1, 2]
    assert history.producer == "walk" and history.states[0].environments == ()
    assert history.states[2].environments == history.states[1].environments
    assert history.states[2].ref.empty and history.states[2].ref.digest == ""
    assert "hf_secret1234" not in history.states[3].ref.instruction
    (env,) = history.states[3].environments
    assert env.interpreter == "/usr/local/bin/python3.11" and env.python == "3.11.9"
    assert env.paths == ("/usr/local/lib/python3.11", SITE)
    assert names(env.distributions) == [("alpha", "1.0"), ("pip", "24.0")]
    assert (
        env.markers["platform_machine"] == "x86_64"
        and env.markers["python_full_version"] == "3.11.9"
    )


def test_a_history_that_does_not_pair_gets_one_ref_per_layer() -> None:
    history = history_of([python_image(), Layer().add({"/x": "x"})], [("only one", False)])
    assert [(s.ref.index, s.ref.instruction) for s in history.states[1:]] == [(0, ""), (1, "")]


def test_debian_python_a_venv_and_the_user_site() -> None:
    base = Layer(links={"/usr/bin/python3": "python3.11", "/bin": "usr/bin"}).add(debian_python())
    base.add(dist_info("/usr/lib/python3/dist-packages", "pip", "23.0.1", installer=""))
    venv = Layer(
        links={"/opt/venv/bin/python": "python3", "/opt/venv/bin/python3": "/usr/bin/python3"}
    )
    cfg = "home = /usr/bin\ninclude-system-site-packages = true\nversion = 3.11.2\n"
    venv.add({"/opt/venv/pyvenv.cfg": cfg})
    venv.add(dist_info(VENV_SITE, "alpha", "1.0"))
    user = Layer().add(dist_info("/root/.local/lib/python3.11/site-packages", "beta", "2.0"))
    state = history_of([base, venv, user]).states[-1]
    envs = {env.interpreter: env for env in state.environments}
    assert sorted(envs) == ["/opt/venv/bin/python", "/usr/bin/python3.11"]
    system = envs["/usr/bin/python3.11"]
    assert system.python == "3.11.2" and system.libc == "glibc 2.36"
    assert system.paths == (
        "/usr/lib/python3.11",
        "/usr/lib/python3.11/lib-dynload",
        "/root/.local/lib/python3.11/site-packages",
        "/usr/lib/python3/dist-packages",
    )
    assert names(system.distributions) == [("beta", "2.0"), ("pip", "23.0.1")]
    venv_env = envs["/opt/venv/bin/python"]  # system site packages: the user site too
    assert venv_env.paths[-3:] == (
        VENV_SITE,
        "/root/.local/lib/python3.11/site-packages",
        "/usr/lib/python3/dist-packages",
    )
    assert names(venv_env.distributions) == [("alpha", "1.0"), ("beta", "2.0"), ("pip", "23.0.1")]
    assert state.system is not None and state.system.distro == "debian-12"
    assert [p.name for p in state.system.packages] == ["libc6", "python3.11-minimal"]


def test_a_legacy_editable_install_is_seen_through_its_pth_line() -> None:
    """``pip install --no-use-pep517 -e /src/legacy`` (setup.py develop) leaves only an
    ``.egg-link`` and an ``easy-install.pth`` line in the site folder; the metadata lies in
    the project. ``site.py`` puts the folder on ``sys.path`` right after that site folder, so
    ``pip list`` shows the package: so must the walk (it used to miss it)."""
    local = "/usr/local/lib/python3.11/dist-packages"
    base = Layer(links={"/usr/bin/python3": "python3.11"}).add(debian_python())
    editable = Layer().add(
        {
            f"{local}/legacy.egg-link": "/src/legacy\n.",
            f"{local}/easy-install.pth": "/src/legacy\n",
            f"{local}/distutils-precedence.pth": "import os; x = 1\n# a comment\n\n",
            f"{local}/gone.pth": "/nowhere\n",
            "/src/legacy/legacy/__init__.py": "",
            **egg_info("/src/legacy", "legacy", "0.7"),
        }
    )
    history = history_of([base, editable])
    (env,) = history.states[-1].environments
    assert env.paths == (
        "/usr/lib/python3.11",
        "/usr/lib/python3.11/lib-dynload",
        local,
        "/src/legacy",
        "/usr/lib/python3/dist-packages",
    )
    assert [(d.name, d.version, d.location) for d in env.distributions] == [
        ("legacy", "0.7", "/src/legacy")
    ]
    verdict = judge_history(history, Policy(), today=TODAY)[-1]
    assert [(f.rule, f.package) for f in verdict.findings] == [("added", "legacy")]


@pytest.mark.parametrize(
    ("user", "environ", "home"),
    [
        ("app", [], "/home/app"),
        ("1000:1000", [], "/home/app"),
        ("app", ["HOME=/srv"], "/srv"),
        ("4242", [], "/"),
        ("", [], "/root"),
    ],
)
def test_the_user_site_is_the_image_users_home(user: str, environ: list[str], home: str) -> None:
    """``USER app`` with no ``ENV HOME``: the engine sets HOME from the image's /etc/passwd,
    so ``pip install --user`` went to /home/app/.local and Python sees it there (the walk
    used to look in /root/.local only)."""
    base = Layer(links={"/usr/bin/python3": "python3.11"}).add(debian_python())
    base.add(
        {"/etc/passwd": "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/sh\n"}
    )
    site = f"{home.rstrip('/')}/.local/lib/python3.11/site-packages"
    user_layer = Layer().add(dist_info(site, "eps", "1.0"))
    tars = [base.tar(), user_layer.tar()]
    document = json.loads(config(tars, env=environ))
    document["config"]["User"] = user
    image_config = parse_config(json.dumps(document).encode())
    deltas = {
        sha256(tar): delta(layer) for tar, layer in zip(tars, [base, user_layer], strict=True)
    }
    (env,) = folding.fold("img", image_config, deltas).states[-1].environments
    assert site in env.paths
    assert [(d.name, d.location) for d in env.distributions] == [("eps", site)]


def test_a_base_without_python_then_a_layer_that_installs_one() -> None:
    cuda = Layer().add(
        {
            "/usr/local/cuda/lib64/libcudart.so.13.0.96": b"\x7fELF",
            "/var/lib/dpkg/status": dpkg_status([("libc6", "2.39-0ubuntu8")]),
        }
    )
    states = history_of([cuda, python_image()]).states
    assert states[1].environments == ()
    assert states[1].system is not None and states[1].system.native[0].soname == "libcudart.so.13"
    (env,) = states[2].environments
    assert names(env.distributions) == [("pip", "24.0")]


def test_a_downgrade_is_a_new_dist_info_and_a_whiteout_and_the_judge_names_it() -> None:
    install = Layer().add(
        {**dist_info(SITE, "nccl-like", "2.30.0"), **dist_info(SITE, "flashy", "1.0")}
    )
    downgrade = Layer(whiteouts=[f"{SITE}/nccl_like-2.30.0.dist-info"]).add(
        dist_info(SITE, "nccl-like", "2.29.7")
    )
    history = history_of(
        [python_image(), install, downgrade],
        [
            ("FROM python", False),
            ("RUN pip install flashy nccl-like", False),
            ("RUN pip install flashy==2 # pulls nccl-like==2.29.7", False),
        ],
    )
    (env,) = history.states[-1].environments
    assert ("nccl-like", "2.29.7") in names(env.distributions)
    assert ("nccl-like", "2.30.0") not in names(env.distributions)
    verdicts = judge_history(history, Policy(), today=TODAY)
    failing = [
        (v.ref.instruction, f.rule, f.before, f.after)
        for v in verdicts
        for f in v.findings
        if f.fails
    ]
    assert failing == [
        ("RUN pip install flashy==2 # pulls nccl-like==2.29.7", "downgraded", "2.30.0", "2.29.7")
    ]


def test_rm_rf_of_a_site_folder_and_an_opaque_folder() -> None:
    install = Layer().add({**dist_info(SITE, "alpha", "1.0"), **dist_info(SITE, "beta", "1.0")})
    removed = Layer(whiteouts=[SITE])
    again = Layer(opaque=[SITE]).add(dist_info(SITE, "gamma", "3"))
    states = history_of([python_image(), install, removed, again]).states
    assert names(states[2].environments[0].distributions) == [
        ("alpha", "1.0"),
        ("beta", "1.0"),
        ("pip", "24.0"),
    ]
    assert states[3].environments[0].distributions == ()
    assert states[3].environments[0].paths == ("/usr/local/lib/python3.11",)
    assert names(states[4].environments[0].distributions) == [("gamma", "3")]


def test_a_file_hides_a_folder_and_a_folder_hides_a_link() -> None:
    install = Layer().add(dist_info(SITE, "alpha", "1.0"))
    flattened = Layer().add({SITE: b"not a folder any more"})
    states = history_of([python_image(), install, flattened]).states
    assert states[3].environments[0].distributions == ()
    merged = Layer(links={"/lib": "usr/lib"}).add(
        {"/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7": b"x"}
    )
    unmerged = Layer(folders=["/lib"])
    state = folding.ImageState()
    state.apply(delta(merged))
    assert state.resolve("/lib/x86_64-linux-gnu") == "/usr/lib/x86_64-linux-gnu"
    state.apply(delta(unmerged))
    assert state.resolve("/lib/x86_64-linux-gnu") == "/lib/x86_64-linux-gnu"


def test_links_resolve_inside_the_image_and_loops_resolve_to_nothing() -> None:
    layer = Layer(
        links={
            "/a": "/b",
            "/b": "a",
            "/etc/os-release": "../usr/lib/os-release",
            "/escape": "../../../../usr/lib",
        }
    )
    state = folding.ImageState()
    state.apply(delta(layer.add({"/usr/lib/os-release": "ID=x\n"})))
    assert state.resolve("/a/x") == ""
    assert state.resolve("/etc/os-release") == "/usr/lib/os-release"
    assert state.resolve("/escape/os-release") == "/usr/lib/os-release"


def test_native_copies_are_attributed_to_their_wheel_or_search_folder() -> None:
    wheel = Layer().add(
        dist_info(
            VENV_SITE,
            "nvidia-nccl-cu13",
            "2.30.7",
            files={"nvidia/nccl/lib/libnccl.so.2": b"\x7fELF"},
        )
    )
    system = Layer().add(
        {
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3": b"\x7fELF",
            "/usr/local/cuda/lib64/libcublasLt.so.13.0.0.19": b"\x7fELF",
            "/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
            "/etc/ld.so.conf.d/cuda.conf": "/usr/local/cuda/lib64\n",
            "/opt/elsewhere/libnccl.so.2": b"\x7fELF",
        }
    )
    state = history_of([python_image(), wheel, system]).states[-1]
    assert state.system is not None
    copies = {
        c.path: (c.origin, c.owner, c.soname, c.version)
        for lib in state.system.native
        for c in lib.copies
    }
    assert copies == {
        f"{VENV_SITE}/nvidia/nccl/lib/libnccl.so.2": (
            "wheel",
            "nvidia-nccl-cu13 2.30.7",
            "libnccl.so.2",
            "",
        ),
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3": ("system", "", "libnccl.so.2", "2.28.3"),
        "/usr/local/cuda/lib64/libcublasLt.so.13.0.0.19": (
            "ld.so.conf",
            "",
            "libcublasLt.so.13",
            "13.0.0.19",
        ),
        "/opt/elsewhere/libnccl.so.2": ("", "", "libnccl.so.2", ""),
    }
    assert all(lib.loads == () for lib in state.system.native)


def test_arm64_markers_come_from_the_config() -> None:
    state = history_of([python_image()], architecture="arm64").states[-1]
    assert state.environments[0].markers["platform_machine"] == "aarch64"


def test_orphan_site_folders_are_environments_named_by_the_folder() -> None:
    copied = Layer().add(
        {**dist_info(VENV_SITE, "alpha", "1.0"), **dist_info("/root/.cache/uv/x", "beta", "1")}
    )
    (env,) = history_of([copied]).states[-1].environments
    assert (env.interpreter, env.python, env.paths) == (VENV_SITE, "3.11", (VENV_SITE,))
    assert names(env.distributions) == [("alpha", "1.0")]


def test_records_equal_the_in_image_scripts_on_the_same_files(tmp_path: Path) -> None:
    """One code path: the walk's records of a site folder equal what the in-image snapshot
    script reads from the same files on disk."""
    site = "/usr/lib/python3/dist-packages"
    files = {
        **dist_info(
            site, "Foo.Bar", "1.0+cu130", requires=["alpha>=1; extra == 'x'"], installer="uv"
        ),
        **egg_info(
            site, "wheel", "0.38.4", "[test]\npytest\n\n[:sys_platform == 'win32']\ncolorama\n"
        ),
        f"{site}/six-1.16.0.egg-info": "Metadata-Version: 1.0\nName: six\nVersion: 1.16.0\n",
        f"{site}/empty-0.1.dist-info/RECORD": "",
        f"{site}/noinstaller-2.dist-info/METADATA": "Name: NoInstaller\nVersion: 2\n\nbody\n",
        f"{site}/egg_files-1.egg-info/PKG-INFO": "Name: egg-files\nVersion: 1\n",
        f"{site}/egg_files-1.egg-info/installed-files.txt": "../egg_files/__init__.py\n",
    }
    layer = Layer().add(files)
    for path, data in layer.files.items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    on_disk = script.distributions([str(tmp_path / site.lstrip("/"))])
    state = folding.ImageState()
    state.apply(delta(layer))
    walked = folding._site_distributions(state, site, folding.dist_folders(state)[site])
    assert [json.loads(json.dumps(d.__dict__)) for d in walked] == [
        dict(r, location=site) for r in on_disk
    ]


@pytest.mark.skipif(sys.platform != "linux", reason="image paths are POSIX")
def test_fold_is_deterministic() -> None:
    layers = [python_image(), Layer().add(dist_info(SITE, "alpha", "1.0"))]
    assert history_of(layers) == history_of(layers)
