"""Which network targets a callback may reach (issue 17 item 3): pure rules, no I/O.

A callback fires on `request_created`, so whoever may create a movement
chooses where the runtime sends a POST. Left open, that aims the runtime at
its own database port, at a cloud metadata service or at anything else on
its private network. So, by default, a callback may only reach a *public*
address: loopback, unspecified (0.0.0.0, ::), link-local (169.254.0.0/16,
including 169.254.169.254, and fe80::/10), private and unique-local
(10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), multicast,
documentation and other reserved ranges are refused, and so are the names of
metadata services. IPv4 addresses wrapped in IPv6 (::ffff:a.b.c.d, 6to4,
NAT64's 64:ff9b::/96) are judged by the IPv4 address inside.

A deployment whose receiver lives on a private network lists it in
MG_CALLBACK_ALLOWED_HOSTS: host names (exact, case-insensitive), addresses
and CIDR blocks. An allowed host name is trusted whatever it resolves to; an
allowed network admits the addresses inside it.

These rules judge one host name or one address. The dispatcher applies them
to the URL at creation *and* to every address a host name resolves to at
send time, then connects to an address it checked (qtg/services/callbacks.py),
so a name that resolves to a public address when the movement is created and
to 10.0.0.5 when the callback is sent (DNS rebinding) is still refused.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Names of cloud metadata services (they answer with credentials).
METADATA_NAMES: frozenset[str] = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.oraclecloud.com",
    }
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

#: The text of a URI after its scheme: RFC 3986's unreserved and reserved
#: characters and percent-escapes, nothing else (no spaces, no non-ASCII, no
#: <>"{}|\^`). The API enforces it on callback_url and publishes it.
URI_REST = r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+"
CALLBACK_URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://{URI_REST}$"


@dataclass(frozen=True, slots=True)
class Allowlist:
    """MG_CALLBACK_ALLOWED_HOSTS, parsed: trusted host names and networks."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    def allows_host(self, host: str) -> bool:
        return normal_host(host) in self.hosts

    def allows_address(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.networks)


def parse_allowlist(text: str) -> Allowlist:
    """Parse a comma list of host names, addresses and CIDR blocks.

    Raises ValueError naming the entry that is none of these (the settings
    turn it into a start-up error naming the variable).
    """
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        name = normal_host(entry)
        if "/" in name or not _looks_like_host_name(name):
            raise ValueError(f"{entry!r} is not a host name, an address or a CIDR block")
        hosts.add(name)
    return Allowlist(frozenset(hosts), tuple(networks))


def normal_host(host: str) -> str:
    """Lower case, no brackets, no trailing dot: one spelling per host."""
    return host.strip().strip("[]").rstrip(".").lower()


def is_host_name(host: str) -> bool:
    """Whether `host` is spelled like a DNS name (labels of letters, digits, - and _)."""
    return _looks_like_host_name(normal_host(host))


def _looks_like_host_name(name: str) -> bool:
    labels = name.split(".")
    return bool(name) and all(
        label and len(label) <= 63 and all(ch.isalnum() or ch in "-_" for ch in label)
        for label in labels
    )


def literal_address(host: str) -> IPAddress | None:
    """`host` as an address when it is one, including the legacy IPv4 spellings
    (127.1, 2130706433, 0x7f.1) that resolvers accept too; else None."""
    name = normal_host(host)
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    if not name or not all(ch.isalnum() or ch == "." for ch in name):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None


def embedded_ipv4(address: IPAddress) -> IPAddress:
    """The IPv4 address inside an IPv4-mapped, 6to4 or NAT64 IPv6 address, else `address`."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_class(address: IPAddress) -> str | None:
    """Why `address` is not a public unicast address ("loopback", "private" …), or None."""
    ip = embedded_ipv4(address)
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in ipaddress.IPv6Network("fc00::/7"):
        return "unique-local"
    if ip.is_private:
        return "private"
    if not ip.is_global or ip.is_reserved:
        return "reserved"
    return None


def refused_host(host: str, allow: Allowlist) -> str | None:
    """Why a URL's host may not be used as written (a metadata or localhost name,
    or a literal address that is not public), or None. Allowlisted names pass."""
    if allow.allows_host(host):
        return None
    name = normal_host(host)
    if name in METADATA_NAMES:
        return f"names a cloud metadata service ({name})"
    if name == "localhost" or name.endswith(".localhost"):
        return f"names the local machine ({name})"
    address = literal_address(name)
    if address is not None:
        return refused_address(address, allow)
    return None


def refused_class(address: IPAddress, allow: Allowlist) -> str | None:
    """The class of `address` when a callback may not connect to it, or None when it may."""
    kind = address_class(address)
    if (
        kind is None
        or allow.allows_address(address)
        or allow.allows_address(embedded_ipv4(address))
    ):
        return None
    return kind


def refused_address(address: IPAddress, allow: Allowlist) -> str | None:
    """Why a callback may not connect to `address`, or None when it may."""
    kind = refused_class(address, allow)
    return None if kind is None else f"is a {kind} address ({address})"


def refused_resolution(host: str, addresses: list[IPAddress], allow: Allowlist) -> str | None:
    """Why a host that resolved to `addresses` may not be contacted, or None.

    Every address must pass, not just one: an attacker's name that answers a
    public and a private address would otherwise win whenever the private one
    is tried first.
    """
    if allow.allows_host(host):
        return None
    if not addresses:
        return f"host {normal_host(host)} resolved to no address"
    for address in addresses:
        kind = refused_class(address, allow)
        if kind is not None:
            return f"host {normal_host(host)} resolves to {address}, a {kind} address"
    return None


def own_api_refusal(address: IPAddress, port: int, api_port: int, *, local: bool) -> str | None:
    """Why connecting to `address`:`port` would reach this runtime's own API, or None.

    Judged on the *resolved* address and the port (issue 26): a host name that
    resolves to loopback, or to any address of this machine (`local`, which
    the caller finds out), on MG_API_PORT is the API itself, whatever the name
    looks like and whether or not it is allowlisted. API port 0 (an ephemeral
    port) names no port to refuse.
    """
    if not api_port or port != api_port:
        return None
    ip = embedded_ipv4(address)
    if ip.is_loopback or ip.is_unspecified or local:
        return f"{address} port {port}, this runtime's own API (MG_API_PORT)"
    return None
