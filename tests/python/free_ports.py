"""Ports for the tests' clusters: free now, below the kernel's ephemeral range. A connection
this machine makes (a client's, a reconnect to a task that is down) takes its local port from
that range, so a port drawn there by bind(0) could be taken before its server binds it
("Address already in use" in CI). Drawn at random, seeded by the pid (tests running side by
side draw apart), each checked by a bind. `python3 free_ports.py N` prints N of them."""
import os
import random
import socket
import sys
import time

_rng = random.Random(os.getpid() ^ int(time.time() * 1000))


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
        return lo if 11000 < lo <= 65535 else 32768
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    """n distinct ports, free now, below the ephemeral range."""
    lo, ports = _ephemeral_low(), []
    while len(ports) < n:
        port = _rng.randrange(10000, lo)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


if __name__ == "__main__":
    print(" ".join(str(p) for p in free_ports(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
