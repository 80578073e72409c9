"""A real SMTP server on loopback (aiosmtpd), for tests: STARTTLS and AUTH required.

It runs in aiosmtpd's own thread and event loop; every accepted mail is handed
to the trio side through a trio token, so a test waits on the arrival itself.
The certificate it presents comes from a throwaway CA (trustme) whose PEM the
client gets as MG_NOTIFY_SMTP_CA_FILE, so the client really verifies it.

    inbox = Inbox(trio.lowlevel.current_trio_token())
    server = SmtpServer(inbox, tmp_path, username="qtg", password="pw").start()
    inbox.refuse_next(1)      # the next DATA is answered 451, later ones accepted
"""

from __future__ import annotations

import email
import email.policy
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import trio
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


@dataclass(frozen=True)
class Mail:
    message: EmailMessage
    mail_from: str
    rcpt_tos: list[str]
    tls: bool  # the session had done STARTTLS
    login: str | None  # the authenticated user
    at: float  # trio.current_time() when it was accepted


class Inbox:
    """The aiosmtpd handler: keeps accepted mail, refuses on request."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.mails: list[Mail] = []
        self.refused = 0
        self._refuse = 0
        self._changed = trio.Event()

    def refuse_next(self, count: int) -> None:
        self._refuse = count

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self._refuse > 0:
            self._refuse -= 1
            self.refused += 1
            return "451 4.3.0 try again later"
        message = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        auth = session.auth_data
        login = auth.login.decode() if session.authenticated and auth is not None else None
        mail = Mail(
            message=message,  # type: ignore[arg-type]
            mail_from=envelope.mail_from,
            rcpt_tos=list(envelope.rcpt_tos),
            tls=session.ssl is not None,
            login=login,
            at=0.0,
        )
        trio.from_thread.run_sync(self._arrived, mail, trio_token=self.token)
        return "250 OK"

    def _arrived(self, mail: Mail) -> None:
        self.mails.append(Mail(**{**mail.__dict__, "at": trio.current_time()}))
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> list[Mail]:
        """Wait until `count` mails have arrived (use under fail_after)."""
        while len(self.mails) < count:
            await self._changed.wait()
        return self.mails


class _Controller(Controller):
    """aiosmtpd's controller on an ephemeral port (it insists on knowing the port)."""

    def _trigger_server(self) -> None:
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


class SmtpServer:
    def __init__(self, inbox: Inbox, folder: Path, *, username: str, password: str) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = folder / "smtp-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(server_context)
        self.username, self.password = username, password
        self.controller = _Controller(
            inbox,
            hostname="127.0.0.1",
            port=0,
            tls_context=server_context,
            require_starttls=True,
            auth_required=True,
            auth_require_tls=True,
            authenticator=self._authenticate,
        )

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == self.username
            and auth_data.password.decode() == self.password
        )
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    @property
    def port(self) -> int:
        return self.controller.port

    def start(self) -> SmtpServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
