-- Issue 44 item 4: the metrics endpoint's backlog (sql/metrics/backlog.sql) counts
-- the callback outbox's pending and dead-lettered rows; no index held the
-- dead-lettered ones, so every scrape read the whole outbox (sent rows and all,
-- until retention), whatever the statistics. The rows the count reads, and
-- nothing else: a sent row has no entry.
CREATE INDEX movement_callback_outbox_backlog
    ON movement_callback_outbox (status, request_id) WHERE status IN ('pending', 'dlq');
