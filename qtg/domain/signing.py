"""Callback authentication v3 (reference §4, DESIGN §6): pure functions, no I/O.

The body is the pure JSON payload; the proof travels in headers. The signed
message is `"{timestamp}\\n{nonce}\\n{sha256_hex(body)}"`, so the signature
covers the exact bytes sent, and the timestamp and nonce that a receiver uses
to reject stale or replayed deliveries. A row's timestamp and nonce are fixed
when the callback is created, and its signature when it is first sent; all
three are reused on every retry, so a retried delivery is byte-for-byte the
same request (even across a secret rotation) and a receiver can dedupe it by
nonce.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_VERSION = "v3"

HEADER_TIMESTAMP = "X-QTG-Callback-Timestamp"
HEADER_NONCE = "X-QTG-Callback-Nonce"
HEADER_SIGNATURE_VERSION = "X-QTG-Callback-Signature-Version"
HEADER_SIGNATURE = "X-QTG-Callback-Signature"


def signature_message(timestamp: int | str, nonce: str, body: bytes) -> bytes:
    """The bytes that are signed: timestamp, nonce and the body's sha256 hex, one per line."""
    return f"{timestamp}\n{nonce}\n{hashlib.sha256(body).hexdigest()}".encode()


def sign_callback(secret: bytes, timestamp: int | str, nonce: str, body: bytes) -> str:
    """Lowercase hex HMAC-SHA256 of the signature message."""
    return hmac.new(secret, signature_message(timestamp, nonce, body), hashlib.sha256).hexdigest()


def signed_headers(timestamp: int, nonce: str, signature: str) -> dict[str, str]:
    """Every header of a v3 callback request carrying an existing signature (a
    row is signed once and every retry resends that signature)."""
    return {
        "Content-Type": "application/json",
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE_VERSION: SIGNATURE_VERSION,
        HEADER_SIGNATURE: signature,
    }


def verify_callback_signature(
    secret: bytes, timestamp: str, nonce: str, body: bytes, signature: str
) -> bool:
    """True when `signature` is the v3 signature of this delivery (constant-time compare)."""
    expected = sign_callback(secret, timestamp, nonce, body)
    return hmac.compare_digest(expected, signature.strip().lower())
