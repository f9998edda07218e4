"""`make cluster` / `make cluster-down`: the cluster tier for a person at a terminal.

    python -m tests.cluster.tier up [--state DIR]    # foreground; Ctrl-C (or `down`) stops it
    python -m tests.cluster.tier down [--state DIR]

`up` starts the control plane and the process kubelet, prints the
`export KUBECONFIG=…` line, and runs until interrupted; every process it
started is ended by PID on the way out. Pods run as processes of this
checkout's virtualenv (docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from tests.cluster.tier.controlplane import ControlPlane
from tests.cluster.tier.kubelet import ProcessKubelet
from tests.cluster.tier.paths import k8s_bin_dir, missing_reason

DEFAULT_STATE = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / (
    "brokergroup-cluster"
)


def _up(state: Path) -> int:
    reason = missing_reason()
    if reason is not None:
        print(f"cannot start the cluster tier: {reason}", file=sys.stderr)
        return 2
    pid_file = state / "tier.pid"
    if pid_file.exists():
        print(
            f"a cluster tier may already run ({pid_file}); `make cluster-down` first",
            file=sys.stderr,
        )
        return 1
    control_plane = ControlPlane(state / "control-plane")
    kubelet = ProcessKubelet(
        control_plane.kubeconfig("node"), control_plane.admin_kubeconfig, state / "kubelet"
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        control_plane.start()
        kubelet.start()
        pid_file.write_text(f"{os.getpid()}\n")
        print(f"{control_plane.version()} on {control_plane.server}; node-1 runs pods as processes")
        print(f"export KUBECONFIG={control_plane.admin_kubeconfig}")
        print(f"export PATH={k8s_bin_dir()}:$PATH   # kubectl, helm")
        print("Ctrl-C or `make cluster-down` stops it", flush=True)
        done.wait()
    finally:
        kubelet.stop()
        control_plane.stop()
        pid_file.unlink(missing_ok=True)
    return 0


def _down(state: Path) -> int:
    pid_file = state / "tier.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        print(f"no cluster tier recorded in {pid_file}", file=sys.stderr)
        return 1
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.tier")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    args = parser.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    return _up(args.state) if args.action == "up" else _down(args.state)


if __name__ == "__main__":
    sys.exit(main())
