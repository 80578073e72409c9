"""The local-key EVM signer (issue 11): eth-account, key from a setting or a file.

The key lives only in the eth-account object; `repr` and `health()` show the
address, never the key. `sign` signs only a payload whose sha256 is the signing
intent's allowed hash, and returns the raw signed transaction (lowercase hex):
for EVM the signature and the broadcastable bytes are one thing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from eth_account import Account
from eth_utils import to_checksum_address

from qtg.config import ConfigError
from qtg.domain.context import SignRequest
from qtg.providers.base import HealthReport, HealthState, SigningRefused

SIGNER_KEY = "evm_local"


class EvmLocalSigner:
    key = SIGNER_KEY

    def __init__(self, private_key: str) -> None:
        try:
            self._account = Account.from_key(private_key)
        except Exception:  # the message could echo the key: never chain it
            raise ConfigError(
                "MG_EVM_SIGNER_PRIVATE_KEY / MG_EVM_SIGNER_KEY_FILE: not a valid private key"
            ) from None
        self.address: str = self._account.address

    @classmethod
    def from_settings(cls, private_key: str | None, key_file: str | None) -> EvmLocalSigner | None:
        if key_file:
            try:
                private_key = Path(key_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"MG_EVM_SIGNER_KEY_FILE: cannot read {key_file!r}: {exc}"
                ) from None
        return cls(private_key) if private_key else None

    def __repr__(self) -> str:
        return f"EvmLocalSigner(address={self.address})"

    async def sign(self, request: SignRequest) -> str:
        digest = hashlib.sha256(request.payload.encode()).hexdigest()
        if digest != request.signing_intent.allowed_payload_hash or digest != request.payload_hash:
            raise SigningRefused("payload hash is not the signing intent's allowed hash")
        tx = json.loads(request.payload)
        if tx.get("from", "").lower() != self.address.lower():
            raise SigningRefused(
                f"transaction is from {tx.get('from')!r}, signer is {self.address}"
            )
        # "qtg": what the transaction is for (a CCIP send's lane, token, fee), covered by
        # the payload hash the signing intent allows but not part of the transaction.
        unsigned = {k: v for k, v in tx.items() if k not in ("from", "qtg")}
        unsigned["to"] = to_checksum_address(unsigned["to"])  # eth-account refuses lowercase
        for field in ("value", "gas", "maxFeePerGas", "maxPriorityFeePerGas", "nonce", "chainId"):
            unsigned[field] = int(unsigned[field])
        signed = self._account.sign_transaction(unsigned)
        return "0x" + bytes(signed.raw_transaction).hex()

    async def health(self) -> HealthReport:
        return HealthReport(state=HealthState.HEALTHY, signer_address=self.address)
