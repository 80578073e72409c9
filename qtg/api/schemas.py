"""Request and response models: the API's contract, and the source of /openapi.json.

Bodies are strict (`extra="forbid"`, no type coercion: `"amount": 12.5` is
refused, not turned into a string), query parameters are lax only in the way
a URL needs (`limit=10` is the string "10"). Responses are validated against
their model before they are sent, so the OpenAPI document cannot drift from
what the routes really return. The operations behind the routes still check
the meaning (an unknown template, a movement in the wrong state); this layer
checks the shape and names the field when it is wrong.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)
from pydantic_core import PydanticCustomError

from qtg.domain import plan
from qtg.domain.callback_targets import CALLBACK_URL_PATTERN
from qtg.domain.states import NodeState, RequestState
from qtg.services.tokens import NAME_PATTERN

# ------------------------------------------------------------------ bases


class Body(BaseModel):
    """A JSON request body: unknown fields and type coercion are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)


class QueryParams(BaseModel):
    """Query (or path) parameters: unknown ones refused; strings parsed to their type."""

    model_config = ConfigDict(extra="forbid")


class Out(BaseModel):
    """A response object; columns the contract does not name are left out."""

    model_config = ConfigDict(extra="ignore")


# ------------------------------------------------------------------ scalar types

TemplateKey = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,127}$"),
    Field(
        description="1-128 of a-z 0-9 _ . - starting with a letter or digit",
        examples=["demo.cex_to_chain"],
    ),
]
NodeKey = Annotated[
    str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$"), Field(examples=["withdraw"])
]
SignerKey = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"),
    Field(examples=["sandbox"]),
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
LongText = Annotated[str, StringConstraints(max_length=2000)]
EventType = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Principal = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
EvmAddress = Annotated[
    str,
    StringConstraints(pattern=r"^0x[0-9a-fA-F]{40}$"),
    Field(examples=["0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"]),
]
Cursor = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,400}$"),
    Field(
        description="opaque: the next_cursor of the previous page of this same list; "
        "any other value, however well formed, is 422 (detail.field: cursor)"
    ),
]
Limit = Annotated[int, Field(ge=1, le=200, description="page size, 1-200")]
JsonObject = dict[str, Any]


def _amount_is_text(value: Any) -> Any:
    """A JSON number is refused with what to send instead: a float cannot hold
    every amount exactly, so amounts travel as decimal strings."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise PydanticCustomError(
            "amount_not_a_string",
            'amounts are decimal strings such as "125.50", not JSON numbers',
        )
    return value


def _positive_decimal(value: str) -> str:
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise ValueError('must be a decimal string such as "125.50"') from None
    if not number.is_finite() or number <= 0:
        raise ValueError("must be a positive decimal string")
    return value


#: What the published schema says an amount is (issue 26): the validation
#: pattern below *and* not zero (`_positive_decimal`), in one regular
#: expression (a lookahead: at least one non-zero digit), so a client or a
#: schema-driven test generating from the document sends only amounts the API
#: accepts. Validation keeps the lookahead-free pattern plus the Decimal check.
AMOUNT_PATTERN = r"^[0-9]{1,30}(\.[0-9]{1,18})?$"
PUBLISHED_AMOUNT_PATTERN = r"^(?=[0-9.]*[1-9])[0-9]{1,30}(\.[0-9]{1,18})?$"

Amount = Annotated[
    str,
    BeforeValidator(_amount_is_text),
    StringConstraints(pattern=AMOUNT_PATTERN),
    AfterValidator(_positive_decimal),
    Field(
        description="a positive decimal as a string (never a JSON number): up to 30 digits, "
        "optionally a point and up to 18 decimals, not zero",
        examples=["125.50"],
        json_schema_extra={"pattern": PUBLISHED_AMOUNT_PATTERN},
    ),
]


# ------------------------------------------------------------------ errors


class ErrorInfo(Out):
    code: str
    message: str
    detail: JsonObject = Field(
        default_factory=dict,
        description="context; for bad input `field` names it, for 409 `current_state`",
    )


class ErrorResponse(Out):
    error: ErrorInfo


# ------------------------------------------------------------------ templates


#: The plan's shape in the OpenAPI document, as strict as qtg/domain/plan.py
#: checks it (which stays the authority: it also checks references, cycles,
#: and that edges name existing nodes). Documentation only: validation is the
#: plan compiler's, with its precise error paths.
GRAPH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["nodes"],
    "properties": {
        "nodes": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "kind", "action_type"],
                "properties": {
                    "key": {"type": "string", "pattern": plan._NAME.pattern},
                    "kind": {"type": "string", "enum": list(plan.NODE_KINDS)},
                    "action_type": {"type": "string", "minLength": 1},
                    "executor_key": {"type": "string"},
                    "config": {"type": "object"},
                    "timeout_policy": {"type": "object"},
                },
            },
        },
        "edges": {
            "type": "array",
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "items": {"type": "string", "pattern": plan._NAME.pattern},
            },
        },
    },
}


class TemplateCreate(Body):
    template_key: TemplateKey
    name: ShortText
    description: LongText = ""
    graph: JsonObject = Field(
        description="the plan: {nodes: [{key, kind, action_type, executor_key?, config?, "
        "timeout_policy?}], edges: [[from, to]]}. Beyond its shape, the plan compiler "
        "refuses with 422 INVALID_PLAN (detail names the path): an edge naming a node "
        "that is not in `nodes`, a duplicate edge or node key, a self-loop or a cycle, a "
        "$ref to a node that is not an ancestor, a manual node without its action type",
        json_schema_extra=GRAPH_SCHEMA,
        examples=[
            {
                "nodes": [
                    {
                        "key": "withdraw",
                        "kind": "action",
                        "action_type": "cex_withdrawal",
                        "config": {"venue": "sandbox"},
                    },
                    {
                        "key": "receive",
                        "kind": "observe",
                        "action_type": "destination_chain_receive_observe",
                        "config": {"txid": "$ref:withdraw.txid"},
                    },
                ],
                "edges": [["withdraw", "receive"]],
            }
        ],
    )
    risk_controls: JsonObject = Field(default_factory=dict)


class TemplateCreated(Out):
    template_key: str
    template_id: uuid.UUID
    version: int
    template_version_id: uuid.UUID
    graph_hash: str
    created: bool = Field(description="true when this call created the template itself")


class TemplateSummary(Out):
    template_id: uuid.UUID
    template_key: str
    name: str
    description: str
    created_at: datetime
    updated_at: datetime
    template_version_id: uuid.UUID | None
    version: int | None
    graph_hash: str | None


class TemplateDetail(TemplateSummary):
    graph: JsonObject | None
    risk_controls: JsonObject | None
    version_created_by: str | None
    version_created_at: datetime | None


class TemplateVersion(Out):
    template_version_id: uuid.UUID
    version: int
    status: Literal["ACTIVE", "RETIRED"]
    graph: JsonObject
    graph_hash: str
    risk_controls: JsonObject
    created_by: str
    created_at: datetime


class TemplateList(Out):
    items: list[TemplateSummary]


class TemplateVersionList(Out):
    items: list[TemplateVersion]


class TemplateKeyPath(QueryParams):
    template_key: TemplateKey


# ------------------------------------------------------------------ proposals

ProposalState = Literal["PENDING_REVIEW", "APPROVED", "REJECTED", "EXPIRED"]


class ProposalCreate(TemplateCreate):
    pass


class ProposalDecision(Body):
    note: LongText | None = None


class Proposal(Out):
    id: uuid.UUID
    template_key: str
    name: str
    description: str
    graph: JsonObject
    risk_controls: JsonObject
    proposal_state: ProposalState
    proposed_by: str
    reviewed_by: str | None
    review_note: str | None
    template_version_id: uuid.UUID | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    template_version: TemplateCreated | None = Field(
        default=None, description="the version an approval created"
    )


class ProposalList(Out):
    items: list[Proposal]


class ProposalPath(QueryParams):
    proposal_id: uuid.UUID


class ProposalListQuery(QueryParams):
    state: ProposalState | None = None
    limit: Limit = 50


# ------------------------------------------------------------------ movements


class Intent(BaseModel):
    """What to move: at least asset, amount and destination; other fields are kept."""

    model_config = ConfigDict(extra="allow", strict=True)

    asset: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    amount: Amount
    destination: Annotated[str, StringConstraints(min_length=1, max_length=512)]


class MovementCreate(Body):
    template_key: TemplateKey
    intent: Intent
    input_params: JsonObject = Field(default_factory=dict)
    callback_url: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=2048),
            # Documents what qtg/services/callbacks.py enforces (it decides, naming the reason).
            Field(
                # http(s), then only what RFC 3986 allows (validate_callback_url's rule)
                json_schema_extra={"format": "uri", "pattern": CALLBACK_URL_PATTERN},
                description="where signed callbacks are POSTed: an http(s) URL with a host, "
                "no user:password@, ASCII only (an internationalized host name in its xn-- "
                "form); a host that is not public is 422 unless MG_CALLBACK_ALLOWED_HOSTS "
                "lists it",
            ),
        ]
        | None
    ) = None


class Empty(Body):
    """No fields: send `{}` or nothing."""


class Decision(Body):
    reason: LongText | None = None


class ManualCompletion(Body):
    artifacts: JsonObject = Field(default_factory=dict)


class NodeResolve(Body):
    """An operator's settlement of an UNKNOWN (or stranded SUBMITTING) node."""

    outcome: Literal["COMPLETED", "FAILED"] = Field(
        description="what really happened: COMPLETED (it moved) or FAILED (provably no money moved)"
    )
    evidence: Annotated[str, StringConstraints(min_length=1, max_length=2000)] = Field(
        description="what shows it: a transaction hash, a venue statement, a ticket"
    )
    provider_refs: JsonObject = Field(
        default_factory=dict,
        description="references recorded on the node (e.g. tx_hash); a confirmation that "
        "names any must name the proposal's",
    )


class NodeResolution(Out):
    id: int
    request_id: uuid.UUID
    node_key: str
    attempt_no: int
    node_state: NodeState = Field(description="the node's state when it was proposed")
    outcome: Literal["COMPLETED", "FAILED"]
    evidence: str
    provider_refs: JsonObject
    status: Literal["proposed", "confirmed", "superseded"]
    proposed_by: str
    proposed_at: datetime
    confirmed_by: str | None
    confirm_evidence: str | None
    decided_at: datetime | None
    applied_at: datetime | None = Field(
        None,
        description="when it took effect; null on a confirmed FAILED whose node's signed "
        "transactions could still be mined: the node waits (FAILURE_NOT_PROVEN) until the "
        "chain shows a same-nonce cancel consumed the nonce",
    )
    proof: JsonObject | None = Field(
        None, description="what proved the outcome (the cancel's receipt, nothing signed)"
    )


class NodeResolutionResult(Out):
    resolution: NodeResolution
    movement: Movement


class MovementNode(Out):
    id: uuid.UUID
    node_key: str
    node_kind: Literal["action", "observe", "manual"]
    action_type: str
    node_state: NodeState
    attempt_no: int
    started_at: datetime | None
    submitted_at: datetime | None
    completed_at: datetime | None
    next_observe_at: datetime | None
    observe_count: int
    provider_refs: JsonObject
    artifacts: JsonObject
    error_code: str | None
    error_detail: str | None
    updated_at: datetime
    failure_proven: bool | None = Field(
        None,
        description="FAILED nodes only: true when nothing the attempt signed can still be "
        "mined and an operators' FAILED carries the chain's proof; retry is refused "
        "(409 FAILURE_NOT_PROVEN) while false",
    )


class MovementSummary(Out):
    id: uuid.UUID
    network_class: str
    template_key: str
    template_version: int
    request_state: RequestState
    current_frontier: list[str]
    intent: JsonObject
    callback_url: str | None
    created_by: str
    approved_by: str | None
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    policy_version: int | None = Field(
        default=None, description="the treasury policy version it was decided under; null: none"
    )
    policy_rule: str | None = Field(default=None, description="the policy rule that matched")
    policy_approvals: JsonObject | None = Field(
        default=None, description="the approvals its rule needs: {count, group | role}"
    )
    policy_delay_seconds: int | None = Field(
        default=None, description="the rule's delay between approval and dispatch"
    )


class PolicyApproval(Out):
    principal: str
    role: str
    counted: bool = Field(description="whether it counts for the rule (group or role)")
    approved_at: datetime


class PolicyWindow(Out):
    rule: str
    scope: str
    window_seconds: int
    used: str = Field(description="the sum already charged in the window and scope")
    limit: str | None


class MovementPolicy(Out):
    version: int
    rule: str | None
    approvals: JsonObject = Field(description="what the rule needs: {count, group | role}")
    approvals_given: list[PolicyApproval]
    approvals_needed: int = Field(description="distinct eligible approvals still missing")
    accumulation: list[PolicyWindow]
    charged: str | None = Field(description="what its dispatch charged; null: not yet")
    delay_seconds: int
    delay_left_seconds: float = Field(description="of the rule's delay before dispatch")


class Movement(MovementSummary):
    policy: MovementPolicy | None = Field(
        default=None, description="how the treasury policy governs it; null: no policy"
    )
    template_version_id: uuid.UUID
    compiled_plan_hash: str
    approval_seal: str | None = Field(
        default=None,
        description=(
            "sha256 of what was approved, written at approval; the signer refuses a movement "
            "whose rows no longer match it (docs: Custody). null: not approved yet"
        ),
    )
    input_params: JsonObject
    idempotency_key: str
    decided_by: str | None
    nodes: list[MovementNode]
    edges: list[list[str]] = Field(
        description="the plan's dependencies as [from, to] node keys (the graph to draw)"
    )


class MovementPage(Out):
    items: list[MovementSummary]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class MovementPath(QueryParams):
    request_id: uuid.UUID


class NodePath(QueryParams):
    request_id: uuid.UUID
    node_key: NodeKey


class MovementListQuery(QueryParams):
    state: RequestState | None = None
    template_key: TemplateKey | None = None
    cursor: Cursor | None = None
    limit: Limit = 50


IdempotencyKey = Annotated[str, StringConstraints(pattern=r"^[\x21-\x7e]{1,200}$")]


# ------------------------------------------------------------------ capital transfers

CapitalTransferStatus = Literal[
    "pending", "movement_created", "completed", "failed", "needs_attention"
]
Place = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class CapitalTransferCreate(Body):
    asset: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    amount: Amount
    source: Place = Field(description="the venue or account the funds leave")
    destination: Place = Field(description="the venue, account or address they go to")
    template_key: TemplateKey | None = Field(
        default=None,
        description="the route template; omitted: the first MG_CAPITAL_TRANSFER_ROUTES match",
    )
    note: LongText | None = None


class CapitalTransfer(Out):
    id: uuid.UUID
    network_class: str
    asset: str
    amount: str
    source: str
    destination: str
    template_key: str
    note: str | None
    status: CapitalTransferStatus
    request_id: uuid.UUID | None = Field(description="its movement, once created")
    request_state: RequestState | None
    idempotency_key: str
    created_by: str
    last_error: str | None
    created_at: datetime
    updated_at: datetime


class CapitalTransferPage(Out):
    items: list[CapitalTransfer]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class CapitalTransferPath(QueryParams):
    transfer_id: uuid.UUID


class CapitalTransferListQuery(QueryParams):
    status: CapitalTransferStatus | None = None
    cursor: Cursor | None = None
    limit: Limit = 50


# ------------------------------------------------------------------ notifications


class Notification(Out):
    id: int
    kind: str
    severity: Literal["info", "warning", "critical"]
    subject: str
    body: str
    links: JsonObject
    request_id: uuid.UUID | None
    node_key: str | None
    dedupe_key: str
    occurrences: int = Field(description="times the open condition was raised")
    last_raised_at: datetime
    routed_at: datetime | None
    resolved_at: datetime | None
    created_at: datetime


class NotificationPage(Out):
    items: list[Notification]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class NotificationPath(QueryParams):
    notification_id: Annotated[int, Field(ge=1, le=2**63 - 1)]


class NotificationListQuery(QueryParams):
    open: bool | None = Field(default=None, description="true: unresolved only; false: resolved")
    kind: EventType | None = None
    cursor: Cursor | None = None
    limit: Limit = 50


# ------------------------------------------------------------------ registry & ops


class Executor(Out):
    executor_key: str
    action_types: list[str]
    health_state: Literal["unknown", "healthy", "degraded", "unhealthy"]
    health_detail: JsonObject
    last_health_at: datetime | None
    registered: bool
    updated_at: datetime


class ExecutorList(Out):
    items: list[Executor]


class Signer(Out):
    """A signer's health and identity posture (expected vs observed address)."""

    signer_key: str
    health_state: Literal["unknown", "healthy", "degraded", "unhealthy"]
    health_detail: JsonObject
    last_health_at: datetime | None
    registered: bool
    observed_signer_address: str | None
    observed_at: datetime | None
    expected_signer_address: str | None
    expected_set_by: str | None
    expected_set_at: datetime | None
    identity_posture: Literal["orphan", "unenrolled", "unobserved", "match", "mismatch"]
    updated_at: datetime


class SignerList(Out):
    items: list[Signer]


class SignerPath(QueryParams):
    signer_key: SignerKey


class ExpectedIdentity(Body):
    expected_signer_address: Annotated[
        EvmAddress,
        # what qtg/services/health.normalize_evm_address enforces, in the document too
        Field(
            description="the signer's EVM address; the zero address is refused",
            json_schema_extra={"not": {"pattern": "^0[xX]0{40}$"}},
        ),
    ]


class WorkerInstance(Out):
    """One process's heartbeat row for a worker."""

    instance_id: str
    host: str
    pid: int
    status: Literal["starting", "running", "backoff", "crashed", "stopped"]
    started_at: datetime | None
    last_beat_at: datetime | None
    last_success_at: datetime | None
    iterations: int
    items: int
    consecutive_errors: int
    last_error: str | None
    beat_age_seconds: float | None
    stale: bool
    superseded: bool = Field(
        description="dead (crashed or stale), but its host has started the worker again since"
    )


class Worker(Out):
    """One worker, folded from its processes' rows: a live instance never masks a dead one."""

    network_class: str
    worker_name: str
    worker_group: Literal["core", "sidecar"]
    status: Literal["starting", "running", "backoff", "crashed", "stopped"]
    instance_id: str | None
    interval_seconds: float
    started_at: datetime | None
    last_beat_at: datetime | None
    last_success_at: datetime | None
    iterations: int
    items: int
    consecutive_errors: int
    last_error: str | None
    beat_age_seconds: float | None
    stale_after_seconds: float
    stale: bool = Field(
        description="an instance claims to run but has not beaten within stale_after_seconds"
    )
    live_instances: int = Field(description="instances running it and beating")
    dead_instances: int = Field(description="instances that crashed or went stale, not restarted")
    instances: list[WorkerInstance]


class WorkerList(Out):
    network_class: str
    items: list[Worker]
    next_cursor: str | None = Field(
        default=None,
        description="always null: every worker of the network class fits on one page; "
        "present so that every list reads the same way",
    )


class WorkerQuery(QueryParams):
    network_class: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = (
        None
    )


class AuditEvent(Out):
    id: int
    actor: str
    action: str
    object_type: str
    object_id: str
    detail: JsonObject
    occurred_at: datetime
    promoted_at: datetime
    prev_hash: str
    row_hash: str


class AuditPage(Out):
    items: list[AuditEvent]
    next_cursor: str | None


SafeText = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class AuditQuery(QueryParams):
    object_type: SafeText | None = None
    object_id: SafeText | None = None
    actor: SafeText | None = None
    action: SafeText | None = None
    cursor: Cursor | None = None
    limit: Limit = 50


# ------------------------------------------------------------------ identity


class WhoAmI(Out):
    name: str
    role: Literal["viewer", "operator", "admin"]


# ------------------------------------------------------------------ health


class Health(Out):
    status: Literal["ok"]


class Durability(Out):
    """Whether a commit survives the loss of the primary (docs/operations/deployment.md)."""

    synchronous: bool
    synchronous_standby_names: str
    synchronous_commit: str
    standbys: int
    synchronous_standbys: int
    reason: str
    required: bool  # MG_REQUIRE_SYNCHRONOUS_REPLICATION asks for one now (auto: standbys stream)
    held: bool  # the dispatcher is holding submits for it


class Readiness(Out):
    status: Literal["ready", "not_ready"]
    checks: dict[str, bool]
    reasons: list[str]
    #: informational: not part of `checks` (an async standby is still ready);
    #: null when the database did not answer
    durability: Durability | None


# ------------------------------------------------------------------ stream


class StreamQuery(QueryParams):
    after: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = Field(
        default=None,
        description="resume after this event id (the last one received); absent: live only",
    )
    request_id: uuid.UUID | None = None
    types: Annotated[str, StringConstraints(max_length=1000)] | None = Field(
        default=None, description="comma-separated event types, e.g. request_state_changed"
    )
    token: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, description="bearer token, for clients that cannot set headers"
    )

    def type_set(self) -> frozenset[str] | None:
        if self.types is None:
            return None
        parts = [t.strip() for t in self.types.split(",") if t.strip()]
        return frozenset(parts)


# ------------------------------------------------------------------ treasury (issue 13)

VenueKey = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"),
    Field(
        description="a venue some balance fetcher of this deployment serves; another "
        "venue is 422 (detail.venues lists the served ones)"
    ),
]
BalanceText = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ExactAmount = Annotated[str, Field(description="an exact decimal string", examples=["1250.50"])]


class BalanceQuery(QueryParams):
    venue_key: VenueKey | None = None
    account: BalanceText | None = None
    asset: BalanceText | None = None
    fresh: bool = Field(
        default=False,
        description="fetch now before answering (operator or admin; rate-limited, bounded)",
    )


class Balance(Out):
    venue_key: str
    account: str
    asset: str
    amount: ExactAmount
    observed_at: datetime
    recorded_at: datetime
    source: Literal["worker", "fresh"]
    fetcher_key: str
    detail: JsonObject
    age_seconds: float
    stale: bool = Field(description="older than MG_BALANCE_STALE_THRESHOLD_SECONDS, judged now")


class FetcherStatus(Out):
    fetcher_key: str
    venue_key: str
    source: Literal["worker", "fresh"]
    outcome: Literal["ok", "failed", "timeout"]
    error: str | None
    rows: int
    started_at: datetime
    finished_at: datetime
    last_ok_at: datetime | None


class FetchOutcome(Out):
    fetcher_key: str
    venue_key: str
    outcome: Literal["ok", "failed", "timeout"]
    rows: int
    error: str | None


class BalanceList(Out):
    as_of: datetime
    stale_threshold_seconds: float
    items: list[Balance]
    fetchers: list[FetcherStatus] = Field(description="each fetcher's last attempt")
    fresh: list[FetchOutcome] | None = Field(
        default=None, description="with fresh=true: what each fetcher did for this request"
    )


def _rfc3339_text(value: Any) -> Any:
    """A query timestamp is RFC 3339 text with its offset, as the document says
    (`format: date-time`): not a Unix number, which the lax parser would take."""
    if isinstance(value, str) and not _RFC3339.match(value):
        raise PydanticCustomError(
            "timestamp_format", "must be an RFC 3339 date-time such as 2026-12-01T00:00:00Z"
        )
    return value


_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?"
    r"([Zz]|[+-][0-9]{2}:?[0-9]{2})$"
)
QueryTimestamp = Annotated[AwareDatetime, BeforeValidator(_rfc3339_text)]


class BalanceHistoryQuery(QueryParams):
    bucket: Literal["hour", "day"] = "hour"
    venue_key: VenueKey | None = None
    account: BalanceText | None = None
    asset: BalanceText | None = None
    since: QueryTimestamp | None = Field(default=None, description="bucket_start >= since")
    until: QueryTimestamp | None = Field(default=None, description="bucket_start < until")
    cursor: Cursor | None = None
    limit: Limit = 50


class BalanceHistoryRow(Out):
    bucket: Literal["hour", "day"]
    bucket_start: datetime
    venue_key: str
    account: str
    asset: str
    first_amount: ExactAmount
    last_amount: ExactAmount
    min_amount: ExactAmount
    max_amount: ExactAmount
    sample_count: int
    first_observed_at: datetime
    last_observed_at: datetime


class BalanceHistoryPage(Out):
    items: list[BalanceHistoryRow]
    next_cursor: str | None


# ------------------------------------------------------------------ treasury policies (issue 45)

PolicyState = Literal["PROPOSED", "ACTIVE", "SUPERSEDED", "REJECTED"]
EntryState = Literal["PROPOSED", "ACTIVE", "REJECTED", "REMOVED"]


class PolicyCreate(Body):
    document: JsonObject = Field(
        description="{groups?: {name: [principal]}, rules: [...]}: an ordered list of rules, "
        "first match decides, the last an unconditional block (docs/policies.md). Refused "
        "with 422 INVALID_POLICY naming the path of what is wrong",
        examples=[
            {
                "groups": {"treasury": ["tina", "tom", "tess"]},
                "rules": [
                    {
                        "name": "small",
                        "asset": "USDC",
                        "destination": "book",
                        "action": "allow",
                        "approvals": {"count": 2, "group": "treasury"},
                    },
                    {"name": "block-all", "action": "block"},
                ],
            }
        ],
    )
    note: LongText | None = None


class PolicyDecision(Body):
    note: LongText | None = None


class PolicyVersion(Out):
    version: int
    document: JsonObject
    document_hash: str
    state: PolicyState
    proposed_by: str
    proposed_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    note: str | None


class PolicyList(Out):
    active_version: int | None = Field(description="the version in force; null: no policy")
    items: list[PolicyVersion]


class PolicyPath(QueryParams):
    version: int = Field(ge=1, le=2**62)


class PolicyListQuery(QueryParams):
    limit: Limit = 50


class EntryCreate(Body):
    chain: ShortText = Field(description="the chain (e.g. an EVM chain id) or venue; * for any")
    asset: ShortText = Field(description="the asset paid to this address; * for any")
    address: ShortText
    label: ShortText
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=50
    )
    replaces: uuid.UUID | None = Field(
        default=None, description="the ACTIVE entry this proposal changes"
    )


class EntryDecision(Body):
    pass


class AddressBookEntry(Out):
    id: uuid.UUID
    chain: str
    asset: str
    address: str
    label: str
    tags: list[str]
    state: EntryState
    replaces: uuid.UUID | None
    proposed_by: str
    proposed_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    usable_at: datetime | None = Field(description="from when movements may pay it")
    cooling_off_left_seconds: float | None = Field(
        description="seconds of cooling-off left (0: usable); null before approval"
    )


class AddressBook(Out):
    items: list[AddressBookEntry]


class EntryPath(QueryParams):
    entry_id: uuid.UUID


class EntryListQuery(QueryParams):
    state: EntryState | None = None
    limit: Limit = 100
