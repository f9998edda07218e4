"""The address a name server route names as a managed group's master (brokerId 0), pure.

A stock RocketMQ client asks the name server for routes every 30 s and keeps sending to the
brokerId 0 address it last saw, so a route that names the master's own remoting address
makes it follow a failover only at its next refresh. A *stable master address* does not
move: the Kubernetes master Service (it follows the role label) or the local runtime's
per-group forwarder. The route names it as brokerId 0 for every group the controller
manages whose master is registered; slaves keep their own addresses.

The policy, loaded once at start-up (`--namesrv-master-address CLUSTER/BROKER=HOST:PORT`,
`--namesrv-master-address-template TEMPLATE`):
- a fixed address for (clusterName, brokerName) wins;
- else the template with `{cluster}`, `{broker}` and `{port}` (the port of the master's own
  registered remoting address) filled in;
- else the master's own address, as RocketMQ routes it.

`--namesrv-master-only-routes MODE` (`master_only`, `MasterOnlyRoutes`): which groups with a
stable address are routed to clients by that address alone (brokerId 0), their slaves left
out of topic routes (`routes.client_broker_addrs` says why: a stock client heartbeats every
address a route names, and a stock RocketMQ 5.3 broker counts a client once per connection).
`stock` (the default): the groups whose brokers register through RocketMQ's own controller
protocol, i.e. stock RocketMQ 5 brokers (`routes.master_only_for`); `all`: every group (the
bare flag, as before there were modes; it needs a stable address); `none`: no group.

Every failure is a `ValueError` at load: unknown placeholders, an empty host, a bad port.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from brokergroup_controller.api import BrokerSetKey

#: The template's placeholders.
TEMPLATE_FIELDS = frozenset({"cluster", "broker", "port"})
# Names that pass validation of a template's host (DNS label characters).
_PROBE = {"cluster": "c", "broker": "b", "port": "10911"}


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    """`host:port` (host non-empty, port 1..65535); ValueError naming `what`."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host.strip():
        raise ValueError(f"{what} {text!r} is not HOST:PORT (empty host)")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{what} {text!r}: port {port_text!r} is not a TCP port (1..65535)")
    return host, int(port_text)


def _check_template(template: str) -> None:
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"master address template {template!r}: {exc}") from exc
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in TEMPLATE_FIELDS or spec or conversion:
            raise ValueError(
                f"master address template {template!r}: unknown placeholder {{{name}}} "
                f"(known: {', '.join('{' + f + '}' for f in sorted(TEMPLATE_FIELDS))})"
            )
    parse_host_port(template.format(**_PROBE), f"master address template {template!r} gives")


class MasterOnlyRoutes(StrEnum):
    """Which groups with a stable master address topic routes name by it alone."""

    NONE = "none"
    """No group: every member by its own address (slave reads possible)."""
    STOCK = "stock"
    """The groups whose brokers register through RocketMQ's controller protocol (stock
    RocketMQ 5 brokers, which list a client once per connection); built-in groups keep
    their slaves in routes."""
    ALL = "all"
    """Every group, built-in ones too."""


def parse_master_only_routes(value: object) -> MasterOnlyRoutes:
    """A mode from a flag or controller.json: `none`, `stock`, `all`; the JSON booleans of
    the setting's first form read as `all` (true) and `none` (false)."""
    if isinstance(value, MasterOnlyRoutes):
        return value
    if isinstance(value, bool):
        return MasterOnlyRoutes.ALL if value else MasterOnlyRoutes.NONE
    if isinstance(value, str) and value in {m.value for m in MasterOnlyRoutes}:
        return MasterOnlyRoutes(value)
    known = ", ".join(m.value for m in MasterOnlyRoutes)
    raise ValueError(f"namesrvMasterOnlyRoutes {value!r} is not one of {known}")


@dataclass(frozen=True)
class MasterAddressPolicy:
    """Where clients reach a managed group's master; `MasterAddressPolicy()` = its own address."""

    template: str | None = None
    """`{cluster}`, `{broker}`, `{port}` filled in, e.g. `{broker}-master.ns.svc:{port}`."""
    fixed: Mapping[BrokerSetKey, str] = field(default_factory=dict)
    """(clusterName, brokerName) → `host:port`, ahead of the template."""
    master_only: MasterOnlyRoutes = MasterOnlyRoutes.STOCK
    """Which groups' topic routes name only their stable address (no slaves)."""

    def __post_init__(self) -> None:
        if self.master_only is MasterOnlyRoutes.ALL and self.template is None and not self.fixed:
            raise ValueError(
                "master-only routes for all groups need a stable master address "
                "(--namesrv-master-address or --namesrv-master-address-template)"
            )
        if self.template is not None:
            _check_template(self.template)
        for (cluster, broker), address in self.fixed.items():
            parse_host_port(address, f"master address of {cluster}/{broker}")

    def stable(self, group: BrokerSetKey) -> bool:
        """Whether `group`'s master is served at a stable address (not its own)."""
        return self.template is not None or group in self.fixed

    def address(self, group: BrokerSetKey, master_addr: str) -> str:
        """The brokerId 0 address of `group` whose master registered as `master_addr`."""
        fixed = self.fixed.get(group)
        if fixed is not None:
            return fixed
        if self.template is None:
            return master_addr
        port = master_addr.rpartition(":")[2]
        return self.template.format(cluster=group[0], broker=group[1], port=port)


def parse_fixed(entries: Iterable[str]) -> dict[BrokerSetKey, str]:
    """`CLUSTER/BROKER=HOST:PORT` flags → fixed addresses (ValueError on a bad or repeated
    entry)."""
    fixed: dict[BrokerSetKey, str] = {}
    for entry in entries:
        group_text, sep, address = entry.partition("=")
        cluster, slash, broker = group_text.partition("/")
        if not sep or not slash or not cluster or not broker or "/" in broker:
            raise ValueError(f"--namesrv-master-address {entry!r} is not CLUSTER/BROKER=HOST:PORT")
        if (cluster, broker) in fixed:
            raise ValueError(f"--namesrv-master-address gives {cluster}/{broker} twice")
        parse_host_port(address, f"--namesrv-master-address {cluster}/{broker}")
        fixed[(cluster, broker)] = address
    return fixed


def load_policy(
    template: str | None,
    fixed_entries: Iterable[str],
    master_only: object = MasterOnlyRoutes.STOCK,
) -> MasterAddressPolicy:
    """The policy from the controller's flags (ValueError says what is wrong)."""
    return MasterAddressPolicy(
        template=template or None,
        fixed=parse_fixed(fixed_entries),
        master_only=parse_master_only_routes(master_only),
    )


#: No policy: routes name the master's own registered address (RocketMQ's behaviour).
OWN_ADDRESS = MasterAddressPolicy()
