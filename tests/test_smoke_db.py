from qtg.db import Database, Query


async def test_database_roundtrip_json(db: Database) -> None:
    row = await db.fetchrow(Query("t/json", "SELECT %(a)s::jsonb AS j"), {"a": '{"x": 1}'})
    assert row == {"j": {"x": 1}}
