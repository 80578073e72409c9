-- A proposed template version awaiting review; the insert trigger notifies
-- qtg_expire so the expiration worker learns the new deadline.
INSERT INTO template_proposals (
    template_key, name, description, graph, risk_controls, proposed_by, expires_at
)
VALUES (
    %(template_key)s, %(name)s, %(description)s, %(graph)s, %(risk_controls)s, %(actor)s,
    now() + make_interval(secs => %(ttl_seconds)s)
)
RETURNING *
