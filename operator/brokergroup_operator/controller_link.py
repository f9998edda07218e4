"""The operator's link to the controllers' API over HTTPS (BROKERGROUP_CONTROLLER_API_TLS).

With the controllers on `--api-tls` (the chart's tls.controllers.httpsApi), the operator
verifies them against the release's cluster CA (the bundle: the current CA and the previous
ones still trusted, so a CA renewal never cuts the link) and presents a client certificate
of its own, signed by the cluster CA (the API asks for one: CERT_OPTIONAL on the controller;
docs/security.md "TLS on Kubernetes"). The certificate never leaves the operator's pod: it
is made in memory from the CA the operator holds and written to a private temporary
directory only because Python's ssl loads a key from a file.

`ensure_controller_link` runs at the operator's start and before each group's pass; it
makes the context when there is none and again every BROKERGROUP_TLS_CHECK_SECONDS (a
renewed CA or a certificate near its end). A new context gives new ControllerClients
(Runtime.controller keys them by it); the old ones are closed.
"""

from __future__ import annotations

import datetime
import logging
import os
import tempfile
import time
from pathlib import Path

from brokergroup_controller.client import tls_context
from brokergroup_operator.runtime import Runtime
from brokergroup_operator.tls_material import load_cluster_ca
from brokergroup_remoting.certificates import issue

log = logging.getLogger("brokergroup_operator")

#: The operator's client certificate lives this long; it is made again at every check
#: (BROKERGROUP_TLS_CHECK_SECONDS, an hour by default), so a day is ample.
CLIENT_CERT_DAYS = 2
CLIENT_NAME = "brokergroup-operator"


async def ensure_controller_link(rt: Runtime, *, force: bool = False) -> str | None:
    """Make (or remake, when due) the operator's HTTPS context to the controllers; None
    when done or not needed, else why not (the pass reports it and retries)."""
    if not rt.settings.controller_api_tls:
        return None
    clock = time.monotonic()
    checked = rt.controller_link_checked
    if (
        not force
        and rt.controller_link is not None
        and checked is not None
        and clock - checked < rt.settings.tls_check_s
    ):
        return None

    def post(kind: str, reason: str, message: str) -> None:
        log.info("%s: %s", reason, message)

    now = datetime.datetime.now(datetime.UTC)
    try:
        ca = await load_cluster_ca(rt, now, post)
        leaf = issue(ca.current, CLIENT_NAME, [CLIENT_NAME], now=now, valid_days=CLIENT_CERT_DAYS)
        folder = Path(tempfile.mkdtemp(prefix="bg-operator-tls-"))
        os.chmod(folder, 0o700)
        files = {
            "ca.crt": ca.bundle_pem.encode(),
            "tls.crt": leaf.cert_pem,
            "tls.key": leaf.key_pem,
        }
        for name, data in files.items():
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        context = tls_context(
            str(folder / "ca.crt"), str(folder / "tls.crt"), str(folder / "tls.key")
        )
        for name in files:  # loaded into the context: the key need not stay on disk
            (folder / name).unlink()
        folder.rmdir()
    except Exception as exc:  # the CA Secret missing or unreadable: the next pass retries
        problem = f"no HTTPS link to the controllers yet (BROKERGROUP_CONTROLLER_API_TLS): {exc}"
        log.warning("%s", problem)
        return problem
    assert context is not None
    await rt.set_controller_link(context)
    rt.controller_link_checked = clock
    return None
