"""The database edge: pool and transactions, named SQL, migrations, the LISTEN hub."""

from qtg.db.hub import CHANNELS, ListenHub, Wakeup
from qtg.db.pool import Database, Jsonb, PoolTimeout, ReadOnlyServer, Tx, session_params
from qtg.db.queries import Query, QueryFamily, UnknownQueryError, sql_family

__all__ = [
    "CHANNELS",
    "Database",
    "Jsonb",
    "ListenHub",
    "PoolTimeout",
    "Query",
    "QueryFamily",
    "ReadOnlyServer",
    "Tx",
    "UnknownQueryError",
    "Wakeup",
    "session_params",
    "sql_family",
]
