"""Handlers of `brokergroup local up|status|kill|down` (and the hidden
`supervise`, which is what `up --detach` runs in the background).

Exit codes: 0 done, 1 refused or failed (with a message on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from brokergroup_cli.local import rocketmq_engine
from brokergroup_cli.local.certs import broker_http_tls, controller_tls
from brokergroup_cli.local.config import ConfigError, LocalConfig, build_config
from brokergroup_cli.local.groups_view import groups_json, render_groups
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.probe import Prober
from brokergroup_cli.local.procs import is_alive, send_signal, wait_gone
from brokergroup_cli.local.state import (
    RuntimeState,
    StateFileError,
    read_state,
    write_state,
)
from brokergroup_cli.local.status import StatusSnapshot, render_text
from brokergroup_cli.local.supervisor import Supervisor, prepare_dir, wall_ms
from brokergroup_cli.local.targets import (
    TargetError,
    awaits_controllers,
    parse_target,
    resolve_target,
)
from brokergroup_remoting import event_loop

_CLEAR = "\x1b[H\x1b[2J"


class LocalError(Exception):
    """A refusal or failure to print (without a traceback) and exit 1."""


def _fail(message: str) -> int:
    print(f"brokergroup local: {message}", file=sys.stderr)
    return 1


def _layout(args: argparse.Namespace) -> Layout:
    return Layout(Path(args.dir).expanduser().resolve())


def _load(layout: Layout) -> tuple[LocalConfig, RuntimeState]:
    try:
        state = read_state(layout.state_file)
    except StateFileError as exc:
        raise LocalError(str(exc)) from exc
    if state is None:
        raise LocalError(f"nothing was started in {layout.root} (no state.json); run `local up`")
    try:
        config = LocalConfig.from_json(json.loads(layout.config_file.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        raise LocalError(f"cannot read {layout.config_file}: {exc}") from exc
    return config, state


def _live_pids(state: RuntimeState) -> list[tuple[str, int, int | None]]:
    out: list[tuple[str, int, int | None]] = []
    if state.supervisor_pid is not None and is_alive(
        state.supervisor_pid, state.supervisor_start_ticks
    ):
        out.append(("supervisor", state.supervisor_pid, state.supervisor_start_ticks))
    for child in state.children():
        if child.pid is not None and is_alive(child.pid, child.start_ticks):
            out.append((child.name, child.pid, child.start_ticks))
    return out


def _check_not_running(layout: Layout) -> None:
    try:
        state = read_state(layout.state_file)
    except StateFileError:
        return  # unreadable leftovers: `up` overwrites them
    if state is None:
        return
    live = _live_pids(state)
    if live:
        names = ", ".join(f"{name} (pid {pid})" for name, pid, _ in live)
        raise LocalError(
            f"a local runtime is already running in {layout.root}: {names}. "
            f"See `brokergroup local status --dir {layout.root}`, or stop it with "
            f"`brokergroup local down --dir {layout.root}`"
        )


def _check_ports_free(config: LocalConfig) -> None:
    """Fail early and clearly if another installation holds the controller ports."""
    for host in config.controller_hosts:
        for port in (config.controller_api_port, config.controller_raft_port):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((host, port))
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL:
                        raise LocalError(
                            f"cannot bind {host}: this machine does not route 127.0.0.0/8 to "
                            "loopback (on macOS: `sudo ifconfig lo0 alias <addr>` for each)"
                        ) from exc
                    raise LocalError(
                        f"{host}:{port} is in use ({exc.strerror}): is another local "
                        "runtime (another --dir) running? Stop it with `local down`"
                    ) from exc


def _setup_logging(layout: Layout) -> None:
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(layout.supervisor_log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("brokergroup_cli")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


# --- up ---------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace) -> int:
    layout = _layout(args)
    try:
        config = build_config(
            layout.root,
            args.brokers,
            args.set or [],
            getattr(args, "engine", "builtin"),
            groups=getattr(args, "groups", 1),
        )
        if rocketmq_engine.is_rocketmq(config):
            rocketmq_engine.require_home()
            rocketmq_engine.check_settings(config)
        _check_not_running(layout)
        _check_ports_free(config)
        if rocketmq_engine.is_rocketmq(config):
            rocketmq_engine.check_proxy_ports(config)
        prepare_dir(config, layout)
        if args.detach:
            event_loop.configured()  # a loop that cannot be had fails here, not detached
            return _up_detached(config, layout)
        return event_loop.run(_foreground(config, layout))
    except (ConfigError, LocalError, event_loop.EventLoopError) as exc:
        return _fail(str(exc))


async def _foreground(config: LocalConfig, layout: Layout) -> int:
    _setup_logging(layout)
    interactive = sys.stdout.isatty()

    def show(snapshot: StatusSnapshot) -> None:
        frame = render_text(snapshot, clock=time.strftime("%H:%M:%S"))
        footer = f"\nCtrl-C stops everything · logs in {layout.logs_dir}"
        if interactive:
            sys.stdout.write(_CLEAR + frame + footer + "\n")
        else:
            sys.stdout.write(frame + "\n\n")
        sys.stdout.flush()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    print(
        f"starting {len(config.controller_hosts)} controllers and {config.broker_count} "
        f"{'stock RocketMQ ' if rocketmq_engine.is_rocketmq(config) else ''}"
        f"brokers in {layout.root} …",
        flush=True,
    )
    await Supervisor(config, layout, on_snapshot=show).run(stop)
    print("\nstopped: every controller and broker of this runtime has exited", flush=True)
    return 0


def _up_detached(config: LocalConfig, layout: Layout) -> int:
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    with open(layout.supervisor_log, "ab") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "brokergroup_cli.local", "supervise", "--dir", str(layout.root)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no controlling terminal; survives this shell
            close_fds=True,
        )
    print(f"supervisor started (pid {daemon.pid}); waiting for a master …", flush=True)
    deadline = time.monotonic() + config.up_wait_timeout_ms / 1000
    snapshot: StatusSnapshot | None = None
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            tail = _tail(layout.supervisor_log, 20)
            raise LocalError(
                f"the supervisor exited with code {daemon.returncode}; "
                f"{layout.supervisor_log} ends with:\n{tail}"
            )
        try:
            snapshot = _snapshot(layout)
        except LocalError:
            snapshot = None  # state.json not written yet
        if snapshot is not None and snapshot.master_broker_id is not None:
            print(render_text(snapshot))
            print(
                f"\nthe group has a master. Status: brokergroup local status --dir {layout.root}"
                f"\nStop: brokergroup local down --dir {layout.root}   logs: {layout.logs_dir}"
            )
            return 0
        time.sleep(0.3)
    if snapshot is not None:
        print(render_text(snapshot))
    raise LocalError(
        f"no master after {config.up_wait_timeout_ms} ms; the runtime is still running "
        f"(see {layout.logs_dir}, `local status`, or stop it with `local down --dir "
        f"{layout.root}`)"
    )


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def cmd_supervise(args: argparse.Namespace) -> int:
    """The detached supervisor (started by `up --detach`, not by users)."""
    layout = _layout(args)
    try:
        config = LocalConfig.from_json(json.loads(layout.config_file.read_text()))
    except (OSError, ValueError, TypeError) as exc:
        return _fail(f"cannot read {layout.config_file}: {exc}")
    _setup_logging(layout)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: None)
        await Supervisor(config, layout).run(stop)

    try:
        event_loop.run(main())
    except event_loop.EventLoopError as exc:
        return _fail(str(exc))
    return 0


# --- status -----------------------------------------------------------------------


def _admin_token(layout: Layout) -> str | None:
    try:
        return layout.token_file.read_text().strip() or None
    except OSError:
        return None  # status then shows the controllers' 401 as a problem line


def _broker_token(layout: Layout) -> str | None:
    """The group's broker credential: brokers' /v1/status asks for it."""
    try:
        return layout.broker_credential_file.read_text().strip() or None
    except OSError:
        return None  # status then shows the brokers as unreadable


def _snapshot(layout: Layout) -> StatusSnapshot:
    config, state = _load(layout)
    alive = {(c.kind.value, c.index): is_alive(c.pid, c.start_ticks) for c in state.children()}
    supervisor_alive = is_alive(state.supervisor_pid, state.supervisor_start_ticks)

    async def take() -> StatusSnapshot:
        async with aiohttp.ClientSession() as session:
            prober = Prober(
                config,
                session,
                _admin_token(layout),
                broker_token=_broker_token(layout),
                controller_tls=controller_tls(config, layout),
                broker_tls=broker_http_tls(config, layout),
            )
            return await prober.snapshot(
                state, process_alive=alive, supervisor_alive=supervisor_alive, now_ms=wall_ms()
            )

    return asyncio.run(take())


def namesrv_fields(layout: Layout) -> dict[str, object]:
    """Where a RocketMQ client finds the group, the key pair it signs with (the group's
    client pair), and the release's admin pair (mqadmin's controller commands)."""
    config, state = _load(layout)
    fields: dict[str, object] = {
        "namesrvAddress": config.namesrv_address,
        # The stable master address routes name as brokerId 0, and where it forwards now.
        "masterAddress": config.master_endpoint_address,
        "masterTarget": state.master_target,
    }
    # The RocketMQ 5 SDKs' endpoint (they sign with the client pair): the stock proxy under
    # engine rocketmq, a forwarder to the master's gRPC port under builtin (docs/grpc.md).
    fields["grpcEndpoint"] = config.proxy_grpc_endpoint
    # RocketMQ's tls.server.mode of those addresses, and the CA a verifying client trusts.
    fields["tlsMode"] = config.tls
    fields["caFile"] = None if config.tls == "disabled" else str(layout.ca_file)
    pairs = (
        (layout.client_key_file, "accessKey", "secretKey"),
        (layout.namesrv_key_file, "adminAccessKey", "adminSecretKey"),
    )
    for path, access_field, secret_field in pairs:
        try:
            keys = json.loads(path.read_text())
            fields.update({access_field: keys["accessKey"], secret_field: keys["secretKey"]})
        except (OSError, ValueError, KeyError, TypeError):
            fields.update({access_field: None, secret_field: None})
    return fields


def cmd_status(args: argparse.Namespace) -> int:
    layout = _layout(args)
    try:
        snapshot = _snapshot(layout)
    except LocalError as exc:
        return _fail(str(exc))
    config, _ = _load(layout)
    groups = (
        None
        if config.groups == 1
        else asyncio.run(groups_json(config, layout, _admin_token(layout)))
    )  # `local up --groups N`: every group (groups_view.py)
    if args.json:
        extra = {} if groups is None else {"groups": groups}
        print(json.dumps({**snapshot.to_json(), **namesrv_fields(layout), **extra}, indent=2))
    else:
        print(render_text(snapshot))
        if groups is not None:
            print(render_groups(groups))
    return 0


# --- kill -------------------------------------------------------------------------


#: How long `local kill master|controller-leader` asks again while no controller answers.
KILL_VIEW_WAIT_S = 15.0


def cmd_kill(args: argparse.Namespace) -> int:
    layout = _layout(args)
    deadline = time.monotonic() + KILL_VIEW_WAIT_S
    try:
        request = parse_target(args.target)
        while True:
            snapshot = _snapshot(layout)
            if not awaits_controllers(request, snapshot) or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        target = resolve_target(request, snapshot)
    except (LocalError, TargetError) as exc:
        return _fail(str(exc))
    if not send_signal(target.pid, target.start_ticks, signal.SIGKILL):
        return _fail(f"{target.description} had already exited; nothing killed")
    print(f"killed {target.description} with SIGKILL")
    if not snapshot.supervisor_alive:
        print("note: no supervisor is running, so nothing will restart it")
    return 0


# --- down -------------------------------------------------------------------------


def cmd_down(args: argparse.Namespace) -> int:
    layout = _layout(args)
    try:
        state = read_state(layout.state_file)
    except StateFileError as exc:
        return _fail(str(exc))
    if state is None:
        print(f"nothing was started in {layout.root}")
        return _purge(layout) if args.purge else 0
    try:
        config = LocalConfig.from_json(json.loads(layout.config_file.read_text()))
        stop_timeout_s = config.stop_timeout_ms / 1000
    except (OSError, ValueError, TypeError):
        stop_timeout_s = 5.0
    before = _live_pids(state)
    if not before:
        print(f"nothing is running in {layout.root}")
    stopped: list[str] = []
    sup = [(pid, ticks) for name, pid, ticks in before if name == "supervisor"]
    if sup:
        pid, ticks = sup[0]
        send_signal(pid, ticks, signal.SIGTERM)
        # The supervisor stops brokers, then controllers, each within stop_timeout.
        if wait_gone([(pid, ticks)], timeout_s=2 * stop_timeout_s + 5):
            send_signal(pid, ticks, signal.SIGKILL)
            wait_gone([(pid, ticks)], timeout_s=2)
        stopped.append(f"supervisor (pid {pid})")
    # Whatever is still alive (the supervisor was killed, or lost track): stop by pid.
    with contextlib.suppress(StateFileError):
        state = read_state(layout.state_file) or state
    leftovers = {(pid, ticks): name for name, pid, ticks in before if name != "supervisor"}
    leftovers.update(
        {(pid, ticks): name for name, pid, ticks in _live_pids(state) if name != "supervisor"}
    )
    alive_left = [p for p in leftovers if is_alive(*p)]
    for pid, ticks in alive_left:
        send_signal(pid, ticks, signal.SIGTERM)
    for pid, ticks in wait_gone(alive_left, timeout_s=stop_timeout_s):
        send_signal(pid, ticks, signal.SIGKILL)
    still = wait_gone(list(leftovers), timeout_s=2)
    stopped += [f"{name} (pid {pid})" for (pid, _), name in leftovers.items()]
    write_state(layout.state_file, state.stopped(wall_ms()))
    with contextlib.suppress(FileNotFoundError):
        layout.pid_file.unlink()
    if stopped:
        print("stopped: " + ", ".join(stopped))
    if still:
        return _fail(f"still alive after SIGKILL: {still}")
    return _purge(layout) if args.purge else 0


def _purge(layout: Layout) -> int:
    """Delete only what `local up` creates (never the whole --dir blindly)."""
    for sub in ("controllers", "brokers", "logs"):
        shutil.rmtree(layout.root / sub, ignore_errors=True)
    for path in (
        layout.token_file,
        layout.broker_credential_root_file,
        layout.broker_credential_file,
        layout.client_credential_file,
        layout.broker_key_file,
        layout.client_key_file,
        layout.config_file,
        layout.controller_config_file,
        layout.state_file,
        layout.pid_file,
    ):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    with contextlib.suppress(OSError):
        layout.root.rmdir()  # only if now empty
    print(f"purged the data of {layout.root}")
    return 0
