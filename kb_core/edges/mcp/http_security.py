"""HTTP transport security: the Host and Origin headers must name this server, against DNS rebinding."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from mcp.server.transport_security import TransportSecuritySettings


def url_host(host: str) -> str:
    """``host`` as it appears in a URL or a Host header: IPv6 addresses in brackets, names in lower case."""
    bare = host.strip().strip("[]")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return host.strip().lower()
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def transport_security(host: str, port: int, extra_hosts: Sequence[str] = ()) -> TransportSecuritySettings:
    """DNS-rebinding protection for every bind address: the Host header must name this server (the bind
    address, the loopback names, the machine's names for a wildcard bind, and ``extra_hosts``) with its port,
    and an Origin header, when sent, must be one of those over http or https."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    bare = host.strip().strip("[]")
    try:
        wildcard = ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        wildcard = False
    if wildcard:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    else:
        names.add(url_host(host))
    names |= {url_host(extra) for extra in extra_hosts if extra.strip()}
    hosts = [f"{name}:{port}" for name in sorted(names)]
    origins = [f"{scheme}://{name}:{port}" for name in sorted(names) for scheme in ("http", "https")]
    if port in (80, 443):  # clients leave the default port out
        hosts += sorted(names)
        origins += [f"{'http' if port == 80 else 'https'}://{name}" for name in sorted(names)]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)
