"""Operator attention: pure rules for notifications and capital transfers (no I/O).

Kept apart from the services so that the decisions an on-call engineer will
ask about — which severity goes where, when a storm becomes a digest, what a
message says, which template a capital transfer takes — can be read and
tested without a database or a network.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import urlsplit


class Settings(Protocol):
    """The settings these rules read (qtg.config.Settings has them): a Protocol, so
    the pure rules do not import the configuration layer above them."""

    @property
    def workers_enabled(self) -> bool: ...
    @property
    def notify_enabled(self) -> bool: ...
    @property
    def notify_webhook_url(self) -> str | None: ...
    @property
    def notify_webhook_severities(self) -> str: ...
    @property
    def notify_email_to(self) -> str: ...
    @property
    def notify_email_from(self) -> str: ...
    @property
    def notify_email_severities(self) -> str: ...
    @property
    def notify_smtp_port(self) -> int: ...
    @property
    def notify_smtp_starttls(self) -> bool: ...
    @property
    def notify_smtp_username(self) -> str | None: ...
    @property
    def notify_smtp_password(self) -> str | None: ...
    @property
    def capital_transfer_routes(self) -> str: ...
    @property
    def callback_allowed_hosts(self) -> str: ...


#: Lowest to highest.
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")
#: The routes the dispatcher knows; their settings are MG_NOTIFY_<ROUTE>_*.
ROUTES: tuple[str, ...] = ("webhook", "email")
#: A digest lists this many notifications in full; the rest are counted by kind.
DIGEST_LISTED = 50
#: Longest body of one listed notification inside a digest.
DIGEST_BODY_CHARS = 300


class AttentionConfigError(ValueError):
    """A notification or capital-transfer setting is unusable (names the variable)."""


# ----------------------------------------------------------------- routing


def parse_severities(text: str, env: str) -> frozenset[str]:
    """A comma list of severities; `*` or `all` means every one, empty means none."""
    items = [i.strip().lower() for i in text.split(",") if i.strip()]
    if any(i in ("*", "all") for i in items):
        return frozenset(SEVERITIES)
    unknown = [i for i in items if i not in SEVERITIES]
    if unknown:
        raise AttentionConfigError(
            f"{env}: unknown severity {unknown[0]!r} (known: {', '.join(SEVERITIES)})"
        )
    return frozenset(items)


def configured_routes(settings: Settings) -> dict[str, frozenset[str]]:
    """Each configured route with the severities it receives.

    A route is configured when its destination is set (MG_NOTIFY_WEBHOOK_URL,
    MG_NOTIFY_EMAIL_TO) and it receives at least one severity.
    """
    routes: dict[str, frozenset[str]] = {}
    if settings.notify_webhook_url:
        routes["webhook"] = parse_severities(
            settings.notify_webhook_severities, "MG_NOTIFY_WEBHOOK_SEVERITIES"
        )
    if email_recipients(settings):
        routes["email"] = parse_severities(
            settings.notify_email_severities, "MG_NOTIFY_EMAIL_SEVERITIES"
        )
    return {route: sev for route, sev in routes.items() if sev}


def routes_for(severity: str, routes: Mapping[str, frozenset[str]]) -> list[str]:
    """The routes a notification of `severity` goes to (in ROUTES order)."""
    return [route for route in ROUTES if severity in routes.get(route, frozenset())]


def email_recipients(settings: Settings) -> list[str]:
    return [a.strip() for a in settings.notify_email_to.split(",") if a.strip()]


# ----------------------------------------------------------------- rate limit


def message_groups(held: int, budget: int) -> list[int]:
    """How `held` routed notifications become messages, given `budget` messages
    left in the route's rate window: sizes of the groups, one message each.

    While they fit with a slot to spare, each is its own message; otherwise
    all of them go in one digest, so the last slot of a window always carries
    everything that is waiting and nothing waits a whole window when a slot
    is free. No budget: nothing is sent (they wait for the window).
    """
    if held <= 0 or budget <= 0:
        return []
    if held < budget:
        return [1] * held
    return [held]


def highest_severity(severities: Sequence[str]) -> str:
    return max(severities, key=SEVERITIES.index)


# ----------------------------------------------------------------- rendering


@dataclass(frozen=True, slots=True)
class Rendered:
    """One message as it will be sent, on every attempt."""

    kind: str  # 'single' | 'digest'
    severity: str
    subject: str
    body: str
    payload: dict[str, Any]  # the webhook's JSON body (json format)


def _item(n: Mapping[str, Any]) -> dict[str, Any]:
    created = n["created_at"]
    resolved = n.get("resolved_at")
    return {
        "id": n["id"],
        "kind": n["kind"],
        "severity": n["severity"],
        "subject": n["subject"],
        "body": n["body"],
        "links": dict(n["links"]),
        "dedupe_key": n["dedupe_key"],
        "occurrences": n["occurrences"],
        "created_at": created.isoformat() if isinstance(created, datetime) else created,
        "resolved_at": resolved.isoformat() if isinstance(resolved, datetime) else resolved,
    }


def render(notifications: Sequence[Mapping[str, Any]]) -> Rendered:
    """A message for one notification, or a digest for several."""
    if not notifications:
        raise ValueError("a message needs at least one notification")
    severity = highest_severity([n["severity"] for n in notifications])
    if len(notifications) == 1:
        [n] = notifications
        subject = f"[qtg {n['severity']}] {n['subject']}"
        body = n["body"] or n["subject"]
        kind = "single"
        listed = [_item(n)]
    else:
        total = len(notifications)
        by_severity = Counter(n["severity"] for n in notifications)
        counts = ", ".join(f"{by_severity[s]} {s}" for s in reversed(SEVERITIES) if by_severity[s])
        subject = f"[qtg {severity}] digest: {total} notifications ({counts})"
        by_kind = Counter(n["kind"] for n in notifications)
        lines = [
            f"{total} notifications arrived faster than this route's rate limit allows;",
            "they are summarised here instead of sent one by one.",
            "",
            "By kind: " + ", ".join(f"{k} {c}" for k, c in sorted(by_kind.items())),
            "",
        ]
        for n in notifications[:DIGEST_LISTED]:
            lines.append(f"- [{n['severity']}] {n['subject']}")
        if total > DIGEST_LISTED:
            lines.append(f"… and {total - DIGEST_LISTED} more.")
        body = "\n".join(lines)
        kind = "digest"
        listed = [
            {**_item(n), "body": n["body"][:DIGEST_BODY_CHARS]}
            for n in notifications[:DIGEST_LISTED]
        ]
    payload = {
        "type": "qtg.notification",
        "kind": kind,
        "severity": severity,
        "subject": subject,
        "text": f"{subject}\n{body}",
        "count": len(notifications),
        "omitted": len(notifications) - len(listed),
        "notifications": listed,
    }
    return Rendered(kind=kind, severity=severity, subject=subject, body=body, payload=payload)


def webhook_body(payload: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """What the webhook receives: the full JSON, or Slack's `{"text": …}` only."""
    if fmt == "slack":
        return {"text": payload["text"]}
    return dict(payload)


# ----------------------------------------------------------------- capital transfers


@dataclass(frozen=True, slots=True)
class TransferRoute:
    source: str  # a glob: `*` matches any
    destination: str
    template_key: str


def parse_transfer_routes(
    text: str, env: str = "MG_CAPITAL_TRANSFER_ROUTES"
) -> list[TransferRoute]:
    """`source>destination=template_key`, comma-separated, first match wins."""
    routes = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        pair, eq, template_key = item.partition("=")
        source, gt, destination = pair.partition(">")
        if not (eq and gt and source.strip() and destination.strip() and template_key.strip()):
            raise AttentionConfigError(f"{env}: {item!r} is not source>destination=template_key")
        routes.append(TransferRoute(source.strip(), destination.strip(), template_key.strip()))
    return routes


def pick_transfer_template(
    routes: Sequence[TransferRoute], source: str, destination: str
) -> str | None:
    """The template of the first route matching source and destination, if any."""
    for route in routes:
        if fnmatch.fnmatchcase(source, route.source) and fnmatch.fnmatchcase(
            destination, route.destination
        ):
            return route.template_key
    return None


# ----------------------------------------------------------------- settings


def _check_webhook_host(host: str, allowed_hosts: str) -> None:
    """The webhook goes where callbacks may go (issue 26): a local, private or
    metadata target only when MG_CALLBACK_ALLOWED_HOSTS lists it. The URL is a
    secret (Slack's carries its token), so the error names neither it nor its host.
    The dispatcher checks again on every address the name resolves to when it sends.
    """
    from qtg.domain.callback_targets import parse_allowlist, refused_host
    from qtg.domain.errors import ConfigError

    try:
        allow = parse_allowlist(allowed_hosts)
    except ValueError:
        return  # a bad allowlist is its own start-up error (Settings.validate_security)
    if refused_host(host, allow) is not None:
        raise ConfigError(
            "MG_NOTIFY_WEBHOOK_URL: its host is not a public target (a local, private or "
            "cloud-metadata name or address); list the host in MG_CALLBACK_ALLOWED_HOSTS "
            "to allow it"
        )


def validate_attention_settings(settings: Settings) -> None:
    """Start-up checks of the issue-14 settings (a ConfigError names the variable)."""
    from qtg.domain.errors import ConfigError

    try:
        parse_severities(settings.notify_webhook_severities, "MG_NOTIFY_WEBHOOK_SEVERITIES")
        parse_severities(settings.notify_email_severities, "MG_NOTIFY_EMAIL_SEVERITIES")
        parse_transfer_routes(settings.capital_transfer_routes)
    except AttentionConfigError as exc:
        raise ConfigError(str(exc)) from None
    url = settings.notify_webhook_url
    if url is not None:
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        # the value is a secret: never echo it
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("MG_NOTIFY_WEBHOOK_URL: must be an http(s) URL with a host")
        _check_webhook_host(parts.hostname, settings.callback_allowed_hosts)
    if settings.notify_smtp_port > 65535:
        raise ConfigError(
            f"MG_NOTIFY_SMTP_PORT: must be at most 65535, got {settings.notify_smtp_port}"
        )
    if (settings.notify_smtp_username is None) != (settings.notify_smtp_password is None):
        raise ConfigError(
            "MG_NOTIFY_SMTP_USERNAME and MG_NOTIFY_SMTP_PASSWORD: set both or neither"
        )
    if settings.notify_smtp_username is not None and not settings.notify_smtp_starttls:
        raise ConfigError(
            "MG_NOTIFY_SMTP_USERNAME needs MG_NOTIFY_SMTP_STARTTLS=true "
            "(credentials are never sent in the clear)"
        )
    if email_recipients(settings) and "@" not in settings.notify_email_from:
        raise ConfigError(
            f"MG_NOTIFY_EMAIL_FROM: not an email address: {settings.notify_email_from!r}"
        )
    bad = [a for a in email_recipients(settings) if "@" not in a]
    if bad:
        raise ConfigError(f"MG_NOTIFY_EMAIL_TO: not an email address: {bad[0]!r}")
    if settings.notify_enabled and settings.workers_enabled and not configured_routes(settings):
        raise ConfigError(
            "MG_NOTIFY_ENABLED=true but no route is configured: set MG_NOTIFY_WEBHOOK_URL "
            "and/or MG_NOTIFY_EMAIL_TO (with a non-empty MG_NOTIFY_*_SEVERITIES)"
        )
