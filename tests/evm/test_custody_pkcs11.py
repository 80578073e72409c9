"""Issue 45 item 4 under a real `bin/qtg-runtime`, a real anvil and SoftHSM2: a transfer
signed inside a PKCS#11 token lands, and the runtime never had the key.

The token lives in the test's own directory (SOFTHSM2_CONF); its secp256k1 key pair is
generated inside it, sensitive and non-extractable, by qtg.providers.evm.pkcs11.generate_key
in a separate process. `.ci/run` installs softhsm2 and the `pkcs11` extra, so this runs
there unskipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from runtime.rt_procs import all_completed, query, wait_until

from evm.test_custody import launch_keyless, logged
from evm.test_transient_and_lanes import fresh_address, seed

pytestmark = pytest.mark.slow

MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")
PIN = "246810"
WEI = 10**18
HEX_KEY = re.compile(r"(0x)?[0-9a-fA-F]{64}")

#: Run in a fresh process (a PKCS#11 module is initialised once per process): make the
#: key inside the token, then report what the token says about it.
KEYGEN = """
import json, sys
import pkcs11
from pkcs11 import Attribute, KeyType, ObjectClass
from qtg.providers.evm.pkcs11 import generate_key
module, token_label, key_label, pin = sys.argv[1:]
address = generate_key(module, token_label, key_label, pin)
token = pkcs11.lib(module).get_token(token_label=token_label)
with token.open(user_pin=pin) as session:
    key = session.get_key(ObjectClass.PRIVATE_KEY, KeyType.EC, label=key_label)
    try:
        key[Attribute.VALUE]
        readable = True
    except pkcs11.exceptions.PKCS11Error:
        readable = False
    print(json.dumps({
        "address": address,
        "extractable": bool(key[Attribute.EXTRACTABLE]),
        "sensitive": bool(key[Attribute.SENSITIVE]),
        "value_readable": readable,
    }))
"""


@pytest.fixture
def token(tmp_path: Path) -> dict[str, str]:
    if not MODULE.exists():
        pytest.skip("SoftHSM2 is not installed (apt-get install softhsm2; .ci/run does)")
    pytest.importorskip("pkcs11", reason="the pkcs11 extra is not installed (.ci/run does)")
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    conf = tmp_path / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\n")
    env = {**os.environ, "SOFTHSM2_CONF": str(conf)}
    subprocess.run(
        ["softhsm2-util", "--init-token", "--free", "--label", "qtg-test", "--pin", PIN,
         "--so-pin", "13579"],
        env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    made = subprocess.run(
        [sys.executable, "-c", KEYGEN, str(MODULE), "qtg-test", "evm-signer", PIN],
        env=env, check=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    facts = json.loads(made.stdout)
    pin_file = tmp_path / "pin"
    pin_file.write_text(PIN + "\n")
    return {**facts, "conf": str(conf), "pin_file": str(pin_file)}


def test_a_transfer_signed_inside_softhsm2_lands_with_no_key_in_the_runtime(
    anvil, dsn, procs, token
) -> None:
    # the key was made inside the token and can never leave it
    assert token["extractable"] is False and token["sensitive"] is True
    assert token["value_readable"] is False
    hsm = token["address"]
    anvil.call("anvil_setBalance", hsm, hex(10 * WEI))
    to = fresh_address()
    proc = launch_keyless(
        procs,
        dsn,
        anvil,
        SOFTHSM2_CONF=token["conf"],
        MG_EVM_SIGNER_BACKEND="pkcs11",
        MG_EVM_SIGNER_PKCS11_MODULE=str(MODULE),
        MG_EVM_SIGNER_PKCS11_TOKEN_LABEL="qtg-test",
        MG_EVM_SIGNER_PKCS11_KEY_LABEL="evm-signer",
        MG_EVM_SIGNER_PKCS11_PIN_FILE=token["pin_file"],
    )
    proc.wait_ready()
    # the running runtime's own environment: no private key setting, nothing key-shaped
    environ = Path(f"/proc/{proc.proc.pid}/environ").read_bytes().decode(errors="replace")
    variables = dict(item.split("=", 1) for item in environ.split("\0") if "=" in item)
    assert "MG_EVM_SIGNER_PRIVATE_KEY" not in variables
    assert "MG_EVM_SIGNER_KEY_FILE" not in variables
    assert variables["MG_EVM_SIGNER_BACKEND"] == "pkcs11"
    assert not [k for k, v in variables.items() if k.startswith("MG_") and HEX_KEY.search(v)]
    # the signer the runtime registered is the token's key
    wait_until(
        lambda: query(
            dsn,
            "SELECT 1 FROM signers WHERE signer_key = 'evm_local' AND observed_signer_address = %s",
            (hsm.lower(),),
        ),
        30,
        "the token's address in the signers roster",
    )
    ids = seed(dsn, [(to, "1.5")], key="custody.pkcs11")
    wait_until(lambda: all_completed(dsn, ids), 30, "the HSM-signed transfer to complete")
    assert anvil.balance(to) == 3 * WEI // 2
    [(tx_hash,)] = query(dsn, "SELECT tx_hash FROM evm_nonce_reservations")
    mined = anvil.call("eth_getTransactionByHash", tx_hash)
    assert mined["from"].lower() == hsm.lower() and mined["blockNumber"] is not None
    assert anvil.call("eth_getTransactionReceipt", tx_hash)["status"] == "0x1"
    assert PIN not in logged(proc)
