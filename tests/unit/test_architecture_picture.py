"""docs/architecture.dot is drawn from the code (tools/architecture/draw.py,
`make architecture`): one box per component, one node per subpackage or
module, the known circles' edges marked. Checked on the DOT text the script
builds from this checkout (graphviz is needed only for the SVG)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_draw() -> ModuleType:
    spec = importlib.util.spec_from_file_location("draw", ROOT / "tools/architecture/draw.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_component_is_a_box_and_every_edge_joins_drawn_nodes() -> None:
    draw = load_draw()
    dot = draw.build_dot()
    for component in draw.COMPONENTS:
        assert f'subgraph "cluster_{component}"' in dot
    nodes = set(re.findall(r'^    "([\w.]+)" \[label=', dot, re.M))
    assert "brokergroup_broker.store" in nodes and "brokergroup_controller.raft_node" in nodes
    edges = re.findall(r'^  "([\w.]+)" -> "([\w.]+)"', dot, re.M)
    assert edges and all(a in nodes and b in nodes for a, b in edges)
    # The dependency rules of DESIGN.md §1, visible in the picture: nothing imports the
    # operator from outside it but the console script.
    into_operator = {a for a, b in edges if b.startswith("brokergroup_operator.")}
    assert {a.split(".")[0] for a in into_operator} <= {"brokergroup_operator", "brokergroup_cli"}


def test_the_known_circles_are_the_red_edges() -> None:
    draw = load_draw()
    dot = draw.build_dot()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    _, circles = draw.contracts(config)
    red = set(re.findall(r'^  "([\w.]+)" -> "([\w.]+)" \[color="#cc0000"', dot, re.M))
    # Circles inside one subpackage fold into its node; the others are drawn red.
    assert red == {(a, b) for a, b in circles if a != b}
