"""HA port authentication (DESIGN.md §11): a mutual HMAC challenge before any frame.

Pure: no I/O, no clock, no randomness (nonces come in as arguments).

Before RocketMQ's handshake frames, on every connection:

1. master → slave: ``MAGIC (4 bytes "BGH1") + master nonce (32)``
2. slave → master: ``slave nonce (32) + HMAC-SHA256(secret, "slave" + master nonce + slave nonce)``
3. master → slave: ``HMAC-SHA256(secret, "master" + slave nonce + master nonce)``

Every message has a fixed length, so each side reads exactly that many
bytes and checks a MAC before it parses anything else: a peer without the
group's HA secret never reaches the frame decoder. The master's proof lets
the slave refuse a fake master (whose bytes it would otherwise append).
Fresh nonces on both sides make a recorded exchange useless on a new
connection. The secret is the file `--ha-secret-file` (local runtime:
`<root>/ha-secret`; chart: the Secret key `ha-secret`).
"""

from __future__ import annotations

import hashlib
import hmac

MAGIC = b"BGH1"
NONCE_BYTES = 32
MAC_BYTES = 32
CHALLENGE_BYTES = len(MAGIC) + NONCE_BYTES
SLAVE_PROOF_BYTES = NONCE_BYTES + MAC_BYTES
MASTER_PROOF_BYTES = MAC_BYTES


class HAAuthError(Exception):
    """The peer did not prove the group's HA secret (or spoke something else)."""


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(secret, role + first + second, hashlib.sha256).digest()


def challenge(master_nonce: bytes) -> bytes:
    if len(master_nonce) != NONCE_BYTES:
        raise ValueError("nonce must be 32 bytes")
    return MAGIC + master_nonce


def slave_proof(secret: bytes, challenge_bytes: bytes, slave_nonce: bytes) -> bytes:
    """The slave's answer to the master's challenge (raises on a malformed challenge)."""
    if len(challenge_bytes) != CHALLENGE_BYTES or not challenge_bytes.startswith(MAGIC):
        raise HAAuthError(
            "the master did not open with the HA authentication challenge "
            "(wrong port, or a master without --ha-secret-file)"
        )
    master_nonce = challenge_bytes[len(MAGIC) :]
    return slave_nonce + _mac(secret, b"slave", master_nonce, slave_nonce)


def check_slave_proof(secret: bytes, master_nonce: bytes, proof: bytes) -> bytes:
    """The master's check; returns the slave's nonce. Constant-time comparison."""
    if len(proof) != SLAVE_PROOF_BYTES:
        raise HAAuthError(f"slave proof is {len(proof)} bytes, not {SLAVE_PROOF_BYTES}")
    slave_nonce, mac = proof[:NONCE_BYTES], proof[NONCE_BYTES:]
    if not hmac.compare_digest(mac, _mac(secret, b"slave", master_nonce, slave_nonce)):
        raise HAAuthError("the slave's proof does not match the group's HA secret")
    return slave_nonce


def master_proof(secret: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
    return _mac(secret, b"master", slave_nonce, master_nonce)


def check_master_proof(
    secret: bytes, master_nonce: bytes, slave_nonce: bytes, proof: bytes
) -> None:
    if not hmac.compare_digest(proof, master_proof(secret, master_nonce, slave_nonce)):
        raise HAAuthError("the master's proof does not match the group's HA secret")
