"""`local status` with `local up --groups N`: every group of the cluster, as the controllers
see it (master, masterEpoch, SyncStateSet), and the key pair each group's applications sign
with. The rest of the status view (brokers' processes, offsets, lag) follows the first group;
a cluster-wide user (`brokergroup admin user`) signs for every group."""

from __future__ import annotations

import json
from typing import Any

from brokergroup_cli.local.certs import controller_tls
from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.plan import Layout
from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError

#: One status read of a group from the controllers.
READ_TIMEOUT_S = 2.0


async def groups_json(
    config: LocalConfig, layout: Layout, token: str | None
) -> list[dict[str, Any]]:
    """One entry per group, in order (broker-a first); a group the controllers do not answer
    for says why in `error`."""
    out: list[dict[str, Any]] = []
    async with ControllerClient(
        config.controller_api_addresses,
        token,
        request_timeout_s=READ_TIMEOUT_S,
        tls=controller_tls(config, layout),
    ) as client:
        for name in config.group_names:
            entry: dict[str, Any] = {"brokerName": name}
            try:
                info = await client.replica_info(config.cluster_name, name)
                entry.update(
                    masterBrokerId=info.master_broker_id,
                    masterAddress=info.live_master_address,
                    masterEpoch=info.master_epoch,
                    syncStateSet=sorted(info.sync_state_set),
                    brokers=len(info.brokers),
                )
            except (ControllerError, ControllerUnavailable) as exc:
                entry["error"] = str(exc)
            try:
                keys = json.loads(
                    layout.group_file(config, name, layout.client_key_file).read_text()
                )
                entry.update(accessKey=keys["accessKey"], secretKey=keys["secretKey"])
            except (OSError, ValueError, KeyError, TypeError):
                entry.update(accessKey=None, secretKey=None)
            out.append(entry)
    return out


def render_groups(groups: list[dict[str, Any]]) -> str:
    lines = ["groups:"]
    for g in groups:
        if "error" in g:
            lines.append(f"  {g['brokerName']}: {g['error']}")
            continue
        master = (
            "none"
            if g["masterBrokerId"] is None
            else f"{g['masterBrokerId']} at {g['masterAddress']}"
        )
        lines.append(
            f"  {g['brokerName']}: master {master}, masterEpoch {g['masterEpoch']}, "
            f"SyncStateSet {g['syncStateSet']}"
        )
    return "\n".join(lines)
