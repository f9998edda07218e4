"""The pod network keeps working for old pods while other pods come and go.

A Linux bridge without an address of its own takes the lowest MAC of its
ports, so adding or removing a pod's veth could change the MAC behind the
gateway and the host addresses. Pods that had already resolved it kept
sending to the old MAC until their ARP entry went stale (15–45 s): a CI run
lost the new master's controller heartbeats for 22 s right after the old
master's pod was deleted, and the controller fenced it.

The check runs a PodNetwork of its own in a fresh network namespace
(`unshare --net`), so its bridge and routes never touch the session's tier.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cluster.tier.podnet import unavailable_reason

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]

# Lower than any random veth MAC (those are locally administered: 0x02 set).
LOWEST_MAC = "00:00:5e:00:53:01"

SCRIPT = textwrap.dedent(
    """
    import json, socket, subprocess, sys, threading
    from tests.cluster.tier.podnet import BRIDGE, PodNetwork

    def bridge_mac():
        # /sys still shows the host's namespace here: ask ip.
        shown = subprocess.run(["ip", "-j", "link", "show", BRIDGE], capture_output=True, check=True)
        return json.loads(shown.stdout)[0]["address"]

    net = PodNetwork()
    net.setup()
    try:
        host = net.host_address()
        listener = socket.create_server((host, 0))
        port = listener.getsockname()[1]

        def serve():
            while True:
                conn, _ = listener.accept()
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        connect = (
            "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), "
            "timeout=3).close()"
        )

        def reaches(attachment):
            argv = net.exec_argv(attachment, [sys.executable, "-c", connect, host, str(port)])
            return subprocess.run(argv, capture_output=True).returncode == 0

        steps = []
        old = net.attach("old", "old", None, "default")
        steps.append(("first connect", reaches(old), bridge_mac()))
        new = net.attach("new", "new", None, "default")
        subprocess.run(["ip", "link", "set", new.host_veth, "address", sys.argv[1]], check=True)
        steps.append(("after a pod with the lowest MAC joined", reaches(old), bridge_mac()))
        net.detach("new")
        steps.append(("after that pod left", reaches(old), bridge_mac()))
        print(json.dumps(steps))
    finally:
        net.teardown()
    """
)


def test_old_pods_keep_reaching_the_host_while_pods_join_and_leave() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    done = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", SCRIPT, LOWEST_MAC],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)
    macs = {mac for _, _, mac in steps}
    assert [(what, ok) for what, ok, _ in steps] == [
        ("first connect", True),
        ("after a pod with the lowest MAC joined", True),
        ("after that pod left", True),
    ], f"bridge MACs seen: {sorted(macs)}"
    assert len(macs) == 1 and LOWEST_MAC not in macs
