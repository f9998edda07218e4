"""The process kubelet's log endpoint, so `kubectl logs` (the API server's
pods/log) works on the tier as on a real node.

A real kubelet serves `GET /containerLogs/{namespace}/{pod}/{container}` on
its port (node `status.daemonEndpoints.kubeletEndpoint.Port`, at the node's
InternalIP); the API server proxies pods/log there. It does not verify a
kubelet's serving certificate unless `--kubelet-certificate-authority` is
set, so a self-signed one serves. Only logs are served (no exec, no
port-forward).

A container's log file holds every run, each opened by the kubelet's
`--- start #N …` line: the current log is the last run, `previous=true` the
one before it (400 when there is none, as a kubelet answers).
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

START_MARKER = b"--- start #"


def runs_of(log: bytes) -> list[bytes]:
    """The log split into runs, each starting with its marker line."""
    runs: list[bytes] = []
    at = log.find(START_MARKER)
    if at < 0:
        return [log] if log else []
    while at >= 0:
        nxt = log.find(b"\n" + START_MARKER, at)
        end = len(log) if nxt < 0 else nxt + 1
        runs.append(log[at:end])
        at = -1 if nxt < 0 else nxt + 1
    return runs


class LogServer:
    """HTTPS on `address`:ephemeral port; `locate(namespace, pod)` gives the pod's
    directory (where the kubelet writes `<container>.log`) or raises LookupError."""

    def __init__(self, address: str, state: Path, locate: Callable[[str, str], Path]) -> None:
        self.address = address
        self.state = state
        self.locate = locate
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    def _certificate(self) -> tuple[Path, Path]:
        cert, key = self.state / "kubelet.crt", self.state / "kubelet.key"
        if not cert.exists():
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
                 "-subj", "/CN=process-kubelet", "-addext", f"subjectAltName=IP:{self.address}",
                 "-keyout", str(key), "-out", str(cert)],
                check=True, capture_output=True,
            )  # fmt: skip
        return cert, key

    def start(self) -> int:
        locate = self.locate

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self._answer(404, b"only /containerLogs/{namespace}/{pod}/{container}\n")
                    return
                _, namespace, pod, container = parts
                query = urllib.parse.parse_qs(url.query)
                previous = query.get("previous", ["false"])[0] == "true"
                try:
                    log = (locate(namespace, pod) / f"{container}.log").read_bytes()
                except (LookupError, OSError) as exc:
                    self._answer(404, f"{namespace}/{pod}/{container}: {exc}\n".encode())
                    return
                runs = runs_of(log)
                if previous and len(runs) < 2:
                    message = (
                        f'previous terminated container "{container}" in pod "{pod}" not found'
                    )
                    self._answer(400, message.encode())
                    return
                self._answer(200, runs[-2] if previous else (runs[-1] if runs else b""))

            def _answer(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        cert, key = self._certificate()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server = ThreadingHTTPServer((self.address, 0), Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = int(server.server_address[1])
        threading.Thread(target=server.serve_forever, name="kubelet-logs", daemon=True).start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
