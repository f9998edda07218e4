"""Which certificates a BrokerGroup's TLS needs now (pure; Strimzi's cluster CA model).

The operator keeps one cluster CA per release (the Secret `BROKERGROUP_CLUSTER_CA_SECRET`:
`ca.crt`, `ca.key`, `ca-bundle.crt`, the CAs still trusted, and `ca-previous.crt`/`.key`,
the CA it replaced while that is valid) and, per group of
`spec.tls.issuer: operator`, a server certificate signed by it (Secret `<bg>-tls`: tls.crt,
tls.key) with the trust bundle beside it (ConfigMap `<bg>-tls-trust`: ca.crt). This module
decides, from what was issued and the clock, what to do now; `tls_material.py` does it.

- A CA or a leaf with `renewalDays` or less left is renewed (`clusterCa.renewalDays`),
  never kept: one that is expired or about to is never handed to a pod. The one exception:
  a leaf a new one could not outlive (its CA expires within the same window; a leaf never
  outlives its CA) is kept, with a warning (`LeafDecision.ca_bound`): reissuing it would
  roll the group at every check and gain nothing. The CA's owner renews the CA (the
  operator does for its own, 395 days ahead); then the leaf is reissued under the new one.
- A leaf whose names (`server_names`) changed, or that a previous CA signed, is reissued;
  so is one whose group asked for it (the `brokergroup.io/force-renew` annotation).
- A renewed CA does not invalidate the leaves it signed at once: the previous CA stays in
  the trust bundle until it expires (a leaf is never valid past its CA: `leaf_days` caps
  it), and a group's leaf is reissued under the new CA only once every pod of the group
  runs with a bundle that trusts the new CA (`Phase`): first a roll that adds the trust,
  then one that swaps the leaf, as Strimzi's CA renewal rolls twice. A pod of the old
  revision and one of the new can always verify each other.
- A leaf that falls due before the pods trust a renewed CA (at the very check that renews
  it) is reissued under the previous CA, whose key the operator keeps for that (Secret keys
  `ca-previous.crt`/`ca-previous.key`, until that CA expires): the pods trust it, and that
  roll carries the bundle trusting the new CA, so the next check swaps the leaf as above
  (`LeafAction.ISSUE_UNDER_PREVIOUS`). Only when no previous key is held (a user's own CA),
  the pods are not known to trust the previous CA (the shell knows it only of a group
  whose pods all run its newest bundle) or the previous CA could not give the new leaf a
  day more is it issued under the new CA before the pods trust it: for that one roll an
  old pod and a new pod cannot verify each other, a shorter outage than an expired leaf.

The operator cannot read a group's Secret (no `get` on Secrets in the watched
namespaces), so what it issued is remembered on the BrokerGroup's status
(`status.tls`, `LeafRecord`): not_after, names, the signing CA's fingerprint; the kubectl
plugin shows the same record.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Days before expiry a certificate is renewed, and how long a new one is valid (the CRD's
#: defaults, Strimzi's clusterCa.renewalDays / validityDays).
DEFAULT_RENEWAL_DAYS = 30
DEFAULT_VALIDITY_DAYS = 365
#: The cluster CA lives five leaf lifetimes (Strimzi makes its CA 365 days too; a longer CA
#: means fewer double rolls and the key never leaves the operator's namespace).
CA_VALIDITY_DAYS = 5 * 365
CLUSTER_DOMAIN = "cluster.local"
#: A leaf within renewalDays of its end is reissued only if the new one would expire at
#: least this much later (leaf_days counts whole days: under a CA that bounds the leaf, a
#: new one gains less than a day, and it is kept).
MIN_RENEWAL_GAIN = datetime.timedelta(days=1)


@dataclass(frozen=True)
class RenewalPolicy:
    """spec.tls.renewalDays / validityDays."""

    renewal_days: int = DEFAULT_RENEWAL_DAYS
    validity_days: int = DEFAULT_VALIDITY_DAYS

    def __post_init__(self) -> None:
        if self.validity_days < 1:
            raise ValueError(f"validityDays must be ≥ 1, got {self.validity_days}")
        if not 0 <= self.renewal_days < self.validity_days:
            raise ValueError(
                f"renewalDays must be ≥ 0 and below validityDays ({self.validity_days}), "
                f"got {self.renewal_days}"
            )

    @property
    def renew_before(self) -> datetime.timedelta:
        return datetime.timedelta(days=self.renewal_days)


@dataclass(frozen=True)
class CaFacts:
    """A CA certificate as the decisions need it (no key)."""

    fingerprint: str
    not_after: datetime.datetime


@dataclass(frozen=True)
class LeafRecord:
    """What the operator issued for a group (status.tls): enough to decide, no secret."""

    not_after: datetime.datetime
    names: tuple[str, ...]
    issuer: str
    """The fingerprint of the CA that signed it."""
    renewed_for: str = ""
    """The force-renew annotation's value it was issued for."""

    def to_status(self) -> dict[str, Any]:
        return {
            "notAfter": iso(self.not_after),
            "names": list(self.names),
            "issuerFingerprint": self.issuer,
            "renewedFor": self.renewed_for,
        }

    @classmethod
    def from_status(cls, tls: Mapping[str, Any] | None) -> LeafRecord | None:
        """The record from status.tls; None when there is none or it is unreadable (then a
        new certificate is issued: a lost record costs one roll, never a bad certificate)."""
        if not tls or not tls.get("notAfter") or not tls.get("issuerFingerprint"):
            return None
        try:
            not_after = parse_iso(str(tls["notAfter"]))
        except ValueError:
            return None
        return cls(
            not_after=not_after,
            names=tuple(str(n) for n in tls.get("names") or ()),
            issuer=str(tls["issuerFingerprint"]),
            renewed_for=str(tls.get("renewedFor") or ""),
        )


class CaAction(enum.Enum):
    KEEP = "keep"
    CREATE = "create"
    RENEW = "renew"


@dataclass(frozen=True)
class CaDecision:
    action: CaAction
    reason: str


def plan_ca(current: CaFacts | None, now: datetime.datetime, policy: RenewalPolicy) -> CaDecision:
    """Keep the cluster CA, make the first one, or renew it within the renewal window."""
    if current is None:
        return CaDecision(CaAction.CREATE, "no cluster CA yet")
    left = current.not_after - now
    if left <= policy.renew_before:
        return CaDecision(
            CaAction.RENEW, f"the cluster CA expires {iso(current.not_after)} ({_days(left)} left)"
        )
    return CaDecision(CaAction.KEEP, "valid")


def trusted_cas(
    current: CaFacts, previous: Iterable[CaFacts], now: datetime.datetime
) -> tuple[CaFacts, ...]:
    """The trust bundle: the current CA first, then every previous one not yet expired
    (a leaf a previous CA signed is valid at most until that CA expires), newest first,
    each once."""
    unique = {ca.fingerprint: ca for ca in previous if ca.not_after > now}
    unique.pop(current.fingerprint, None)
    kept = sorted(unique.values(), key=lambda ca: ca.not_after, reverse=True)
    return (current, *kept)


class LeafAction(enum.Enum):
    KEEP = "keep"
    ISSUE = "issue"
    """Issue a new leaf under the current CA (and write the trust bundle)."""
    TRUST_FIRST = "trust-first"
    """Write the bundle trusting the current CA, keep the leaf: pods roll to trust the new
    CA before any of them presents a leaf it signed."""
    ISSUE_UNDER_PREVIOUS = "issue-under-previous"
    """Issue a new leaf under the previous CA (its key held; every pod trusts it) and write
    the bundle trusting the current CA: a leaf falling due before the pods trust a renewed
    CA. The next check, once the pods trust the current CA, reissues it under that one."""


@dataclass(frozen=True)
class LeafDecision:
    action: LeafAction
    reason: str
    ca_bound: bool = False
    """KEEP of a leaf within renewalDays of its end that a new one could not outlive (its
    CA expires as soon): the shell warns, the CA's owner renews it."""


def plan_leaf(
    record: LeafRecord | None,
    *,
    wanted_names: Sequence[str],
    ca: CaFacts,
    trusted_by_pods: bool,
    now: datetime.datetime,
    policy: RenewalPolicy,
    force_token: str = "",
    previous_ca: CaFacts | None = None,
    previous_trusted_by_pods: bool = False,
) -> LeafDecision:
    """What to do with a group's server certificate.

    `trusted_by_pods`: every pod of the group runs with a bundle that trusts `ca` (the
    shell reads it from the pods' tls digest). `force_token`: the group's force-renew
    annotation ("" none). `previous_ca`: the CA `ca` replaced, when its key is held (None:
    not held, as for a user's own CA); `previous_trusted_by_pods`: every pod trusts it."""
    if record is None:
        return LeafDecision(LeafAction.ISSUE, "no certificate yet")
    left = record.not_after - now
    bound = ""
    if left <= policy.renew_before:
        # Due before the pods trust the current CA: a leaf of the previous CA, which they
        # trust, if it lives long enough to matter (else an expired leaf is the longer
        # outage, and the new CA signs it below).
        if (
            not trusted_by_pods
            and previous_trusted_by_pods
            and previous_ca is not None
            and _previous_renews(record, ca, previous_ca, now, policy)
        ):
            return LeafDecision(
                LeafAction.ISSUE_UNDER_PREVIOUS,
                f"it expires {iso(record.not_after)} ({_days(left)} left) and not every "
                f"pod trusts the new cluster CA yet: issued under the previous one, which "
                f"they trust (it expires {iso(previous_ca.not_after)})",
            )
        # An expiring leaf is replaced even mid CA rotation: a new pod presenting a
        # new-CA leaf to an old pod is a shorter outage than an expired certificate.
        # But only when the new one would live longer: a leaf never outlives its CA, so
        # under a CA that itself expires within renewalDays every new leaf would expire
        # within them again, and reissuing it at every check rolled the group forever.
        if _renews(record, ca, now, policy):
            return LeafDecision(
                LeafAction.ISSUE, f"it expires {iso(record.not_after)} ({_days(left)} left)"
            )
        bound = (
            f"the certificate expires {iso(record.not_after)} ({_days(left)} left) and is not "
            f"reissued: a new one could not outlive the CA, which expires "
            f"{iso(ca.not_after)}; renew the CA"
        )
    if record.issuer != ca.fingerprint:
        if not trusted_by_pods:
            return LeafDecision(
                LeafAction.TRUST_FIRST, "the cluster CA was renewed: every pod trusts it first"
            )
        return LeafDecision(LeafAction.ISSUE, "signed by the previous cluster CA")
    if tuple(record.names) != tuple(wanted_names):
        return LeafDecision(LeafAction.ISSUE, "its names changed")
    if force_token and force_token != record.renewed_for:
        return LeafDecision(LeafAction.ISSUE, f"renewal requested ({force_token})")
    if bound:
        return LeafDecision(LeafAction.KEEP, bound, ca_bound=True)
    return LeafDecision(LeafAction.KEEP, "valid")


def _renews(record: LeafRecord, ca: CaFacts, now: datetime.datetime, policy: RenewalPolicy) -> bool:
    """A leaf issued now under `ca` would replace `record` usefully: it expires at least
    MIN_RENEWAL_GAIN later, or any later when `record` has expired."""
    gain = renewed_not_after(ca, now, policy) - record.not_after
    return gain >= MIN_RENEWAL_GAIN or (record.not_after <= now and gain > datetime.timedelta(0))


def _previous_renews(
    record: LeafRecord,
    ca: CaFacts,
    previous_ca: CaFacts,
    now: datetime.datetime,
    policy: RenewalPolicy,
) -> bool:
    """`previous_ca` may sign the leaf replacing `record` while the pods do not trust `ca`:
    it is another CA than `ca`, `record` is not `ca`'s already, it has a whole day left
    (leaf_days' one-day floor would outlive a CA with less), and its leaf renews `record`."""
    return (
        record.issuer != ca.fingerprint != previous_ca.fingerprint
        and previous_ca.not_after - now >= MIN_RENEWAL_GAIN
        and _renews(record, previous_ca, now, policy)
    )


def renewed_not_after(
    ca: CaFacts, now: datetime.datetime, policy: RenewalPolicy
) -> datetime.datetime:
    """When a leaf issued now would expire (`leaf_days` from now)."""
    return now + datetime.timedelta(days=leaf_days(ca, now, policy))


def leaf_days(ca: CaFacts, now: datetime.datetime, policy: RenewalPolicy) -> int:
    """validityDays, cut to the CA's remaining life (a leaf never outlives its issuer)."""
    left = (ca.not_after - now).days
    return max(1, min(policy.validity_days, left))


def server_names(group: str, namespace: str) -> tuple[str, ...]:
    """The names a group's brokers are dialled at: its master Service `<bg>` (the name
    servers' master address `<bg>.<ns>.svc`), and every pod's stable name
    `<pod>.<bg>-headless.<ns>.svc` as one wildcard, so scaling changes no name (a changed
    name rolls every pod). Short and cluster-domain forms both."""
    headless = f"{group}-headless"
    names = [group, f"{group}.{namespace}", f"{group}.{namespace}.svc"]
    names.append(f"{group}.{namespace}.svc.{CLUSTER_DOMAIN}")
    names += [f"*.{headless}.{namespace}.svc", f"*.{headless}.{namespace}.svc.{CLUSTER_DOMAIN}"]
    return tuple(names)


def controller_names(hosts: Iterable[str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """The controllers' certificate names: each node's host (the addresses brokers dial
    the name servers at) and the release's Services (`extra`, from the chart)."""
    return tuple(dict.fromkeys([*hosts, *extra]))


def tls_digest(leaf_fingerprint: str, trusted: Sequence[str]) -> str:
    """16 hex digits over the leaf and the CAs trusted: the pod template carries it, so a
    new leaf or a new trust makes a new revision, which the planner rolls."""
    text = leaf_fingerprint + "\0" + ",".join(trusted)
    return hashlib.sha256(b"brokergroup tls v1\0" + text.encode()).hexdigest()[:16]


def iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return moment


def _days(left: datetime.timedelta) -> str:
    return f"{left.total_seconds() / 86400:.1f} days"
