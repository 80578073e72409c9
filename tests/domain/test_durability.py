"""qtg.domain.durability: when a commit survives the loss of the primary (issue 27)."""

from __future__ import annotations

from qtg.domain.durability import holds, judge, required

SYNC = {
    "synchronous_standby_names": "standby1",
    "synchronous_commit": "on",
    "in_recovery": False,
    "standbys": 1,
    "synchronous_standbys": 1,
    "unreadable": 0,
}


def test_a_streaming_synchronous_standby_at_on_or_remote_apply_is_synchronous() -> None:
    assert judge(SYNC).synchronous and judge(SYNC).reason == ""
    assert judge({**SYNC, "synchronous_commit": "remote_apply"}).synchronous


def test_anything_less_is_not_and_says_why() -> None:
    cases = {
        "synchronous_standby_names is empty": {"synchronous_standby_names": ""},
        "no synchronous standby streaming (1 standby(s)": {"synchronous_standbys": 0},
        "synchronous_commit is 'local'": {"synchronous_commit": "local"},
        "synchronous_commit is 'remote_write'": {"synchronous_commit": "remote_write"},
        "synchronous_commit is 'off'": {"synchronous_commit": "off"},
        "the server is a standby": {"in_recovery": True},
        "grant pg_monitor": {"synchronous_standbys": 0, "unreadable": 1},
    }
    for why, change in cases.items():
        verdict = judge({**SYNC, **change})
        assert not verdict.synchronous, change
        assert why in verdict.reason, (why, verdict.reason)


def test_the_default_policy_holds_only_while_standbys_stream_and_none_is_synchronous() -> None:
    lone = judge(
        {**SYNC, "synchronous_standby_names": "", "standbys": 0, "synchronous_standbys": 0}
    )
    asynchronous = judge({**SYNC, "synchronous_standby_names": "", "synchronous_standbys": 0})
    two_one_sync = judge({**SYNC, "standbys": 2})
    # auto: a lone server has no failover to lose commits in; an asynchronous standby does
    assert not holds(lone, "auto") and not required(lone, "auto")
    assert holds(asynchronous, "auto") and required(asynchronous, "auto")
    assert not holds(two_one_sync, "auto") and required(two_one_sync, "auto")
    # true: always a synchronous standby; false: never
    assert holds(lone, "true") and holds(asynchronous, "true") and not holds(two_one_sync, "true")
    assert not holds(lone, "false") and not holds(asynchronous, "false")
