"""The database edge: pool and transactions, named SQL, migrations, the LISTEN hub."""

from qtg.db.hub import CHANNELS, ListenHub, Wakeup
from qtg.db.pool import Database, Jsonb, PoolTimeout, Tx
from qtg.db.queries import Query, QueryFamily, UnknownQueryError, sql_family

__all__ = [
    "CHANNELS",
    "Database",
    "Jsonb",
    "ListenHub",
    "PoolTimeout",
    "Query",
    "QueryFamily",
    "Tx",
    "UnknownQueryError",
    "Wakeup",
    "sql_family",
]
