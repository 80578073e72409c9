"""A plan node's predecessor and successor keys, kept on its row (migration 0029).

sql/progress/load_nodes.sql reads them from plan_nodes instead of computing
them per node on every claim. They must equal what the old sub-selects
computed from plan_edges — for every template the engine creates, after any
hand edit of the edges or of a node's key or position, and for the versions
that existed before the migration.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg
import pytest
import schema_rows as rows

from qtg.db import Database
from qtg.db.migrate import migrate
from qtg.services.templates import create_template

Conn = psycopg.Connection[Any]

#: The sub-selects load_nodes.sql ran before migration 0029, per plan node.
LIVE = """
SELECT p.id, p.node_key,
       coalesce((SELECT array_agg(f.node_key ORDER BY f.position)
                 FROM plan_edges e JOIN plan_nodes f ON f.id = e.from_node_id
                 WHERE e.to_node_id = p.id), '{}') AS predecessor_keys,
       coalesce((SELECT array_agg(t.node_key ORDER BY t.position)
                 FROM plan_edges e JOIN plan_nodes t ON t.id = e.to_node_id
                 WHERE e.from_node_id = p.id), '{}') AS successor_keys
FROM plan_nodes p ORDER BY p.id
"""
STORED = "SELECT id, node_key, predecessor_keys, successor_keys FROM plan_nodes ORDER BY id"


def _live(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(LIVE).fetchall()


def _stored(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(STORED).fetchall()


def _random_dag(rng: random.Random, size: int) -> dict[str, Any]:
    """Nodes in a shuffled order, edges only from an earlier to a later one."""
    keys = [f"n{i}" for i in range(size)]
    edges = [
        [keys[a], keys[b]] for a in range(size) for b in range(a + 1, size) if rng.random() < 0.3
    ]
    nodes = [{"key": k, "kind": "action", "action_type": "cex_withdrawal"} for k in keys]
    rng.shuffle(nodes)
    return {"nodes": nodes, "edges": edges}


async def test_every_created_template_stores_what_the_edges_say(db: Database, dsn: str) -> None:
    rng = random.Random(29)
    for i in range(25):
        await create_template(
            db,
            template_key=f"dag.{i}",
            name=f"DAG {i}",
            graph=_random_dag(rng, rng.randint(1, 9)),
            actor="admin",
        )
    with psycopg.connect(dsn) as conn:
        stored = _stored(conn)
        assert stored == _live(conn)
        # the check above can fail: most nodes of these DAGs have neighbours
        assert sum(1 for _, _, before, after in stored if before or after) > 50


async def test_hand_edits_of_edges_and_nodes_are_followed(db: Database, dsn: str) -> None:
    graph = {
        "nodes": [
            {"key": k, "kind": "action", "action_type": "cex_withdrawal"}
            for k in ("a", "b", "c", "d")
        ],
        "edges": [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]],
    }
    created = await create_template(db, template_key="diamond", name="D", graph=graph, actor="x")
    version = created["template_version_id"]
    with psycopg.connect(dsn, autocommit=True) as conn:

        def node(key: str) -> Any:
            row = conn.execute(
                "SELECT id FROM plan_nodes WHERE template_version_id = %s AND node_key = %s",
                (version, key),
            ).fetchone()
            assert row is not None
            return row[0]

        def keys(key: str) -> tuple[list[str], list[str]]:
            row = conn.execute(
                "SELECT predecessor_keys, successor_keys FROM plan_nodes WHERE id = %s",
                (node(key),),
            ).fetchone()
            assert row is not None
            return row[0], row[1]

        assert keys("d") == (["b", "c"], [])
        conn.execute(
            "DELETE FROM plan_edges WHERE from_node_id = %s AND to_node_id = %s",
            (node("c"), node("d")),
        )
        assert keys("d") == (["b"], []) and keys("c") == (["a"], [])
        conn.execute("INSERT INTO plan_edges VALUES (%s, %s, %s)", (version, node("a"), node("d")))
        assert keys("a")[1] == ["b", "c", "d"]
        conn.execute(
            "UPDATE plan_edges SET from_node_id = %s WHERE from_node_id = %s AND to_node_id = %s",
            (node("c"), node("a"), node("d")),
        )
        assert keys("d") == (["b", "c"], []) and keys("a")[1] == ["b", "c"]
        assert keys("c") == (["a"], ["d"])
        conn.execute("UPDATE plan_nodes SET node_key = 'bee' WHERE id = %s", (node("b"),))
        assert keys("d") == (["bee", "c"], []) and keys("a")[1] == ["bee", "c"]
        conn.execute("UPDATE plan_nodes SET position = -1 WHERE id = %s", (node("c"),))
        assert keys("a")[1] == ["c", "bee"] and keys("d")[0] == ["c", "bee"]  # plan order
        assert _stored(conn) == _live(conn)


def test_versions_from_before_the_migration_are_filled_in(empty_dsn: str, tmp_path: Path) -> None:
    migrate(empty_dsn, root=rows.migrations_before(tmp_path, "0029"))
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        plan = rows.plan(conn)  # one node, "step", at position 0
        ids = {"step": plan.plan_node_id}
        for position, key in ((1, "second"), (2, "third")):
            ids[key] = rows.one(
                conn,
                "INSERT INTO plan_nodes (template_version_id, node_key, node_kind, action_type,"
                " position) VALUES (%(version)s, %(key)s, 'action', 'cex_withdrawal', %(position)s)"
                " RETURNING id",
                {"version": plan.version_id, "key": key, "position": position},
            )
        for a, b in (("step", "second"), ("step", "third"), ("second", "third")):
            conn.execute(
                "INSERT INTO plan_edges VALUES (%s, %s, %s)", (plan.version_id, ids[a], ids[b])
            )
    assert migrate(empty_dsn)[0].startswith("0029_")
    with psycopg.connect(empty_dsn) as conn:
        stored = {row[1]: (row[2], row[3]) for row in _stored(conn)}
        assert stored == {
            "step": ([], ["second", "third"]),
            "second": (["step"], ["third"]),
            "third": (["step", "second"], []),
        }
        assert _stored(conn) == _live(conn)


@pytest.mark.parametrize("size", [1, 2, 40])
async def test_a_template_version_of_any_size(db: Database, dsn: str, size: int) -> None:
    rng = random.Random(size)
    await create_template(
        db, template_key=f"size.{size}", name="S", graph=_random_dag(rng, size), actor="x"
    )
    with psycopg.connect(dsn) as conn:
        assert _stored(conn) == _live(conn)
