-- Issue 29: a request's APPROVED → EXECUTING move no longer wakes the dispatchers.
-- That move is made by a dispatcher itself, in the write-ahead transaction of the
-- request's first node — after its claim — so its qtg_dispatch woke every
-- dispatcher for a pass that found nothing new: one empty claim per movement
-- started, 200 a second during a burst of approvals. The work it could point at
-- had already sent its own wake-up (a node made READY notifies on its own, and the
-- claim takes APPROVED and EXECUTING requests alike). Every other move into
-- EXECUTING — an operator's resume out of MANUAL_INTERVENTION, the end of a
-- manual action — still wakes them, as does APPROVED.
CREATE OR REPLACE FUNCTION qtg_after_request_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_created', NULL, NEW.request_state,
            jsonb_build_object('template_version_id', NEW.template_version_id));
    ELSE
        IF NEW.request_state IS DISTINCT FROM OLD.request_state THEN
            PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_state_changed',
                OLD.request_state, NEW.request_state, '{}'::jsonb);
            IF NEW.request_state = 'MANUAL_INTERVENTION' THEN
                PERFORM qtg_record_event(NEW.id, NULL, NULL, 'request_attention',
                    OLD.request_state, NEW.request_state,
                    jsonb_build_object('reason', 'manual intervention required'));
            END IF;
        END IF;
        IF NEW.current_frontier IS DISTINCT FROM OLD.current_frontier THEN
            PERFORM qtg_record_event(NEW.id, NULL, NULL, 'frontier_advanced', NULL, NULL,
                jsonb_build_object('frontier', to_jsonb(NEW.current_frontier)));
        END IF;
    END IF;
    IF NEW.request_state IN ('APPROVED', 'EXECUTING')
       AND (TG_OP = 'INSERT'
            OR (OLD.request_state IS DISTINCT FROM NEW.request_state
                AND NOT (OLD.request_state = 'APPROVED' AND NEW.request_state = 'EXECUTING'))) THEN
        PERFORM qtg_notify('qtg_dispatch');
    END IF;
    IF NEW.request_state = 'PENDING_APPROVAL' AND NEW.expires_at IS NOT NULL
       AND (TG_OP = 'INSERT' OR OLD.expires_at IS DISTINCT FROM NEW.expires_at) THEN
        PERFORM qtg_notify('qtg_expire');
    END IF;
    RETURN NULL;
END;
$$;
