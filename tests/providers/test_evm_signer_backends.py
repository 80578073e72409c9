"""MG_EVM_SIGNER_BACKEND (issue 45 item 4): which backend start-up builds, what it
refuses, and that the secrets never show in what it says."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest
import trio
from eth_account import Account

from qtg.config import ConfigError, Settings
from qtg.domain.context import SigningIntent, SignRequest
from qtg.providers.evm.pkcs11 import SECP256K1_N, recover_vrs
from qtg.providers.evm.signer import EvmLocalSigner, signer_from_settings

KEY = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
ADDRESS = Account.from_key(KEY).address
PASSPHRASE = "not-in-any-message"


def keystore(tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(Account.encrypt(KEY, PASSPHRASE, iterations=2**10)))
    secret = tmp_path / "pass"
    secret.write_text(PASSPHRASE + "\n")
    return str(path), str(secret)


def test_a_key_in_the_environment_next_to_a_keystore_stops_start_up(tmp_path) -> None:
    path, secret = keystore(tmp_path)
    with pytest.raises(ConfigError, match="unset MG_EVM_SIGNER_PRIVATE_KEY"):
        Settings.from_env(
            {
                "MG_EVM_SIGNER_BACKEND": "keystore",
                "MG_EVM_SIGNER_KEYSTORE_FILE": path,
                "MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE": secret,
                "MG_EVM_SIGNER_PRIVATE_KEY": KEY,
            }
        )
    with pytest.raises(ConfigError, match="MG_EVM_SIGNER_BACKEND"):
        Settings.from_env({"MG_EVM_SIGNER_BACKEND": "vault"})


def test_the_keystore_backend_decrypts_and_a_wrong_passphrase_names_only_settings(
    tmp_path,
) -> None:
    path, secret = keystore(tmp_path)
    settings = Settings.from_env(
        {
            "MG_EVM_SIGNER_BACKEND": "keystore",
            "MG_EVM_SIGNER_KEYSTORE_FILE": path,
            "MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE": secret,
        }
    )
    signer = signer_from_settings(settings)
    assert signer is not None and signer.address == ADDRESS and signer.backend == "keystore"
    assert KEY[2:] not in repr(signer)
    (tmp_path / "pass").write_text("wrong")
    with pytest.raises(ConfigError) as refused:
        signer_from_settings(settings)
    assert "cannot be decrypted" in str(refused.value) and "wrong" not in str(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    with pytest.raises(ConfigError, match="needs MG_EVM_SIGNER_KEYSTORE_FILE"):
        signer_from_settings(Settings.from_env({"MG_EVM_SIGNER_BACKEND": "keystore"}))


def test_the_private_key_backend_warns_that_it_is_for_development(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="qtg.providers.evm.signer"):
        signer = signer_from_settings(Settings.from_env({"MG_EVM_SIGNER_PRIVATE_KEY": KEY}))
    assert isinstance(signer, EvmLocalSigner) and signer.backend == "private_key"
    [record] = caplog.records
    assert "development only" in record.getMessage()
    assert KEY[2:] not in caplog.text
    assert signer_from_settings(Settings.from_env({})) is None  # nothing set: no signer


def test_every_backend_signs_only_its_allowed_payload(tmp_path) -> None:
    path, secret = keystore(tmp_path)
    signer = EvmLocalSigner.from_keystore(path, secret)
    payload = json.dumps(
        {
            "from": ADDRESS,
            "to": ADDRESS,
            "value": "1",
            "data": "0x",
            "gas": "21000",
            "maxFeePerGas": "1000000000",
            "maxPriorityFeePerGas": "1",
            "nonce": "0",
            "chainId": "31337",
            "type": 2,
        }
    )

    digest = hashlib.sha256(payload.encode()).hexdigest()

    def request(allowed: str) -> SignRequest:
        return SignRequest(
            request_id="r", request_node_id="n", payload_format="evm_tx_json", payload=payload,
            payload_hash=digest, metadata={},
            signing_intent=SigningIntent(
                action="evm_transfer", asset="ETH", amount="1", destination=ADDRESS,
                allowed_payload_hash=allowed,
            ),
        )  # fmt: skip

    raw = trio.run(signer.sign, request(digest))
    assert Account.recover_transaction(raw) == ADDRESS
    from qtg.providers.base import SigningRefused

    with pytest.raises(SigningRefused):
        trio.run(signer.sign, request("00" * 32))


def test_recovery_finds_v_and_folds_a_high_s() -> None:
    """What the PKCS#11 backend does with a token's raw r||s: fold s into the lower
    half (EIP-2) and find the recovery id whose key is the token's."""
    from eth_keys import KeyAPI

    key = KeyAPI.PrivateKey(bytes.fromhex(KEY[2:]))
    point = b"\x04" + key.public_key.to_bytes()
    for n in range(4):
        digest = hashlib.sha256(str(n).encode()).digest()
        sig = key.sign_msg_hash(digest)
        high_s = SECP256K1_N - sig.s  # the same signature, as a token may return it
        raw = sig.r.to_bytes(32, "big") + high_s.to_bytes(32, "big")
        assert recover_vrs(digest, raw, point) == (sig.v, sig.r, sig.s)
    from qtg.providers.base import SigningRefused

    other = b"\x04" + KeyAPI.PrivateKey(b"\x01" * 32).public_key.to_bytes()
    with pytest.raises(SigningRefused, match="does not recover"):
        recover_vrs(hashlib.sha256(b"0").digest(), raw, other)
