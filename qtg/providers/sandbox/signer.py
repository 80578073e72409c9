"""The sandbox signer: HMAC-SHA256 over the payload, refusing anything not approved.

HMAC from the standard library is enough to make signing real in the ways
qtg depends on: a signature verifies only for the exact payload and key, and
the signer refuses a payload whose sha256 is not the hash the dispatcher
approved (`signing_intent.allowed_payload_hash`), which is the check a real
custody signer makes before it touches a key. No new dependency is needed.

`signer_address` is `0x` + 40 hex derived from the key by sha256. It is NOT an
EVM address (no secp256k1 key, no keccak): it only gives the health worker a
stable, nonzero, EVM-shaped identity that changes when the key changes, so
the expected-versus-observed signer identity check can be exercised.
"""

from __future__ import annotations

import hashlib
import hmac

from qtg.domain.context import SignRequest
from qtg.providers.base import HealthReport, HealthState, SigningRefused
from qtg.providers.sandbox.lanes import SIGNER_KEY

SCHEME = "hmac-sha256"


class SandboxSigner:
    def __init__(self, secret: str | bytes, *, key: str = SIGNER_KEY) -> None:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if not raw:
            raise ValueError("the sandbox signer's key must not be empty")
        self.key = key
        self._secret = raw
        self.signer_address = _address(raw)

    def __repr__(self) -> str:  # never show the secret
        return f"SandboxSigner(key={self.key!r}, address={self.signer_address})"

    async def sign(self, request: SignRequest) -> str:
        actual = hashlib.sha256(request.payload.encode()).hexdigest()
        if actual != request.payload_hash:
            raise SigningRefused(
                f"payload sha256 is {actual}, but the request says {request.payload_hash}",
                code="PAYLOAD_HASH_MISMATCH",
            )
        allowed = request.signing_intent.allowed_payload_hash
        if actual != allowed:
            raise SigningRefused(
                f"payload sha256 {actual} is not the allowed payload hash {allowed}",
                code="PAYLOAD_NOT_ALLOWED",
            )
        return self._mac(request.payload)

    def verify(self, payload: str, signature: str | None) -> bool:
        """True if `signature` is this signer's signature of exactly `payload`."""
        if not signature:
            return False
        return hmac.compare_digest(self._mac(payload), signature.lower())

    async def health(self) -> HealthReport:
        return HealthReport(
            state=HealthState.HEALTHY,
            detail={"scheme": SCHEME},
            signer_address=self.signer_address,
        )

    def _mac(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()


def _address(secret: bytes) -> str:
    digest = hashlib.sha256(b"qtg-sandbox-signer-address\x00" + secret).digest()[-20:]
    if not any(digest):  # the health worker refuses the zero address
        digest = digest[:-1] + b"\x01"
    return "0x" + digest.hex()
