"""The `brokergroup` entry point imports only the component that owns the command asked for
(cli/brokergroup_cli/main.py COMPONENTS), and its table names exactly what each component
registers, so no command can be lost to the shortcut."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from brokergroup_cli.main import COMPONENTS, build_parser


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


@pytest.mark.parametrize(("module", "commands"), COMPONENTS)
def test_the_table_names_what_each_component_registers(
    module: str, commands: tuple[str, ...]
) -> None:
    parser = argparse.ArgumentParser()
    importlib.import_module(module).register(parser.add_subparsers(dest="command"))
    assert tuple(_commands(parser)) == commands


def test_every_command_reaches_the_same_parser_alone_or_with_all() -> None:
    every = _commands(build_parser())
    assert every == [c for _, commands in COMPONENTS for c in commands]
    for command in every:
        assert command in _commands(build_parser(command))
    for unknown in (None, "--help", "nope"):
        assert _commands(build_parser(unknown)) == every


def test_local_status_does_not_import_the_chaos_runner() -> None:
    # A fresh interpreter: this one imported everything above.
    probe = (
        "import sys; from brokergroup_cli.main import build_parser; "
        "build_parser('local').parse_args(['local', 'status', '--dir', '/nonexistent']); "
        "print(sorted(m for m in sys.modules if m.startswith('brokergroup_cli.chaos')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
