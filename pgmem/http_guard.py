"""What pgmem's HTTP doors share to keep strangers out: the Host and Origin names a server
accepts, and tokens compared in constant time. The MCP server (:mod:`pgmem.mcp_server`) hands
the names to its SDK's transport security; the inspector (:mod:`pgmem.ui`) checks them itself
with :meth:`HostGuard.refusal`, by the same rules. No web framework is imported here.
"""

from __future__ import annotations

import hmac
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Addresses a server bound to reaches from this machine only (loopback names).
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def url_host(host: str) -> str:
    """``host`` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def default_allowed_hosts(host: str) -> list[str]:
    """The Host header values a server bound to ``host`` accepts by default: on a loopback
    address the loopback names; else that address, this machine's name and fully qualified
    name, and loopback. Any port."""
    if host in LOOPBACK:
        return list(LOOPBACK)
    names = {host, socket.gethostname(), socket.getfqdn(), "127.0.0.1", "localhost"}
    names.discard("0.0.0.0")
    names.discard("::")
    return sorted(names)


@dataclass(frozen=True)
class HostGuard:
    """The Host and Origin values a server accepts, as patterns: ``name:*`` (any port) or an
    exact value. A request must name an accepted Host; a browser's Origin, when sent, must be
    ``http(s)://`` one of them: a page of another site (or a DNS name rebound to this
    machine) is refused."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...]

    @classmethod
    def of(cls, names: Iterable[str]) -> HostGuard:
        """The guard accepting ``names`` (host names or addresses), on any port."""
        written = [url_host(name) for name in names]
        return cls(
            hosts=tuple(f"{name}:*" for name in written),
            origins=tuple(f"{scheme}://{name}:*" for name in written
                          for scheme in ("http", "https")),
        )

    def host_allowed(self, host: str | None) -> bool:
        """Whether a Host header value is accepted (a missing one is not)."""
        return bool(host) and _matches(host or "", self.hosts)

    def origin_allowed(self, origin: str | None) -> bool:
        """Whether an Origin header value is accepted (none sent: a same-origin or non-browser
        request, accepted)."""
        return not origin or _matches(origin, self.origins)

    def refusal(self, host: str | None, origin: str | None) -> tuple[int, str] | None:
        """The HTTP status and reason to refuse a request with these headers, or None."""
        if not self.host_allowed(host):
            return 421, "Invalid Host header"
        if not self.origin_allowed(origin):
            return 403, "Invalid Origin header"
        return None


def _matches(value: str, patterns: Sequence[str]) -> bool:
    for pattern in patterns:
        if value == pattern:
            return True
        if pattern.endswith(":*") and value.startswith(pattern[:-1]):
            port = value[len(pattern) - 1:]
            if port.isdigit():
                return True
    return False


class TokenSet:
    """Secrets a request may present, compared in constant time (``hmac.compare_digest``)
    with every one, so that neither which one matched nor how much of it did shows in the
    time taken."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self._tokens = [token.encode() for token in tokens]

    def match(self, presented: str | None) -> int | None:
        """The index of the token ``presented`` is, or None."""
        if presented is None:
            return None
        given = presented.encode("utf-8", "surrogateescape")
        found: int | None = None
        for n, expected in enumerate(self._tokens):
            if hmac.compare_digest(given, expected) and found is None:
                found = n
        return found
