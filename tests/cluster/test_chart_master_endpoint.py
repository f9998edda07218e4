"""The chart's part of the stable master endpoint (issue 19 items 5-6, issue 20 item 4).

- The controllers get `--namesrv-master-address-template` from
  `controller.namesrv.masterAddressTemplate` (default `{broker}.{cluster}.svc:{port}`: the
  group's master Service, which a pod's cluster-domain search path resolves), quoted so
  the `sh -c` line hands it over as one word; an empty value renders no flag.
- Stock clients get a name server Service `<release>-brokergroup-namesrv` (ClusterIP, port
  9876, ready controller pods only), the address for their `namesrvAddr`.
- values.schema.json refuses a template the shell line could not carry.
- `controller.namesrv.masterOnlyRoutes` (default `stock`) reaches
  `--namesrv-master-only-routes`: engine rocketmq groups routed by their master Service
  alone, built-in groups with their slaves.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.test_chart import CHART, _helm, _render

pytestmark = pytest.mark.cluster

FLAG = "--namesrv-master-address-template"


def _render_template(tmp_path: Path, template: str, check: bool = True) -> Any:
    """A render with the template in a values file (`--set` reads braces and commas)."""
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps({"controller": {"namesrv": {"masterAddressTemplate": template}}}))
    args = ["template", "rel", str(CHART), "--namespace", "mq", "-f", str(values)]
    result: subprocess.CompletedProcess[str] = _helm(*args, check=check)
    if not check:
        return result
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _controller_words(objs: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    sts = objs[("StatefulSet", "rel-brokergroup-controller")]
    script = sts["spec"]["template"]["spec"]["containers"][0]["command"][2]
    return shlex.split(script)


def test_the_controllers_name_the_master_service_as_brokerid_0_by_default(
    tmp_path: Path,
) -> None:
    words = _controller_words(_render())
    assert words[words.index(FLAG) + 1] == "{broker}.{cluster}.svc:{port}"
    custom_template = "{broker}.{cluster}.svc.example.org:{port}"
    custom = _controller_words(_render_template(tmp_path, custom_template))
    assert custom[custom.index(FLAG) + 1] == custom_template
    # Empty: the name servers name the master's own registered address, as before.
    assert FLAG not in _controller_words(_render_template(tmp_path, ""))


def test_the_controllers_route_stock_groups_by_their_master_alone_by_default() -> None:
    """`--namesrv-master-only-routes` from `controller.namesrv.masterOnlyRoutes` (default
    stock: the controllers decide per group, engine rocketmq groups by their master Service
    alone, built-in ones with their slaves; issue 34); the schema takes only the modes."""
    flag = "--namesrv-master-only-routes"
    words = _controller_words(_render())
    assert words[words.index(flag) + 1] == "stock"
    words = _controller_words(_render("controller.namesrv.masterOnlyRoutes=none"))
    assert words[words.index(flag) + 1] == "none"
    refused = _helm(
        "template", "rel", str(CHART), "--set", "controller.namesrv.masterOnlyRoutes=yes",
        check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "masterOnlyRoutes" in refused.stderr


def test_a_name_server_service_for_stock_clients() -> None:
    objs = _render()
    service = objs[("Service", "rel-brokergroup-namesrv")]["spec"]
    # A ClusterIP (not the headless peer Service, which also lists pods not yet ready).
    assert service.get("clusterIP") != "None" and not service.get("publishNotReadyAddresses")
    assert service["selector"] == {
        "app.kubernetes.io/instance": "rel",
        "app.kubernetes.io/component": "controller",
    }
    assert service["ports"] == [
        {"name": "namesrv", "port": 9876, "targetPort": "namesrv", "protocol": "TCP"}
    ]
    moved = _render("controller.namesrvPort=19876")[("Service", "rel-brokergroup-namesrv")]
    assert moved["spec"]["ports"][0]["port"] == 19876


@pytest.mark.parametrize("bad", ["{broker} x:{port}", "{broker}':{port}"])
def test_schema_refuses_a_template_the_shell_line_cannot_carry(bad: str, tmp_path: Path) -> None:
    result = _render_template(tmp_path, bad, check=False)
    assert result.returncode != 0 and "values don't meet the specifications" in result.stderr
