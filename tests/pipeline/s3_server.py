"""A real S3-compatible server for the audit's object-store tests: versitygw
(tools/s3/build.sh: `go install` from the Go module proxy into
~/.cache/brokergroup/s3) serving a directory through its posix backend on
127.0.0.1. Credentials are made per run and handed to the server and to clients in
their environments, as a user's would be (never on a command line)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "tools" / "s3" / "build.sh"
HOST = "127.0.0.1"


class ServerUnavailable(Exception):
    """The server binary could not be built here (the reason is the message)."""


def server_binary() -> Path:
    """BROKERGROUP_S3_BIN, else the cached build (built now if missing)."""
    given = os.environ.get("BROKERGROUP_S3_BIN")
    if given:
        return Path(given)
    try:
        built = subprocess.run(
            [str(BUILD)], capture_output=True, text=True, timeout=1800, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ServerUnavailable(f"{BUILD} did not finish in {exc.timeout} s") from exc
    if built.returncode != 0:
        raise ServerUnavailable(
            f"{BUILD} failed ({built.returncode}): {built.stderr.strip()[-800:]}"
        )
    return Path(built.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    """http://127.0.0.1:PORT"""
    env: dict[str, str]
    """What a client's environment needs: credentials, endpoint, region."""

    def filesystem(self) -> fs.S3FileSystem:
        return fs.S3FileSystem(
            access_key=self.env["AWS_ACCESS_KEY_ID"],
            secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=self.endpoint,
            region=self.env["AWS_REGION"],
            allow_bucket_creation=True,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def s3_server(data_dir: Path, log: Path) -> Iterator[S3Server]:
    binary = server_binary()
    access, secret = f"audit{secrets.token_hex(6)}", secrets.token_hex(20)
    port = _free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "ROOT_ACCESS_KEY_ID": access,
        "ROOT_SECRET_ACCESS_KEY": secret,
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "--port", f"{HOST}:{port}", "posix", str(data_dir)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"versitygw exited {proc.returncode}:\n{log.read_text()}")
            with socket.socket() as s:
                if s.connect_ex((HOST, port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"versitygw not listening on {port}:\n{log.read_text()}")
            time.sleep(0.1)
        endpoint = f"http://{HOST}:{port}"
        yield S3Server(
            endpoint,
            {
                "AWS_ACCESS_KEY_ID": access,
                "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_REGION": "us-east-1",
            },
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
