from __future__ import annotations

from evm.conftest import anvil, anvil_session  # noqa: F401  (the same real anvil)
