"""Extras per component (issue 18 item 6): what each install carries, and what a
command says when its extra is missing.

Each test builds a real Python environment holding exactly the distributions an
install of `brokergroup[...]` would bring: the requirements of the chosen extras
(from the installed metadata, i.e. pyproject.toml), resolved through their own
requirements, each linked from this virtualenv into a fresh directory. The
project's sources come from the checkout; the interpreter runs with `-S`, so
nothing else of this virtualenv is importable. Then:

- the image's install (`[broker,controller,operator]`) imports the broker,
  controller and operator in full and has neither pyspark nor matplotlib, and
  every third-party module their commands import (grimp's import graph, lazy
  imports included) is in it;
- `brokergroup chaos` and `brokergroup audit` there stop with
  "install brokergroup[audit]" and exit 2, no traceback;
- the base install still shows `brokergroup --help`, and every command names
  the extras it lacks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import grimp
import pytest
from packaging.requirements import Requirement

from brokergroup_cli.extras import COMMAND_EXTRAS, extra_requirements, missing_for, normalize

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["controller", "broker-image", "cli", "operator", "pipeline", "remoting"]
ROOT_PACKAGES = [
    "brokergroup_remoting",
    "brokergroup_controller",
    "brokergroup_broker",
    "brokergroup_cli",
    "brokergroup_operator",
    "brokergroup_audit",
]
#: tools/image/build.sh installs these (fast: uvloop, which every server process takes where it imports).
IMAGE_EXTRAS = ("broker", "controller", "operator", "fast")


def resolve(extras: tuple[str, ...]) -> set[str]:
    """Every distribution `pip install brokergroup[extras]` installs (brokergroup aside)."""
    todo = [Requirement(r) for r in metadata.requires("brokergroup") or []]
    todo = [
        r
        for r in todo
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *extras))
    ]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = normalize(req.name)
        if name == "brokergroup":
            # The `all` extra names the others; this test never asks for it.
            continue
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            # Not installed here: only a platform-marked dependency may be absent.
            assert req.marker is not None, f"{name} is required but not installed"
            continue
        seen.add(name)
        for line in requires:
            sub = Requirement(line)
            wanted = sub.marker is None or any(
                sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)
            )
            if wanted:
                todo.append(sub)
    return seen


def image_prune() -> list[str]:
    """What the image's Dockerfile leaves out of its dependencies (`ARG PRUNE`)."""
    dockerfile = (ROOT / "broker-image" / "Dockerfile").read_text()
    found = re.search(r'^ARG PRUNE="([^"]*)"', dockerfile, re.M)
    assert found is not None
    return found.group(1).split()


def build_env(site: Path, extras: tuple[str, ...], prune: list[str] = []) -> set[str]:  # noqa: B006
    """Link the distributions of `brokergroup[extras]` into `site`, without the
    `prune` parts ("package/subpackage"); return the top-level names importable from it."""
    site.mkdir()
    pruned: dict[str, set[str]] = {}
    for part in prune:
        top, child = part.split("/")
        pruned.setdefault(top, set()).add(child)
    names: set[str] = set()
    for dist_name in [*resolve(extras), "brokergroup"]:
        dist = metadata.distribution(dist_name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            if top in ("..", "__pycache__") or top.endswith(".pth") or "__editable__" in top:
                continue
            source = Path(str(dist.locate_file(top)))
            if top in pruned:
                (site / top).mkdir()
                for child in source.iterdir():
                    if child.name not in pruned[top]:
                        (site / top / child.name).symlink_to(child)
            elif source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
            else:
                continue
            names.add(top.removesuffix(".py").split(".")[0])
    return names


def run(site: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(site), *(str(ROOT / s) for s in SOURCES)])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": path, "PYTHONNOUSERSITE": "1"}
    script = (
        code or "import sys; from brokergroup_cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-S", "-c", script, *args],
        capture_output=True, text=True, env=env, cwd=site.parent, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def image_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    site = tmp_path_factory.mktemp("image") / "site"
    return site, build_env(site, IMAGE_EXTRAS, image_prune())


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("base") / "site"
    build_env(site, ())
    return site


#: What the image runs: every command but `audit` and `chaos` (`brokergroup_cli.main`
#: registers those two too; their handlers stop at the extra check).
IMAGE_ENTRIES = [
    "brokergroup_broker.cli",
    "brokergroup_controller.cli",
    "brokergroup_operator.cli",
    "brokergroup_operator.uninstall",
    "brokergroup_cli.local_cli",
    "brokergroup_cli.kubectl_plugin.cli",
    "brokergroup_cli.main",
]


def image_closure() -> set[str]:
    """Every module the image's commands import, lazy imports inside handlers
    included (grimp reads every import statement)."""
    graph = grimp.build_graph(*ROOT_PACKAGES, include_external_packages=True, cache_dir=None)
    closure: set[str] = set()
    for entry in IMAGE_ENTRIES:
        closure |= graph.find_upstream_modules(entry) | {entry}
    for command_only in ("brokergroup_audit.cli", "brokergroup_cli.chaos.cli"):
        closure -= graph.find_upstream_modules(command_only) | {command_only}
    return closure


def test_the_image_install_has_what_its_commands_import_and_no_spark(
    image_env: tuple[Path, set[str]],
) -> None:
    site, names = image_env
    assert not names & {"pyspark", "matplotlib", "pandas", "pyarrow", "numpy"}, sorted(names)
    closure = image_closure()
    ours = sorted(m for m in closure if m.split(".")[0] in ROOT_PACKAGES)
    third_party = {
        m.split(".")[0]
        for m in closure
        if m.split(".")[0] not in ROOT_PACKAGES and m.split(".")[0] not in sys.stdlib_module_names
    }
    assert third_party <= names, f"the image lacks {sorted(third_party - names)}"
    load = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)"
    done = run(site, *ours, code=load)
    assert done.returncode == 0, done.stderr
    for module in ("pyspark", "matplotlib", *(p.replace("/", ".") for p in image_prune())):
        absent = run(site, code=f"import {module}")
        assert absent.returncode == 1 and "ModuleNotFoundError" in absent.stderr


@pytest.mark.parametrize("command", [["chaos", "--windows", "1"], ["audit", "store"]])
def test_audit_commands_name_their_extra(
    image_env: tuple[Path, set[str]], command: list[str]
) -> None:
    site, _ = image_env
    done = run(site, *command, "--out", str(site.parent / "out"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "install brokergroup[audit]" in done.stderr, done.stderr
    assert not (site.parent / "out").exists()


def test_the_base_install_shows_help_and_names_missing_extras(base_env: Path) -> None:
    assert run(base_env, "--help").returncode == 0
    done = run(
        base_env, "controller", "--node-id", "1", "--peers", "127.0.0.1:9880", "--data-dir", "d"
    )
    assert done.returncode == 2
    assert "install brokergroup[controller]" in done.stderr, done.stderr
    assert "pysyncobj" in done.stderr
    done = run(base_env, "operator", "--standalone")
    assert "install brokergroup[operator]" in done.stderr, done.stderr
    done = run(base_env, "chaos")
    # The broker's extra is missing too (prometheus-client), named once though the
    # controller's extra names it as well.
    assert "install brokergroup[controller,broker,audit]" in done.stderr, done.stderr
    assert done.stderr.count("prometheus-client") == 1, done.stderr
    plugin = "import sys; from brokergroup_cli.kubectl_plugin.cli import main; sys.exit(main(sys.argv[1:]))"
    done = run(base_env, "status", "bg/demo", code=plugin)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "install brokergroup[operator]" in done.stderr, done.stderr


def test_every_command_extra_is_declared() -> None:
    declared = extra_requirements(metadata.requires("brokergroup") or [])
    for command, extras in COMMAND_EXTRAS.items():
        assert set(extras) <= declared.keys() | {"broker"}, command
    assert set(declared["all"]) == {"brokergroup"}
    assert not {"pyspark", "matplotlib"} & set(declared[""])


def test_missing_for_reads_the_markers() -> None:
    requires = ["aiohttp>=3.9", 'pysyncobj==0.3.17; extra == "controller"',
                'matplotlib>=3.8 ; extra == "audit"', 'brokergroup[audit]; extra == "all"']  # fmt: skip
    assert missing_for("chaos", requires, lambda name: name != "matplotlib") == {
        "audit": ["matplotlib"]
    }
    assert missing_for("admin", requires, lambda name: False) == {}
    assert missing_for("local", requires, lambda name: True) == {}
