"""How a user's SecretKey is kept in the Raft log and the dumps (docs/security.md "How a
SecretKey is kept").

RocketMQ keeps a user's password plain in its metadata store. Here the leader seals it before
proposing: Fernet (AES-128-CBC + HMAC-SHA256, a random IV) under a key derived with
HKDF-SHA256 from the broker credential root, which every controller holds anyway to check the
group pairs. The log, journal and dumps on the data directory then hold no usable SecretKey;
every replica applies the same sealed bytes (sealing happens once, on the leader, before the
event is proposed). The leader unseals only to answer a broker's users-snapshot.

Without a root (`--insecure-no-auth`) the secret is kept plain, marked `plain:`, so a reader
of the dump can tell. A sealed value that does not open (the root was rotated without the old
one) is a clear error naming the user, never a silently wrong key.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SEALED_PREFIX = "fernet1:"
PLAIN_PREFIX = "plain:"
_INFO = b"brokergroup user secret seal v1"


class SealError(Exception):
    """A sealed SecretKey that does not open with this controller's root."""


class SecretSealer:
    """Seals and opens SecretKeys; `root` None keeps them plain (marked)."""

    def __init__(self, root: str | None) -> None:
        self._fernet: Fernet | None = None
        if root:
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
                root.encode()
            )
            self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, secret_key: str) -> str:
        if self._fernet is None:
            return PLAIN_PREFIX + secret_key
        return SEALED_PREFIX + self._fernet.encrypt(secret_key.encode()).decode("ascii")

    def open(self, sealed: str, access_key: str = "?") -> str:
        if sealed.startswith(PLAIN_PREFIX):
            return sealed[len(PLAIN_PREFIX) :]
        if not sealed.startswith(SEALED_PREFIX) or self._fernet is None:
            raise SealError(
                f"the SecretKey of user {access_key} is sealed, and this controller has no "
                "broker credential root to open it"
            )
        try:
            return self._fernet.decrypt(sealed[len(SEALED_PREFIX) :].encode()).decode()
        except (InvalidToken, UnicodeDecodeError):
            raise SealError(
                f"the SecretKey of user {access_key} does not open with this controller's "
                "broker credential root (was the root rotated?): set it again with "
                "'brokergroup admin user update --generate-secret'"
            ) from None

    def __repr__(self) -> str:
        return "SecretSealer(<secret>)"
