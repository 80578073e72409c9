"""qtg.domain.durability: when a commit survives the loss of the primary (issue 27)."""

from __future__ import annotations

from qtg.domain.durability import judge

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
