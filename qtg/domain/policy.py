"""Treasury policies as data (issue 45): an ordered list of rules, first match decides.

A policy document is plain JSON, so it can be proposed, reviewed (four-eyes by
admins) and recorded in the audit chain like any other change:

    {"groups": {"treasury": ["tina", "tom", "tess"]},
     "rules": [
       {"name": "daily-cap", "asset": "USDC",
        "accumulation": {"window_seconds": 86400, "scope": "overall", "gt": "1000000"},
        "action": "block"},
       {"name": "large", "asset": "USDC", "destination": "book", "amount": {"gt": "50000"},
        "action": "allow", "approvals": {"count": 3, "group": "treasury"}},
       {"name": "small", "asset": "USDC", "destination": "book",
        "action": "allow", "approvals": {"count": 2, "group": "treasury"}},
       {"name": "block-all", "action": "block"}]}

Conditions (each omitted one matches anything): `template`, `action_type`,
`network_class`, `source`, `asset` (a string or a list of strings: one must
equal the movement's; `action_type` matches when any of the plan's action
nodes has it, `source` when any of the movement's sources is named);
`destination` ("any"; "book": a usable address-book entry; {"tag": t}: a usable
entry carrying tag t; {"entry": label}: the usable entry of that label);
`amount` (a range: any of gt/gte/lt/lte as decimal strings);
`accumulation` ({"window_seconds", "scope": overall|destination|asset|initiator,
and a range}): the sum already charged in the window, in the rule's scope and
of the rule's assets, plus this movement's amount, falls in the range.

Outcomes: `"action": "block"` (a 403 naming the rule), or `"action": "allow"`
with `approvals` ({"count": N, "group": g} or {"count": N, "role": r}; N >= 1;
the creator never counts; default one operator, today's four-eyes) and an
optional `delay_seconds` before dispatch. The last rule must be an
unconditional block: nothing falls through a policy by accident.

Everything here is pure; the service (qtg/services/policies.py) supplies the
facts, the address book and the sums, and keeps the accumulation ledger.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

SCOPES = ("overall", "destination", "asset", "initiator")
ROLES = ("viewer", "operator", "admin")
_LIST_CONDITIONS = ("template", "action_type", "network_class", "source", "asset")
_RANGE_KEYS = ("gt", "gte", "lt", "lte")
_RULE_KEYS = frozenset(
    {
        "name",
        "description",
        *_LIST_CONDITIONS,
        "destination",
        "amount",
        "accumulation",
        "action",
        "approvals",
        "delay_seconds",
    }
)
MAX_RULES = 200
MAX_DELAY_SECONDS = 30 * 86_400
MAX_WINDOW_SECONDS = 366 * 86_400
MAX_APPROVALS = 50


class PolicyError(ValueError):
    """A policy document that cannot be used; `path` names the offending part."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


# ------------------------------------------------------------------ the model


@dataclass(frozen=True, slots=True)
class Range:
    gt: Decimal | None = None
    gte: Decimal | None = None
    lt: Decimal | None = None
    lte: Decimal | None = None

    def contains(self, value: Decimal) -> bool:
        return (
            (self.gt is None or value > self.gt)
            and (self.gte is None or value >= self.gte)
            and (self.lt is None or value < self.lt)
            and (self.lte is None or value <= self.lte)
        )

    def limit(self) -> Decimal | None:
        """The ceiling a sum may reach before it falls in this range (for display)."""
        return self.gt if self.gt is not None else self.gte


@dataclass(frozen=True, slots=True)
class Accumulation:
    window_seconds: int
    scope: str
    range: Range


@dataclass(frozen=True, slots=True)
class Approvals:
    count: int
    group: str | None = None
    role: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"count": self.count}
        if self.group is not None:
            out["group"] = self.group
        if self.role is not None:
            out["role"] = self.role
        return out


#: Today's rule when a policy does not say: one operator who is not the creator.
DEFAULT_APPROVALS = Approvals(1, role="operator")


@dataclass(frozen=True, slots=True)
class Destination:
    """`any`, `book` (any usable entry), a tag of usable entries, or one entry by label."""

    kind: str  # any | book | tag | entry
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    action: str  # allow | block
    lists: Mapping[str, frozenset[str]] = field(default_factory=dict)
    destination: Destination | None = None
    amount: Range | None = None
    accumulation: Accumulation | None = None
    approvals: Approvals = DEFAULT_APPROVALS
    delay_seconds: int = 0

    @property
    def unconditional(self) -> bool:
        return (
            not self.lists
            and self.destination is None
            and self.amount is None
            and self.accumulation is None
        )


@dataclass(frozen=True, slots=True)
class Policy:
    rules: tuple[Rule, ...]
    groups: Mapping[str, frozenset[str]]

    def rule(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)

    def accumulating(self) -> list[Rule]:
        return [r for r in self.rules if r.accumulation is not None]


@dataclass(frozen=True, slots=True)
class BookEntry:
    """An address-book entry as evaluation sees it; `usable` once its cooling-off is over."""

    label: str
    chain: str
    asset: str
    address: str
    tags: frozenset[str]
    usable: bool


@dataclass(frozen=True, slots=True)
class Facts:
    """What a rule can look at, about one movement."""

    template: str
    action_types: frozenset[str]
    network_class: str
    sources: frozenset[str]
    asset: str
    amount: Decimal
    destination: str
    chain: str | None
    initiator: str
    #: the address-book entries of this destination (usable or cooling off)
    entries: tuple[BookEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    rule: str
    action: str
    approvals: Approvals
    delay_seconds: int
    #: why the rule matched where it is worth saying (accumulation reached, cooling off)
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def blocked(self) -> bool:
        return self.action == "block"


# ------------------------------------------------------------------ parsing


def document_hash(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _decimal(value: Any, path: str) -> Decimal:
    if not isinstance(value, str):
        raise PolicyError(path, 'must be a decimal string such as "50000"')
    try:
        out = Decimal(value)
    except InvalidOperation:
        raise PolicyError(path, f"{value!r} is not a decimal") from None
    if not out.is_finite() or out < 0:
        raise PolicyError(path, "must be a finite, non-negative decimal")
    return out


def _range(value: Any, path: str) -> Range:
    if not isinstance(value, Mapping) or not value:
        raise PolicyError(path, f"must be an object with some of {', '.join(_RANGE_KEYS)}")
    unknown = set(value) - set(_RANGE_KEYS)
    if unknown:
        raise PolicyError(f"{path}.{sorted(unknown)[0]}", "unknown bound")
    return Range(**{k: _decimal(value[k], f"{path}.{k}") for k in _RANGE_KEYS if k in value})


def _int(value: Any, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyError(path, f"must be an integer from {low} to {high}")
    return value


def _names(value: Any, path: str) -> frozenset[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise PolicyError(path, "must be a string or a non-empty list of strings")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item or len(item) > 200:
            raise PolicyError(f"{path}[{i}]", "must be a non-empty string")
    return frozenset(items)


def _destination(value: Any, path: str) -> Destination:
    if value in ("any", "book"):
        return Destination(value)
    if isinstance(value, Mapping) and len(value) == 1:
        [(kind, name)] = value.items()
        if kind in ("tag", "entry") and isinstance(name, str) and name:
            return Destination(kind, name)
    raise PolicyError(path, 'must be "any", "book", {"tag": "<tag>"} or {"entry": "<label>"}')


def _rule(raw: Any, path: str, groups: Mapping[str, frozenset[str]]) -> Rule:
    if not isinstance(raw, Mapping):
        raise PolicyError(path, "a rule must be an object")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise PolicyError(f"{path}.{sorted(unknown)[0]}", "unknown rule field")
    name = raw.get("name")
    if not isinstance(name, str) or not 1 <= len(name) <= 100:
        raise PolicyError(f"{path}.name", "every rule needs a name of 1-100 characters")
    action = raw.get("action")
    if action not in ("allow", "block"):
        raise PolicyError(f"{path}.action", 'must be "allow" or "block"')
    lists = {k: _names(raw[k], f"{path}.{k}") for k in _LIST_CONDITIONS if k in raw}
    destination = (
        _destination(raw["destination"], f"{path}.destination") if "destination" in raw else None
    )
    amount = _range(raw["amount"], f"{path}.amount") if "amount" in raw else None
    accumulation = None
    if "accumulation" in raw:
        acc = raw["accumulation"]
        apath = f"{path}.accumulation"
        if not isinstance(acc, Mapping):
            raise PolicyError(apath, "must be an object")
        extra = set(acc) - {"window_seconds", "scope", *_RANGE_KEYS}
        if extra:
            raise PolicyError(f"{apath}.{sorted(extra)[0]}", "unknown accumulation field")
        scope = acc.get("scope", "overall")
        if scope not in SCOPES:
            raise PolicyError(f"{apath}.scope", f"must be one of {', '.join(SCOPES)}")
        bounds = {k: acc[k] for k in _RANGE_KEYS if k in acc}
        accumulation = Accumulation(
            _int(acc.get("window_seconds"), f"{apath}.window_seconds", 1, MAX_WINDOW_SECONDS),
            scope,
            _range(bounds, apath),
        )
    approvals = DEFAULT_APPROVALS
    delay = 0
    if action == "allow":
        if "approvals" in raw:
            ap = raw["approvals"]
            ppath = f"{path}.approvals"
            if not isinstance(ap, Mapping) or set(ap) - {"count", "group", "role"}:
                raise PolicyError(
                    ppath, 'must be {"count": N, "group": g} or {"count": N, "role": r}'
                )
            count = _int(ap.get("count"), f"{ppath}.count", 1, MAX_APPROVALS)
            group, role = ap.get("group"), ap.get("role")
            if (group is None) == (role is None):
                raise PolicyError(ppath, "name exactly one of group and role")
            if group is not None and group not in groups:
                raise PolicyError(f"{ppath}.group", f"no group {group!r} in the policy's groups")
            if role is not None and role not in ROLES:
                raise PolicyError(f"{ppath}.role", f"must be one of {', '.join(ROLES)}")
            if group is not None and count > len(groups[group]):
                raise PolicyError(
                    f"{ppath}.count", f"group {group!r} has fewer than {count} members"
                )
            approvals = Approvals(count, group=group, role=role)
        if "delay_seconds" in raw:
            delay = _int(raw["delay_seconds"], f"{path}.delay_seconds", 0, MAX_DELAY_SECONDS)
    elif "approvals" in raw or "delay_seconds" in raw:
        raise PolicyError(path, "a block rule takes no approvals or delay")
    return Rule(name, action, lists, destination, amount, accumulation, approvals, delay)


def parse_policy(document: Any) -> Policy:
    """The policy of `document`, or PolicyError naming what is wrong."""
    if not isinstance(document, Mapping):
        raise PolicyError("policy", "must be an object with rules (and optionally groups)")
    extra = set(document) - {"rules", "groups", "description"}
    if extra:
        raise PolicyError(sorted(extra)[0], "unknown policy field")
    raw_groups = document.get("groups", {})
    if not isinstance(raw_groups, Mapping):
        raise PolicyError("groups", "must be an object: group name -> list of principals")
    groups = {str(k): _names(v, f"groups.{k}") for k, v in raw_groups.items()}
    raw_rules = document.get("rules")
    if not isinstance(raw_rules, list) or not 1 <= len(raw_rules) <= MAX_RULES:
        raise PolicyError("rules", f"must be a list of 1-{MAX_RULES} rules")
    rules = tuple(_rule(r, f"rules[{i}]", groups) for i, r in enumerate(raw_rules))
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        if rule.name in seen:
            raise PolicyError(f"rules[{i}].name", f"rule name {rule.name!r} is used twice")
        seen.add(rule.name)
    last = rules[-1]
    if not (last.action == "block" and last.unconditional):
        raise PolicyError(
            f"rules[{len(rules) - 1}]", "the last rule must block everything (no conditions)"
        )
    return Policy(rules, groups)


# ------------------------------------------------------------------ evaluation


def usable_entries(facts: Facts) -> list[BookEntry]:
    return [e for e in facts.entries if e.usable]


def _destination_matches(dest: Destination, facts: Facts) -> bool:
    if dest.kind == "any":
        return True
    usable = usable_entries(facts)
    if dest.kind == "book":
        return bool(usable)
    if dest.kind == "tag":
        return any(dest.value in e.tags for e in usable)
    return any(e.label == dest.value for e in usable)


def accumulation_in_scope(scope: str, facts: Facts) -> dict[str, str | None]:
    """The filter of the charges a rule of `scope` sums for this movement."""
    return {
        "destination": facts.destination.lower() if scope == "destination" else None,
        "asset": facts.asset if scope == "asset" else None,
        "initiator": facts.initiator if scope == "initiator" else None,
    }


def _matches(rule: Rule, facts: Facts, used: Mapping[str, Decimal]) -> bool:
    single = {
        "template": {facts.template},
        "network_class": {facts.network_class},
        "asset": {facts.asset},
        "action_type": facts.action_types,
        "source": facts.sources,
    }
    for key, names in rule.lists.items():
        if not names & single[key]:
            return False
    if rule.destination is not None and not _destination_matches(rule.destination, facts):
        return False
    if rule.amount is not None and not rule.amount.contains(facts.amount):
        return False
    if rule.accumulation is not None:
        total = used.get(rule.name, Decimal(0)) + facts.amount
        if not rule.accumulation.range.contains(total):
            return False
    return True


def evaluate(policy: Policy, facts: Facts, used: Mapping[str, Decimal]) -> Decision:
    """The first rule that matches decides. `used`: per accumulating rule's name,
    the sum already charged in its window and scope (without this movement)."""
    for rule in policy.rules:
        if not _matches(rule, facts, used):
            continue
        detail: dict[str, Any] = {}
        if rule.accumulation is not None:
            detail["accumulated"] = str(used.get(rule.name, Decimal(0)))
            detail["window_seconds"] = rule.accumulation.window_seconds
        if rule.action == "block":
            cooling = [e for e in facts.entries if not e.usable]
            if cooling and not usable_entries(facts):
                detail["destination_cooling_off"] = True
        return Decision(rule.name, rule.action, rule.approvals, rule.delay_seconds, detail)
    raise AssertionError("a parsed policy ends with an unconditional block")  # pragma: no cover


def eligible_approvers(
    approvals: Approvals,
    groups: Mapping[str, frozenset[str]],
    given: Iterable[tuple[str, str]],
    creator: str,
) -> list[str]:
    """Of the approvals `given` as (principal, role at the time), the distinct
    principals that count for `approvals`: never the creator; in its group, or
    holding at least its role."""
    out: list[str] = []
    for principal, role in given:
        if principal == creator or principal in out:
            continue
        if may_approve(approvals, groups, principal, role):
            out.append(principal)
    return out


def may_approve(
    approvals: Approvals, groups: Mapping[str, frozenset[str]], principal: str, role: str
) -> bool:
    if approvals.group is not None:
        return principal in groups.get(approvals.group, frozenset())
    wanted = approvals.role or "operator"
    return role in ROLES and ROLES.index(role) >= ROLES.index(wanted)
