"""Certificate renewal without a restart (brokergroup_remoting.tls.reload_changed, issue 36
item 2): a real asyncio TLS server on loopback whose certificate files are replaced.

After the files change and `reload_changed` runs, a new connection is handed the new
certificate while a connection made before keeps working on its session; a renewal whose
key does not match its certificate is refused and the old pair is kept (new connections
still get the old certificate); unchanged files are not loaded again; a server asking for
client certificates trusts a new CA once its CA file changed (a CA rollover).
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509

from brokergroup_remoting.certificates import Issued, issue, make_ca
from brokergroup_remoting.tls import client_context, reload_changed, server_context

NOW = datetime.datetime.now(datetime.UTC)
NAMES = ["localhost", "127.0.0.1"]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
    finally:
        writer.close()


async def _answered(port: int, context: ssl.SSLContext) -> bool:
    """Whether a session comes up and echoes (TLS 1.3: a refused client certificate shows
    at the client's first read)."""
    try:
        _, _, writer = await _serial_of(port, context)
    except (ssl.SSLError, ConnectionError, AssertionError):
        return False
    writer.close()
    return True


Opened = tuple[int, asyncio.StreamReader, asyncio.StreamWriter]


async def _serial_of(port: int, context: ssl.SSLContext) -> Opened:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.write(b"ping\n")
    await writer.drain()
    assert await reader.readline() == b"ping\n"
    return x509.load_der_x509_certificate(der).serial_number, reader, writer


class Files:
    def __init__(self, directory: Path) -> None:
        self.ca = make_ca("reload CA", now=NOW)
        self.ca_file = directory / "ca.crt"
        self.ca.write(self.ca_file, directory / "ca.key")
        self.cert_file, self.key_file = directory / "server.crt", directory / "server.key"

    def renew(self) -> Issued:
        issued = issue(self.ca, "server", NAMES, now=NOW)
        issued.write(self.cert_file, self.key_file)
        return issued


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Files, int, ssl.SSLContext]]:
    files = Files(tmp_path)
    files.renew()
    context = server_context(files.cert_file, files.key_file)
    server = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    yield files, port, context
    server.close()


async def test_new_connections_get_the_renewed_certificate_and_old_ones_stay(
    served: tuple[Files, int, ssl.SSLContext],
) -> None:
    files, port, _ = served
    client = client_context(files.ca_file)
    before, old_reader, old_writer = await _serial_of(port, client)
    renewed = files.renew()
    assert reload_changed() >= 1
    after, _, new_writer = await _serial_of(port, client)
    assert after == renewed.certificate.serial_number != before
    # The connection made before the renewal still works on its own session.
    old_writer.write(b"still\n")
    await old_writer.drain()
    assert await old_reader.readline() == b"still\n"
    for w in (old_writer, new_writer):
        w.close()


async def test_a_mismatched_key_keeps_the_old_pair(
    served: tuple[Files, int, ssl.SSLContext],
) -> None:
    files, port, _ = served
    client = client_context(files.ca_file)
    before, _, w1 = await _serial_of(port, client)
    # A certificate whose key is not the one written beside it.
    issue(files.ca, "server", NAMES, now=NOW).write(files.cert_file, files.cert_file.parent / "x")
    reload_changed()
    after, _, w2 = await _serial_of(port, client)
    assert after == before
    for w in (w1, w2):
        w.close()


async def test_unchanged_files_are_not_loaded_again(
    served: tuple[Files, int, ssl.SSLContext],
) -> None:
    reload_changed()
    assert reload_changed() == 0


async def test_a_new_ca_is_trusted_for_client_certificates_after_its_file_changed(
    tmp_path: Path,
) -> None:
    files = Files(tmp_path)
    files.renew()
    context = server_context(files.cert_file, files.key_file, client_ca_file=files.ca_file)
    server = await asyncio.start_server(_echo, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    new_ca = make_ca("next CA", now=NOW)
    holder_cert, holder_key = tmp_path / "holder.crt", tmp_path / "holder.key"
    issue(new_ca, "client", NAMES, now=NOW).write(holder_cert, holder_key)
    client = client_context(files.ca_file, cert_file=holder_cert, key_file=holder_key)
    try:
        assert not await _answered(port, client)
        # The CA file now holds both CAs (the rollover's overlap).
        files.ca_file.write_bytes(files.ca.cert_pem + new_ca.cert_pem)
        assert reload_changed() >= 1
        assert await _answered(port, client)
    finally:
        server.close()
