"""`qtg watch`: tail the movement event stream (WS /v3/stream) in a terminal.

One line per event. The command resumes by itself: it remembers the last
event id (and the `after` of each ping) and reconnects with it when the
server closes the stream (4008 slow consumer, 1001 restart) or the network
drops, so nothing is missed or shown twice. The token comes from `QTG_TOKEN`
(preferred: argv is visible to other users) or `--token`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO
from urllib.parse import urlencode, urlsplit

import trio
import trio_websocket

from qtg.cli.common import CommandError
from qtg.config import Settings
from qtg.domain import bounded_json
from qtg.domain.states import RequestState

#: A watched request in one of these states will not change again.
FINAL_STATES = frozenset(
    {RequestState.COMPLETED, RequestState.REJECTED, RequestState.EXPIRED, RequestState.CANCELLED}
)
RECONNECT_MAX_SECONDS = 5.0
#: --give-up-after's default: how long the command keeps trying to reach an API
#: it cannot connect to before it stops with an error (0: for ever).
GIVE_UP_AFTER_SECONDS = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "watch",
        help="tail the movement event stream",
        description="Print movement events as they happen (WS /v3/stream), one per line. "
        "Token: QTG_TOKEN or --token.",
    )
    parser.add_argument("--url", help="API base URL (default: http://MG_API_HOST:MG_API_PORT)")
    parser.add_argument("--token", help="bearer token (default: $QTG_TOKEN)")
    parser.add_argument(
        "--after",
        type=int,
        metavar="ID",
        help="start after this event id (0: from the beginning; default: now)",
    )
    parser.add_argument("--request-id", metavar="UUID", help="only this movement's events")
    parser.add_argument("--types", metavar="T1,T2", help="only these event types")
    parser.add_argument(
        "--give-up-after",
        type=float,
        metavar="SECONDS",
        default=GIVE_UP_AFTER_SECONDS,
        help="stop with an error after this long without reaching the API "
        f"(default {GIVE_UP_AFTER_SECONDS:g}; 0: retry for ever)",
    )
    parser.add_argument(
        "--until-final",
        action="store_true",
        help="with --request-id: exit once the movement is COMPLETED, "
        "REJECTED, EXPIRED or CANCELLED",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("QTG_TOKEN")
    if not token:
        raise CommandError("no token: set QTG_TOKEN (or pass --token)")
    if args.until_final and not args.request_id:
        raise CommandError("--until-final needs --request-id")
    if args.after is not None and args.after < 0:
        raise CommandError("--after must be 0 or more")
    if args.give_up_after < 0:
        raise CommandError("--give-up-after must be 0 or more")
    base = args.url or _default_url(Settings.from_env())
    check_base_url(base)
    watcher = Watcher(
        base,
        token,
        after=args.after,
        request_id=args.request_id,
        types=args.types,
        until_final=args.until_final,
        give_up_after=args.give_up_after,
    )
    return trio.run(watcher.run)


def check_base_url(base: str) -> None:
    """A one-line CommandError for a URL the stream cannot be reached at (an
    `ftp://x` once ended in a 21-line traceback from the WebSocket library)."""
    try:
        parts = urlsplit(base)
        port = parts.port
    except ValueError as exc:
        raise CommandError(f"--url {base!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
        raise CommandError(
            f"--url {base!r}: give the API's base URL, http://HOST:PORT or https://HOST:PORT"
        )
    if port == 0:
        raise CommandError(f"--url {base!r}: port 0 is not a port to connect to")


def connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in words: the OS error under trio_websocket's
    HandshakeError ("connection refused"), not the wrapper's class name."""
    fallback = ""
    queue: list[BaseException] = [exc]
    seen: set[int] = set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror.lower()
        if isinstance(current, trio.TooSlowError):
            return "no answer in time"
        if isinstance(current, OSError) and not fallback:
            fallback = str(current).strip()
        if isinstance(current, BaseExceptionGroup):
            queue.extend(current.exceptions)
        queue.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return fallback or type(exc).__name__


def _default_url(settings: Settings) -> str:
    host = settings.api_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.api_port}"


def stream_url(base: str, params: dict[str, Any]) -> str:
    parts = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/v3/stream" + (
        f"?{query}" if query else ""
    )


def format_event(event: dict[str, Any]) -> str:
    """One terminal line for an event message."""
    when = str(event.get("occurred_at") or "")[11:23]
    head = f"#{event['id']:<7} {when:<12} {event['request_id']}"
    kind = event["event_type"]
    data = event.get("data") or {}
    if kind == "node_state_changed":
        attempt = f" (attempt {data['attempt_no']})" if data.get("attempt_no") else ""
        error = f" [{data['error_code']}]" if data.get("error_code") else ""
        what = (
            f"node {event['node_key']}: {event['from_state']} -> {event['to_state']}"
            f"{attempt}{error}"
        )
    elif kind == "request_state_changed":
        what = f"request: {event['from_state']} -> {event['to_state']}"
    elif kind == "request_created":
        what = f"request: created ({event['to_state']})"
    elif kind == "frontier_advanced":
        what = f"frontier: {', '.join(data.get('frontier') or []) or '(empty)'}"
    elif kind == "request_attention":
        what = f"ATTENTION: {data.get('reason', 'needs a human')}"
    else:
        what = f"{kind} {json.dumps(data, separators=(',', ':'))}"
    return f"{head}  {what}"


class Watcher:
    def __init__(
        self,
        base: str,
        token: str,
        *,
        after: int | None,
        request_id: str | None,
        types: str | None,
        until_final: bool,
        give_up_after: float = GIVE_UP_AFTER_SECONDS,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:
        self.base = base
        self.token = token
        self.after = after
        self.request_id = request_id
        self.types = types
        self.until_final = until_final
        self.give_up_after = give_up_after
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    async def run(self) -> int:
        backoff = 0.5
        unreachable_since: float | None = None  # the first failed attempt of a run of them
        while True:
            url = stream_url(
                self.base,
                {"after": self.after, "request_id": self.request_id, "types": self.types},
            )
            attempt_started = trio.current_time()
            delay = backoff
            try:
                async with trio_websocket.open_websocket_url(
                    url,
                    extra_headers=[(b"authorization", f"Bearer {self.token}".encode())],
                    connect_timeout=10,
                    disconnect_timeout=2,
                ) as ws:
                    backoff = 0.5
                    unreachable_since = None
                    if await self._follow(ws):
                        return 0
            except trio_websocket.ConnectionRejected as exc:
                body = (exc.body or b"").decode("utf-8", "replace")
                try:
                    message = bounded_json.loads(body)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    message = body or "refused"
                raise CommandError(
                    f"the stream refused us ({exc.status_code}): {message}"
                ) from None
            except trio_websocket.ConnectionClosed as exc:
                code = exc.reason.code if exc.reason is not None else None
                why = exc.reason.reason if exc.reason is not None else None
                self._note(f"{describe_close(code, why)}; resuming")
                if code == 4008:
                    continue  # slow consumer: catch up from where we are, at once
            except (OSError, trio_websocket.HandshakeError, trio.TooSlowError) as exc:
                if unreachable_since is None:
                    unreachable_since = attempt_started
                waited = trio.current_time() - unreachable_since
                why = connect_failure(exc)
                if self.give_up_after:
                    if waited >= self.give_up_after:
                        raise CommandError(
                            f"cannot reach {self.base} ({why}); gave up after {waited:.1f} s "
                            f"(--give-up-after {self.give_up_after:g}; 0 retries for ever)"
                        ) from None
                    delay = min(backoff, self.give_up_after - waited)
                self._note(f"cannot reach {self.base} ({why}); retrying in {delay:.1f} s")
            await trio.sleep(delay)
            backoff = min(backoff * 2, RECONNECT_MAX_SECONDS)

    async def _follow(self, ws: trio_websocket.WebSocketConnection) -> bool:
        """Print events until the connection ends; True when the watch is over."""
        while True:
            message = bounded_json.loads(await ws.get_message())
            if message.get("type") == "ping":
                self.after = max(self.after or 0, int(message["after"]))
                continue
            if message.get("type") != "event":
                continue
            print(format_event(message), file=self.out, flush=True)
            self.after = message["id"]
            if (
                self.until_final
                and message["event_type"] == "request_state_changed"
                and message["to_state"] in FINAL_STATES
            ):
                return True

    def _note(self, text: str) -> None:
        print(f"qtg watch: {text}", file=self.err, flush=True)


#: Close codes a user may see, in words (RFC 6455 §7.4.1 and qtg's own).
CLOSE_MEANINGS = {
    1000: "closed normally",
    1001: "the API is restarting",
    1006: "the connection to the API was lost (no close frame: the API stopped or "
    "the network dropped)",
    1011: "the API hit an internal error",
    1013: "the API cannot reach its database",
    4008: "this client fell behind (slow consumer)",
}


def describe_close(code: int | None, reason: str | None) -> str:
    """One readable line for a closed stream: never a bare `(1006 )`."""
    meaning = CLOSE_MEANINGS.get(code or 0, "closed")
    text = f"stream {meaning} [code {code}]" if code is not None else f"stream {meaning}"
    return f"{text}: {reason}" if reason else text
