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
