"""The README's Kubernetes quick start, run as written on the e2e kind cluster
(issue 22 item 8, DESIGN.md §8).

The block (tests/e2e/readme.py finds it) runs as one bash script
(`set -euo pipefail`, traced), from the checkout, as a user who pasted it:
`make image` builds brokergroup:dev (with OFFLINE_BASE=1 on the tier's
offline path, as the README's comment says), `kind load docker-image` puts it
into the tier's cluster (KIND_CLUSTER_NAME names it), Helm installs the chart
with that image, a BrokerGroup comes up, its master pod is deleted and the
block waits for the failover. The only things set from outside are what a
user's shell would have: PATH with the tier's kind, kubectl and helm, and a
kubeconfig whose current namespace is a fresh one, so the release and the
group are this test's alone. Afterwards, from the block's own output: the
master `kubectl brokergroup status` shows is on another pod than the one
`kubectl get bg` showed before the deletion, one masterEpoch later, and the
group is Available.
Teardown deletes the group while the operator runs, uninstalls the release
and deletes the namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.e2e.kind_env import KindCluster
from tests.e2e.readme import README, printed_group, quick_start_block

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
#: `make image` (cached layers), image load, chart install, a group and a failover.
BLOCK_TIMEOUT_S = 3600


def test_readme_quick_start_as_written(kind_cluster: KindCluster, tmp_path: Path) -> None:
    block = quick_start_block(README.read_text())
    namespace = f"quickstart-{uuid.uuid4().hex[:6]}"
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(kind_cluster.kubeconfig, kubeconfig)
    kubectl = str(kind_cluster.bin_dir / "kubectl")
    subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "config", "set-context", "--current",
         f"--namespace={namespace}"],
        check=True, capture_output=True,
    )  # fmt: skip
    kind_cluster.kubectl("create", "namespace", namespace)
    env = {
        **os.environ,
        "PATH": os.pathsep.join(
            [str(kind_cluster.bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]
        ),
        "KUBECONFIG": str(kubeconfig),
        "KIND_CLUSTER_NAME": kind_cluster.name,
        "OFFLINE_BASE": "1" if kind_cluster.path == "offline" else "0",
    }
    try:
        result = subprocess.run(
            ["bash", "-euxo", "pipefail", "-c", block],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
        )  # fmt: skip
        assert result.returncode == 0, (
            f"the quick start failed (rc {result.returncode}):\n{result.stderr[-6000:]}"
        )
        group = json.loads(
            kind_cluster.kubectl("get", "bg", "orders", "-n", namespace, "-o", "json").stdout
        )
        status = group["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        before = printed_group(result.stdout)  # `kubectl get bg orders` before the deletion
        after = re.search(
            r"^master: broker (\d+) at (\S+) .*masterEpoch (\d+)$", result.stdout, re.M
        )
        assert after is not None, result.stdout
        assert conditions["Available"] == "True", status
        assert after.group(2) != before["MASTER"], (before, after.group(0))
        assert int(after.group(3)) == int(before["EPOCH"]) + 1, (before, after.group(0))
        assert (status["master"]["pod"], status["masterEpoch"]) == (
            after.group(2),
            int(after.group(3)),
        )
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            kind_cluster.kubectl(
                "delete", "bg", "--all", "-n", namespace, "--wait", "--timeout=180s", timeout=240
            )
            kind_cluster.helm("uninstall", "bg", "-n", namespace, "--wait", timeout=300)
        kind_cluster.kubectl("delete", "namespace", namespace, "--wait", "--timeout=300s",
                             check=False, timeout=360)  # fmt: skip
