"""The local runtime end to end (DESIGN.md §4): `local up --detach`,
`local status --json`, `local kill master`, `local down`, with real processes
on loopback (controllers 127.0.1.1-3, brokers from 127.0.0.10).

Two backends run the same scenarios:

- `stand-in`: tiny stand-ins for `brokergroup controller` / `broker` written
  below (just the documented HTTP surface and a naive election). They prove
  the supervisor, address moves, state file, kill and down on their own.
- `real`: the project's controller and broker. Skipped, with the reason,
  until both `brokergroup_controller.cli` and `brokergroup_broker.core.cli_broker`
  (the `brokergroup broker` command) exist.

Each backend uses its own ports (not the defaults), so a developer's running
`local up` is not disturbed. Every process is started by the runtime under
test and stopped by `local down`; the fixture then SIGKILLs, by pid and
start time, any process it saw in state.json that is somehow still alive.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.procs import is_alive, send_signal

pytestmark = pytest.mark.integration

STAND_INS = r'''
"""Stand-ins for `brokergroup controller` / `brokergroup broker` (test only).

Just enough of the documented HTTP surface for the local runtime's supervisor,
status, kill and down: controllers answer /v1/raft, /v1/replica-info,
/v1/brokers/heartbeat and /v1/brokers/inactive and elect the live broker with
the lowest id when the master is gone (masterEpoch + 1); brokers keep their
BrokerId in their data dir, heartbeat every 100 ms and answer /v1/status.
"""

import argparse
import json
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


def serve(host, port, get, post):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urlparse(self.path)
            self._reply(get(url.path, parse_qs(url.query)))

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self._reply(post(self.path, json.loads(self.rfile.read(n) or b"{}")))

    ThreadingHTTPServer((host, port), Handler).serve_forever()


def controller(a):
    lock = threading.Lock()
    st = {"brokers": {}, "master": None, "epoch": 0, "sse": 1}
    peers = [p.split(":")[0] for p in a.peers.split(",")]

    def alive(bid):
        b = st["brokers"].get(bid)
        return b is not None and time.time() - b["hb"] < 1.0

    def info():
        with lock:
            if st["master"] is None or not alive(st["master"]):
                live = sorted(b for b in st["brokers"] if alive(b))
                if live:
                    st["master"], st["epoch"], st["sse"] = live[0], st["epoch"] + 1, st["sse"] + 1
            m = st["master"] if st["master"] is not None and alive(st["master"]) else None
            return {
                "clusterName": "DefaultCluster", "brokerName": "broker-a",
                "masterBrokerId": m,
                "masterAddress": st["brokers"][m]["address"] if m else None,
                "masterEpoch": st["epoch"],
                "syncStateSet": sorted(b for b in st["brokers"] if alive(b)),
                "syncStateSetEpoch": st["sse"],
                "brokers": [
                    {"brokerId": b, "address": v["address"], "alive": alive(b),
                     "maxOffset": v["maxOffset"], "confirmOffset": v["maxOffset"]}
                    for b, v in sorted(st["brokers"].items())
                ],
            }

    def is_leader():
        for host in peers[: a.node_id - 1]:
            try:
                urllib.request.urlopen(f"http://{host}:{a.api_port}/healthz", timeout=0.2)
                return False
            except OSError:
                continue
        return True

    def get(path, q):
        if path == "/healthz":
            return {"code": "SUCCESS"}
        if path == "/v1/raft":
            return {"nodeId": a.node_id, "isLeader": is_leader(), "term": 1, "commitIndex": 0}
        if path == "/v1/replica-info":
            return info() if st["brokers"] else None
        return None

    def post(path, body):
        with lock:
            if path == "/v1/brokers/heartbeat":
                st["brokers"][body["brokerId"]] = {
                    "address": body["address"], "hb": time.time(), "maxOffset": body["maxOffset"]}
            elif path == "/v1/brokers/inactive":
                if body["brokerId"] in st["brokers"]:
                    st["brokers"][body["brokerId"]]["hb"] = 0.0
        return info()

    serve(a.bind_address, a.api_port, get, post)


def broker(a):
    data = Path(a.data_dir)
    id_file = data / "fake-broker-id"
    if not id_file.exists():
        id_file.write_text(str(int(data.name) + 1))
    bid = int(id_file.read_text())
    address = f"{a.advertise_address}:{a.client_port}"
    st = {"role": "slave", "epoch": 0, "start": time.time()}

    def offset():
        return int((time.time() - st["start"]) * 1000)

    def beat():
        while True:
            for c in a.controller_addresses.split(","):
                body = json.dumps({"brokerId": bid, "address": address, "maxOffset": offset()})
                req = urllib.request.Request(f"http://{c}/v1/brokers/heartbeat", body.encode(),
                                             {"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=0.3) as r:
                        info = json.loads(r.read())
                    if c == a.controller_addresses.split(",")[0] or info["masterEpoch"] > st["epoch"]:
                        st["role"] = "master" if info["masterBrokerId"] == bid else "slave"
                        st["epoch"] = info["masterEpoch"]
                except OSError:
                    pass
            time.sleep(0.1)

    threading.Thread(target=beat, daemon=True).start()

    def get(path, q):
        if path == "/v1/status":
            return {"brokerId": bid, "role": st["role"], "masterEpoch": st["epoch"],
                    "maxOffset": offset(), "confirmOffset": offset(), "address": address}
        return None

    serve(a.bind_address, a.client_port + 2, get, lambda p, b: None)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    c = sub.add_parser("controller")
    for flag in ("--peers", "--data-dir", "--bind-address", "--token-file", "--config"):
        c.add_argument(flag)
    c.add_argument("--node-id", type=int)
    c.add_argument("--api-port", type=int)
    b = sub.add_parser("broker")
    for flag in ("--cluster-name", "--broker-name", "--data-dir", "--controller-addresses",
                 "--controller-token-file", "--bind-address", "--advertise-address"):
        b.add_argument(flag)
    b.add_argument("--client-port", type=int)
    b.add_argument("--set", action="append")
    a = p.parse_args()
    print("fake", sys.argv[1:], flush=True)
    controller(a) if a.cmd == "controller" else broker(a)


main()
'''


@dataclass
class Runtime:
    """One `local` installation in a temp dir, driven through the CLI."""

    root: Path
    command: list[str]
    settings: list[str]
    seen: set[tuple[int, int | None]] = field(default_factory=set)

    def run(self, *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.command, *args, "--dir", str(self.root)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        self._remember()
        return result

    def up(self, brokers: int = 3) -> subprocess.CompletedProcess[str]:
        args = ["up", "--detach", "--brokers", str(brokers)]
        for item in self.settings:
            args += ["--set", item]
        return self.run(*args, timeout_s=120)

    def status(self) -> dict[str, Any]:
        result = self.run("status", "--json")
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "state.json").read_text())
        return data

    def _remember(self) -> None:
        try:
            state = self.state()
        except (OSError, ValueError):
            return
        if state.get("supervisorPid"):
            self.seen.add((state["supervisorPid"], state.get("supervisorStartTicks")))
        for child in [*state.get("controllers", []), *state.get("brokers", [])]:
            if child.get("pid"):
                self.seen.add((child["pid"], child.get("startTicks")))

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "logs").glob("*.log")):
            out.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(out)


def wait_for(
    what: str, check: Callable[[], dict[str, Any] | None], timeout_s: float, runtime: Runtime
) -> dict[str, Any]:
    """Poll `check` (bounded) until it returns a value; fail with the logs."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        last = runtime.status()
        time.sleep(0.3)
    pytest.fail(
        f"timed out after {timeout_s}s waiting for {what}; last status {last}\n{runtime.logs()}"
    )


def _missing_real_components() -> str | None:
    # `brokergroup controller` and `brokergroup broker` (the broker's command
    # lives in its core; brokergroup_broker.cli registers it once it exists).
    for module in ("brokergroup_controller.cli", "brokergroup_broker.core.cli_broker"):
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return f"{module} is not in this tree yet: the real local runtime cannot start"
    return None


@pytest.fixture(params=["stand-in", "real"])
def runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    fast = [
        "local.restartInitialDelayMs=100",
        "local.pollIntervalMs=300",
        "local.stopTimeoutMs=3000",
    ]
    if request.param == "stand-in":
        script = tmp_path / "stand_ins.py"
        script.write_text(STAND_INS)
        rt = Runtime(
            root=tmp_path / "local",
            command=[sys.executable, "-m", "brokergroup_cli.local"],
            settings=[
                *fast,
                f"local.launcher={sys.executable} {script}",
                "local.controllerApiPort=29878",
                "local.controllerRaftPort=29880",
                "local.brokerClientPort=30911",
            ],
        )
    else:
        reason = _missing_real_components()
        if reason:
            pytest.skip(reason)
        rt = Runtime(
            root=tmp_path / "local",
            command=[sys.executable, "-m", "brokergroup_cli.main", "local"],
            settings=[
                *fast,
                "local.controllerApiPort=19878",
                "local.controllerRaftPort=19880",
                "local.brokerClientPort=20911",
            ],
        )
    try:
        yield rt
    finally:
        rt.run("down", timeout_s=60)
        for pid, ticks in rt.seen:  # safety net: only processes this test started
            send_signal(pid, ticks, signal.SIGKILL)


def test_kill_master_fails_over_and_the_broker_returns_on_a_new_address(
    runtime: Runtime,
) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    assert "the group has a master" in up.stdout

    before = runtime.status()
    assert before["master"] is not None, before
    old_master = before["master"]["brokerId"]
    old_epoch = before["masterEpoch"]
    old_row = next(b for b in before["brokers"] if b["brokerId"] == old_master)
    assert len(before["controllers"]) == 3 and len(before["brokers"]) == 3
    hosts = sorted(b["address"].split(":")[0] for b in before["brokers"])
    assert hosts == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]

    killed = runtime.run("kill", "master")
    assert killed.returncode == 0, killed.stderr
    assert f"killed master broker {old_master}" in killed.stdout

    def failed_over() -> dict[str, Any] | None:
        s = runtime.status()
        master = s["master"]
        if master is None or master["brokerId"] == old_master or s["masterEpoch"] <= old_epoch:
            return None
        back = [b for b in s["brokers"] if b["brokerId"] == old_master]
        if not back or back[0]["process"] != "running" or back[0]["alive"] is not True:
            return None
        return s

    after = wait_for("a new master and the old one back", failed_over, 45, runtime)
    back = next(b for b in after["brokers"] if b["brokerId"] == old_master)
    assert back["slot"] == old_row["slot"]
    assert back["address"] != old_row["address"]
    assert back["address"].split(":")[0] not in hosts  # the next unused 127.0.0.x
    assert back["restarts"] >= 1
    assert back["role"] != "master"
    assert old_row["address"].split(":")[0] in back["previousAddresses"]

    pids = set(runtime.seen)
    down = runtime.run("down", timeout_s=60)
    assert down.returncode == 0, down.stderr
    assert pids and not [p for p in pids if is_alive(*p)]
    assert runtime.state()["supervisorPid"] is None


def test_controller_restarts_on_its_own_address_and_up_refuses_twice(
    runtime: Runtime,
) -> None:
    up = runtime.up(brokers=2)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"

    again = runtime.up(brokers=2)
    assert again.returncode == 1
    assert "already running" in again.stderr

    before = runtime.status()
    leader = before["controllerLeader"]
    assert leader is not None, before
    row = next(c for c in before["controllers"] if c["nodeId"] == leader["nodeId"])
    killed = runtime.run("kill", "controller-leader")
    assert killed.returncode == 0, killed.stderr
    assert f"controller-{leader['nodeId']}" in killed.stdout

    def restarted() -> dict[str, Any] | None:
        s = runtime.status()
        c = next(c for c in s["controllers"] if c["nodeId"] == leader["nodeId"])
        ok = c["restarts"] >= 1 and c["process"] == "running" and c["pid"] != row["pid"]
        return s if ok and c["reachable"] and s["controllerLeader"] is not None else None

    after = wait_for("the controller back on its address", restarted, 45, runtime)
    c = next(c for c in after["controllers"] if c["nodeId"] == leader["nodeId"])
    assert c["address"] == row["address"]

    unknown = runtime.run("kill", "broker-99")
    assert unknown.returncode == 1 and "BrokerId 99" in unknown.stderr
