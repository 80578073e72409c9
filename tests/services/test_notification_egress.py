"""The notification webhook gets the callbacks' egress policy (issue 26).

MG_NOTIFY_WEBHOOK_URL used to be posted to as written: any target (loopback,
private, cloud metadata, this runtime's own API) and through whatever proxy
the environment named. Now it goes through the same checked connection as a
callback: every resolved address checked against the target rules
(MG_CALLBACK_ALLOWED_HOSTS for internal targets), the connection made to a
checked address, no environment proxy. Real HTTP receivers on loopback; the
injected resolver only answers loopback or addresses that must be refused
before any connection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from receiver import Receiver
from sidecar_fixtures import make_settings

from qtg.config import ConfigError, Settings
from qtg.db import Database, Query
from qtg.providers.registry import ProviderRegistry
from qtg.services.context import ServiceContext
from qtg.services.notifications import dispatch_notifications, raise_notification

SECRET = "test-callback-secret"
MESSAGES = Query("tests/notify_egress/messages", "SELECT * FROM notification_messages ORDER BY id")


class FakeResolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.answers[host]


@pytest.fixture
async def receiver(nursery: trio.Nursery) -> Receiver:
    return await nursery.start(Receiver(secret=SECRET.encode()).serve)


def context(db: Database, tmp_path: Path, url: str, **changes: Any) -> ServiceContext:
    settings = make_settings(
        tmp_path,
        callback_signing_secret=SECRET,
        notify_enabled=True,
        notify_webhook_url=url,
        notify_webhook_severities="critical",
        notify_email_to="",
        notify_timeout_seconds=5.0,
    ).replace(**changes)
    return ServiceContext(db=db, settings=settings, providers=ProviderRegistry())


async def page(db: Database) -> None:
    async with db.transaction() as tx:
        await raise_notification(
            tx, kind="test_page", severity="critical", dedupe_key="egress:1", subject="x"
        )


async def the_message(db: Database) -> dict[str, Any]:
    [row] = await db.fetch(MESSAGES)
    return row


async def test_a_loopback_webhook_is_refused_unless_allowlisted(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    ctx = context(db, tmp_path, receiver.url("/notify"), callback_allowed_hosts="")
    await page(db)
    await dispatch_notifications(ctx)
    assert receiver.requests == [], "the webhook reached a loopback target"
    row = await the_message(db)
    assert row["status"] == "dlq" and row["attempts"] == 1  # refused: final, never retried
    assert row["last_error"] == ("refused: MG_NOTIFY_WEBHOOK_URL is a loopback address (127.0.0.1)")


@pytest.mark.parametrize("private", ["10.0.0.5", "169.254.169.254", "::ffff:192.168.1.1"])
async def test_a_name_resolving_to_a_private_address_is_never_contacted(
    db: Database, tmp_path: Path, receiver: Receiver, private: str
) -> None:
    """The receiver is answered first: a sender that checked only the first address
    (or none) would reach it, which the test would see."""
    url = f"http://hooks.test:{receiver.port}/notify"
    ctx = context(db, tmp_path, url, callback_allowed_hosts="127.0.0.1")
    resolver = FakeResolver({"hooks.test": ["127.0.0.1", private]})
    await page(db)
    await dispatch_notifications(ctx, resolver=resolver)
    assert receiver.requests == []
    assert resolver.asked == [("hooks.test", receiver.port)]
    row = await the_message(db)
    assert row["status"] == "dlq"
    assert row["last_error"].startswith(
        "refused: MG_NOTIFY_WEBHOOK_URL host hooks.test resolves to "
    ), row["last_error"]


async def test_an_allowlisted_webhook_is_delivered_to_the_checked_address(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    url = f"http://hooks.test:{receiver.port}/notify"
    ctx = context(db, tmp_path, url, callback_allowed_hosts="127.0.0.1")
    resolver = FakeResolver({"hooks.test": ["127.0.0.1"]})  # the name exists only here
    await page(db)
    await dispatch_notifications(ctx, resolver=resolver)
    [got] = receiver.on("/notify")
    assert got.headers["host"] == f"hooks.test:{receiver.port}"
    assert got.signature_ok
    assert (await the_message(db))["status"] == "sent"


async def test_the_webhook_never_posts_to_this_runtimes_own_api(
    db: Database, tmp_path: Path, receiver: Receiver
) -> None:
    url = f"http://hooks.test:{receiver.port}/v1/movements"
    ctx = context(
        db, tmp_path, url, callback_allowed_hosts="127.0.0.1,hooks.test", api_port=receiver.port
    )
    await page(db)
    await dispatch_notifications(ctx, resolver=FakeResolver({"hooks.test": ["127.0.0.1"]}))
    assert receiver.requests == []
    assert "this runtime's own API" in (await the_message(db))["last_error"]


async def test_an_environment_proxy_is_not_used(
    db: Database,
    tmp_path: Path,
    receiver: Receiver,
    nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy would connect to an address nobody checked: the request goes direct."""
    proxy = await nursery.start(Receiver(secret=SECRET.encode()).serve)
    for name in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    ctx = context(db, tmp_path, receiver.url("/notify"), callback_allowed_hosts="127.0.0.1")
    await page(db)
    await dispatch_notifications(ctx)
    assert proxy.requests == [], "the webhook went through the environment's proxy"
    assert len(receiver.on("/notify")) == 1
    assert (await the_message(db))["status"] == "sent"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://metadata.google.internal/x",
    ],
)
def test_an_internal_webhook_url_stops_start_up_unless_allowlisted(url: str) -> None:
    with pytest.raises(
        ConfigError, match=r"^MG_NOTIFY_WEBHOOK_URL: .*MG_CALLBACK_ALLOWED_HOSTS"
    ) as info:
        Settings.from_env({"MG_NOTIFY_WEBHOOK_URL": url})
    assert url not in str(info.value)  # the URL is a secret: never echoed
    host = url.split("/")[2].split(":")[0]
    assert host not in str(info.value)
    allowed = Settings.from_env({"MG_NOTIFY_WEBHOOK_URL": url, "MG_CALLBACK_ALLOWED_HOSTS": host})
    assert allowed.notify_webhook_url == url
    assert Settings.from_env({"MG_NOTIFY_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/X"})
