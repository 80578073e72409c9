-- The treasury view (issue 13): balance snapshots and their history, the
-- leases that keep two runtimes from fetching twice, and CEX transfers.

-- ------------------------------------------------ balance snapshots (reference §7)

-- Append-only: one row per (venue, account, asset) a fetcher reported, from the
-- balance_snapshot worker or from GET /v3/balances?fresh=true (same rows,
-- `source` tells them apart). Amounts are exact decimals; a failing fetcher
-- writes a balance_fetch_attempts row, never a zero here. Rows are only ever
-- deleted by retention; an UPDATE is refused.
CREATE TABLE balance_snapshots (
    id          bigserial PRIMARY KEY,
    venue_key   text NOT NULL CHECK (venue_key <> ''),
    account     text NOT NULL CHECK (account <> ''),
    asset       text NOT NULL CHECK (asset <> ''),
    amount      numeric NOT NULL CHECK (amount <> 'NaN'::numeric),
    observed_at timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    source      text NOT NULL CHECK (source IN ('worker', 'fresh')),
    fetcher_key text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX balance_snapshots_latest
    ON balance_snapshots (venue_key, account, asset, observed_at DESC, id DESC);
CREATE INDEX balance_snapshots_observed ON balance_snapshots (observed_at, id);

CREATE FUNCTION qtg_balance_snapshots_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'balance_snapshots is append-only: UPDATE refused'
        USING ERRCODE = 'QT002';
END;
$$;
CREATE TRIGGER balance_snapshots_no_update
    BEFORE UPDATE ON balance_snapshots
    FOR EACH ROW EXECUTE FUNCTION qtg_balance_snapshots_append_only();

-- One row per fetcher call: what it returned, or why it did not.
CREATE TABLE balance_fetch_attempts (
    id          bigserial PRIMARY KEY,
    fetcher_key text NOT NULL,
    venue_key   text NOT NULL,
    source      text NOT NULL CHECK (source IN ('worker', 'fresh')),
    outcome     text NOT NULL CHECK (outcome IN ('ok', 'failed', 'timeout')),
    error       text,
    rows        integer NOT NULL DEFAULT 0 CHECK (rows >= 0),
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((outcome = 'ok') = (error IS NULL))
);
CREATE INDEX balance_fetch_attempts_latest
    ON balance_fetch_attempts (fetcher_key, finished_at DESC, id DESC);
CREATE INDEX balance_fetch_attempts_finished ON balance_fetch_attempts (finished_at, id);

-- Leases shared by every runtime on this database: `snapshot` lets one runtime
-- per interval run the fetchers; `fresh` rate-limits on-demand fetches.
CREATE TABLE balance_leases (
    lease_name  text PRIMARY KEY CHECK (lease_name IN ('snapshot', 'fresh')),
    next_at     timestamptz NOT NULL DEFAULT '-infinity',
    taken_by    text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO balance_leases (lease_name) VALUES ('snapshot'), ('fresh');

-- ------------------------------------------------ balance history (rollups)

-- First, last, min, max and sample count of one (venue, account, asset) in one
-- hour or day. Hourly rows come from raw snapshots, daily rows from hourly ones,
-- so retention may drop raw snapshots once their hour is rolled up.
CREATE TABLE balance_history (
    bucket            text NOT NULL CHECK (bucket IN ('hour', 'day')),
    bucket_start      timestamptz NOT NULL,
    venue_key         text NOT NULL,
    account           text NOT NULL,
    asset             text NOT NULL,
    first_amount      numeric NOT NULL,
    last_amount       numeric NOT NULL,
    min_amount        numeric NOT NULL,
    max_amount        numeric NOT NULL,
    sample_count      integer NOT NULL CHECK (sample_count > 0),
    first_observed_at timestamptz NOT NULL,
    last_observed_at  timestamptz NOT NULL,
    rolled_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, venue_key, account, asset, bucket_start),
    CHECK (min_amount <= max_amount)
);
CREATE INDEX balance_history_time ON balance_history (bucket, bucket_start DESC);

-- How far each bucket kind is rolled up: every bucket that ends at or before
-- `rolled_through` is final. Locked FOR UPDATE SKIP LOCKED by the rollup pass,
-- so two runtimes never roll the same buckets at once.
CREATE TABLE balance_rollup_progress (
    bucket         text PRIMARY KEY CHECK (bucket IN ('hour', 'day')),
    rolled_through timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
INSERT INTO balance_rollup_progress (bucket) VALUES ('hour'), ('day');

-- ------------------------------------------------ the sandbox venue's ledger

-- The sandbox provider's "remote" balances (like sandbox_submissions, written
-- only by qtg/providers/sandbox and tests): what the sandbox venue reports.
CREATE TABLE sandbox_venue_balances (
    account    text NOT NULL,
    asset      text NOT NULL,
    amount     numeric NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, asset)
);
INSERT INTO sandbox_venue_balances (account, asset, amount) VALUES
    ('main', 'USDC', 1250000.000000),
    ('main', 'ETH', 84.250000000000000000),
    ('hot', 'USDC', 50000.000000);

-- ------------------------------------------------ CEX transfers (cex_transfer_ingest)

-- Deposits and withdrawals a venue reports, one row per venue and external id.
-- Status only moves forward: pending -> ok | failed | canceled; a final status
-- never changes (trigger below), so a venue that reports an old status again
-- changes nothing.
CREATE TABLE cex_transfers (
    id              bigserial PRIMARY KEY,
    venue           text NOT NULL,
    external_id     text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('deposit', 'withdrawal')),
    status          text NOT NULL CHECK (status IN ('pending', 'ok', 'failed', 'canceled')),
    asset           text NOT NULL,
    amount          numeric NOT NULL CHECK (amount <> 'NaN'::numeric),
    fee             numeric,
    txid            text,
    address         text,
    network         text,
    occurred_at     timestamptz NOT NULL,
    matched_node_id uuid REFERENCES movement_request_nodes (id),
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (venue, external_id)
);
CREATE INDEX cex_transfers_txid ON cex_transfers (txid) WHERE txid IS NOT NULL;
CREATE INDEX cex_transfers_unmatched ON cex_transfers (venue, kind) WHERE matched_node_id IS NULL;

CREATE FUNCTION qtg_cex_transfers_forward_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status AND OLD.status <> 'pending' THEN
        RAISE EXCEPTION 'cex_transfers % %: status % is final, % refused',
            OLD.venue, OLD.external_id, OLD.status, NEW.status
            USING ERRCODE = 'QT001';
    END IF;
    IF NEW.venue <> OLD.venue OR NEW.external_id <> OLD.external_id OR NEW.kind <> OLD.kind THEN
        RAISE EXCEPTION 'cex_transfers: venue, external_id and kind never change'
            USING ERRCODE = 'QT001';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER cex_transfers_forward_only
    BEFORE UPDATE ON cex_transfers
    FOR EACH ROW EXECUTE FUNCTION qtg_cex_transfers_forward_only();

-- Per-venue cursor: the ingest asks the venue for transfers since `since`.
CREATE TABLE cex_ingest_cursors (
    venue      text PRIMARY KEY,
    since      timestamptz,
    last_ok_at timestamptz,
    last_error text,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Matching an ingested withdrawal to its cex_withdrawal node (provider_refs.withdrawal_id).
CREATE INDEX movement_request_nodes_withdrawal_id
    ON movement_request_nodes ((provider_refs ->> 'withdrawal_id'))
    WHERE provider_refs ? 'withdrawal_id';
