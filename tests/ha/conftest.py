# The session's anvil (tests/evm/conftest.py) for the HA tests: the chain is the judge.
from evm.conftest import anvil, anvil_session  # noqa: F401
