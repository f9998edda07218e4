"""The supervisor: runs 3 controllers and N brokers as child processes.

Theory of operation
-------------------
One asyncio task per slot (controller node or broker slot) loops:
spawn → wait for exit → (broker: tell the controller it is gone) → back off
(`backoff.on_exit`) → spawn again. A broker slot takes a *new* loopback
address on every spawn (`addresses.allocate_host`), like a rescheduled pod;
its data dir (DIR/brokers/<slot>/) is the same, so it keeps its BrokerId.
A controller keeps its address: Raft members are named by address.

Brokers start only after a controller leader exists (bounded wait), so the
first broker's registration is not a string of connection errors.

Every `pollIntervalMs` the supervisor takes a status snapshot (controllers'
/v1/raft and /v1/replica-info, brokers' /v1/status), learns each slot's
BrokerId and role from it, rewrites DIR/state.json and hands the snapshot
to the view.

The supervisor also serves the group's stable master address (`masterEndpointHost:Port`):
a forwarder to the current master that follows the controller's long-poll
(`master_endpoint`), named by the name servers as the route's brokerId 0.

With `local.nodeGidBase` each controller and broker slot runs in a group id of its own,
the same on every restart, recorded in state.json (`gid`): what a chaos target's faults
need to tell a stock broker's sockets apart (they all leave from 127.0.0.1).

Stopping (SIGINT/SIGTERM → the `stop` event): no more restarts; brokers get
SIGTERM, then SIGKILL after `stopTimeoutMs`; then the controllers the same
way; the state file is marked stopped and the pid file removed. Children run
in their own sessions, so a terminal's Ctrl-C reaches only the supervisor,
which then stops them in this order.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from brokergroup_cli.local import rocketmq_engine
from brokergroup_cli.local.addresses import AddressPool, AddressPoolExhausted, allocate_host
from brokergroup_cli.local.backoff import RestartHistory, RestartPolicy, on_exit
from brokergroup_cli.local.certs import broker_http_tls, controller_tls, ensure_certificates
from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.master_endpoint import MasterForwarder, MasterWatch, RemotingPorts
from brokergroup_cli.local.plan import (
    Layout,
    broker_argv,
    controller_argv,
    controller_settings_json,
)
from brokergroup_cli.local.probe import Prober
from brokergroup_cli.local.procs import group_preexec, process_start_ticks
from brokergroup_cli.local.state import ChildKind, ChildRecord, Phase, RuntimeState, write_state
from brokergroup_cli.local.status import StatusSnapshot
from brokergroup_cli.local.stock_users_sync import BrokerProcess, StockUsersSync
from brokergroup_controller.api import INCARNATION_ENV
from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.credentials import derive_credential, derive_rocketmq_pair
from brokergroup_controller.errors import ControllerError
from brokergroup_remoting import event_loop
from brokergroup_remoting.tls import client_context, load_server_tls, run_reloader

log = logging.getLogger(__name__)
#: The controller client's budget for a gone broker's inactive report (no leader answering).
_REPORT_BUDGET_MS = 2_000


def wall_ms() -> int:
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def prepare_dir(config: LocalConfig, layout: Layout) -> None:
    """Create DIR's tree, the secrets (kept if present), config.json, controller.json."""
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.logs_dir.mkdir(exist_ok=True)
    for node_id in range(1, len(config.controller_hosts) + 1):
        layout.controller_data_dir(node_id).mkdir(parents=True, exist_ok=True)
    for slot in range(config.broker_count * config.groups):
        layout.broker_data_dir(slot).mkdir(parents=True, exist_ok=True)
    for secret_file in layout.secret_files:
        if not secret_file.exists():
            _write_secret(secret_file, secrets.token_urlsafe(32))
    if not layout.namesrv_key_file.exists():
        write_namesrv_keys(layout)
    # Derived from the root each time: the same value while the root is kept.
    root = layout.broker_credential_root_file.read_text().strip()
    for path, (role, cluster, broker) in layout.derived_credentials(config).items():
        path.parent.mkdir(parents=True, exist_ok=True)  # DIR/groups/<name>/ (--groups)
        credential = derive_credential(root, role, cluster, broker)
        if not path.exists() or path.read_text().strip() != credential:
            path.unlink(missing_ok=True)
            _write_secret(path, credential)
    for path, (role, cluster, broker) in layout.derived_key_pairs(config).items():
        line = derive_rocketmq_pair(root, role, cluster, broker).to_json()
        if not path.exists() or path.read_text().strip() != line:
            _replace_secret(path, line)
    if config.tls != "disabled":
        ensure_certificates(config, layout, datetime.datetime.now(datetime.UTC))
    layout.config_file.write_text(json.dumps(config.to_json(), indent=2) + "\n")
    if config.controller_settings:
        layout.controller_config_file.write_text(
            json.dumps(controller_settings_json(config), indent=2) + "\n"
        )


def forwarder_tls(config: LocalConfig, layout: Layout) -> dict[str, Any]:
    """The stable master address's TLS: the brokers' mode, ended at the forwarder (which
    reads frames); to a master that enforces TLS, TLS again (verified with the CA)."""
    if config.tls == "disabled":
        return {}
    tls = load_server_tls(config.tls, layout.tls_cert_file, layout.tls_key_file)
    upstream = client_context(layout.ca_file) if config.tls == "enforcing" else None
    return {"tls": tls, "upstream_tls": upstream}


def write_namesrv_keys(layout: Layout) -> None:
    """The RocketMQ client key pair (AclClientRPCHook's AccessKey/SecretKey), once."""
    keys = {"accessKey": "bg" + secrets.token_hex(8), "secretKey": secrets.token_urlsafe(32)}
    _write_secret(layout.namesrv_key_file, json.dumps(keys))


def _write_secret(path: Path, value: str) -> None:
    """A new file readable by its owner only (never briefly wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")


def _replace_secret(path: Path, value: str) -> None:
    """Rewrite a secret file crash-safely (temp + fsync + rename + directory fsync), 0600
    from its first byte: a reader sees the old file or the new one, whole."""
    temp = path.with_name(path.name + ".tmp")
    temp.unlink(missing_ok=True)  # a crash's leftover
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@dataclass
class _Slot:
    kind: ChildKind
    index: int
    host: str
    port: int
    log_file: Path
    proc: asyncio.subprocess.Process | None = None
    start_ticks: int | None = None
    phase: Phase = Phase.STARTING
    started_at_ms: int | None = None
    started_mono_ms: int = 0
    history: RestartHistory = field(default_factory=RestartHistory)
    last_exit_code: int | None = None
    restart_at_ms: int | None = None
    broker_id: int | None = None
    role: str | None = None
    previous_hosts: list[str] = field(default_factory=list)
    incarnation: str = ""  # this start's token (the broker heartbeats it)
    gid: int | None = None  # its own group (local.nodeGidBase), the same on every start

    @property
    def name(self) -> str:
        if self.kind is ChildKind.PROXY:
            return "proxy"
        return (
            f"controller-{self.index}"
            if self.kind is ChildKind.CONTROLLER
            else (f"broker slot {self.index}")
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def record(self) -> ChildRecord:
        return ChildRecord(
            kind=self.kind,
            index=self.index,
            host=self.host,
            port=self.port,
            pid=self.proc.pid if self.alive() and self.proc else None,
            start_ticks=self.start_ticks if self.alive() else None,
            phase=self.phase,
            started_at_ms=self.started_at_ms,
            restarts=self.history.restarts,
            last_exit_code=self.last_exit_code,
            restart_at_ms=self.restart_at_ms,
            broker_id=self.broker_id,
            role=self.role,
            previous_hosts=tuple(self.previous_hosts[-8:]),
            log_file=str(self.log_file),
            gid=self.gid,
        )


class Supervisor:
    def __init__(
        self,
        config: LocalConfig,
        layout: Layout,
        *,
        on_snapshot: Callable[[StatusSnapshot], None] | None = None,
    ) -> None:
        self._config = config
        self._layout = layout
        self._on_snapshot = on_snapshot
        self._policy = RestartPolicy(
            initial_delay_ms=config.restart_initial_delay_ms,
            max_delay_ms=config.restart_max_delay_ms,
            multiplier=config.restart_multiplier,
            reset_after_ms=config.restart_reset_after_ms,
        )
        self._pool = AddressPool.of(config.broker_first_host, config.broker_last_host)
        self._cursor: int | None = None
        self._stopping = asyncio.Event()
        self._started_at_ms = wall_ms()
        self._pid = os.getpid()
        self._pid_ticks = process_start_ticks(self._pid)
        self._controllers = [
            self._controller_slot(n, host) for n, host in enumerate(config.controller_hosts, 1)
        ]
        self._brokers = [self._broker_slot(slot) for slot in range(config.broker_count)]
        # `local up --groups N`: the other groups' brokers (slots N.., config.group_of_slot),
        # started, restarted and stopped like the first group's; the status view, the state
        # file's broker rows and the stable master address follow the first group.
        self._other_groups_brokers = [
            self._broker_slot(slot)
            for slot in range(config.broker_count, config.broker_count * config.groups)
        ]
        # Engine rocketmq: the stock proxy, started with the brokers, stopped before them.
        self._proxies = (
            [
                _Slot(
                    ChildKind.PROXY,
                    0,
                    config.master_endpoint_host,
                    config.proxy_grpc_port,
                    rocketmq_engine.proxy_log(layout),
                )
            ]
            if rocketmq_engine.is_rocketmq(config)
            else []
        )
        self._token = ""
        self._prober: Prober | None = None
        self._controller: ControllerClient | None = None
        self._forwarder = MasterForwarder(
            name=f"{config.cluster_name}/{config.broker_name}",
            hold_ms=config.master_endpoint_hold_ms,
            **forwarder_tls(config, layout),
        )
        # The RocketMQ 5 SDKs' stable endpoint: the master's gRPC port (engine builtin; the
        # stock proxy serves that address under engine rocketmq). docs/grpc.md.
        self._grpc_forwarder = (
            None
            if rocketmq_engine.is_rocketmq(config)
            else MasterForwarder(
                name=f"{config.cluster_name}/{config.broker_name} gRPC",
                hold_ms=config.master_endpoint_hold_ms,
                remoting=False,
            )
        )
        self.latest_snapshot: StatusSnapshot | None = None
        #: The loop this supervisor runs on (known once `run` starts); every child it starts
        #: is told to run on the same kind (event_loop.EVENT_LOOP_ENV).
        self._event_loop: event_loop.LoopKind | None = None

    def _controller_slot(self, n: int, host: str) -> _Slot:
        config = self._config
        return _Slot(ChildKind.CONTROLLER, n, host, config.controller_api_port,
                     self._layout.controller_log(n), gid=config.controller_gid(n))  # fmt: skip

    def _broker_slot(self, slot: int) -> _Slot:
        config = self._config
        return _Slot(ChildKind.BROKER, slot, "", config.broker_client_port,
                     self._layout.broker_log(slot), gid=config.broker_gid(slot))  # fmt: skip

    # --- state file ------------------------------------------------------------

    def runtime_state(self) -> RuntimeState:
        return RuntimeState(
            root_dir=str(self._layout.root),
            supervisor_pid=self._pid,
            supervisor_start_ticks=self._pid_ticks,
            started_at_ms=self._started_at_ms,
            updated_at_ms=wall_ms(),
            address_cursor=self._cursor,
            controllers=tuple(s.record() for s in self._controllers),
            brokers=tuple(s.record() for s in self._brokers if s.host),
            other_groups_brokers=tuple(s.record() for s in self._other_groups_brokers if s.host),
            config=self._config.to_json(),
            master_target=self._forwarder.target,
            proxies=tuple(s.record() for s in self._proxies),
            event_loop=None if self._event_loop is None else self._event_loop.value,
        )

    def _save(self) -> None:
        try:
            write_state(self._layout.state_file, self.runtime_state())
        except OSError as exc:
            log.error("cannot write %s: %s", self._layout.state_file, exc)

    # --- children ----------------------------------------------------------------

    def _argv(self, slot: _Slot) -> list[str]:
        rocketmq = rocketmq_engine.is_rocketmq(self._config)
        if slot.kind is ChildKind.PROXY:
            return rocketmq_engine.proxy_argv(self._config, self._layout)
        if slot.kind is ChildKind.CONTROLLER:
            argv = controller_argv(self._config, self._layout, slot.index)
            if rocketmq:
                argv += rocketmq_engine.controller_args(self._config, self._layout)
            return argv
        # Live brokers' addresses, and this slot's old one: a restart always moves.
        in_use = {
            s.host
            for s in (*self._brokers, *self._other_groups_brokers)
            if s.host and (s is slot or s.alive())
        }
        allocation = allocate_host(self._pool, self._cursor, in_use)
        self._cursor = allocation.cursor
        if slot.host:
            slot.previous_hosts.append(slot.host)
        slot.host = allocation.host
        if rocketmq:
            return rocketmq_engine.broker_argv(self._config, self._layout, slot.index, slot.host)
        return broker_argv(self._config, self._layout, slot.index, slot.host)

    async def _spawn(self, slot: _Slot) -> None:
        argv = self._argv(slot)
        slot.incarnation = secrets.token_hex(8)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{INCARNATION_ENV: slot.incarnation})
        if self._event_loop is not None:
            env[event_loop.EVENT_LOOP_ENV] = self._event_loop.value
        with open(slot.log_file, "ab") as out:
            out.write(
                f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} supervisor starts {slot.name} "
                f"on {slot.host}: {' '.join(argv)}\n".encode()
            )
            out.flush()
            slot.proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env=env,
                **group_preexec(slot.gid),
            )
        slot.start_ticks = process_start_ticks(slot.proc.pid)
        slot.phase = Phase.RUNNING
        slot.started_at_ms = wall_ms()
        slot.started_mono_ms = monotonic_ms()
        slot.restart_at_ms = None
        slot.role = None
        log.info(
            "started %s pid %d on %s%s", slot.name, slot.proc.pid, slot.host,
            "" if slot.gid is None else f" in group {slot.gid}",
        )  # fmt: skip
        self._save()

    async def _run_slot(self, slot: _Slot) -> None:
        while not self._stopping.is_set():
            try:
                await self._spawn(slot)
            except (OSError, AddressPoolExhausted) as exc:
                log.error("cannot start %s: %s", slot.name, exc)
                slot.proc = None
                code: int | None = None
            else:
                assert slot.proc is not None
                code = await slot.proc.wait()
            slot.last_exit_code = code
            if self._stopping.is_set():
                break
            log.warning("%s on %s exited with code %s", slot.name, slot.host, code)
            if slot.kind is ChildKind.BROKER:
                await self._report_gone(slot, code)
            decision = on_exit(self._policy, slot.history, slot.started_mono_ms, monotonic_ms())
            slot.history = decision.history
            slot.phase = Phase.BACKOFF
            slot.role = None
            slot.restart_at_ms = wall_ms() + decision.delay_ms
            self._save()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), decision.delay_ms / 1000)
        slot.phase = Phase.STOPPED

    async def _supervise_slot(self, slot: _Slot) -> None:
        """`_run_slot`, with a bug in it logged loudly instead of lost in a task."""
        try:
            await self._run_slot(slot)
        except Exception:
            log.exception("supervision of %s failed; it is no longer restarted", slot.name)
            raise

    async def _supervise_proxy(self, slot: _Slot) -> None:
        """The stock proxy, once the group has a master: a cluster-mode proxy exits at start
        when no broker of its cluster is registered yet (it creates its heartbeat-sync topic
        on the cluster first)."""
        while not self._stopping.is_set():
            snapshot = self.latest_snapshot
            if snapshot is not None and snapshot.master_broker_id is not None:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 0.5)
        await self._supervise_slot(slot)

    async def _report_gone(self, slot: _Slot, code: int | None) -> None:
        """DESIGN.md §2.3: the supervisor reports a gone process so the election
        does not wait for a heartbeat timeout."""
        if not self._config.report_inactive or slot.broker_id is None or not self._token:
            return
        reason = f"local supervisor: broker process on {slot.host} exited (code {code})"
        broker_name = self._config.group_names[self._config.group_of_slot(slot.index)]
        # The controller leader may have died with the broker: the client re-sends
        # this idempotent report (its one retry policy) while a new one is elected
        # (~0.5 s), or the election would wait out a heartbeat timeout. Bounded by
        # its budget and before the restart, so it can never hit the next incarnation.
        try:
            await self._controller_client().report_inactive(
                self._config.cluster_name,
                broker_name,
                slot.broker_id,
                reason,
                process_gone=True,  # the supervisor saw the exit status
                incarnation=slot.incarnation,  # the start it saw end, not the next one
            )
            outcome = "ok"
        except (ControllerError, ControllerUnavailable) as exc:
            outcome = f"failed: {exc}"
        log.info("reported broker %d inactive: %s", slot.broker_id, outcome)

    def _controller_client(self) -> ControllerClient:
        if self._controller is None:
            self._controller = ControllerClient(
                self._config.controller_api_addresses,
                self._token,
                request_timeout_s=_REPORT_BUDGET_MS / 1000,
                tls=controller_tls(self._config, self._layout),
            )
        return self._controller

    async def _close_controller_client(self) -> None:
        if self._controller is not None:
            await self._controller.close()
            self._controller = None

    async def _terminate(self, slots: list[_Slot], tasks: list[asyncio.Task[None]]) -> None:
        for slot in slots:
            if slot.alive() and slot.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.send_signal(signal.SIGTERM)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._config.stop_timeout_ms / 1000)
        for slot in slots:
            if slot.alive() and slot.proc is not None:
                log.warning("%s ignored SIGTERM; sending SIGKILL", slot.name)
                with contextlib.suppress(ProcessLookupError):
                    slot.proc.kill()
        if pending:
            await asyncio.wait(pending, timeout=self._config.stop_timeout_ms / 1000)

    # --- main loop ---------------------------------------------------------------

    def _learn(self, snapshot: StatusSnapshot) -> None:
        for row in snapshot.brokers:
            slot = self._brokers[row.slot]
            if row.broker_id is not None and slot.alive():
                slot.broker_id = row.broker_id
            elif slot.broker_id is None and rocketmq_engine.is_rocketmq(self._config):
                slot.broker_id = rocketmq_engine.broker_id(self._layout, slot.index)
            slot.role = row.role if slot.alive() else None

    async def _learn_other_groups(self) -> None:
        """The BrokerIds of the other groups' live brokers (by their registered host), so
        their exit is reported at once too (`_report_gone`)."""
        if not self._other_groups_brokers:
            return
        names = self._config.group_names
        for group, name in enumerate(names[1:], start=1):
            try:
                info = await self._controller_client().replica_info(self._config.cluster_name, name)
            except (ControllerError, ControllerUnavailable):
                continue
            by_host = {b.address.rsplit(":", 1)[0]: b.broker_id for b in info.brokers}
            for slot in self._other_groups_brokers:
                if self._config.group_of_slot(slot.index) == group and slot.alive():
                    slot.broker_id = by_host.get(slot.host, slot.broker_id)

    async def _poll_once(self) -> None:
        if self._prober is None:
            return
        alive = {(s.kind.value, s.index): s.alive() for s in (*self._controllers, *self._brokers)}
        snapshot = await self._prober.snapshot(
            self.runtime_state(), process_alive=alive, supervisor_alive=True, now_ms=wall_ms()
        )
        self._learn(snapshot)
        await self._learn_other_groups()
        self.latest_snapshot = snapshot
        self._save()
        if self._on_snapshot is not None:
            self._on_snapshot(snapshot)

    async def _wait_for_controller_leader(self) -> None:
        assert self._prober is not None
        deadline = monotonic_ms() + self._config.controller_ready_timeout_ms
        while not self._stopping.is_set() and monotonic_ms() < deadline:
            if await self._prober.controller_leader_ready([s.record() for s in self._controllers]):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 0.2)
        if not self._stopping.is_set():
            log.warning(
                "no controller leader after %d ms; starting brokers anyway",
                self._config.controller_ready_timeout_ms,
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set, then stop every child (see module doc)."""
        self._event_loop = event_loop.running()
        self._token = self._layout.token_file.read_text().strip()
        self._layout.pid_file.write_text(f"{self._pid}\n")
        controller_tasks: list[asyncio.Task[None]] = []
        broker_tasks: list[asyncio.Task[None]] = []
        proxy_tasks: list[asyncio.Task[None]] = []
        stop_watch = asyncio.create_task(self._forward_stop(stop))
        # The stable master address's renewed certificate, without a restart (tls.py).
        reloader = asyncio.create_task(run_reloader())
        async with aiohttp.ClientSession() as session:
            self._prober = Prober(
                self._config,
                session,
                self._token,
                broker_token=self._layout.broker_credential_file.read_text().strip(),
                controller_tls=controller_tls(self._config, self._layout),
                broker_tls=broker_http_tls(self._config, self._layout),
            )
            watch_client = ControllerClient(
                self._config.controller_api_addresses,
                self._token,
                tls=controller_tls(self._config, self._layout),
            )
            watch: asyncio.Task[None] | None = None
            users_sync: asyncio.Task[None] | None = None
            try:
                await self._forwarder.start(
                    self._config.master_endpoint_host, self._config.master_endpoint_port
                )
                if self._grpc_forwarder is not None:
                    await self._grpc_forwarder.start(
                        self._config.master_endpoint_host, self._config.proxy_grpc_port
                    )
                watch = asyncio.create_task(self._watch_master(watch_client))
                controller_tasks = [
                    asyncio.create_task(self._supervise_slot(s)) for s in self._controllers
                ]
                await self._wait_for_controller_leader()
                if not self._stopping.is_set():
                    broker_tasks = [
                        asyncio.create_task(self._supervise_slot(s))
                        for s in (*self._brokers, *self._other_groups_brokers)
                    ]
                    proxy_tasks = [
                        asyncio.create_task(self._supervise_proxy(s)) for s in self._proxies
                    ]
                    if rocketmq_engine.users_enabled(self._config):
                        users_sync = asyncio.create_task(self._sync_stock_users())
                while not self._stopping.is_set():
                    try:
                        await self._poll_once()
                    except Exception:  # the view must never take the supervisor down
                        log.exception("status poll failed")
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._stopping.wait(), self._config.poll_interval_ms / 1000
                        )
            finally:
                self._stopping.set()
                if watch is not None:
                    watch.cancel()
                if users_sync is not None:
                    users_sync.cancel()
                await self._forwarder.close()
                if self._grpc_forwarder is not None:
                    await self._grpc_forwarder.close()
                await watch_client.close()
                log.info("stopping: the proxy and brokers first, then controllers")
                await self._terminate(self._proxies, proxy_tasks)
                await self._terminate([*self._brokers, *self._other_groups_brokers], broker_tasks)
                await self._terminate(self._controllers, controller_tasks)
                stop_watch.cancel()
                reloader.cancel()
                final = self.runtime_state().stopped(wall_ms())
                write_state(self._layout.state_file, final)
                with contextlib.suppress(FileNotFoundError):
                    self._layout.pid_file.unlink()
                await self._close_controller_client()
                log.info("stopped")

    async def _sync_stock_users(self) -> None:
        """Engine rocketmq with ACL 2.0 on: the stock brokers' users follow the controllers'."""
        config, layout = self._config, self._layout
        client = ControllerClient(
            config.controller_api_addresses,
            layout.broker_credential_file.read_text().strip(),
            tls=controller_tls(config, layout),
        )

        def brokers() -> list[BrokerProcess]:
            port = config.broker_client_port
            return [
                BrokerProcess(f"{s.host}:{port}", s.proc.pid)
                for s in self._brokers
                if s.alive() and s.proc is not None and s.host
            ]

        sync = StockUsersSync(
            client,
            config.cluster_name,
            layout.broker_key_file,
            brokers,
            tls=None if config.tls == "disabled" else client_context(layout.ca_file),
        )
        try:
            await sync.run(self._stopping)
        finally:
            await client.close()

    async def _watch_master(self, client: ControllerClient) -> None:
        """Keep the stable master address on the current master (logged if it ever fails)."""
        config = self._config
        ports = RemotingPorts(config.broker_remoting_port())
        try:
            grpc = self._grpc_forwarder
            also = () if grpc is None else ((RemotingPorts(config.broker_grpc_port()), grpc),)
            await MasterWatch(
                client, config.cluster_name, config.broker_name, ports, self._forwarder, also=also
            ).run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the master watch failed; the stable master address no longer follows")
            raise

    async def _forward_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._stopping.set()
