"""The address Ray uses on a node: that of a named interface (InfiniBand, HSN), or what the
hostname resolves to (with a site's suffix: JSC names a node's InfiniBand address jwb0001i).
Ray's own guess connects outwards, which fails on compute nodes without a route."""

from __future__ import annotations

import fcntl
import socket
import struct

from hpo.errors import SlurmEnvironmentError

_SIOCGIFADDR = 0x8915


def interfaces() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def interface_address(name: str) -> str:
    """The IPv4 address of a network interface, e.g. 'ib0' -> '10.1.2.3'."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR,
                                 struct.pack("256s", name.encode()[:15]))
        except OSError:
            raise SlurmEnvironmentError(
                f"slurm.interface: no IPv4 address on interface {name!r} on "
                f"{socket.gethostname()}. Hint: pick one of {', '.join(interfaces())} (or "
                "leave interface out to use the hostname's address)") from None
    return socket.inet_ntoa(packed[20:24])


def suffixed(host: str, suffix: str) -> str:
    """The host's name with the suffix after its first label: ('jwb0001.juwels', 'i') ->
    'jwb0001i.juwels'."""
    first, dot, rest = host.partition(".")
    return f"{first}{suffix}{dot}{rest}"


def node_address(interface: str | None, hostname: str | None = None,
                 suffix: str = "") -> str:
    """This node's address for Ray: the interface's, else what the hostname (plus the site's
    suffix) resolves to."""
    if interface:
        return interface_address(interface)
    host = suffixed(hostname or socket.gethostname(), suffix)
    try:
        address = socket.gethostbyname(host)
    except OSError:
        check = f"check slurm.hostname_suffix ({suffix!r}) or " if suffix else ""
        raise SlurmEnvironmentError(
            f"cannot resolve this node's hostname {host!r}. Hint: {check}set slurm.interface "
            f"to one of {', '.join(interfaces())}") from None
    if address.startswith("127."):
        raise SlurmEnvironmentError(
            f"hostname {host!r} resolves to {address}, which other nodes cannot reach. Hint: "
            f"set slurm.interface to one of {', '.join(interfaces())}")
    if not is_local(address):
        check = "check slurm.hostname_suffix or " if not suffix else ""
        raise SlurmEnvironmentError(
            f"hostname {host!r} resolves to {address}, which is no address of this node, so "
            f"other nodes would not reach Ray here. Hint: {check}set slurm.interface to one "
            f"of {', '.join(interfaces())}")
    return address


def is_local(address: str) -> bool:
    """Whether an address belongs to one of this node's interfaces (it can be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            return False
    return True
