"""What every service pass is handed: the database, the settings and the providers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qtg.config import Settings
from qtg.db import Database

if TYPE_CHECKING:
    from qtg.providers.registry import ProviderRegistry


@dataclass(frozen=True, slots=True)
class ServiceContext:
    db: Database
    settings: Settings
    providers: ProviderRegistry
