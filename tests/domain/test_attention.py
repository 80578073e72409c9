"""The pure rules of operator attention: routing, rate-limit grouping, rendering, routes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from qtg.config import ConfigError, Settings
from qtg.domain.attention import (
    AttentionConfigError,
    configured_routes,
    message_groups,
    parse_severities,
    parse_transfer_routes,
    pick_transfer_template,
    render,
    routes_for,
    webhook_body,
)


def notification(i: int, severity: str = "critical", kind: str = "request_attention") -> dict:
    return {
        "id": i,
        "kind": kind,
        "severity": severity,
        "subject": f"subject {i}",
        "body": f"body {i}",
        "links": {"request_id": f"r{i}"},
        "dedupe_key": f"k:{i}",
        "occurrences": 1,
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        "resolved_at": None,
    }


def test_severities_route_per_settings() -> None:
    settings = Settings().replace(
        notify_webhook_url="https://hooks.example/x",
        notify_webhook_severities="warning,critical",
        notify_email_to="a@example.com",
        notify_email_severities="critical",
    )
    routes = configured_routes(settings)
    assert routes_for("critical", routes) == ["webhook", "email"]
    assert routes_for("warning", routes) == ["webhook"]
    assert routes_for("info", routes) == []
    assert configured_routes(Settings()) == {}  # no destination, no route
    assert parse_severities("*", "X") == {"info", "warning", "critical"}
    assert parse_severities("", "X") == frozenset()
    with pytest.raises(AttentionConfigError, match="X: unknown severity 'page'"):
        parse_severities("critical,page", "X")


@pytest.mark.parametrize(
    ("held", "budget", "groups"),
    [
        (0, 5, []),
        (3, 0, []),  # no budget: they wait for the window
        (3, 5, [1, 1, 1]),  # they fit, with a slot to spare
        (4, 4, [4]),  # the last slot carries everything waiting
        (1000, 3, [1000]),
        (1, 1, [1]),
    ],
)
def test_message_groups(held: int, budget: int, groups: list[int]) -> None:
    assert message_groups(held, budget) == groups


def test_a_storm_never_exceeds_the_budget() -> None:
    """Passes seeing any arrival pattern spend at most `limit` messages and drop nothing."""
    limit, used, carried = 5, 0, 0
    for arriving in (1, 1, 2, 300, 1, 696):
        groups = message_groups(arriving, limit - used)
        used += len(groups)
        carried += sum(groups)
    assert used <= limit
    assert carried <= 1001 and carried >= 1 + 1 + 2 + 300  # the rest waits, never lost


def test_render_single_and_digest() -> None:
    single = render([notification(1)])
    assert single.kind == "single" and single.subject == "[qtg critical] subject 1"
    assert single.payload["notifications"][0]["links"] == {"request_id": "r1"}
    assert webhook_body(single.payload, "slack") == {"text": "[qtg critical] subject 1\nbody 1"}
    many = [notification(i, "warning" if i % 2 else "critical") for i in range(120)]
    digest = render(many)
    assert digest.kind == "digest" and digest.severity == "critical"
    assert "120 notifications (60 critical, 60 warning)" in digest.subject
    assert digest.payload["count"] == 120 and digest.payload["omitted"] == 70
    assert "… and 70 more." in digest.body


def test_transfer_routes() -> None:
    routes = parse_transfer_routes("binance>0x*=cex.to.evm, *>binance=evm.to.cex")
    assert pick_transfer_template(routes, "binance", "0xabc") == "cex.to.evm"
    assert pick_transfer_template(routes, "okx", "binance") == "evm.to.cex"
    assert pick_transfer_template(routes, "okx", "kraken") is None
    with pytest.raises(AttentionConfigError, match="not source>destination=template_key"):
        parse_transfer_routes("binance=x")


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"MG_NOTIFY_ENABLED": "true"}, "no route is configured"),
        ({"MG_NOTIFY_WEBHOOK_URL": "ftp://x/y"}, "MG_NOTIFY_WEBHOOK_URL: must be an http"),
        ({"MG_NOTIFY_EMAIL_SEVERITIES": "loud"}, "MG_NOTIFY_EMAIL_SEVERITIES: unknown"),
        ({"MG_NOTIFY_SMTP_USERNAME": "u"}, "set both or neither"),
        (
            {
                "MG_NOTIFY_SMTP_USERNAME": "u",
                "MG_NOTIFY_SMTP_PASSWORD": "p",
                "MG_NOTIFY_SMTP_STARTTLS": "false",
            },
            "never sent in the clear",
        ),
        ({"MG_NOTIFY_EMAIL_TO": "oncall"}, "MG_NOTIFY_EMAIL_TO: not an email address"),
        ({"MG_NOTIFY_SMTP_PORT": "70000"}, "MG_NOTIFY_SMTP_PORT"),
        ({"MG_CAPITAL_TRANSFER_ROUTES": "a>b"}, "MG_CAPITAL_TRANSFER_ROUTES"),
        ({"MG_NOTIFY_RATE_LIMIT_MESSAGES": "0"}, "MG_NOTIFY_RATE_LIMIT_MESSAGES"),
    ],
)
def test_bad_settings_stop_start_up_naming_the_variable(env: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Settings.from_env(env)


def test_the_webhook_url_is_a_secret() -> None:
    secret = "https://hooks.slack.example/services/T0/B0/XYZSECRET"
    settings = Settings.from_env({"MG_NOTIFY_WEBHOOK_URL": secret})
    assert settings.redacted()["MG_NOTIFY_WEBHOOK_URL"] == "***"
    with pytest.raises(ConfigError) as bad:
        Settings.from_env({"MG_NOTIFY_WEBHOOK_URL": "gopher://XYZSECRET"})
    assert "XYZSECRET" not in str(bad.value)
