"""The name server's client key pair (AccessKey/SecretKey), read from a file.

The file is JSON, `{"accessKey": "...", "secretKey": "..."}` (`brokergroup local up`
writes one; in Kubernetes a Secret mounted as a file), like the controller's other secrets:
never on a command line, never logged. Kept to this one function so the source of keys can
change (credentials by role) without touching the name server.
"""

from __future__ import annotations

import json

#: An AccessKey stock tools accept (AclUtils: letters, digits, '_' and '-', 6..).
MIN_SECRET_CHARS = 6


def read_key_file(path: str) -> dict[str, str]:
    """AccessKey → SecretKey from `path`; ValueError names what is wrong (never the secret)."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except ValueError:
            raise ValueError(f"name server key file {path} is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError(f"name server key file {path} must hold a JSON object")
    access_key, secret_key = data.get("accessKey"), data.get("secretKey")
    if not isinstance(access_key, str) or len(access_key) < MIN_SECRET_CHARS:
        raise ValueError(
            f"{path}: accessKey must be a string of at least {MIN_SECRET_CHARS} characters"
        )
    if not isinstance(secret_key, str) or len(secret_key) < MIN_SECRET_CHARS:
        raise ValueError(
            f"{path}: secretKey must be a string of at least {MIN_SECRET_CHARS} characters"
        )
    return {access_key: secret_key}
