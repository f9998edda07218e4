"""Where the remoting port's AccessKey/SecretKey pair comes from: a file, like the
controller's other secrets (DESIGN.md §11), never a flag's value or a log line.

The file holds the JSON a stock broker takes as `innerClientAuthenticationCredentials`
(`{"accessKey": "...", "secretKey": "..."}`), so one Secret serves both sides.
"""

from __future__ import annotations

import json

from brokergroup_remoting.net import Credentials


def read_remoting_credentials(path: str) -> Credentials:
    """The key pair in `path`; ValueError (naming the file, never the secret) if malformed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(
            f'remoting credentials file {path} is not JSON {{"accessKey": …, "secretKey": …}}'
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"remoting credentials file {path} must hold a JSON object")
    access_key, secret_key = data.get("accessKey"), data.get("secretKey")
    for name, value in (("accessKey", access_key), ("secretKey", secret_key)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"remoting credentials file {path}: {name} is missing or empty")
    assert isinstance(access_key, str) and isinstance(secret_key, str)
    return Credentials(access_key.strip(), secret_key.strip())
