"""Settings: every MG_* variable of the Runtime Workers Reference, typed, with its defaults.

Settings are read once, from the environment, into a frozen `Settings`. A bad
value stops start-up with one line that names the variable and what was wrong
(`ConfigError`), because a runtime that moves money must not guess what an
operator meant by `MG_NODE_DISPATCH_INTERVAL_SECONDS=2s`.

Each field declares its environment variable next to its default, so that a
reader can go from a paragraph of the reference to the field in one step.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qtg.domain import audit_chain
from qtg.domain.callback_targets import parse_allowlist

# re-exported: `from qtg.config import ConfigError`
from qtg.domain.errors import ConfigError as ConfigError

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def setting(
    env: str,
    default: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: float | None = None,
    secret: bool = False,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """Declare a field read from environment variable `env`."""
    return field(
        default=default,
        metadata={
            "env": env,
            "minimum": minimum,
            "maximum": maximum,
            "exclusive_minimum": exclusive_minimum,
            "secret": secret,
            "choices": choices,
        },
    )


def interval(env: str, default: float) -> Any:
    """An interval in seconds: a number strictly greater than zero."""
    return setting(env, default, exclusive_minimum=0)


def port(env: str, default: int | None, *, any_port: bool) -> Any:
    """A TCP port: 1..65535, or also 0 (the OS picks a free one) where `any_port`.
    Range-checked because the socket layer does not: 99999 silently became
    port 34463 (modulo 65,536) and 65536 acted like 0 (issue 26)."""
    return setting(env, default, minimum=0 if any_port else 1, maximum=65535)


def count(env: str, default: int) -> Any:
    """A batch size or attempt count: an integer of at least one."""
    return setting(env, default, minimum=1)


@dataclass(frozen=True, slots=True)
class Settings:
    # ---- database
    # PostgreSQL DSN (a libpq URL or a multi-host string); unset: the embedded database in
    # MG_EMBEDDED_DATA_DIR.
    database_url: str | None = setting("MG_DATABASE_URL", None, secret=True)
    # A separate DSN for the LISTEN connection, direct (never through transaction pooling), e.g.
    # when MG_DATABASE_URL goes through pgbouncer; unset: MG_DATABASE_URL.
    listen_database_url: str | None = setting("MG_LISTEN_DATABASE_URL", None, secret=True)
    # The network class this runtime serves: every claim of a worker that acts on a movement filters
    # on it.
    network_class: str = setting("MG_NETWORK_CLASS", "default")
    # Connections the workers' pool keeps open.
    db_pool_min_size: int = setting("MG_DB_POOL_MIN_SIZE", 2, minimum=1)
    # Most connections of the workers' pool.
    db_pool_max_size: int = setting("MG_DB_POOL_MAX_SIZE", 10, minimum=1)
    # How long a worker's transaction waits for a free connection of the workers' pool.
    db_pool_timeout_seconds: float = interval("MG_DB_POOL_TIMEOUT_SECONDS", 10.0)
    # The API has a pool of its own: a flood of requests can exhaust
    # it, never the workers'. A request that finds no free connection within the
    # timeout is answered 503 at once instead of queueing.
    api_db_pool_min_size: int = setting("MG_API_DB_POOL_MIN_SIZE", 1, minimum=1)
    # Most connections of the API's own pool.
    api_db_pool_max_size: int = setting("MG_API_DB_POOL_MAX_SIZE", 10, minimum=1)
    # How long an API request waits for a free connection of its pool; then 503 DATABASE_BUSY.
    api_db_pool_timeout_seconds: float = interval("MG_API_DB_POOL_TIMEOUT_SECONDS", 2.0)
    # statement_timeout of every pooled session, in milliseconds.
    statement_timeout_ms: int = setting("MG_STATEMENT_TIMEOUT_MS", 30_000, minimum=1)
    # Where the embedded PostgreSQL keeps its data (<dir>/pgdata), and the generated callback secret
    # and audit key.
    embedded_data_dir: str = setting("MG_EMBEDDED_DATA_DIR", ".qtg")
    # With MG_DATABASE_URL, migrate at start (as --migrate does); otherwise a runtime refuses to
    # start while migrations are pending. The embedded database is always migrated.
    migrate_on_start: bool = setting("MG_MIGRATE_ON_START", False)
    # ---- high availability
    # true: MG_DATABASE_URL is pgbouncer in transaction pooling: nothing is prepared
    # server-side and no startup `options` are sent (pgbouncer refuses them); see
    # Operations, Deployment. (MG_DATABASE_URL may also be a libpq multi-host string,
    # host=a,b port=x,y; a connection is only kept on a read-write server.)
    database_pgbouncer: bool = setting("MG_DATABASE_PGBOUNCER", False)
    # The synchronous_commit level of every pooled session, so of the write-ahead
    # commit: `on` (with a synchronous standby: flushed there before it returns)
    # or `remote_apply`. Lower levels do not survive a failover.
    database_synchronous_commit: str = setting(
        "MG_DATABASE_SYNCHRONOUS_COMMIT", "on", choices=("on", "remote_apply")
    )
    # Replication state is read at start and this often (readyz, metrics, the hold below).
    durability_check_interval_seconds: float = interval(
        "MG_DURABILITY_CHECK_INTERVAL_SECONDS", 10.0
    )
    # When the dispatcher holds irreversible submits (nodes stay READY, one
    # durability_hold notification pages) because no synchronous standby acknowledges:
    # auto (the default) while standbys stream and none of them is synchronous (an
    # asynchronous failover would lose acknowledged write-ahead commits); true whenever
    # no synchronous standby acknowledges (a lone server too); false never.
    require_synchronous_replication: str = setting(
        "MG_REQUIRE_SYNCHRONOUS_REPLICATION", "auto", choices=("auto", "true", "false")
    )

    # ---- runtime
    # Run the background workers (false: the API only, like --api-only).
    workers_enabled: bool = setting("MG_WORKERS_ENABLED", True)
    # Wake workers by LISTEN/NOTIFY; false is pure interval polling.
    reactive: bool = setting("MG_REACTIVE", True)
    # A worker waits its fallback interval plus or minus a random amount up to this between passes,
    # so processes do not poll in step.
    worker_jitter_seconds: float = setting("MG_WORKER_JITTER_SECONDS", 0.0, minimum=0)
    # A worker writes its heartbeat row at most once per this many seconds, however busy it is.
    heartbeat_min_interval_seconds: float = interval("MG_HEARTBEAT_MIN_INTERVAL_SECONDS", 1.0)
    # Rows of processes silent this long (and for ten of their intervals) are
    # deleted when a process starts: one set of rows per start otherwise piles up.
    heartbeat_retention_seconds: float = interval("MG_HEARTBEAT_RETENTION_SECONDS", 7 * 86400.0)
    # Log level.
    log_level: str = setting("MG_LOG_LEVEL", "INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    # Log format: json (one JSON object per line) or text (one readable line).
    log_format: str = setting("MG_LOG_FORMAT", "json", choices=("json", "text"))

    # ---- core workers (node_dispatcher, node_observer, node_recovery)
    # node_dispatcher's fallback interval (it is woken by NOTIFY).
    node_dispatch_interval_seconds: float = interval("MG_NODE_DISPATCH_INTERVAL_SECONDS", 2.0)
    # Dispatch units one pass runs side by side: each a batch claim of
    # MG_NODE_DISPATCH_BATCH_SIZE, or with batch size 1 the reference's serial
    # one-node walk (1 and 1: the reference's serial dispatcher). Each commit waits
    # for its WAL flush; n units in parallel share flushes, as n processes would.
    node_dispatch_concurrency: int = setting("MG_NODE_DISPATCH_CONCURRENCY", 1, minimum=1)
    # node_observer's fallback interval.
    node_observe_interval_seconds: float = interval("MG_NODE_OBSERVE_INTERVAL_SECONDS", 5.0)
    # Due nodes one observer claim takes: 32, not the reference's 10 — about half the
    # statements and commits per observation. With 10,000 waiting at a 10 s interval
    # on 2 cores, 32 kept up through a burst of approvals where 10 fell behind (by
    # 0.4-1.6 s after it in a fast hour, 9-30 s in a slow one;
    # docs/operations/deployment.md). 10, with MG_NODE_OBSERVE_BATCH_CLAIM=false,
    # is the reference's observer.
    node_observe_batch_size: int = count("MG_NODE_OBSERVE_BATCH_SIZE", 32)
    # Observer batches one runtime keeps in flight at once: each
    # claims MG_NODE_OBSERVE_BATCH_SIZE nodes, asks the providers and writes the
    # outcomes, while the others do the same (1: the reference's one batch at a
    # time). Waiting work is bound by round trips, not CPU: 10,000 nodes at a 10 s
    # interval need 1,000 observations a second.
    node_observe_concurrency: int = setting("MG_NODE_OBSERVE_CONCURRENCY", 4, minimum=1)
    # Observations of one provider (executor) in flight at once across those batches:
    # a bound on what the observer asks of one remote system (its rate limit, its
    # connections), whatever the batch size and concurrency.
    node_observe_provider_concurrency: int = setting(
        "MG_NODE_OBSERVE_PROVIDER_CONCURRENCY", 16, minimum=1
    )
    # Claimed observer batches one runtime has in flight at once: a
    # claiming batch hands what it leased to the providers and claims the next while
    # those calls are out, so a slow provider's batch holds a slot, not the claims; each
    # batch's nodes are written per provider as that provider answers. A slot is taken
    # before a claim, so this also bounds the observer's pooled connections (about one a
    # slot): the default, MG_NODE_OBSERVE_CONCURRENCY's, keeps the dispatcher's share of
    # MG_DB_POOL_MAX_SIZE what it was; raise the two together.
    node_observe_batches_in_flight: int = setting("MG_NODE_OBSERVE_BATCHES_IN_FLIGHT", 4, minimum=1)
    # How long a dispatch stretch (claim to write-ahead commit) may hold the observer's
    # next claim and provider calls back, from the stretch's start: the money path's
    # right of way over waiting work (qtg/services/right_of_way.py). 0 (the default since
    # the sandbox's observations are batched, docs/benchmarks.md): the observer never
    # gives way.
    node_observe_give_way_ms: int = setting("MG_NODE_OBSERVE_GIVE_WAY_MS", 0, minimum=0)
    # Enforce a plan node's timeout_policy.observe_seconds (a timed-out node is UNKNOWN, never
    # FAILED).
    observe_timeout_enforcement_enabled: bool = setting(
        "MG_OBSERVE_TIMEOUT_ENFORCEMENT_ENABLED", False
    )
    # A claimed node is leased to its observer for this long (it is
    # not due for any other) while the provider is asked with no lock held; one
    # observation is cut off at half of it. An observer that dies mid-call
    # leaves its nodes due again when the lease runs out. The dispatcher leases
    # the READY nodes it claims for as long (a policy-governed movement's charge
    # held meanwhile) while it prepares and signs them with no lock held, each
    # cut off at half of it (then the node waits: PREPARE_TIMEOUT); a dispatcher
    # that dies mid-prepare leaves its nodes to be claimed again when the lease
    # runs out (nothing was sent).
    node_observe_lease_seconds: float = interval("MG_NODE_OBSERVE_LEASE_SECONDS", 60.0)
    # node_recovery's interval.
    node_recovery_interval_seconds: float = interval("MG_NODE_RECOVERY_INTERVAL_SECONDS", 60.0)
    # Nodes one recovery pass takes.
    node_recovery_batch_size: int = count("MG_NODE_RECOVERY_BATCH_SIZE", 10)
    # A SUBMITTING node older than this is presumed stranded by a crash between
    # the write-ahead commit and submit's return, and handed to recover().
    node_recovery_submitting_grace_seconds: float = interval(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS", 120.0
    )
    # A SUBMITTING node whose owning process has not shown it is alive for this long
    # (its liveness row, beaten every fifth of this; a kill -9 or a lost host stops it)
    # is handed to recover() at once, without waiting for the grace above.
    node_recovery_dead_owner_seconds: float = interval("MG_NODE_RECOVERY_DEAD_OWNER_SECONDS", 5.0)
    # A node recovery has not decided for this long (UNKNOWN, or
    # SUBMITTING this long past its grace) moves its movement to MANUAL_INTERVENTION
    # (request_attention: a critical notification and a callback), once per node attempt
    # and EXECUTING episode: again a bound after each resume.
    node_unknown_attention_seconds: float = interval("MG_NODE_UNKNOWN_ATTENTION_SECONDS", 900.0)
    # A transient fault before any side effect (an RPC that does not
    # answer, a fee above its cap) leaves the node READY, retried after a backoff
    # that doubles up to this (MG_NODE_TRANSIENT_ATTENTION_SECONDS: when it pages).
    node_transient_retry_max_seconds: float = interval("MG_NODE_TRANSIENT_RETRY_MAX_SECONDS", 60.0)
    # A node still waiting out transient faults this long moves its movement to MANUAL_INTERVENTION
    # (request_attention), again a bound after each resume.
    node_transient_attention_seconds: float = interval("MG_NODE_TRANSIENT_ATTENTION_SECONDS", 900.0)
    # node_recovery's sweep settles an EXECUTING request whose
    # nodes already decide its state (its worker's settle was lost) once its nodes
    # have not changed for this long (its own worker settles it before that).
    node_settle_grace_seconds: float = interval("MG_NODE_SETTLE_GRACE_SECONDS", 10.0)

    # ---- sidecars (the periodic workers beside the core three)
    # callback_dispatcher's fallback interval.
    callback_dispatch_interval_seconds: float = interval(
        "MG_CALLBACK_DISPATCH_INTERVAL_SECONDS", 3.0
    )
    # Callbacks one dispatcher pass sends.
    callback_batch_size: int = count("MG_CALLBACK_BATCH_SIZE", 5)
    # Attempts before a callback goes to the dead-letter state (dlq).
    callback_max_attempts: int = count("MG_CALLBACK_MAX_ATTEMPTS", 5)
    # Bound on one callback request; no answer within it is a failed attempt.
    callback_timeout_seconds: float = interval("MG_CALLBACK_TIMEOUT_SECONDS", 10.0)
    # HMAC key of callback (and notification webhook) signatures; required with MG_DATABASE_URL in a
    # process that runs workers; on the embedded database generated on first use.
    callback_signing_secret: str | None = setting("MG_CALLBACK_SIGNING_SECRET", None, secret=True)
    # expiration_checker's interval.
    expiration_check_interval_seconds: float = interval(
        "MG_EXPIRATION_CHECK_INTERVAL_SECONDS", 30.0
    )
    # Requests one expiration pass expires.
    expiration_batch_size: int = count("MG_EXPIRATION_BATCH_SIZE", 20)
    # How long a request waits for approval before it is EXPIRED.
    approval_ttl_seconds: float = interval("MG_APPROVAL_TTL_SECONDS", 300.0)
    # template_proposal_expiration's interval.
    template_proposal_expiration_interval_seconds: float = interval(
        "MG_TEMPLATE_PROPOSAL_EXPIRATION_INTERVAL_SECONDS", 30.0
    )
    # How long a template proposal waits for approval.
    template_proposal_ttl_seconds: float = interval("MG_TEMPLATE_PROPOSAL_TTL_SECONDS", 86_400.0)
    # How long an approved address-book entry waits before a movement may pay it
    # (its cooling-off time); a change of an entry's address, chain or asset waits it again.
    address_book_cooling_off_seconds: float = setting(
        "MG_ADDRESS_BOOK_COOLING_OFF_SECONDS", 86_400.0, minimum=0
    )
    # The most nodes a template version may have; a bigger graph is refused with 422
    # TEMPLATE_TOO_LARGE naming the limit (a movement of 10,000 nodes took hours and
    # slowed every other movement's pickup).
    template_max_nodes: int = count("MG_TEMPLATE_MAX_NODES", 200)
    # executor_health's interval.
    executor_health_interval_seconds: float = interval("MG_EXECUTOR_HEALTH_INTERVAL_SECONDS", 60.0)
    # audit_outbox_promoter's fallback interval.
    audit_outbox_promoter_interval_seconds: float = interval(
        "MG_AUDIT_OUTBOX_PROMOTER_INTERVAL_SECONDS", 1.0
    )
    # Bound on one executor's or signer's health(): one that hangs must not stall the
    # executor_health pass.
    executor_health_timeout_seconds: float = interval("MG_EXECUTOR_HEALTH_TIMEOUT_SECONDS", 10.0)

    # ---- conditional workers (reference "Always-on vs conditional")
    # Run evm_nonce_reaper (core, fail-fast) when the runtime has the evm_rpc capability.
    evm_nonce_reaper_enabled: bool = setting("MG_EVM_NONCE_REAPER_ENABLED", True)
    # evm_nonce_reaper's interval.
    evm_nonce_reaper_interval_seconds: float = interval(
        "MG_EVM_NONCE_REAPER_INTERVAL_SECONDS", 60.0
    )
    # evm_nonce_reaper's reorg watch: this often, between its full passes,
    # the same worker asks the chain whether a payment consumed in the last hour left the
    # canonical chain (one query and one count per such account), and runs the FAILED
    # resolutions' cancel step; a reorg pages and is re-sent within about this long.
    evm_reorg_watch_seconds: float = interval("MG_EVM_REORG_WATCH_SECONDS", 2.0)
    # Run ccip_stranded_reaper (core, fail-fast).
    ccip_stranded_reaper_enabled: bool = setting("MG_CCIP_STRANDED_REAPER_ENABLED", True)
    # ccip_stranded_reaper's interval.
    ccip_stranded_reaper_interval_seconds: float = interval(
        "MG_CCIP_STRANDED_REAPER_INTERVAL_SECONDS", 60.0
    )
    # Run capital_transfer_followup.
    capital_transfer_followup_enabled: bool = setting("MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED", False)
    # capital_transfer_followup's interval.
    capital_transfer_followup_interval_seconds: float = interval(
        "MG_CAPITAL_TRANSFER_FOLLOWUP_INTERVAL_SECONDS", 60.0
    )
    # Run notification_dispatcher (start-up refuses it with no route).
    notify_enabled: bool = setting("MG_NOTIFY_ENABLED", False)
    # Run balance_history_rollup (hourly and daily balance history).
    balance_history_enabled: bool = setting("MG_BALANCE_HISTORY_ENABLED", True)
    # Venues cex_transfer_ingest pulls deposits and withdrawals from (comma list); empty: the worker
    # does not run.
    cex_transfer_ingest_venues_csv: str = setting("MG_CEX_TRANSFER_INGEST_VENUES_CSV", "")
    # Run balance_snapshot.
    balance_snapshot_enabled: bool = setting("MG_BALANCE_SNAPSHOT_ENABLED", False)
    # balance_snapshot's interval.
    balance_snapshot_interval_seconds: float = interval(
        "MG_BALANCE_SNAPSHOT_INTERVAL_SECONDS", 30.0
    )
    # A balance older than this is served with stale: true.
    balance_stale_threshold_seconds: float = interval("MG_BALANCE_STALE_THRESHOLD_SECONDS", 120.0)
    # Run ccip_drift (sidecar group; it also needs a sidecar client, MG_CCIP_SIDECAR).
    ccip_enabled: bool = setting("MG_CCIP_ENABLED", False)
    # ccip_drift's interval.
    ccip_drift_poll_interval_seconds: float = interval("MG_CCIP_DRIFT_POLL_INTERVAL_SECONDS", 300.0)
    # Run verify_drift (sidecar) when the runtime has the evm_rpc capability: on by
    # default, watching every configured token and bridge contract.
    verify_drift_enabled: bool = setting("MG_VERIFY_DRIFT_ENABLED", True)
    # verify_drift's interval.
    verify_drift_interval_seconds: float = interval("MG_VERIFY_DRIFT_INTERVAL_SECONDS", 21_600.0)

    # ---- providers (the executors, signers and fetchers MG_PROVIDERS loads)
    # Comma list of `qtg.providers` entry-point names to load (or `module:callable`).
    providers: str = setting("MG_PROVIDERS", "sandbox")
    # Sandbox provider: simulated latency of every remote call, unless a node's config says.
    sandbox_latency_ms: int = setting("MG_SANDBOX_LATENCY_MS", 0, minimum=0)
    # What the sandbox executor's health() reports (to exercise the health worker).
    sandbox_health: str = setting(
        "MG_SANDBOX_HEALTH", "healthy", choices=("healthy", "degraded", "unhealthy")
    )
    # HMAC key of the sandbox signer. The default is a fixed, public DEVELOPMENT key:
    # signatures made with it prove nothing outside a sandbox.
    sandbox_signer_key: str = setting(
        "MG_SANDBOX_SIGNER_KEY", "qtg-sandbox-dev-key-not-a-secret", secret=True
    )

    # ---- API
    # Address the API listens on (and the metrics-only listener).
    api_host: str = setting("MG_API_HOST", "127.0.0.1")
    # Port the API listens on (0: any free port).
    api_port: int = port("MG_API_PORT", 8000, any_port=True)
    # Admission control: HTTP requests in progress at once; the next one is answered
    # 503 OVERLOADED with Retry-After: 1 at once, before it reads a byte from the database.
    api_max_concurrent_requests: int = count("MG_API_MAX_CONCURRENT_REQUESTS", 64)
    # WS /v3/stream: events a client may fall behind by before it is closed
    # (4008, resumable); references to shared events, so cheap per client.
    stream_client_buffer: int = count("MG_STREAM_CLIENT_BUFFER", 10_000)
    # WS /v3/stream sends a ping this often while idle.
    stream_ping_interval_seconds: float = interval("MG_STREAM_PING_INTERVAL_SECONDS", 15.0)
    # Fallback poll of the event feed when no qtg_events notify arrives.
    stream_poll_interval_seconds: float = interval("MG_STREAM_POLL_INTERVAL_SECONDS", 1.0)

    # ---- notifications and capital transfers
    # notification_dispatcher (MG_NOTIFY_ENABLED): fallback interval, rows per pass,
    # bound on one delivery, attempts before dlq.
    notify_interval_seconds: float = interval("MG_NOTIFY_INTERVAL_SECONDS", 5.0)
    # Notifications routed, and messages sent, per pass.
    notify_batch_size: int = count("MG_NOTIFY_BATCH_SIZE", 100)
    # Bound on one delivery (the HTTP request; each SMTP socket operation).
    notify_timeout_seconds: float = interval("MG_NOTIFY_TIMEOUT_SECONDS", 10.0)
    # Attempts before a notification message goes to dlq.
    notify_max_attempts: int = count("MG_NOTIFY_MAX_ATTEMPTS", 5)
    # Per route: at most this many messages per window; the rest become one digest.
    notify_rate_limit_messages: int = count("MG_NOTIFY_RATE_LIMIT_MESSAGES", 10)
    # The rate limit's window.
    notify_rate_limit_window_seconds: float = interval("MG_NOTIFY_RATE_LIMIT_WINDOW_SECONDS", 600.0)
    # Webhook route. The URL is a secret (a Slack incoming-webhook URL is a credential).
    notify_webhook_url: str | None = setting("MG_NOTIFY_WEBHOOK_URL", None, secret=True)
    # json (the full notification) or slack ({"text": …}, which a Slack or Mattermost incoming
    # webhook accepts).
    notify_webhook_format: str = setting(
        "MG_NOTIFY_WEBHOOK_FORMAT", "json", choices=("json", "slack")
    )
    # Severities the webhook receives (*: all; empty: none).
    notify_webhook_severities: str = setting("MG_NOTIFY_WEBHOOK_SEVERITIES", "warning,critical")
    # Email route (SMTP; STARTTLS before AUTH, credentials never in the clear).
    notify_email_to: str = setting("MG_NOTIFY_EMAIL_TO", "")
    # Sender address of notification emails.
    notify_email_from: str = setting("MG_NOTIFY_EMAIL_FROM", "qtg@localhost")
    # Severities emailed (*: all; empty: none).
    notify_email_severities: str = setting("MG_NOTIFY_EMAIL_SEVERITIES", "critical")
    # SMTP server host.
    notify_smtp_host: str = setting("MG_NOTIFY_SMTP_HOST", "localhost")
    # SMTP server port.
    notify_smtp_port: int = port("MG_NOTIFY_SMTP_PORT", 587, any_port=False)
    # STARTTLS before anything else (start-up refuses a username without it).
    notify_smtp_starttls: bool = setting("MG_NOTIFY_SMTP_STARTTLS", True)
    # SMTP AUTH user (set both or neither of username and password).
    notify_smtp_username: str | None = setting("MG_NOTIFY_SMTP_USERNAME", None)
    # SMTP AUTH password.
    notify_smtp_password: str | None = setting("MG_NOTIFY_SMTP_PASSWORD", None, secret=True)
    # CA bundle that verifies the SMTP server's certificate (default: the system's).
    notify_smtp_ca_file: str | None = setting("MG_NOTIFY_SMTP_CA_FILE", None)
    # capital_transfer_followup (MG_CAPITAL_TRANSFER_FOLLOWUP_ENABLED): rows per pass; a
    # transfer whose movement is still unapproved after this long pages (warning; the
    # default is under MG_APPROVAL_TTL_SECONDS, so someone can still approve it).
    capital_transfer_followup_batch_size: int = count("MG_CAPITAL_TRANSFER_FOLLOWUP_BATCH_SIZE", 20)
    # A capital transfer whose movement is still unapproved after this long pages
    # (capital_transfer_stale).
    capital_transfer_stale_seconds: float = interval("MG_CAPITAL_TRANSFER_STALE_SECONDS", 180.0)
    # Route templates: "source>destination=template_key", comma-separated; `*` matches any.
    capital_transfer_routes: str = setting("MG_CAPITAL_TRANSFER_ROUTES", "")
    # ---- treasury view
    # (balance_snapshot, balance_history_rollup, GET /v3/balances, cex_transfer_ingest:
    # the flags and the snapshot interval and stale threshold are the reference's and
    # sit with the conditional workers)

    # One fetcher call that takes longer is recorded as a timeout; the others go on.
    balance_fetch_timeout_seconds: float = interval("MG_BALANCE_FETCH_TIMEOUT_SECONDS", 10.0)
    # Raw snapshots older than this are deleted (their hours are kept in history).
    balance_snapshot_retention_seconds: float = interval(
        "MG_BALANCE_SNAPSHOT_RETENTION_SECONDS", 7 * 86_400.0
    )
    # Rows one retention DELETE removes; a pass runs at most ..._MAX_BATCHES of them.
    balance_retention_batch_size: int = count("MG_BALANCE_RETENTION_BATCH_SIZE", 1_000)
    # Retention batches one balance_snapshot pass runs at most.
    balance_retention_max_batches: int = count("MG_BALANCE_RETENTION_MAX_BATCHES", 10)
    # GET /v3/balances?fresh=true: whole-request bound, and the shortest gap between
    # two on-demand fetches across every API process on the database.
    balance_fresh_timeout_seconds: float = interval("MG_BALANCE_FRESH_TIMEOUT_SECONDS", 10.0)
    # Shortest gap between two on-demand fetches (fresh=true) across every process on the database;
    # sooner: 429 RATE_LIMITED.
    balance_fresh_min_interval_seconds: float = interval(
        "MG_BALANCE_FRESH_MIN_INTERVAL_SECONDS", 10.0
    )
    # balance_history_rollup's interval.
    balance_history_rollup_interval_seconds: float = interval(
        "MG_BALANCE_HISTORY_ROLLUP_INTERVAL_SECONDS", 300.0
    )
    # A bucket is rolled up once it ended this long ago (late snapshots land first).
    balance_history_grace_seconds: float = setting(
        "MG_BALANCE_HISTORY_GRACE_SECONDS", 120.0, minimum=0
    )
    # Hourly buckets one rollup pass closes at most (the loop drains the rest at once).
    balance_history_max_buckets: int = count("MG_BALANCE_HISTORY_MAX_BUCKETS", 48)
    # Circle Gateway (provider `gateway`): API base URL and the depositor addresses
    # whose unified USDC balance is snapshot as venue_key "gateway".
    gateway_api_url: str = setting("MG_GATEWAY_API_URL", "https://gateway-api.circle.com")
    # Depositor addresses (comma list) whose unified USDC balance is fetched.
    gateway_depositors_csv: str = setting("MG_GATEWAY_DEPOSITORS_CSV", "")
    # cex_transfer_ingest's interval.
    cex_transfer_ingest_interval_seconds: float = interval(
        "MG_CEX_TRANSFER_INGEST_INTERVAL_SECONDS", 30.0
    )
    # Provider `ccxt`: exchange ids (ccxt's, e.g. okx) and the JSON file of their API keys.
    ccxt_venues_csv: str = setting("MG_CCXT_VENUES_CSV", "")
    # JSON file of the venues' API keys ({"okx": {"apiKey", "secret", "password", "api_url"?}}, mode
    # 0600).
    ccxt_credentials_file: str | None = setting("MG_CCXT_CREDENTIALS_FILE", None)
    # The ccxt executor's cex_withdrawal: a withdraw request's own timeout;
    # how long after sending a withdrawal missing from the venue's history is still
    # "maybe late" (recovery answers UNKNOWN); and the gap between the two missing
    # reads that together prove it never happened (NOT_SUBMITTED).
    ccxt_withdraw_timeout_seconds: float = interval("MG_CCXT_WITHDRAW_TIMEOUT_SECONDS", 15.0)
    # After sending, a withdrawal missing from the venue's history may still be late (recovery
    # answers UNKNOWN) for this long; set it above the venue's worst history lag.
    ccxt_withdrawal_grace_seconds: float = interval("MG_CCXT_WITHDRAWAL_GRACE_SECONDS", 300.0)
    # The gap between the two missing reads that prove a withdrawal never happened.
    ccxt_withdrawal_recheck_seconds: float = interval("MG_CCXT_WITHDRAWAL_RECHECK_SECONDS", 60.0)
    # One venue's pull that takes longer is recorded as failed; the others go on.
    cex_transfer_ingest_timeout_seconds: float = interval(
        "MG_CEX_TRANSFER_INGEST_TIMEOUT_SECONDS", 30.0
    )
    # How far back the first pull of a venue with no cursor looks.
    cex_transfer_ingest_lookback_seconds: float = interval(
        "MG_CEX_TRANSFER_INGEST_LOOKBACK_SECONDS", 86_400.0
    )
    # A venue's cursor is moved back this far on every pull, so a transfer the
    # venue files late is still seen (the unique key makes the overlap harmless).
    cex_transfer_ingest_overlap_seconds: float = setting(
        "MG_CEX_TRANSFER_INGEST_OVERLAP_SECONDS", 3_600.0, minimum=0
    )
    # ---- ops: API connection limits
    # A client that sends nothing for this long is disconnected (slowloris: a
    # promised body that never comes, headers that never end).
    api_read_timeout_seconds: float = interval("MG_API_READ_TIMEOUT_SECONDS", 30.0)
    # An idle keep-alive connection is closed after this long.
    api_keep_alive_timeout_seconds: float = interval("MG_API_KEEP_ALIVE_TIMEOUT_SECONDS", 5.0)
    # Largest request head (request line and headers) a client may send.
    api_max_header_bytes: int = count("MG_API_MAX_HEADER_BYTES", 16 * 1024)
    # ---- EVM chain side: the `evm` provider, evm_nonce_reaper
    # `chain_id=url,…`: one JSON-RPC client per chain. Empty: no EVM capability,
    # so evm_nonce_reaper is skipped with the reference's warning.
    evm_rpc_urls: str = setting("MG_EVM_RPC_URLS", "")
    # Every JSON-RPC call is bounded by this timeout; reads are retried, writes never.
    evm_rpc_timeout_seconds: float = interval("MG_EVM_RPC_TIMEOUT_SECONDS", 10.0)
    # JSON-RPC calls in flight per chain.
    evm_rpc_concurrency: int = count("MG_EVM_RPC_CONCURRENCY", 8)
    # Retries of a read (each tries every URL) after a transport fault or a transient JSON-RPC
    # error, backing off 0.1 s, 0.2 s … 2 s; writes are never retried.
    evm_rpc_read_retries: int = setting("MG_EVM_RPC_READ_RETRIES", 2, minimum=0)
    # Most reads in one JSON-RPC batch request: concurrent reads to one URL (receipts,
    # block numbers, balances) go out together; 1 = every read a request of its own. A URL
    # that refuses batches gets single calls; writes are never batched.
    evm_rpc_batch_max: int = setting("MG_EVM_RPC_BATCH_MAX", 20, minimum=1, maximum=1000)
    # Where the EVM signer's key lives (docs/custody.md): `private_key` (the setting or
    # file below: development only, start-up logs a warning), `keystore` (a Web3 Secret
    # Storage file and a passphrase file) or `pkcs11` (a non-extractable key inside a
    # PKCS#11 token: the runtime never holds it).
    evm_signer_backend: str = setting(
        "MG_EVM_SIGNER_BACKEND", "private_key", choices=("private_key", "keystore", "pkcs11")
    )
    # The local-key signer: a 0x-hex private key, or a file holding one. Never logged.
    # Development only (MG_EVM_SIGNER_BACKEND=private_key).
    evm_signer_private_key: str | None = setting("MG_EVM_SIGNER_PRIVATE_KEY", None, secret=True)
    # A file holding the signer's key instead of MG_EVM_SIGNER_PRIVATE_KEY (set one of the two).
    evm_signer_key_file: str | None = setting("MG_EVM_SIGNER_KEY_FILE", None)
    # MG_EVM_SIGNER_BACKEND=keystore: the Web3 Secret Storage JSON file (an encrypted key).
    evm_signer_keystore_file: str | None = setting("MG_EVM_SIGNER_KEYSTORE_FILE", None)
    # MG_EVM_SIGNER_BACKEND=keystore: a file holding the keystore's passphrase (its
    # trailing newline is dropped). Read once at start; never logged.
    evm_signer_keystore_passphrase_file: str | None = setting(
        "MG_EVM_SIGNER_KEYSTORE_PASSPHRASE_FILE", None
    )
    # MG_EVM_SIGNER_BACKEND=pkcs11: the PKCS#11 module (a shared library), e.g.
    # /usr/lib/softhsm/libsofthsm2.so.
    evm_signer_pkcs11_module: str | None = setting("MG_EVM_SIGNER_PKCS11_MODULE", None)
    # MG_EVM_SIGNER_BACKEND=pkcs11: the label of the token holding the key.
    evm_signer_pkcs11_token_label: str | None = setting("MG_EVM_SIGNER_PKCS11_TOKEN_LABEL", None)
    # MG_EVM_SIGNER_BACKEND=pkcs11: the label of the secp256k1 key pair in the token.
    evm_signer_pkcs11_key_label: str | None = setting("MG_EVM_SIGNER_PKCS11_KEY_LABEL", None)
    # MG_EVM_SIGNER_BACKEND=pkcs11: a file holding the token's user PIN. Never logged.
    evm_signer_pkcs11_pin_file: str | None = setting("MG_EVM_SIGNER_PKCS11_PIN_FILE", None)
    # Blocks on top of the receipt's block before observe() says COMPLETED.
    evm_confirmations: int = setting("MG_EVM_CONFIRMATIONS", 1, minimum=0)
    # Reservations older than this are looked at by evm_nonce_reaper; broadcast ones
    # still unmined past the attention threshold raise a request_attention event.
    evm_nonce_reservation_stale_seconds: float = interval(
        "MG_EVM_NONCE_RESERVATION_STALE_SECONDS", 120.0
    )
    # A transaction broadcast but unmined this long raises one request_attention warning.
    evm_nonce_attention_seconds: float = interval("MG_EVM_NONCE_ATTENTION_SECONDS", 1800.0)
    # ---- Never pay twice
    # Per-chain depth a transfer must reach before COMPLETED: `chain_id=n|safe|finalized,…`
    # (e.g. `31337=3,1=safe`); a chain not listed uses MG_EVM_CONFIRMATIONS.
    evm_confirmations_by_chain: str = setting("MG_EVM_CONFIRMATIONS_BY_CHAIN", "")
    # A broadcast transaction still unmined after this long is replaced at the same
    # nonce, same payload, fees +12 % (within MG_EVM_FEE_CAPS); until then, and after,
    # the newest signed bytes are broadcast again on every look.
    evm_replace_after_seconds: float = interval("MG_EVM_REPLACE_AFTER_SECONDS", 120.0)
    # A nonce used at the trusted depth whose consumer cannot be read (neither a receipt
    # of ours nor the consuming transaction in its block) waits, never a new attempt nor
    # FAILED; past this long it pages critical (absence is never evidence).
    evm_evidence_attention_seconds: float = interval("MG_EVM_EVIDENCE_ATTENTION_SECONDS", 120.0)
    # Per-chain fee caps in gwei, `chain_id=max_fee:max_tip,…`: a market fee above its
    # cap makes the transfer wait (RetryLater EVM_FEE_ABOVE_CAP, paged), never fail.
    evm_fee_caps: str = setting("MG_EVM_FEE_CAPS", "")
    # Headroom on eth_estimateGas (the state can change between estimate and mining).
    evm_gas_margin_percent: int = setting("MG_EVM_GAS_MARGIN_PERCENT", 20, minimum=0)
    # verify_drift: `chain_id:address[:erc20],…` contracts whose code hash (and, for
    # erc20, decimals and symbol) are checked against the baseline of first sight.
    verify_drift_contracts: str = setting("MG_VERIFY_DRIFT_CONTRACTS", "")
    # One chain's checks end within this; a chain that does not answer is a finding.
    verify_drift_lane_timeout_seconds: float = interval(
        "MG_VERIFY_DRIFT_LANE_TIMEOUT_SECONDS", 30.0
    )
    # Treasury view: the evm provider's balance fetcher reads, on every
    # configured chain, the native coin and these ERC-20 token contracts (comma list)
    # of the signer's address plus these addresses (comma list).
    evm_balance_addresses_csv: str = setting("MG_EVM_BALANCE_ADDRESSES_CSV", "")
    # ERC-20 token contracts (comma list) whose balances the evm fetcher reads.
    evm_balance_tokens_csv: str = setting("MG_EVM_BALANCE_TOKENS_CSV", "")
    # ---- security: callback targets
    # Callbacks reach only public addresses unless the target is listed here: a comma
    # list of host names, addresses and CIDR blocks (e.g. "hooks.internal,10.20.0.0/16").
    callback_allowed_hosts: str = setting("MG_CALLBACK_ALLOWED_HOSTS", "")
    # ---- money path under faults
    # Attempts one action node gets in all. When recover() proves that an
    # attempt never happened (a crash or a dead connection between the
    # write-ahead commit and submit), the node goes back to READY for a new
    # attempt while attempt_no < this; after that it ends FAILED (NOT_SUBMITTED).
    node_max_attempts: int = count("MG_NODE_MAX_ATTEMPTS", 3)
    # node_recovery's pace for a node whose recover() cannot tell yet: the n-th
    # undecided answer waits base * 2**(n-1) s, at most the cap, before the
    # node is asked again (by any process).
    node_recovery_retry_base_seconds: float = interval("MG_NODE_RECOVERY_RETRY_BASE_SECONDS", 5.0)
    # The cap of that backoff.
    node_recovery_retry_max_seconds: float = interval("MG_NODE_RECOVERY_RETRY_MAX_SECONDS", 600.0)
    # The SUBMITTING grace cutoff of the ccip recovery lane: a CCIP node
    # SUBMITTING longer than this is presumed stranded and handed to
    # recover(); unset: MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS.
    node_recovery_submitting_grace_seconds_ccip: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_CCIP", None, exclusive_minimum=0
    )
    # Recovery's SUBMITTING grace for stargate_* nodes; unset: the general one.
    node_recovery_submitting_grace_seconds_stargate: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_STARGATE", None, exclusive_minimum=0
    )
    # Recovery's SUBMITTING grace for exchange (cex_*) nodes; unset: the general one.
    node_recovery_submitting_grace_seconds_cex: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_CEX", None, exclusive_minimum=0
    )
    # Recovery's SUBMITTING grace for every other node; unset: the general one.
    node_recovery_submitting_grace_seconds_other: float | None = setting(
        "MG_NODE_RECOVERY_SUBMITTING_GRACE_SECONDS_OTHER", None, exclusive_minimum=0
    )

    # ---- audit anchoring
    # The HMAC-SHA256 key of the audit chain (>= 32 bytes), or a file holding it.
    # Not in the database, never logged. Unset: the chain stays unkeyed, with a warning.
    audit_hmac_key: str | None = setting("MG_AUDIT_HMAC_KEY", None, secret=True)
    # A file holding the audit key instead of MG_AUDIT_HMAC_KEY (set one of the two).
    audit_hmac_key_file: str | None = setting("MG_AUDIT_HMAC_KEY_FILE", None)
    # Retired keys (comma list), accepted by `qtg audit verify` for rows and
    # checkpoints chained with them before a rotation; never used to write.
    audit_hmac_previous_keys: str | None = setting("MG_AUDIT_HMAC_PREVIOUS_KEYS", None, secret=True)
    # With a key, the audit_outbox_promoter publishes a signed checkpoint (head id,
    # head hash, count) at most this often: a log line at info, and, with the
    # directory set, a JSON line appended to <dir>/audit-checkpoints.jsonl. 0: off.
    audit_checkpoint_interval_seconds: float = setting(
        "MG_AUDIT_CHECKPOINT_INTERVAL_SECONDS", 3600.0, minimum=0
    )
    # With it set, each published checkpoint is also appended to <dir>/audit-checkpoints.jsonl.
    audit_checkpoint_dir: str | None = setting("MG_AUDIT_CHECKPOINT_DIR", None)

    # ---- retention
    # (`qtg prune`, meant for cron. Days may be fractional; 0 means "as soon as it is
    # eligible". Heartbeats use MG_HEARTBEAT_RETENTION_SECONDS above.)

    # `qtg prune` deletes movement_events of movements terminal (COMPLETED, FAILED,
    # CANCELLED, REJECTED, EXPIRED) this long (days; fractional allowed, 0: at once).
    retention_events_days: float = setting("MG_RETENTION_EVENTS_DAYS", 90.0, minimum=0)
    # `qtg prune` deletes sent / dead-lettered callback and notification messages, and
    # resolved notifications, this old (days).
    retention_outbox_days: float = setting("MG_RETENTION_OUTBOX_DAYS", 30.0, minimum=0)
    # `qtg prune` archives audit_events older than this (days) to a file, then deletes
    # them — only with MG_RETENTION_AUDIT_ARCHIVE_DIR.
    retention_audit_days: float = setting("MG_RETENTION_AUDIT_DAYS", 365.0, minimum=0)
    # Where `qtg prune` writes audit archives; unset: audit rows are never deleted.
    retention_audit_archive_dir: str | None = setting("MG_RETENTION_AUDIT_ARCHIVE_DIR", None)
    # Rows one DELETE removes (each batch is its own short transaction).
    retention_batch_size: int = count("MG_RETENTION_BATCH_SIZE", 1_000)

    # ---- metrics: GET /metrics
    # true: /metrics needs a viewer token (401/403 like every route); default open,
    # as Prometheus scrapers expect on an internal address.
    metrics_require_token: bool = setting("MG_METRICS_REQUIRE_TOKEN", False)
    # A --workers-only process has no API: set this to serve its /metrics alone on
    # MG_API_HOST:MG_METRICS_PORT (0: an ephemeral port, logged). Unset: no listener.
    metrics_port: int | None = port("MG_METRICS_PORT", None, any_port=True)

    # ---- speed: batched dispatch
    # READY nodes one dispatcher pass claims in one statement and one write-ahead
    # commit, then submits side by side (nonce lanes in claim order). 1: the
    # reference's one-node-per-pass dispatcher.
    node_dispatch_batch_size: int = count("MG_NODE_DISPATCH_BATCH_SIZE", 16)

    # ---- CCIP: the `ccip` provider, ccip_stranded_reaper, ccip_drift
    # The lanes qtg sends on and checks for drift: a JSON list of
    # {name, chain_id, source_selector, dest_selector, router, …} (see the CCIP provider).
    ccip_lanes: str = setting("MG_CCIP_LANES", "")
    # Headroom on the router's getFee quote: added to a native-fee ccipSend's
    # value and to a fee-token allowance raise, so a fee that rises a little between
    # the quote and mining does not revert the send.
    ccip_fee_margin_percent: int = setting("MG_CCIP_FEE_MARGIN_PERCENT", 10, minimum=0)
    # Unresolved send intents older than this are reaped (resolved from the chain,
    # else stranded with a request_attention).
    ccip_send_intent_stranded_seconds: float = interval(
        "MG_CCIP_SEND_INTENT_STRANDED_SECONDS", 1800.0
    )
    # The CCIP sidecar client ccip_drift asks: rpc (router and ramps over JSON-RPC),
    # http (a sidecar at MG_CCIP_SIDECAR_URL, the CCIP sidecar contract), or none.
    ccip_sidecar: str = setting("MG_CCIP_SIDECAR", "none", choices=("none", "rpc", "http"))
    # The HTTP sidecar's base URL (required with MG_CCIP_SIDECAR=http).
    ccip_sidecar_url: str | None = setting("MG_CCIP_SIDECAR_URL", None)
    # Bound of one sidecar request.
    ccip_sidecar_timeout_seconds: float = interval("MG_CCIP_SIDECAR_TIMEOUT_SECONDS", 10.0)

    # ---- CCTP: the `cctp` provider (Circle's burn, attestation and mint)
    # The chains it burns on and mints on: a JSON list of {chain_id, domain,
    # token_messenger, message_transmitter, usdc} (see the CCTP provider).
    cctp_chains: str = setting("MG_CCTP_CHAINS", "")
    # Circle's attestation API (Iris): https://iris-api.circle.com, or -sandbox.
    cctp_attestation_url: str = setting("MG_CCTP_ATTESTATION_URL", "https://iris-api.circle.com")
    # Bound of one attestation API request.
    cctp_attestation_timeout_seconds: float = interval("MG_CCTP_ATTESTATION_TIMEOUT_SECONDS", 10.0)
    # Polling: the reference's observe intervals (cctp_attestation 15 s, cctp_mint_status 5 s).
    cctp_attestation_poll_seconds: float = interval("MG_CCTP_ATTESTATION_POLL_SECONDS", 15.0)
    # cctp_mint_status's poll.
    cctp_mint_poll_seconds: float = interval("MG_CCTP_MINT_POLL_SECONDS", 5.0)

    # ---- Stargate: the `stargate` provider (Stargate V2 sends over LayerZero V2)
    # The chains it sends from and delivers on: a JSON list of {chain_id, eid, pool,
    # endpoint, token} (see the Stargate provider).
    stargate_chains: str = setting("MG_STARGATE_CHAINS", "")
    # stargate_delivery's poll of the destination chain for the GUID's OFTReceived.
    stargate_delivery_poll_seconds: float = interval("MG_STARGATE_DELIVERY_POLL_SECONDS", 10.0)
    # Blocks behind the destination's head, at the delivery's first look, where its search
    # for the GUID starts (then kept): how far back a delivery made before qtg looked is found.
    stargate_delivery_search_blocks: int = setting(
        "MG_STARGATE_DELIVERY_SEARCH_BLOCKS", 50_000, minimum=1
    )
    # A message not delivered this long after its send's block makes the stargate_delivery
    # node UNKNOWN (STARGATE_UNDELIVERED), never FAILED: the movement pages
    # (MANUAL_INTERVENTION); resumed, recovery asks the destination again (a late delivery
    # still completes it).
    stargate_undelivered_after_seconds: float = interval(
        "MG_STARGATE_UNDELIVERED_AFTER_SECONDS", 1800.0
    )

    # ---- deBridge DLN: the `debridge` provider (createOrder, a taker's fulfilment)
    # The chains: a JSON list of {chain_id, dln_source, dln_destination, tokens:
    # {ASSET: address}} (see the deBridge provider).
    debridge_chains: str = setting("MG_DEBRIDGE_CHAINS", "")
    # DLN's order-status API (GET /api/Orders/{orderId}), a hint beside the chain.
    debridge_status_url: str = setting("MG_DEBRIDGE_STATUS_URL", "https://stats-api.dln.trade")
    # Bound of one status API request.
    debridge_status_timeout_seconds: float = interval("MG_DEBRIDGE_STATUS_TIMEOUT_SECONDS", 10.0)
    # debridge_fulfillment's poll (the reference's observe interval: 30 s).
    debridge_fulfillment_poll_seconds: float = interval(
        "MG_DEBRIDGE_FULFILLMENT_POLL_SECONDS", 30.0
    )
    # An order no taker fulfilled this long after its creation makes its
    # debridge_fulfillment node UNKNOWN (DEBRIDGE_UNFULFILLED): it pages like any undecided
    # node, and operators may cancel the order by resolving the node FAILED.
    debridge_unfulfilled_after_seconds: float = interval(
        "MG_DEBRIDGE_UNFULFILLED_AFTER_SECONDS", 1800.0
    )
    # Blocks behind each chain's head, at the fulfilment's first look, where its searches
    # for the order's FulfilledOrder and ClaimedOrderCancel start (then kept): how far back
    # a fulfilment or refund made before qtg looked is found.
    debridge_log_search_blocks: int = setting("MG_DEBRIDGE_LOG_SEARCH_BLOCKS", 50_000, minimum=1)

    # ---- speed: batched observation
    # true: an observer pass claims up to MG_NODE_OBSERVE_BATCH_SIZE due nodes in one
    # statement, observes them side by side and commits every outcome in one
    # transaction. false: the reference's one claim and transaction per node.
    node_observe_batch_claim: bool = setting("MG_NODE_OBSERVE_BATCH_CLAIM", True)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from `env` (default: the process environment)."""
        source = os.environ if env is None else env
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = source.get(f.metadata["env"])
            if raw is not None:
                values[f.name] = _parse(f, hints[f.name], raw)
        settings = cls(**values)
        for prefix, low, high in (
            ("MG_DB_POOL", settings.db_pool_min_size, settings.db_pool_max_size),
            ("MG_API_DB_POOL", settings.api_db_pool_min_size, settings.api_db_pool_max_size),
        ):
            if low > high:
                raise ConfigError(
                    f"{prefix}_MIN_SIZE: {low} is larger than {prefix}_MAX_SIZE ({high})"
                )
        # ---- notifications and capital transfers (issue 14)
        from qtg.domain.attention import validate_attention_settings

        validate_attention_settings(settings)
        # ---- EVM chain side (issue 11): a bad MG_EVM_RPC_URLS stops start-up here.
        from qtg.domain.evm import parse_drift_contracts, parse_rpc_urls

        parse_rpc_urls(settings.evm_rpc_urls)
        parse_drift_contracts(settings.verify_drift_contracts)
        from qtg.domain.chain_outcome import parse_depths, parse_fee_caps

        parse_depths(settings.evm_confirmations_by_chain)
        parse_fee_caps(settings.evm_fee_caps)
        if settings.evm_signer_private_key and settings.evm_signer_key_file:
            raise ConfigError(
                "MG_EVM_SIGNER_PRIVATE_KEY and MG_EVM_SIGNER_KEY_FILE are both set; set one"
            )
        if settings.evm_signer_backend != "private_key" and (
            settings.evm_signer_private_key or settings.evm_signer_key_file
        ):
            # keys out of the runtime (issue 45): a key in the environment next to a
            # keystore or a token is one too many
            raise ConfigError(
                f"MG_EVM_SIGNER_BACKEND={settings.evm_signer_backend}: unset "
                "MG_EVM_SIGNER_PRIVATE_KEY and MG_EVM_SIGNER_KEY_FILE"
            )
        # ---- CCIP (issue 12): bad lanes or a sidecar without its URL stop start-up.
        from qtg.domain.ccip import parse_lanes

        parse_lanes(settings.ccip_lanes)
        if settings.ccip_sidecar == "http" and not settings.ccip_sidecar_url:
            raise ConfigError("MG_CCIP_SIDECAR_URL: MG_CCIP_SIDECAR=http needs the sidecar's URL")
        # ---- CCTP (issue 28): a bad chain list stops start-up here.
        from qtg.domain.cctp import parse_chains

        parse_chains(settings.cctp_chains)
        # ---- Stargate (issue 46): likewise.
        from qtg.domain.stargate import parse_chains as parse_stargate_chains

        parse_stargate_chains(settings.stargate_chains)

        # ---- deBridge (issue 46): a bad chain list stops start-up here.
        from qtg.domain.debridge import parse_chains as parse_debridge_chains

        parse_debridge_chains(settings.debridge_chains)
        settings.validate_security()
        # ---- audit anchoring (issue 17 item 4): an unreadable or short key stops start-up.
        audit_keys(settings)
        return settings

    def validate_security(self) -> None:
        """The security settings' checks (issue 17 item 3): ConfigError naming one."""
        try:
            parse_allowlist(self.callback_allowed_hosts)
        except ValueError as exc:
            raise ConfigError(f"MG_CALLBACK_ALLOWED_HOSTS: {exc}") from None

    def callback_secret_problem(self) -> str | None:
        """Why this process may not start without MG_CALLBACK_SIGNING_SECRET, or None.

        With an external database (MG_DATABASE_URL) several runtimes on
        several hosts serve one set of movements, and any of them may send a
        callback: a secret generated per host (the embedded default, in
        MG_EMBEDDED_DATA_DIR) would sign with a different key on each, and a
        receiver would reject some of them. Only a process that runs workers
        sends callbacks (and signed notification webhooks); an API-only one
        does not need it.
        """
        if self.database_url and self.workers_enabled and not self.callback_signing_secret:
            return (
                "MG_CALLBACK_SIGNING_SECRET is required with an external database "
                "(MG_DATABASE_URL): every runtime must sign callbacks with the same key"
            )
        return None

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def redacted(self) -> dict[str, Any]:
        """Every setting by variable name, with secrets masked: safe to log."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata["secret"] and value is not None:
                value = "***"
            out[f.metadata["env"]] = value
        return out


def _parse(f: dataclasses.Field[Any], hint: Any, raw: str) -> Any:
    env = f.metadata["env"]
    base = _non_optional(hint)
    text = raw.strip()
    if base is bool:
        lowered = text.lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ConfigError(f"{env}: expected true or false, got {raw!r}")
    if base is int or base is float:
        try:
            value: float = int(text) if base is int else float(text)
        except ValueError:
            kind = "an integer" if base is int else "a number"
            raise ConfigError(f"{env}: expected {kind}, got {raw!r}") from None
        if base is float and value != value:  # NaN
            raise ConfigError(f"{env}: expected a number, got {raw!r}")
        minimum = f.metadata["minimum"]
        exclusive = f.metadata["exclusive_minimum"]
        if minimum is not None and value < minimum:
            raise ConfigError(f"{env}: must be at least {minimum}, got {raw!r}")
        maximum = f.metadata["maximum"]
        if maximum is not None and value > maximum:
            raise ConfigError(f"{env}: must be at most {maximum}, got {raw!r}")
        if exclusive is not None and value <= exclusive:
            raise ConfigError(f"{env}: must be greater than {exclusive}, got {raw!r}")
        return value
    choices = f.metadata["choices"]
    if choices is not None:
        upper = text.upper() if all(c.isupper() for c in choices) else text.lower()
        if upper not in choices:
            raise ConfigError(f"{env}: expected one of {', '.join(choices)}, got {raw!r}")
        return upper
    if text == "" and hint is not base:  # optional string: empty means unset
        return None
    return text


def _non_optional(hint: Any) -> Any:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0]
    return hint


# ---- audit keys (issue 17 item 4): parsed with the settings, below the services that use them


@dataclass(frozen=True, slots=True)
class AuditKeys:
    """The key new rows are chained with, and every key verification accepts (by key_id)."""

    current: bytes
    by_id: Mapping[str, bytes]

    @property
    def current_id(self) -> str:
        return audit_chain.key_id(self.current)


def _key_bytes(text: str, setting_name: str) -> bytes:
    key = text.strip().encode("utf-8")
    if len(key) < audit_chain.MIN_KEY_BYTES:
        raise ConfigError(
            f"{setting_name}: the audit HMAC key must be at least "
            f"{audit_chain.MIN_KEY_BYTES} bytes, got {len(key)}"
        )
    return key


def audit_keys(settings: Settings) -> AuditKeys | None:
    """The configured audit keys, or None (unkeyed). ConfigError naming the setting if bad.

    Never logs or echoes the key: error messages name only the setting and a length.
    """
    if settings.audit_hmac_key and settings.audit_hmac_key_file:
        raise ConfigError("MG_AUDIT_HMAC_KEY and MG_AUDIT_HMAC_KEY_FILE are both set; set one")
    if settings.audit_hmac_key_file:
        try:
            text = Path(settings.audit_hmac_key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"MG_AUDIT_HMAC_KEY_FILE: cannot read {settings.audit_hmac_key_file!r} "
                f"({type(exc).__name__})"
            ) from None
        current = _key_bytes(text, "MG_AUDIT_HMAC_KEY_FILE")
    elif settings.audit_hmac_key:
        current = _key_bytes(settings.audit_hmac_key, "MG_AUDIT_HMAC_KEY")
    else:
        if settings.audit_hmac_previous_keys:
            raise ConfigError(
                "MG_AUDIT_HMAC_PREVIOUS_KEYS is set but neither MG_AUDIT_HMAC_KEY nor "
                "MG_AUDIT_HMAC_KEY_FILE is"
            )
        return None
    keys = [current] + [
        _key_bytes(part, "MG_AUDIT_HMAC_PREVIOUS_KEYS")
        for part in (settings.audit_hmac_previous_keys or "").split(",")
        if part.strip()
    ]
    return AuditKeys(current=current, by_id={audit_chain.key_id(k): k for k in keys})
