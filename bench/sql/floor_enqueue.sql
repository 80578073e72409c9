-- One READY node (bench/floor.py); its commit starts the pickup.
INSERT INTO floor_nodes (params) VALUES (%(params)s) RETURNING id
