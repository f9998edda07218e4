"""The README's Kubernetes quick start, read without a cluster (issue 22 item 8).

The e2e tier runs the block as written (tests/e2e/test_readme_quick_start.py);
here: the block is found and parses (`bash -n`), its steps are the ones the
README promises, in order (build the image, load it into kind, install the
chart with that image, create a group, wait for its master and both slaves in the
SyncStateSet (a failover elects only from it), delete the master
pod, wait for the next masterEpoch), and the image it builds, loads and installs is
the one `make image` tags and the chart's default — a default install must
not point at an image that exists nowhere.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.readme import README, commands, printed_group, quick_start_block

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_start_steps_in_order() -> None:
    steps = commands(quick_start_block(README.read_text()))
    assert [s.splitlines()[0] for s in steps] == [
        "make image",
        "kind load docker-image brokergroup:dev",
        "helm install bg charts/brokergroup --set image.repository=brokergroup "
        "--set image.tag=dev --wait --timeout 10m",
        "kubectl apply -f - <<'EOF'",
        "kubectl wait bg/orders --for=condition=Available --timeout=10m",
        "kubectl wait bg/orders --for=jsonpath='{.status.inSync}'=3/3 --timeout=10m",
        "kubectl get bg orders",
        "epoch=$(kubectl get bg orders -o jsonpath='{.status.masterEpoch}')",
        "kubectl delete pod -l brokergroup.io/group=orders,brokergroup.io/role=master",
        'kubectl wait bg/orders --for=jsonpath="{.status.masterEpoch}=$((epoch + 1))" --timeout=5m',
        "kubectl wait bg/orders --for=condition=Available --timeout=5m",
        ".venv/bin/kubectl-brokergroup status orders",
    ]
    group = yaml.safe_load(steps[3].split("\n", 1)[1].rsplit("\n", 1)[0])
    assert group == {
        "apiVersion": "brokergroup.io/v1alpha1",
        "kind": "BrokerGroup",
        "metadata": {"name": "orders"},
        "spec": {"replicas": 3, "ha": {"minInSyncReplicas": 2}},
    }


def test_the_block_parses_as_a_shell_script() -> None:
    block = quick_start_block(README.read_text())
    result = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_one_image_built_loaded_installed_and_defaulted() -> None:
    build = (ROOT / "tools" / "image" / "build.sh").read_text()
    built = re.search(r"^IMAGE=\$\{IMAGE:-([^}]+)\}$", build, re.M)
    assert built is not None
    values = yaml.safe_load((ROOT / "charts" / "brokergroup" / "values.yaml").read_text())
    default = f"{values['image']['repository']}:{values['image']['tag']}"
    steps = commands(quick_start_block(README.read_text()))
    loaded = steps[1].removeprefix("kind load docker-image ")
    installed = dict(re.findall(r"--set image\.(\w+)=(\S+)", steps[2]))
    assert (
        built.group(1),
        default,
        loaded,
        f"{installed['repository']}:{installed['tag']}",
    ) == ("brokergroup:dev",) * 4
    assert values["image"]["pullPolicy"] == "IfNotPresent"  # a loaded image, never pulled


def test_the_marker_names_the_e2e_test_that_runs_it() -> None:
    marker = next(line for line in README.read_text().splitlines() if "quick-start:" in line)
    path = marker.split("quick-start:", 1)[1].split()[0]
    assert (ROOT / path).is_file(), path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no marker\n", "exactly one"),
        ("<!-- quick-start: x -->\n```\nls\n```\n", "followed by a ```sh fence"),
        ("<!-- quick-start: x -->\n```sh\nls\n", "not closed"),
    ],
)
def test_a_broken_readme_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        quick_start_block(text)


def test_printed_group_reads_the_kubectl_table() -> None:
    out = "bg/orders condition met\nNAME     MASTER     EPOCH   INSYNC   READY   AGE\norders   orders-1   1       3/3      3/3     41s\n"
    assert printed_group(out) == {
        "NAME": "orders", "MASTER": "orders-1", "EPOCH": "1", "INSYNC": "3/3", "READY": "3/3", "AGE": "41s",
    }  # fmt: skip
    with pytest.raises(ValueError, match="no `kubectl get bg` table"):
        printed_group("nothing\n")
