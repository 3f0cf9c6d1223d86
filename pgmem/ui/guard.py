"""The inspector's door, a pure ASGI middleware in front of its pages: Host and Origin checked
as the MCP HTTP server checks them (:class:`pgmem.http_guard.HostGuard`), a token, a CSRF cookie
for the forms, and headers that forbid every script but the inspector's own files."""

from __future__ import annotations

import hmac
import secrets
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgmem.http_guard import HostGuard, TokenSet

SESSION_COOKIE = "pgmem_ui_session"
CSRF_COOKIE = "pgmem_ui_csrf"
#: Only the inspector's own files run or style anything; forms post only to it; no page of
#: another site may frame it.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    # the URL may carry the token; "no-referrer" would make form posts send "Origin: null"
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


class Guard:
    """Refuse what the inspector must not answer, and add its security headers.

    ``token``: None (mounted behind the host application's own authentication) or the secret
    of the URL ``pgmem ui`` prints. That URL works once: the token is exchanged for a session
    cookie (HttpOnly, SameSite=Strict) and the browser redirected to the same page without it;
    later requests need the cookie. Every request gets a CSRF cookie; :func:`csrf_ok` checks a
    form's copy of it."""

    def __init__(self, app: ASGIApp, *, hosts: HostGuard, token: str | None) -> None:
        self.app = app
        self.hosts = hosts
        self._login = None if token is None else TokenSet([token])
        self._sessions: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = self.hosts.refusal(headers.get("host"), headers.get("origin"))
        if refused is not None:
            await _send(PlainTextResponse(refused[1], status_code=refused[0]), scope, receive,
                        send)
            return
        cookies = _cookies(headers)
        path = scope.get("root_path", "") or "/"
        if self._login is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if "token" in query:
                if self._login.match(query.pop("token")) is None:
                    await _send(_refusal(), scope, receive, send)
                    return
                self._login = TokenSet([])  # one use
                session = secrets.token_urlsafe(32)
                self._sessions.append(session)
                target = scope.get("root_path", "") + scope["path"]
                if query:
                    target += "?" + urlencode(query)
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict",
                                    path=path)
                await _send(response, scope, receive, send)
                return
            if TokenSet(self._sessions).match(cookies.get(SESSION_COOKIE)) is None:
                await _send(_refusal(), scope, receive, send)
                return
        csrf = cookies.get(CSRF_COOKIE)
        fresh = csrf is None or len(csrf) < 32
        if fresh:
            csrf = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf"] = csrf

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    out[name] = value
                if fresh:
                    out.append("set-cookie", f"{CSRF_COOKIE}={csrf}; HttpOnly; Path={path}; "
                                             "SameSite=Strict")
            await send(message)

        await self.app(scope, receive, send_with_headers)


def csrf_ok(state_token: str | None, form_token: Any) -> bool:
    """Whether a form's CSRF field equals the request's CSRF cookie (constant time)."""
    if not isinstance(form_token, str) or not state_token:
        return False
    return hmac.compare_digest(form_token.encode(), state_token.encode())


def _cookies(headers: Headers) -> dict[str, str]:
    jar: SimpleCookie = SimpleCookie()
    for value in headers.getlist("cookie"):
        try:
            jar.load(value)
        except CookieError:  # a malformed Cookie header is no credential
            continue
    return {name: morsel.value for name, morsel in jar.items()}


def _refusal() -> PlainTextResponse:
    return PlainTextResponse(
        "pgmem ui: open the URL `pgmem ui` printed (its token works once), or start it again",
        status_code=403,
    )


async def _send(response: Any, scope: Scope, receive: Receive, send: Send) -> None:
    async def with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            out = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                out[name] = value
        await send(message)

    await response(scope, receive, with_headers)
