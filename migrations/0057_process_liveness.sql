-- Issue 43 item 7: dead owners are noticed in seconds.
--
-- A node left SUBMITTING by a process that is gone (kill -9, a lost host) used
-- to wait MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS (120 s) before recovery
-- asked recover(): nothing said that its owner was gone. Now the write-ahead
-- records which process owns the attempt (submitting_owner: its instance id,
-- qtg.services.heartbeats.ProcessId), and every runtime process beats its row
-- of runtime_processes (alive_at) every fifth of
-- MG_NODE_RECOVERY_DEAD_OWNER_SECONDS. A SUBMITTING node whose owner has not
-- beaten for that long is a recovery candidate at once. A submit in flight
-- holds its node row (qtg.services.dispatch.submit_all), which recovery's
-- claims skip, and recovery's own write is taken under a lease and refused if
-- the node moved on (migration 0056): an owner wrongly judged dead costs a
-- recover() call, never a second side effect.
--
-- One row per process start; rows of processes gone are kept for an operator
-- (what ran, until when) and pruned with the heartbeats' retention.
CREATE TABLE runtime_processes (
    instance_id   text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL CHECK (pid >= 0),
    network_class text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    alive_at      timestamptz NOT NULL DEFAULT now()
);

-- NULL: written ahead by no runtime process (a test, a tool): the grace alone applies.
ALTER TABLE movement_request_nodes ADD COLUMN submitting_owner text;

-- Recovery's next-due read and its dead-owner test walk only SUBMITTING nodes (few).
CREATE INDEX movement_request_nodes_submitting_owner
    ON movement_request_nodes (submitting_owner, id)
    WHERE node_state = 'SUBMITTING';
