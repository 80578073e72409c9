INSERT INTO template_versions (template_id, version, graph, graph_hash, risk_controls, created_by)
VALUES (%(template_id)s, %(version)s, %(graph)s, %(graph_hash)s, %(risk_controls)s, %(created_by)s)
RETURNING id
