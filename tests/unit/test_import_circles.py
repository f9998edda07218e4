"""The "no import circles" check of `make lint` (issue 18 item 2) fails on a new circle.

The contract is pyproject.toml's `no-import-circles` (import-linter's
acyclic_siblings over every component, the known circles allowlisted by name).
Each test copies the components' sources and pyproject.toml into a temporary
directory, changes the copy, and runs `lint-imports --contract
no-import-circles` on it exactly as `make lint` does (the copy first on
PYTHONPATH): unchanged it passes; a planted module circle, a planted circle
between subpackages, and an allowlist entry that matches no import all fail.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "controller": "brokergroup_controller",
    "broker-image": "brokergroup_broker",
    "cli": "brokergroup_cli",
    "operator": "brokergroup_operator",
    "pipeline": "brokergroup_audit",
    "remoting": "brokergroup_remoting",
}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for folder, package in SOURCES.items():
        shutil.copytree(
            ROOT / folder / package,
            tmp_path / folder / package,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(tree / folder) for folder in SOURCES)
    env["COLUMNS"] = "400"  # lint-imports wraps its lines at the terminal's width
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--contract", "no-import-circles"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_copy_passes_and_reads_the_copy(tree: Path) -> None:
    done = lint(tree)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KEPT" in done.stdout
    # The copy, not the checkout, is what was analysed: a module only the copy has.
    (tree / "operator" / "brokergroup_operator" / "only_in_copy.py").write_text(
        "from brokergroup_operator import only_in_copy_too\n"
    )
    (tree / "operator" / "brokergroup_operator" / "only_in_copy_too.py").write_text(
        "from brokergroup_operator import only_in_copy\n"
    )
    done = lint(tree)
    assert done.returncode == 1, done.stdout
    assert "No cycles are allowed in brokergroup_operator." in done.stdout
    assert "only_in_copy" in done.stdout


def test_a_planted_circle_between_two_modules_fails(tree: Path) -> None:
    # election is a pure core the state machine uses; make it import the HTTP server back.
    election = tree / "controller" / "brokergroup_controller" / "election.py"
    election.write_text(election.read_text() + "\nfrom brokergroup_controller import server\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout
    assert "No cycles are allowed in brokergroup_controller." in done.stdout
    assert ".election" in done.stdout or ".server" in done.stdout


def test_a_planted_circle_between_subpackages_fails(tree: Path) -> None:
    # The store must not know the broker's core, which uses the store.
    store_init = tree / "broker-image" / "brokergroup_broker" / "store" / "__init__.py"
    store_init.write_text(store_init.read_text() + "\nfrom brokergroup_broker.core import role\n")
    done = lint(tree)
    assert done.returncode == 1, done.stdout
    assert "No cycles are allowed in brokergroup_broker." in done.stdout
    assert ".store -> .core" in done.stdout


def test_an_allowlist_entry_without_its_import_fails(tree: Path) -> None:
    """A fixed circle's allowlist lines must be deleted: the list only shrinks."""
    config = tree / "pyproject.toml"
    text = config.read_text()
    contract = text.index('id = "no-import-circles"')
    stale = '"brokergroup_operator.model -> brokergroup_operator.handlers"'
    at = text.find("ignore_imports = [", contract)
    if at == -1:  # the allowlist is empty and gone: give the contract one again
        at = text.index("\n", contract) + 1
        text = text[:at] + f"ignore_imports = [{stale}]\n" + text[at:]
    else:
        at += len("ignore_imports = [")
        text = text[:at] + f"\n    {stale}," + text[at:]
    config.write_text(text)
    done = lint(tree)
    assert done.returncode == 1, done.stdout
    assert (
        "No matches for ignored import "
        "brokergroup_operator.model -> brokergroup_operator.handlers" in done.stdout
    )
