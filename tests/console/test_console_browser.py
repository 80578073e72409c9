"""The operator console in a real browser against a real `bin/qtg-runtime` (issue 16 part 3).

Operator alice signs in, creates a movement through the API and opens its
page; her approval is refused (four-eyes, the API's error shown as it is);
operator bob approves it in his own browser; alice's page — never reloaded —
turns every node the completed colour as the runtime drives the movement and
the stream announces it. Screenshots of the main pages go to screenshots/.
"""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect
from runtime.rt_procs import wait_until

from qtg.config import Settings

from .conftest import EXPECT_MS, PEOPLE, Runtime, screenshot

pytestmark = pytest.mark.slow

#: console.css --c-completed (#2e9d57) as the computed SVG fill.
COMPLETED_FILL = "rgb(46, 157, 87)"
BLOCKED_FILL = "rgb(227, 230, 235)"
DEMO = "demo.cctp_bridge"  # 5 nodes: burn → attestation → mint → mint_status → finality


def sign_in(chromium, runtime: Runtime, who: str, *, scale: float = 1) -> Page:
    context = chromium.new_context(
        viewport={"width": 1400, "height": 900}, device_scale_factor=scale
    )
    page = context.new_page()
    page.set_default_timeout(EXPECT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # A Content-Security-Policy violation is reported on the console: the page
    # must not depend on anything the policy blocks.
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.errors = errors  # type: ignore[attr-defined]
    page.goto(f"{runtime.url}/console/")
    expect(page.locator("#token")).to_be_visible()
    page.fill("#token", runtime.tokens[who])
    page.click("#signin")
    role = dict(PEOPLE)[who]
    expect(page.locator(".principal")).to_have_text(f"{who} ({role})")
    expect(page.locator("table.list")).to_be_visible()
    return page


def create_movement(runtime: Runtime, who: str = "alice", template: str = DEMO) -> str:
    with runtime.client(who) as client:
        r = client.post(
            "/v3/movements",
            headers={"Idempotency-Key": f"console-{uuid.uuid4()}"},
            json={
                "template_key": template,
                "intent": {"asset": "USDC", "amount": "10.00", "destination": "0xabc"},
            },
        )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_four_eyes_and_a_graph_that_turns_green_live(chromium, runtime: Runtime) -> None:
    # Drawn at 3/4 scale: its screenshot is the console page's (docs/console-movement.png).
    alice = sign_in(chromium, runtime, "alice", scale=0.75)
    urls: list[str] = []
    alice.on("request", lambda r: urls.append(r.url))
    alice.on("websocket", lambda ws: urls.append(ws.url))

    rid = create_movement(runtime, "alice")
    alice.goto(f"{runtime.url}/console/#/movements/{rid}")
    nodes = alice.locator("#graph g.node")
    expect(nodes).to_have_count(5)
    expect(alice.locator("#stream-status")).to_have_attribute("data-status", "live")
    expect(alice.locator('#graph g.node[data-state="BLOCKED"]')).to_have_count(5)
    expect(alice.locator('#graph g.node[data-key="burn"] rect.box')).to_have_css(
        "fill", BLOCKED_FILL
    )
    # A marker that only survives if the page is never reloaded: the colours
    # below must come from the stream, not from a fresh load.
    alice.evaluate("window.__notReloaded = true")

    # The creator may not approve her own movement (four-eyes): no approve button that
    # the API would only refuse (issue 44), a line saying who may; she may still reject.
    expect(alice.locator("#act-reject")).to_be_visible()
    expect(alice.locator("#act-approve")).to_have_count(0)
    expect(alice.locator("#four-eyes-note")).to_contain_text("another operator approves it")
    expect(alice.locator("h1")).to_have_attribute("data-state", "PENDING_APPROVAL")
    # The approval deadline is shown while it matters.
    expect(alice.locator("#expires-label")).to_have_text("Expires")

    # A second operator may.
    bob = sign_in(chromium, runtime, "bob")
    bob.goto(f"{runtime.url}/console/#/movements/{rid}")
    expect(bob.locator("#act-approve")).to_be_visible()
    expect(bob.locator("#four-eyes-note")).to_have_count(0)
    bob.click("#act-approve")
    expect(bob.locator("#action-ok")).to_be_visible()
    expect(alice.locator("h1")).not_to_have_attribute("data-state", "PENDING_APPROVAL")
    expect(alice.locator("#four-eyes-note")).to_have_count(0)

    # Alice's page follows the runtime through the stream.
    expect(alice.locator('#graph g.node[data-state="COMPLETED"]')).to_have_count(
        5, timeout=EXPECT_MS
    )
    for key in ("burn", "attestation", "mint", "mint_status", "finality"):
        expect(alice.locator(f'#graph g.node[data-key="{key}"] rect.box')).to_have_css(
            "fill", COMPLETED_FILL
        )
    expect(alice.locator("h1")).to_have_attribute("data-state", "COMPLETED")
    # The event log got the news as it happened, newest first.
    expect(alice.locator("#events li").first).to_contain_text("request_state_changed")
    expect(alice.locator("#events li").first).to_contain_text("COMPLETED")
    assert alice.evaluate("window.__notReloaded") is True
    expect(alice.locator("#act-approve")).to_have_count(0)
    # No approval deadline on a COMPLETED movement (it once showed "Expires").
    expect(alice.locator(".summary")).not_to_contain_text("Expires")
    expect(alice.locator("#expires")).to_have_count(0)

    # Node detail: attempts, provider refs, timings.
    alice.click('#graph g.node[data-key="burn"]')
    detail = alice.locator("#node-detail")
    expect(detail).to_contain_text("Provider refs")
    expect(detail.locator("#node-attempts")).to_have_text("1")
    screenshot(alice, "movement")
    screenshot(alice, "movement-readme", full_page=False)

    # The token is in this tab's sessionStorage only, and never travelled in a URL
    # (HTTP requests or the WebSocket).
    stored = alice.evaluate("[sessionStorage.getItem('qtg.console.token'), localStorage.length]")
    assert stored == [runtime.tokens["alice"], 0]
    assert urls and not [u for u in urls if runtime.tokens["alice"] in u], urls
    assert any("/v3/stream" in u for u in urls), urls
    assert alice.errors == [] and bob.errors == []  # type: ignore[attr-defined]


def test_main_pages_render_and_are_captured(chromium, runtime: Runtime) -> None:
    rid = create_movement(runtime, "alice")
    with runtime.client("bob") as bob:
        assert bob.post(f"/v3/movements/{rid}/approve").status_code == 200
    create_movement(runtime, "alice", "demo.cex_to_chain")
    page = sign_in(chromium, runtime, "admin")

    expect(page.locator("table.list tbody tr")).to_have_count(2)
    # The first page follows the stream: a new movement appears without a reload.
    page.evaluate("window.__notReloaded = true")
    newest = create_movement(runtime, "alice")
    expect(page.locator("table.list tbody tr")).to_have_count(3)
    expect(page.locator("table.list tbody tr").first).to_have_attribute("data-id", newest)
    assert page.evaluate("window.__notReloaded") is True
    screenshot(page, "movements")

    page.goto(f"{runtime.url}/console/#/workers")
    expect(page.locator('#workers tr[data-worker="node_dispatcher"]')).to_be_visible()
    expect(page.locator('#workers tr[data-worker="node_dispatcher"]')).to_have_attribute(
        "data-stale", "false"
    )
    screenshot(page, "workers")

    page.goto(f"{runtime.url}/console/#/audit")
    expect(page.locator("table.list tbody tr").first).to_contain_text("movement.created")
    expect(page.locator(f'table.list a[href="#/movements/{rid}"]')).to_have_count(2)
    screenshot(page, "audit")

    page.goto(f"{runtime.url}/console/#/templates?key={DEMO}")
    expect(page.locator(".card svg.dag g.node")).to_have_count(5)
    expect(page.locator('.card svg.dag g.node[data-key="burn"]')).to_contain_text("cctp_burn")
    screenshot(page, "templates")
    # A movement started from the template's form waits for a second person. The
    # destination has no made-up default (it was "0xabc"): the form is not sent
    # until someone types one.
    destination = page.locator('form.create input[name="destination"]')
    expect(destination).to_have_value("")
    page.click("form.create button[type=submit]")
    assert destination.evaluate("(e) => !e.validity.valid") is True
    assert "#/templates" in page.url
    destination.fill("0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed")
    page.click("form.create button[type=submit]")
    expect(page.locator("#graph g.node")).to_have_count(5)
    expect(page.locator("h1")).to_have_attribute("data-state", "PENDING_APPROVAL")
    expect(page.locator("dl.facts")).to_contain_text("admin")

    for path, heading in (
        ("proposals", "Template proposals"),
        ("providers", "Executors and signers"),
        ("transfers", "Capital transfers"),
        ("balances", "Balances"),
        ("drift", "Drift findings"),
        ("notifications", "Notifications"),
    ):
        page.goto(f"{runtime.url}/console/#/{path}")
        expect(page.locator("main h1")).to_have_text(heading)
        expect(page.locator("main .error")).to_have_count(0)
        if path == "providers":
            expect(page.locator("#executors tbody tr").first).to_contain_text("sandbox")
            screenshot(page, "providers")
    assert page.errors == []  # type: ignore[attr-defined]


def test_a_viewer_sees_no_actions_and_a_bad_token_is_refused(chromium, runtime: Runtime) -> None:
    rid = create_movement(runtime, "alice")
    context = chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(EXPECT_MS)
    page.goto(f"{runtime.url}/console/#/movements/{rid}")
    expect(page.locator("#token")).to_be_visible()  # not signed in: the sign-in page
    page.fill("#token", "qtg_not-a-token")
    page.click("#signin")
    expect(page.locator("main .error")).to_contain_text("401 UNAUTHENTICATED")
    assert page.evaluate("sessionStorage.length") == 0
    # Signed in, the page asked for first is the one shown.
    page.fill("#token", runtime.tokens["vic"])
    page.click("#signin")
    expect(page.locator("#graph g.node")).to_have_count(5)
    assert rid in page.url and runtime.tokens["vic"] not in page.url

    viewer = sign_in(chromium, runtime, "vic")
    viewer.goto(f"{runtime.url}/console/#/movements/{rid}")
    expect(viewer.locator("#graph g.node")).to_have_count(5)
    expect(viewer.locator("#actions")).to_contain_text("Viewer: no actions.")
    expect(viewer.locator("#act-approve")).to_have_count(0)
    # Signing out forgets the token.
    viewer.click("#signout")
    expect(viewer.locator("#token")).to_be_visible()
    assert viewer.evaluate("sessionStorage.length") == 0


def test_reject_asks_first_and_sends_the_reason(chromium, runtime: Runtime) -> None:
    rid = create_movement(runtime, "alice")
    bob = sign_in(chromium, runtime, "bob")
    bob.goto(f"{runtime.url}/console/#/movements/{rid}")
    bob.fill("#reason", "wrong destination")
    bob.once("dialog", lambda dialog: dialog.dismiss())
    bob.click("#act-reject")
    expect(bob.locator("#act-approve")).to_be_visible()  # dismissed: nothing was sent
    expect(bob.locator("h1")).to_have_attribute("data-state", "PENDING_APPROVAL")
    bob.once("dialog", lambda dialog: dialog.accept())
    bob.click("#act-reject")
    expect(bob.locator("#action-ok")).to_be_visible()
    expect(bob.locator("h1")).to_have_attribute("data-state", "REJECTED")
    # The audit trail is promoted from its outbox by the runtime's audit worker,
    # after the reject's own commit: wait for the fact, with a deadline.
    with runtime.client("vic") as vic:

        def rejected_facts() -> list[dict]:
            audit = vic.get("/v3/audit-events", params={"object_id": rid}).json()["items"]
            return [e for e in audit if e["action"] == "movement.rejected"]

        rejected = wait_until(rejected_facts, EXPECT_MS / 1000, "the movement.rejected audit fact")
    assert rejected[0]["actor"] == "bob", rejected
    assert rejected[0]["detail"].get("reason") == "wrong destination", rejected


def test_a_failed_node_is_retried_by_a_second_operator(chromium, runtime: Runtime) -> None:
    graph = {
        "nodes": [
            {
                "key": "send",
                "kind": "action",
                "action_type": "cctp_burn",
                "config": {"sandbox": {"fail": "submit_rejected"}},
            },
            {"key": "after", "kind": "observe", "action_type": "cctp_attestation"},
        ],
        "edges": [["send", "after"]],
    }
    with runtime.client("admin") as admin:
        r = admin.post(
            "/v3/templates", json={"template_key": "t.fails", "name": "fails", "graph": graph}
        )
        assert r.status_code == 201, r.text
    rid = create_movement(runtime, "alice", "t.fails")
    with runtime.client("bob") as bob_api:
        assert bob_api.post(f"/v3/movements/{rid}/approve").status_code == 200

    alice = sign_in(chromium, runtime, "alice")
    alice.goto(f"{runtime.url}/console/#/movements/{rid}?node=send")
    send = alice.locator('#graph g.node[data-key="send"]')
    expect(send).to_have_attribute("data-state", "FAILED")
    expect(alice.locator("#node-detail")).to_contain_text("SANDBOX_SUBMIT_REJECTED")
    expect(alice.locator("#node-attempts")).to_have_text("1")
    alice.click("#act-retry")  # her own movement: four-eyes
    expect(alice.locator("#action-result .error")).to_have_attribute("data-code", "FOUR_EYES")

    bob = sign_in(chromium, runtime, "bob")
    bob.goto(f"{runtime.url}/console/#/movements/{rid}?node=send")
    bob.click("#act-retry")
    expect(bob.locator("#action-ok")).to_be_visible()
    # The new attempt fails the same way; alice's page shows it without a reload.
    expect(alice.locator("#node-attempts")).to_have_text("2")
    expect(send).to_have_attribute("data-state", "FAILED")
    expect(send.locator("text.attempts")).to_have_text("\u00d72")  # the attempts badge
    screenshot(alice, "movement-failed-node")


def test_an_unknown_node_is_resolved_by_two_operators(chromium, runtime: Runtime) -> None:
    """Issue 25 item 1: the node panel's Resolve control. Alice proposes, her own
    confirmation is refused (four-eyes), bob confirms; the DAG goes on live."""
    graph = {
        "nodes": [
            {
                "key": "send",
                "kind": "action",
                "action_type": "cctp_burn",
                "config": {"sandbox": {"fail": "submit_crash_after", "recover": "undecided"}},
            },
            {"key": "after", "kind": "observe", "action_type": "cctp_attestation"},
        ],
        "edges": [["send", "after"]],
    }
    with runtime.client("admin") as admin:
        r = admin.post(
            "/v3/templates",
            json={"template_key": "t.undecided", "name": "undecided", "graph": graph},
        )
        assert r.status_code == 201, r.text
    rid = create_movement(runtime, "alice", "t.undecided")
    with runtime.client("bob") as bob_api:
        assert bob_api.post(f"/v3/movements/{rid}/approve").status_code == 200

    alice = sign_in(chromium, runtime, "alice")
    alice.goto(f"{runtime.url}/console/#/movements/{rid}?node=send")
    send = alice.locator('#graph g.node[data-key="send"]')
    expect(send).to_have_attribute("data-state", "UNKNOWN")
    alice.select_option("#resolve-outcome", "COMPLETED")
    alice.fill("#resolve-evidence", "burn tx 0xabc is in block 12")
    alice.fill("#resolve-refs", '{"tx_hash": "0xabc"}')
    alice.click("#act-resolve")
    expect(alice.locator("#action-ok")).to_have_attribute("data-resolution", "proposed")
    expect(send).to_have_attribute("data-state", "UNKNOWN")  # nothing moved yet
    alice.fill("#resolve-evidence", "me again")
    alice.click("#act-resolve")
    expect(alice.locator("#action-result .error")).to_have_attribute("data-code", "FOUR_EYES")

    bob = sign_in(chromium, runtime, "bob")
    bob.goto(f"{runtime.url}/console/#/movements/{rid}?node=send")
    bob.select_option("#resolve-outcome", "FAILED")
    bob.fill("#resolve-evidence", "I think it failed")
    bob.click("#act-resolve")
    expect(bob.locator("#action-result .error")).to_have_attribute(
        "data-code", "RESOLUTION_MISMATCH"
    )
    bob.select_option("#resolve-outcome", "COMPLETED")
    bob.fill("#resolve-evidence", "checked the explorer: block 12")
    bob.click("#act-resolve")
    expect(bob.locator("#action-ok")).to_have_attribute("data-resolution", "confirmed")
    # alice's page, never reloaded, follows the DAG to the end
    expect(send).to_have_attribute("data-state", "COMPLETED")
    expect(alice.locator('#graph g.node[data-key="after"]')).to_have_attribute(
        "data-state", "COMPLETED"
    )
    expect(alice.locator("h1")).to_have_attribute("data-state", "COMPLETED")
    expect(alice.locator("#node-detail")).to_contain_text("0xabc")
    screenshot(bob, "movement-resolved-node")
    assert not alice.errors and not bob.errors, (alice.errors, bob.errors)  # type: ignore[attr-defined]


def test_a_pending_movement_shows_its_policy_rule_approvals_and_window(
    chromium, runtime: Runtime
) -> None:
    """Under a treasury policy asking two operators, the movement page shows the
    rule, the approvals given and still needed, and the accumulation window."""
    import trio

    from qtg.db import Database
    from qtg.services import policies

    document = {
        "rules": [
            {
                "name": "cap",
                "accumulation": {"window_seconds": 86400, "scope": "overall", "gt": "1000"},
                "action": "block",
            },
            {
                "name": "two-operators",
                "destination": "any",
                "action": "allow",
                "approvals": {"count": 2, "role": "operator"},
            },
            {"name": "block-all", "action": "block"},
        ]
    }

    async def activate() -> None:
        async with Database(runtime.dsn, min_size=1, max_size=1) as db:
            proposed = await policies.propose_policy(db, document=document, actor="admin")
            await policies.approve_policy(db, proposed["version"], actor="admin2")

    trio.run(activate)
    rid = create_movement(runtime, "alice")
    bob = sign_in(chromium, runtime, "bob")
    bob.goto(f"{runtime.url}/console/#/movements/{rid}")
    expect(bob.locator("#policy-rule")).to_contain_text("rule two-operators")
    expect(bob.locator("#policy-approvals")).to_contain_text("0 of 2 from role operator")
    expect(bob.locator("#policy-accumulation")).to_have_text("cap: 0 of 1000 in 86400s (overall)")
    bob.click("#act-approve")  # the API answers 202: one more is needed
    expect(bob.locator("#action-ok")).to_contain_text("PENDING_APPROVAL")
    expect(bob.locator("#policy-approvals")).to_have_text(
        "1 of 2 from role operator (bob) · 1 still needed"
    )
    admin = sign_in(chromium, runtime, "admin")
    admin.goto(f"{runtime.url}/console/#/movements/{rid}")
    admin.click("#act-approve")
    expect(admin.locator("h1")).not_to_have_attribute("data-state", "PENDING_APPROVAL")
    expect(admin.locator("#policy-approvals")).to_have_text(
        "2 of 2 from role operator (bob, admin)"
    )
    assert bob.errors == [] and admin.errors == []  # type: ignore[attr-defined]


def test_the_policy_page_sets_versions_side_by_side_and_the_book_shows_time_left(
    chromium, runtime: Runtime
) -> None:
    """An admin proposes a policy version and an address-book entry in the
    console; the proposal sits beside the active version, the proposer's own
    approval is refused (four-eyes), and an approved entry shows its cooling-off."""
    import trio

    from qtg.db import Database
    from qtg.services import policies

    first = {"rules": [{"name": "block-all", "action": "block"}]}

    async def activate() -> None:
        async with Database(runtime.dsn, min_size=1, max_size=1) as db:
            proposed = await policies.propose_policy(db, document=first, actor="admin2")
            await policies.approve_policy(db, proposed["version"], actor="admin3")

    trio.run(activate)
    admin = sign_in(chromium, runtime, "admin")
    admin.goto(f"{runtime.url}/console/#/policies")
    expect(admin.locator("main h1")).to_have_text("Treasury policy")
    expect(admin.locator("#policy-active")).to_contain_text("ACTIVE")
    admin.fill(
        "#policy-document",
        '{"rules": [{"name": "any", "destination": "any", "action": "allow"},'
        ' {"name": "block-all", "action": "block"}]}',
    )
    admin.click("#policy-propose button[type=submit]")
    proposed = admin.locator("#policy-versions section.card").nth(1)
    expect(proposed).to_contain_text("PROPOSED")
    expect(proposed).to_contain_text('"any"')
    expect(admin.locator("#policy-versions section.card").first).to_contain_text("ACTIVE")
    proposed.locator("button.primary").click()  # her own proposal
    expect(admin.locator("#policy-result .error")).to_have_attribute("data-code", "FOUR_EYES")

    admin.goto(f"{runtime.url}/console/#/address-book")
    expect(admin.locator("main h1")).to_have_text("Address book")
    form = admin.locator("#entry-propose")
    for name, value in (
        ("label", "ops"),
        ("chain", "1"),
        ("asset", "USDC"),
        ("address", "0x00000000000000000000000000000000000000b0"),
        ("tags", "ops, hot"),
    ):
        form.locator(f'input[name="{name}"]').fill(value)
    form.locator("button[type=submit]").click()
    row = admin.locator('#address-book tr[data-label="ops"]')
    expect(row).to_contain_text("PROPOSED")

    async def approve_entry() -> None:
        async with Database(runtime.dsn, min_size=1, max_size=1) as db:
            [entry] = await policies.list_entries(db, state="PROPOSED")
            await policies.decide_entry(
                db, Settings.from_env({}), entry["id"], actor="admin2", approve=True
            )

    trio.run(approve_entry)
    admin.reload()
    expect(row).to_contain_text("ACTIVE")
    expect(row.locator("td.cooling")).to_contain_text("s left")
    assert admin.errors == []  # type: ignore[attr-defined]
