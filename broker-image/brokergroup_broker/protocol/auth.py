"""Client port authentication (DESIGN.md §11): a key-pair handshake before any frame.

Pure: no I/O, no clock, no randomness (nonces come in as arguments). The server and
the client (`server.py`, `client.py`) read exactly the lengths below and call these.

Theory of operation. The client port takes the same RocketMQ AccessKey/SecretKey pairs
as the broker's remoting port: the group's CLIENT pair and BROKER pair
(`--remoting-client-key-file`, `--remoting-key-file`; docs/security.md). Every
connection opens with a handshake that reuses the HA port's mutual HMAC challenge
(`brokergroup_broker.ha.auth`), keyed with `client_port_key(SecretKey)` — an HMAC of
the SecretKey under this port's own label, so a proof made here is worth nothing on
the remoting or HA ports:

1. broker → client: ``"BGH1" + broker nonce (32)`` (`ha.auth.challenge`)
2. client → broker (HELLO): ``int16 n (0..MAX_ACCESS_KEY_BYTES) + AccessKey (n bytes,
   ASCII) + client nonce (32) + HMAC-SHA256(key, "slave" + broker nonce + client
   nonce)`` (`ha.auth.slave_proof`); n = 0 is "no credential" (the 64 proof bytes
   are then sent as zeros, so the layout never changes).
3. broker → client: one status byte, then
   - 0 AUTHENTICATED: ``HMAC-SHA256(key, "master" + client nonce + broker nonce)``
     (32 bytes): the broker holds the pair too, so a fake broker cannot serve the
     client forged messages;
   - 1 OPEN: nothing (a broker started with ``--insecure-no-client-auth``, for
     development; a client holding a pair refuses it, it cannot check it);
   - 2 REFUSED: ``int16 length + UTF-8 reason (≤ MAX_REASON_BYTES)``, then the broker
     closes the connection.

Only after step 3 does either side build a frame decoder: before authentication the
broker parses a 2-byte length and the fixed-size bytes it announces (an AccessKey of at
most 255 bytes), nothing else. The broker bounds the whole handshake in time
(`ServerConfig.auth_timeout_ms`).

Who may do what (least privilege): every request of this protocol (send, pull, offsets,
queue count, consumer offsets) is a client operation, so the CLIENT pair may do all of
them; the BROKER pair may too (a broker pod holds both pairs anyway). The protocol has
no administrative request; one added later must say so in `ADMIN_REQUEST_CODES`, and
only the broker pair may send it (`refusal_for`). Another group's pair, the release's
admin pair, or a pair the broker was not given is an unknown AccessKey: REFUSED, with
what the AccessKey says about itself (its group and role, public parts) so a user
pointed at the wrong Secret is told so.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from brokergroup_broker.ha import auth as ha_auth
from brokergroup_controller.credentials import Role
from brokergroup_remoting.net import Credentials

#: Bytes of the broker's opening challenge ("BGH1" + nonce).
CHALLENGE_BYTES = ha_auth.CHALLENGE_BYTES
NONCE_BYTES = ha_auth.NONCE_BYTES
#: Client nonce + MAC after the AccessKey in the HELLO.
CLIENT_PROOF_BYTES = ha_auth.SLAVE_PROOF_BYTES
#: The broker's proof after status AUTHENTICATED.
SERVER_PROOF_BYTES = ha_auth.MASTER_PROOF_BYTES
#: Longest AccessKey a HELLO may carry (a derived one for 127-byte names is ≈ 180).
MAX_ACCESS_KEY_BYTES = 255
#: Longest refusal reason the broker sends (longer ones are cut).
MAX_REASON_BYTES = 1024
#: HMAC label that makes this port's key differ from the SecretKey itself.
_KEY_LABEL = b"brokergroup client port v1"
_LENGTH = struct.Struct(">h")
_ZERO_PROOF = bytes(CLIENT_PROOF_BYTES)


class AuthStatus(IntEnum):
    AUTHENTICATED = 0
    OPEN = 1
    REFUSED = 2


#: Request codes only the broker pair may send (none today: every request is a client's).
ADMIN_REQUEST_CODES: frozenset[int] = frozenset()


class AuthenticationError(Exception):
    """A broker (or the controller, for discovery) refused this client's credential,
    or a broker could not prove it holds the pair. Never retried: `reason` says why."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address} refused the credential: {reason}")
        self.address = address
        self.reason = reason


class HandshakeError(Exception):
    """The peer broke the handshake, or could not prove the key; the text says which."""


def client_port_key(secret_key: str) -> bytes:
    """The HMAC key of this port's handshake, derived from a SecretKey."""
    return hmac.new(secret_key.encode(), _KEY_LABEL, hashlib.sha256).digest()


# ----------------------------------------------------------------- client side


def hello(pair: Credentials | None, challenge: bytes, client_nonce: bytes) -> bytes:
    """The client's HELLO for the broker's `challenge` (HandshakeError if that is not one)."""
    if len(challenge) != CHALLENGE_BYTES or not challenge.startswith(ha_auth.MAGIC):
        raise HandshakeError(
            "the broker did not open with the client port's authentication challenge "
            "(not a brokergroup client port, or a broker older than the handshake)"
        )
    if pair is None:
        return _LENGTH.pack(0) + _ZERO_PROOF
    raw = pair.access_key.encode()
    if not 0 < len(raw) <= MAX_ACCESS_KEY_BYTES:
        raise HandshakeError(f"the AccessKey is {len(raw)} bytes, over {MAX_ACCESS_KEY_BYTES}")
    proof = ha_auth.slave_proof(client_port_key(pair.secret_key), challenge, client_nonce)
    return _LENGTH.pack(len(raw)) + raw + proof


def check_server_proof(
    pair: Credentials, challenge: bytes, client_nonce: bytes, proof: bytes
) -> None:
    """The broker proved the pair too (HandshakeError if not)."""
    try:
        ha_auth.check_master_proof(
            client_port_key(pair.secret_key), challenge[len(ha_auth.MAGIC) :], client_nonce, proof
        )
    except ha_auth.HAAuthError:
        raise HandshakeError(
            "the broker's proof does not match the key pair: it does not hold this "
            "group's pair (a broker of another group, or not a broker)"
        ) from None


def reason_length(two_bytes: bytes) -> int:
    n: int = _LENGTH.unpack(two_bytes)[0]
    if not 0 <= n <= MAX_REASON_BYTES:
        raise HandshakeError(f"refusal reason length {n} outside [0, {MAX_REASON_BYTES}]")
    return n


# ----------------------------------------------------------------- broker side


@dataclass(frozen=True)
class Accepted:
    role: Role
    access_key: str
    #: The status byte and proof to send back.
    answer: bytes


@dataclass(frozen=True)
class Refused:
    reason: str

    @property
    def answer(self) -> bytes:
        return refusal(self.reason)


def refusal(reason: str) -> bytes:
    raw = reason.encode()[:MAX_REASON_BYTES]
    return bytes([AuthStatus.REFUSED]) + _LENGTH.pack(len(raw)) + raw


OPEN_ANSWER = bytes([AuthStatus.OPEN])


def access_key_length(two_bytes: bytes) -> int | Refused:
    """The HELLO's AccessKey length, or the refusal of a bad one (before reading further)."""
    n: int = _LENGTH.unpack(two_bytes)[0]
    if 0 <= n <= MAX_ACCESS_KEY_BYTES:
        return n
    return Refused(
        f"not a HELLO: AccessKey length {n} outside [0, {MAX_ACCESS_KEY_BYTES}] (the client "
        "port starts with the authentication handshake, docs/protocol.md)"
    )


@dataclass(frozen=True)
class ClientPortAuth:
    """The pairs this broker's client port accepts, each with its role, and how to
    describe an AccessKey it does not hold (the refusal's remark; never a secret)."""

    pairs: tuple[tuple[Credentials, Role], ...]
    unknown_key_reason: Callable[[str], str | None] = lambda _key: None

    def __post_init__(self) -> None:
        if not self.pairs:
            raise ValueError("an authenticated client port needs at least one key pair")

    def check(self, challenge: bytes, access_key: bytes, proof: bytes) -> Accepted | Refused:
        """Decide one HELLO: `access_key` as read (≤ MAX_ACCESS_KEY_BYTES), `proof` the
        CLIENT_PROOF_BYTES after it. Constant-time comparisons only."""
        if not access_key:
            return Refused(
                "no credential: this broker's client port needs the group's client key pair "
                "(AccessKey/SecretKey; brokergroup produce/consume --key-file)"
            )
        found: tuple[Credentials, Role] | None = None
        for pair, role in self.pairs:
            if hmac.compare_digest(access_key, pair.access_key.encode()):
                found = (pair, role)
        try:
            key_text = access_key.decode("ascii")
        except UnicodeDecodeError:
            key_text = access_key.decode("ascii", "replace")
        if found is None:
            remark = self.unknown_key_reason(key_text)
            return Refused(f"the AccessKey is not known{': ' + remark if remark else ''}")
        pair, role = found
        key = client_port_key(pair.secret_key)
        nonce = challenge[len(ha_auth.MAGIC) :]
        try:
            client_nonce = ha_auth.check_slave_proof(key, nonce, proof)
        except ha_auth.HAAuthError:
            return Refused(
                f"the proof does not match the SecretKey of AccessKey {key_text} (wrong SecretKey)"
            )
        answer = bytes([AuthStatus.AUTHENTICATED]) + ha_auth.master_proof(key, nonce, client_nonce)
        return Accepted(role, pair.access_key, answer)


def refusal_for(role: Role | None, request_code: int) -> str | None:
    """Why a connection authenticated as `role` (None: an open port) may not send
    `request_code`; None when it may."""
    if request_code in ADMIN_REQUEST_CODES and role is not None and role is not Role.BROKER:
        return f"request code {request_code} needs the group's broker pair, not the {role} pair"
    return None
