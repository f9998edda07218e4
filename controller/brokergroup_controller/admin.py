"""`brokergroup admin …`: the controller API for people (like `mqadmin
getSyncStateSet`, `electMaster`, `cleanBrokerMetadata`).

Each command prints a table, or with `--json` one JSON document, and exits
1 with the controller's code and message when the controller refuses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from brokergroup_controller import api
from brokergroup_controller.client import ControllerClient, ControllerUnavailable, tls_context
from brokergroup_controller.errors import ControllerError

TOKEN_ENV = "BROKERGROUP_TOKEN"
#: The CA a client verifies an HTTPS controller API (and TLS brokers) against.
CA_FILE_ENV = "BROKERGROUP_CA_FILE"
#: Where `brokergroup local up` keeps its installation (and its `token`) unless
#: told otherwise; the admin CLI finds the token there like it finds the
#: local runtime's controller addresses by default.
LOCAL_DIR_ENV = "BROKERGROUP_LOCAL_DIR"
LOCAL_DIR_DEFAULT = "~/.brokergroup/local"
# Every command needs a credential (reads too, DESIGN.md §11).


def local_runtime_file(name: str) -> str:
    """A file of the local runtime's directory (`brokergroup local up`)."""
    local_dir = os.environ.get(LOCAL_DIR_ENV) or LOCAL_DIR_DEFAULT
    return os.path.join(os.path.expanduser(local_dir), name)


def token_search_path() -> list[str]:
    """Where the admin token is looked for when --token-file is not given, in order."""
    return [f"${TOKEN_ENV}", local_runtime_file("token")]


def resolve_api_tls(ca_file: str | None) -> ssl.SSLContext | None:
    """TLS for a command-line client of the controllers' API (and the brokers' ports):
    `--ca-file`, ${CA_FILE_ENV}, else the local runtime's CA (DIR/tls/ca.crt) when its
    config.json has TLS on (`local up --set local.tls=…`); None: plaintext. ValueError
    names a CA file that does not load."""
    named = ca_file or os.environ.get(CA_FILE_ENV)
    if named:
        return tls_context(named)
    try:
        with open(local_runtime_file("config.json"), encoding="utf-8") as f:
            local = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(local, dict) or local.get("tls", "disabled") == "disabled":
        return None
    ca = local_runtime_file(os.path.join("tls", "ca.crt"))
    return tls_context(ca) if os.path.exists(ca) else None


def resolve_token(token_file: str | None) -> str | None:
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            return f.read().strip() or None
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    local_token = token_search_path()[1]
    try:
        with open(local_token, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _table(rows: Sequence[Sequence[object]], out: TextIO) -> None:
    cells = [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    for row in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _print_replica_info(info: api.ReplicaInfo, out: TextIO) -> None:
    out.write(
        f"{info.cluster_name}/{info.broker_name}: master {info.master_broker_id} "
        f"({info.master_address or 'none'}{'' if info.master_alive else ', NOT ALIVE'}), "
        f"masterEpoch {info.master_epoch}, "
        f"SyncStateSet {sorted(info.sync_state_set)} (epoch {info.sync_state_set_epoch}), "
        f"nextBrokerId {info.next_broker_id}\n"
    )
    rows: list[list[object]] = [
        ["BROKER_ID", "ADDRESS", "ROLE", "ALIVE", "IN_SYNC", "EPOCH", "MAX_OFFSET",
         "CONFIRM_OFFSET", "PRIORITY", "HB_AGE_MS"],
    ]  # fmt: skip
    for b in info.brokers:
        rows.append(
            [
                b.broker_id,
                b.address,
                "master" if b.broker_id == info.master_broker_id else "slave",
                b.alive,
                b.broker_id in info.sync_state_set,
                b.epoch,
                b.max_offset,
                b.confirm_offset,
                b.election_priority,
                b.last_heartbeat_age_ms,
            ]
        )
    _table(rows, out)


def _print_sync_state_sets(infos: Sequence[api.ReplicaInfo], out: TextIO) -> None:
    rows: list[list[object]] = [
        ["#CLUSTER", "#BROKER_NAME", "#MASTER_ID", "#MASTER_ADDR", "#MASTER_ALIVE", "#MASTER_EPOCH",
         "#SYNC_STATE_SET_EPOCH", "#SYNC_STATE_SET"],
    ]  # fmt: skip
    for info in infos:
        rows.append(
            [
                info.cluster_name,
                info.broker_name,
                info.master_broker_id,
                info.master_address,
                info.master_alive,
                info.master_epoch,
                info.sync_state_set_epoch,
                ",".join(str(x) for x in sorted(info.sync_state_set)) or "-",
            ]
        )
    _table(rows, out)


async def _record_events(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> None:
    """Append one JSON line per controller change of any group (event_export) until
    --duration-s passes (or forever). One long-poll per group; groups re-listed every
    poll timeout so new ones are picked up."""
    import time

    from brokergroup_controller.event_export import Heartbeat, change_events, heartbeats_seen

    sink = open(args.out, "a", encoding="utf-8") if args.out else out  # noqa: SIM115
    views: dict[tuple[str, str], api.ReplicaInfo] = {}
    masters: dict[tuple[str, str], int | None] = {}
    seen: dict[tuple[str, str], dict[int, Heartbeat]] = {}
    deadline = None if args.duration_s is None else time.monotonic() + args.duration_s

    def emit(info: api.ReplicaInfo) -> None:
        key = (info.cluster_name, info.broker_name)
        now_ms = int(time.time() * 1000)
        earlier = seen.get(key, {})
        for line in change_events(views.get(key), masters.get(key), info, now_ms, earlier):
            sink.write(json.dumps(line, sort_keys=True) + "\n")
        sink.flush()
        views[key] = info
        seen[key] = heartbeats_seen(earlier, info, now_ms)
        if info.master_broker_id is not None:
            masters[key] = info.master_broker_id

    async def follow(key: tuple[str, str]) -> None:
        while deadline is None or time.monotonic() < deadline:
            seen = views[key]
            try:
                info = await client.watch(
                    key[0], key[1], seen.master_epoch, seen.sync_state_set_epoch,
                    args.poll_timeout_ms,
                )  # fmt: skip
            except ControllerUnavailable:
                continue  # the client already re-sent it for its whole budget: watch again
            emit(info)

    tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
    try:
        while deadline is None or time.monotonic() < deadline:
            try:
                for info in await client.groups():
                    key = (info.cluster_name, info.broker_name)
                    if key not in views:
                        emit(info)
                        tasks[key] = asyncio.create_task(follow(key))
            except ControllerUnavailable:
                pass
            await asyncio.sleep(args.poll_timeout_ms / 1000)
    finally:
        for task in tasks.values():
            task.cancel()
        if sink is not out:
            sink.close()


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    addresses = api.split_addresses(args.controller_addresses)
    token = resolve_token(args.token_file)
    if token is None:
        looked = ", ".join(token_search_path())
        sys.stderr.write(
            f"brokergroup admin {args.admin_command}: no controller API token found (looked at "
            f"{looked}). Pass --token-file, set {TOKEN_ENV}, or set {LOCAL_DIR_ENV} to the "
            "directory of a `brokergroup local up --dir …` installation.\n"
        )
        return 2
    try:
        tls = resolve_api_tls(args.ca_file)
    except ValueError as exc:
        sys.stderr.write(f"brokergroup admin {args.admin_command}: {exc}\n")
        return 2
    async with ControllerClient(
        addresses, token, request_timeout_s=args.timeout, tls=tls
    ) as client:
        command = args.admin_command
        result: Any
        if command == "replica-info":
            info = await client.replica_info(args.cluster_name, args.broker_name)
            result = info.to_json()
            if not args.json:
                _print_replica_info(info, out)
        elif command == "sync-state-set":
            infos = [await client.replica_info(args.cluster_name, n) for n in args.broker_name]
            result = [i.to_json() for i in infos]
            if not args.json:
                _print_sync_state_sets(infos, out)
        elif command == "elect-master":
            info = await client.elect_master(
                args.cluster_name, args.broker_name, designated_broker_id=args.broker_id
            )
            result = info.to_json()
            if not args.json:
                _print_replica_info(info, out)
        elif command == "switchover":
            eligible = (
                None
                if args.eligible_broker_ids is None
                else [int(x) for x in api.split_addresses(args.eligible_broker_ids)]
            )
            info = await client.switchover(
                args.cluster_name, args.broker_name, eligible_broker_ids=eligible
            )
            result = info.to_json()
            if not args.json:
                _print_replica_info(info, out)
        elif command == "clean-broker-data":
            ids = None if args.broker_ids is None else api.split_addresses(args.broker_ids)
            removed = await client.clean_broker_data(
                args.cluster_name,
                args.broker_name,
                None if ids is None else [int(x) for x in ids],
                force=args.force,
            )
            result = {"removed": removed}
            if not args.json:
                out.write(f"removed BrokerIds {removed} from {args.broker_name}\n")
        elif command == "raft":
            result = []
            for address in addresses:
                try:
                    result.append(await client.raft_status(address))
                except ControllerUnavailable as exc:
                    result.append({"self": address, "error": str(exc)})
            if not args.json:
                rows: list[list[object]] = [
                    ["API", "RAFT", "LEADER", "TERM", "COMMIT", "APPLIED", "READY"]
                ]
                for address, status in zip(addresses, result, strict=True):
                    if "error" in status:
                        rows.append([address, "unreachable", "-", "-", "-", "-", "-"])
                        continue
                    rows.append(
                        [
                            address,
                            status["self"],
                            status["leader"],
                            status["term"],
                            status["commitIndex"],
                            status["lastApplied"],
                            status["ready"],
                        ]
                    )
                _table(rows, out)
        elif command == "events":
            await _record_events(client, args, out)
            return 0
        elif command == "groups":
            groups = await client.groups()
            result = [g.to_json() for g in groups]
            if not args.json:
                _print_sync_state_sets(groups, out)
        elif command == "user":
            from brokergroup_controller.admin_users import run_user_command

            result = await run_user_command(client, args, out)
        else:  # argparse restricts the choices
            raise AssertionError(command)
        if args.json:
            out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args, sys.stdout))
    except ControllerError as exc:
        sys.stderr.write(f"error: {exc.code}: {exc.message}\n")
        return 1
    except ControllerUnavailable as exc:
        sys.stderr.write(f"error: controller unavailable: {exc}\n")
        for attempt in exc.attempts[-6:]:
            sys.stderr.write(f"  {attempt}\n")
        return 2
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
