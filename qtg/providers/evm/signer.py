"""The EVM signer (issue 11) and its key backends (issue 45 item 4).

One signer contract, three places for the key (MG_EVM_SIGNER_BACKEND):

- `private_key`: a hex key in MG_EVM_SIGNER_PRIVATE_KEY or a plain file
  (MG_EVM_SIGNER_KEY_FILE). Development only: start-up says so in a warning.
- `keystore`: a Web3 Secret Storage JSON file (MG_EVM_SIGNER_KEYSTORE_FILE),
  decrypted at start with the passphrase read from MG_EVM_SIGNER_KEYSTORE_
  PASSPHRASE_FILE. No key in the environment or in a plain file; the decrypted
  key is in this process's memory while it runs.
- `pkcs11`: a key generated inside a PKCS#11 token, non-extractable; the
  runtime hands the token a digest and gets (r, s) back, and never holds the
  key (qtg/providers/evm/pkcs11.py).

`EvmSigner.sign` is the same for all three: it signs only a payload whose sha256
is the signing intent's allowed hash and whose `from` is this signer's address,
and returns the raw signed transaction (lowercase hex): for EVM the signature
and the broadcastable bytes are one thing. `repr` and `health()` show the
address, never the key. (The custody checks against the approved movement run
before this, in qtg/services/custody.py.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_utils import to_checksum_address

from qtg.config import ConfigError, Settings
from qtg.domain.context import SignRequest
from qtg.providers.base import HealthReport, HealthState, SigningRefused

log = logging.getLogger("qtg.providers.evm.signer")

#: The one EVM signer slot: every backend signs under this key (prepared actions
#: and the signers roster name it), so changing backend keeps the roster's row.
SIGNER_KEY = "evm_local"


class EvmSigner:
    """The contract every backend shares; a backend implements `_sign_unsigned`."""

    key = SIGNER_KEY
    backend = "abstract"
    address: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend}, address={self.address})"

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
        raw = await self._sign_unsigned(unsigned)
        return "0x" + raw.hex()

    async def _sign_unsigned(self, unsigned: dict[str, Any]) -> bytes:
        raise NotImplementedError

    async def health(self) -> HealthReport:
        return HealthReport(
            state=HealthState.HEALTHY,
            signer_address=self.address,
            detail={"backend": self.backend},
        )


class EvmLocalSigner(EvmSigner):
    """The key in this process's memory (backends `private_key` and `keystore`)."""

    backend = "private_key"

    def __init__(self, private_key: str, *, backend: str = "private_key") -> None:
        try:
            self._account = Account.from_key(private_key)
        except Exception:  # the message could echo the key: never chain it
            raise ConfigError(
                "MG_EVM_SIGNER_PRIVATE_KEY / MG_EVM_SIGNER_KEY_FILE: not a valid private key"
            ) from None
        self.backend = backend
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

    @classmethod
    def from_keystore(cls, keystore_file: str, passphrase_file: str) -> EvmLocalSigner:
        """Decrypt a Web3 Secret Storage file with the passphrase in `passphrase_file`
        (its trailing newline dropped). Errors name the setting, never the secret."""
        try:
            keystore = json.loads(Path(keystore_file).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"MG_EVM_SIGNER_KEYSTORE_FILE: cannot read {keystore_file!r} as a keystore "
                f"({type(exc).__name__})"
            ) from None
        try:
            passphrase = Path(passphrase_file).read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE: cannot read {passphrase_file!r} "
                f"({type(exc).__name__})"
            ) from None
        try:
            key = Account.decrypt(keystore, passphrase)
        except Exception:  # a wrong passphrase is a ValueError whose text is harmless, but
            # a malformed file's could carry material: name the settings only
            raise ConfigError(
                "MG_EVM_SIGNER_KEYSTORE_FILE / MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE: the "
                "keystore cannot be decrypted with that passphrase"
            ) from None
        signer = cls("0x" + bytes(key).hex(), backend="keystore")
        del key
        return signer

    async def _sign_unsigned(self, unsigned: dict[str, Any]) -> bytes:
        return bytes(self._account.sign_transaction(unsigned).raw_transaction)


def signer_from_settings(settings: Settings) -> EvmSigner | None:
    """The signer MG_EVM_SIGNER_BACKEND names, or None (`private_key` with no key set)."""
    backend = settings.evm_signer_backend
    if backend == "keystore":
        keystore = settings.evm_signer_keystore_file
        passphrase = settings.evm_signer_keystore_passphrase_file
        if not keystore or not passphrase:
            raise ConfigError(
                "MG_EVM_SIGNER_BACKEND=keystore needs MG_EVM_SIGNER_KEYSTORE_FILE and "
                "MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE"
            )
        return EvmLocalSigner.from_keystore(keystore, passphrase)
    if backend == "pkcs11":
        from qtg.providers.evm.pkcs11 import EvmPkcs11Signer

        return EvmPkcs11Signer.from_settings(settings)
    signer = EvmLocalSigner.from_settings(
        settings.evm_signer_private_key, settings.evm_signer_key_file
    )
    if signer is not None:
        log.warning(
            "the EVM signer's key is a plain setting or file (MG_EVM_SIGNER_BACKEND="
            "private_key): for development only; use keystore or pkcs11 for real funds",
            extra={"signer_address": signer.address},
        )
    return signer
