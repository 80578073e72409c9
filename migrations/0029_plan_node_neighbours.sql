-- Issue 29: a plan node's direct predecessors and successors, kept on its row.
--
-- sql/progress/load_nodes.sql ran two correlated sub-selects per node (its
-- predecessor keys and its successor keys, each an index walk of plan_edges
-- joined to plan_nodes) on every claim of the dispatcher and of the observer:
-- the drain's most expensive statement (0.29 calls and ~0.16 ms per node), and
-- 40 % of it those sub-selects. A plan version's edges are written once, when
-- the version is created; the keys are now computed then, by the same
-- expressions, into plan_nodes.predecessor_keys / successor_keys (plan order).
--
-- They cannot drift from plan_edges: any change to plan_edges, or to a plan
-- node's key or position (what the arrays hold and are ordered by), recomputes
-- the arrays of that plan version in the same statement. Nothing in qtg edits
-- a plan after it is created; a hand edit is what the dispatcher's plan-hash
-- drift check exists for, and the arrays follow it all the same.

ALTER TABLE plan_nodes
    ADD COLUMN predecessor_keys text[] NOT NULL DEFAULT '{}',
    ADD COLUMN successor_keys text[] NOT NULL DEFAULT '{}';

-- The expressions sql/progress/load_nodes.sql used, for every node of the versions.
CREATE FUNCTION qtg_plan_neighbours(p_versions uuid[]) RETURNS void
LANGUAGE sql AS $$
    UPDATE plan_nodes p
    SET predecessor_keys = coalesce((SELECT array_agg(f.node_key ORDER BY f.position)
                                     FROM plan_edges e JOIN plan_nodes f ON f.id = e.from_node_id
                                     WHERE e.to_node_id = p.id), '{}'),
        successor_keys = coalesce((SELECT array_agg(t.node_key ORDER BY t.position)
                                   FROM plan_edges e JOIN plan_nodes t ON t.id = e.to_node_id
                                   WHERE e.from_node_id = p.id), '{}')
    WHERE p.template_version_id = ANY(p_versions)
$$;

SELECT qtg_plan_neighbours(ARRAY(SELECT id FROM template_versions));

-- plan_edges: once per statement, for the versions it touched. A transition
-- table belongs to one event, so each event has its own trigger.
CREATE FUNCTION qtg_plan_edges_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM qtg_plan_neighbours(ARRAY(SELECT DISTINCT template_version_id FROM new_edges));
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM qtg_plan_neighbours(ARRAY(SELECT DISTINCT template_version_id FROM old_edges));
    ELSE
        PERFORM qtg_plan_neighbours(ARRAY(
            SELECT template_version_id FROM new_edges
            UNION SELECT template_version_id FROM old_edges));
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER plan_edges_inserted AFTER INSERT ON plan_edges
    REFERENCING NEW TABLE AS new_edges
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_plan_edges_changed();
CREATE TRIGGER plan_edges_deleted AFTER DELETE ON plan_edges
    REFERENCING OLD TABLE AS old_edges
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_plan_edges_changed();
CREATE TRIGGER plan_edges_updated AFTER UPDATE ON plan_edges
    REFERENCING OLD TABLE AS old_edges NEW TABLE AS new_edges
    FOR EACH STATEMENT EXECUTE FUNCTION qtg_plan_edges_changed();

-- plan_nodes: a key or a position changed (the recompute itself writes
-- neither, so it does not fire this again).
CREATE FUNCTION qtg_plan_node_renamed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM qtg_plan_neighbours(ARRAY[NEW.template_version_id, OLD.template_version_id]);
    RETURN NULL;
END;
$$;
CREATE TRIGGER plan_nodes_renamed AFTER UPDATE OF node_key, position, template_version_id
    ON plan_nodes
    FOR EACH ROW
    WHEN (NEW.node_key IS DISTINCT FROM OLD.node_key
          OR NEW.position IS DISTINCT FROM OLD.position
          OR NEW.template_version_id IS DISTINCT FROM OLD.template_version_id)
    EXECUTE FUNCTION qtg_plan_node_renamed();
