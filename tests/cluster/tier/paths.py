"""Where the cluster tier finds the project's installation and its Kubernetes binaries."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = ROOT / "tools" / "k8s" / "build.sh"
BIN_DIR_SCRIPT = ROOT / "tools" / "k8s" / "bin-dir.sh"
#: The "image" of every pod: this installation's console scripts.
VENV_BIN = Path(sys.executable).parent
#: Where the RocketMQ image (broker-image/rocketmq.Dockerfile) keeps the stock jars.
ROCKETMQ_IN_IMAGE = "/opt/rocketmq"


def image_paths() -> dict[str, str]:
    """Image paths a pod's command may name, mapped to their copy on this machine: the
    RocketMQ image's /opt/rocketmq (lib/ = the jars `tools/rocketmq/fetch.sh server`
    caches), so a stock broker's `java -cp /opt/rocketmq/lib/*` runs here as in the image."""
    import os

    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    home = Path(os.environ.get("BROKERGROUP_ROCKETMQ_HOME", f"{cache}/brokergroup/rocketmq/5.3.1"))
    server = home / "server"
    return {ROCKETMQ_IN_IMAGE: str(server)} if (server / "lib" / ".complete").exists() else {}


def k8s_bin_dir() -> Path:
    out = subprocess.run([str(BIN_DIR_SCRIPT)], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def missing_reason() -> str | None:
    """Why the tier cannot run here, or None: root for pod networks, the binaries or Go."""
    from tests.cluster.tier.podnet import unavailable_reason

    if (reason := unavailable_reason()) is not None:
        return reason
    bin_dir = k8s_bin_dir()
    wanted = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    if all((bin_dir / b).exists() for b in wanted):
        return None
    if shutil.which("go") is None:
        return "Go is not installed, so the Kubernetes binaries cannot be built (tools/k8s)"
    return None  # buildable: the fixture runs tools/k8s/build.sh
