"""The PKCS#11 EVM signer backend (issue 45 item 4): the key never leaves the token.

The secp256k1 key pair is generated inside the token (`generate_key`, or any
tool of the HSM's vendor) with CKA_SENSITIVE true and CKA_EXTRACTABLE false; a
key that could be exported is refused at start. Signing is by digest: the
runtime computes the EIP-1559 signing hash (keccak of the unsigned typed
transaction), the token signs it with CKM_ECDSA and returns (r, s); s is folded
into the lower half of the curve order (EIP-2), and the recovery id is the one
of {0, 1} whose recovered public key is the token's (the token does not say).

The module (python-pkcs11, the optional extra `pkcs11`) is a C binding, so it is
imported only when MG_EVM_SIGNER_BACKEND=pkcs11. Its calls block: they run in a
worker thread, one at a time (one session, one signing operation at a time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from eth_account._utils.legacy_transactions import (
    encode_transaction,
    serializable_unsigned_transaction_from_dict,
)
from eth_account.typed_transactions import TypedTransaction
from eth_keys import KeyAPI
from eth_utils import keccak, to_checksum_address

from qtg.config import ConfigError, Settings
from qtg.providers.base import HealthReport, HealthState, SigningRefused
from qtg.providers.evm.signer import EvmSigner

#: The order of secp256k1's group.
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
CURVE = "secp256k1"


def _pkcs11() -> Any:
    try:
        import pkcs11
    except ImportError:  # the extra is not installed
        raise ConfigError(
            "MG_EVM_SIGNER_BACKEND=pkcs11 needs python-pkcs11: pip install 'qtg[pkcs11]'"
        ) from None
    return pkcs11


def _uncompressed_point(ec_point: bytes) -> bytes:
    """CKA_EC_POINT is a DER OCTET STRING around 04||x||y (some tokens give it bare)."""
    if len(ec_point) == 65 and ec_point[0] == 4:
        return ec_point
    if len(ec_point) == 67 and ec_point[0] == 4 and ec_point[1] == 65 and ec_point[2] == 4:
        return ec_point[2:]
    raise ConfigError("MG_EVM_SIGNER_PKCS11_KEY_LABEL: the key's EC point is not uncompressed")


def address_of(public_point: bytes) -> str:
    """The EVM address of an uncompressed secp256k1 point: keccak(x||y)[-20:]."""
    return to_checksum_address(keccak(public_point[1:])[-20:])


def recover_vrs(digest: bytes, raw_signature: bytes, public_point: bytes) -> tuple[int, int, int]:
    """(recovery id, r, s) of a raw r||s signature over `digest` by the key whose
    point is `public_point`, with s in the lower half (EIP-2). Raises SigningRefused
    when neither recovery id gives that key (the token signed with another key)."""
    if len(raw_signature) != 64:
        raise SigningRefused("the token returned a signature that is not r||s of 32 bytes each")
    r = int.from_bytes(raw_signature[:32], "big")
    s = int.from_bytes(raw_signature[32:], "big")
    if s > SECP256K1_N // 2:
        s = SECP256K1_N - s
    for v in (0, 1):
        try:
            recovered = KeyAPI.Signature(vrs=(v, r, s)).recover_public_key_from_msg_hash(digest)
        except Exception:
            continue
        if recovered.to_bytes() == public_point[1:]:
            return v, r, s
    raise SigningRefused("the token's signature does not recover to the token's public key")


class EvmPkcs11Signer(EvmSigner):
    backend = "pkcs11"

    def __init__(self, module: str, token_label: str, key_label: str, pin: str) -> None:
        p11 = _pkcs11()
        from pkcs11 import Attribute, KeyType, ObjectClass

        try:
            lib = p11.lib(module)
            token = lib.get_token(token_label=token_label)
            self._session = token.open(user_pin=pin)
        except ConfigError:
            raise
        except Exception as exc:  # the PIN is never in these messages; name what failed
            raise ConfigError(
                f"MG_EVM_SIGNER_PKCS11_MODULE / _TOKEN_LABEL / _PIN_FILE: cannot open token "
                f"{token_label!r} with {module!r} ({type(exc).__name__})"
            ) from None
        try:
            self._private = self._session.get_key(
                object_class=ObjectClass.PRIVATE_KEY, key_type=KeyType.EC, label=key_label
            )
            public = self._session.get_key(
                object_class=ObjectClass.PUBLIC_KEY, key_type=KeyType.EC, label=key_label
            )
        except Exception as exc:
            raise ConfigError(
                f"MG_EVM_SIGNER_PKCS11_KEY_LABEL: no single EC key pair {key_label!r} in token "
                f"{token_label!r} ({type(exc).__name__})"
            ) from None
        from pkcs11.util.ec import encode_named_curve_parameters

        if self._private[Attribute.EXTRACTABLE] or not self._private[Attribute.SENSITIVE]:
            raise ConfigError(
                f"MG_EVM_SIGNER_PKCS11_KEY_LABEL: key {key_label!r} can leave the token "
                "(CKA_EXTRACTABLE true or CKA_SENSITIVE false); generate a non-extractable one"
            )
        if public[Attribute.EC_PARAMS] != encode_named_curve_parameters(CURVE):
            raise ConfigError(f"MG_EVM_SIGNER_PKCS11_KEY_LABEL: key {key_label!r} is not {CURVE}")
        self._public = _uncompressed_point(bytes(public[Attribute.EC_POINT]))
        self.address = address_of(self._public)
        self.token_label = token_label
        self._lock = trio.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> EvmPkcs11Signer:
        missing = [
            env
            for env, value in (
                ("MG_EVM_SIGNER_PKCS11_MODULE", settings.evm_signer_pkcs11_module),
                ("MG_EVM_SIGNER_PKCS11_TOKEN_LABEL", settings.evm_signer_pkcs11_token_label),
                ("MG_EVM_SIGNER_PKCS11_KEY_LABEL", settings.evm_signer_pkcs11_key_label),
                ("MG_EVM_SIGNER_PKCS11_PIN_FILE", settings.evm_signer_pkcs11_pin_file),
            )
            if not value
        ]
        if missing:
            raise ConfigError(f"MG_EVM_SIGNER_BACKEND=pkcs11 needs {', '.join(missing)}")
        assert settings.evm_signer_pkcs11_pin_file is not None  # for mypy: checked above
        try:
            pin = Path(settings.evm_signer_pkcs11_pin_file).read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"MG_EVM_SIGNER_PKCS11_PIN_FILE: cannot read "
                f"{settings.evm_signer_pkcs11_pin_file!r} ({type(exc).__name__})"
            ) from None
        return cls(
            str(settings.evm_signer_pkcs11_module),
            str(settings.evm_signer_pkcs11_token_label),
            str(settings.evm_signer_pkcs11_key_label),
            pin,
        )

    def _sign_digest(self, digest: bytes) -> bytes:
        from pkcs11 import Mechanism

        return bytes(self._private.sign(digest, mechanism=Mechanism.ECDSA))

    async def _sign_unsigned(self, unsigned: dict[str, Any]) -> bytes:
        tx = serializable_unsigned_transaction_from_dict(unsigned)
        digest = bytes(tx.hash())
        async with self._lock:
            raw = await trio.to_thread.run_sync(self._sign_digest, digest)
        recovery_id, r, s = recover_vrs(digest, raw, self._public)
        if isinstance(tx, TypedTransaction):
            v = recovery_id  # typed transactions carry the y parity
        else:
            v = recovery_id + 35 + 2 * int(unsigned["chainId"])  # EIP-155
        return bytes(encode_transaction(tx, vrs=(v, r, s)))

    async def health(self) -> HealthReport:
        return HealthReport(
            state=HealthState.HEALTHY,
            signer_address=self.address,
            detail={"backend": self.backend, "token": self.token_label},
        )


def generate_key(module: str, token_label: str, key_label: str, pin: str) -> str:
    """Generate a secp256k1 key pair inside the token, sensitive and non-extractable
    (the private key can sign and do nothing else); its EVM address."""
    p11 = _pkcs11()
    from pkcs11 import Attribute, KeyType
    from pkcs11.util.ec import encode_named_curve_parameters

    token = p11.lib(module).get_token(token_label=token_label)
    with token.open(user_pin=pin, rw=True) as session:
        params = session.create_domain_parameters(
            KeyType.EC, {Attribute.EC_PARAMS: encode_named_curve_parameters(CURVE)}, local=True
        )
        public, _ = params.generate_keypair(
            store=True,
            label=key_label,
            public_template={Attribute.VERIFY: True},
            private_template={
                Attribute.SIGN: True,
                Attribute.SENSITIVE: True,
                Attribute.EXTRACTABLE: False,
                Attribute.DECRYPT: False,
                Attribute.UNWRAP: False,
                Attribute.DERIVE: False,
            },
        )
        return address_of(_uncompressed_point(bytes(public[Attribute.EC_POINT])))
