-- Heartbeat rows are per process start (0009): a worker that starts again is a
-- new row (INSERT), not the crashed row moving on. A crashed worker's page
-- (0011) is therefore resolved by either: its crashed row leaving `crashed`,
-- or a new instance of the same worker in the same network class starting.
CREATE OR REPLACE FUNCTION qtg_notify_on_heartbeat_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key text := 'worker_crashed:' || NEW.network_class || ':' || NEW.worker_name;
BEGIN
    IF NEW.status = 'crashed' THEN
        PERFORM qtg_raise_notification(
            'worker_crashed', 'critical', v_key,
            'worker ' || NEW.worker_name || ' crashed (' || NEW.network_class || ')',
            'The ' || NEW.worker_group || ' worker ' || NEW.worker_name || ' of network class '
                || NEW.network_class || ' on instance ' || coalesce(NEW.instance_id, '?')
                || ' stopped: ' || coalesce(NEW.last_error, 'no error recorded') || '.',
            jsonb_build_object('worker', NEW.worker_name, 'network_class', NEW.network_class,
                               'instance_id', NEW.instance_id));
    ELSIF TG_OP = 'INSERT' OR OLD.status = 'crashed' THEN
        PERFORM qtg_resolve_notification(v_key);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER worker_heartbeats_notify_started AFTER INSERT ON worker_heartbeats
    FOR EACH ROW
    EXECUTE FUNCTION qtg_notify_on_heartbeat_change();
