"""The remoting AccessKey/SecretKey pair, read from a file (the one reader every port uses).

The file is JSON `{"accessKey": "...", "secretKey": "..."}`: what `brokergroup local up`
writes, a Kubernetes Secret mounted as a file, and what a stock broker takes as
`innerClientAuthenticationCredentials`. Never on a command line, never logged. Errors name
the file and the field, never the secret.
"""

from __future__ import annotations

import hmac
import json

from brokergroup_remoting.net import Credentials, ServerAuth

#: Shortest key stock tools accept (AclUtils: at least 6 characters).
MIN_KEY_CHARS = 6


def read_key_file(path: str, what: str = "remoting key file") -> Credentials:
    """The key pair in `path`; ValueError naming the file and field if it is malformed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f'{what} {path} is not JSON {{"accessKey": …, "secretKey": …}}') from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path} must hold a JSON object")
    pair: list[str] = []
    for name in ("accessKey", "secretKey"):
        value = data.get(name)
        if not isinstance(value, str) or len(value.strip()) < MIN_KEY_CHARS:
            raise ValueError(
                f"{what} {path}: {name} must be a string of at least {MIN_KEY_CHARS} characters"
            )
        pair.append(value.strip())
    return Credentials(pair[0], pair[1])


def server_auth(credentials: Credentials) -> ServerAuth:
    """Requests must be signed with this key pair (AclClientRPCHook), checked before decoding."""

    def secret_for(access_key: str) -> str | None:
        known = hmac.compare_digest(access_key.encode(), credentials.access_key.encode())
        return credentials.secret_key if known else None

    return ServerAuth(secret_for=secret_for)
