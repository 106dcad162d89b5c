#!/usr/bin/env python3
"""Small TCP probes for the tests of emulated hosts (tests/test_hosts.sh, bench/hosts.sh).

  hosts_net.py serve HOST:PORT         a sink and echo: answers each 'p' byte with 'p',
                                       swallows the rest; prints "ready" once listening
  hosts_net.py rtt HOST:PORT N         mean round trip of N one-byte pings, in ms
  hosts_net.py send HOST:PORT BYTES    sends BYTES, prints Mbit/s (after the peer's ack)
  hosts_net.py reach HOST:PORT SECS    exit 0 when a connection opens within SECS, else 1
"""
import socket
import sys
import threading
import time


def addr(s):
    host, _, port = s.rpartition(":")
    return host, int(port)


def serve(a):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(addr(a))
    ls.listen(16)
    print("ready", flush=True)

    def one(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with c:
            while True:
                b = c.recv(1 << 16)
                if not b:
                    return
                if b == b"p":
                    c.sendall(b"p")
                elif b.endswith(b"!"):  # the end of a bulk send: ack it
                    c.sendall(b"k")

    while True:
        c, _ = ls.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def main():
    cmd, a = sys.argv[1], sys.argv[2]
    if cmd == "serve":
        return serve(a)
    if cmd == "reach":
        deadline = time.time() + float(sys.argv[3])
        while time.time() < deadline:
            try:
                socket.create_connection(addr(a), timeout=0.5).close()
                return 0
            except OSError:
                time.sleep(0.1)
        return 1
    s = socket.create_connection(addr(a), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if cmd == "rtt":
        n = int(sys.argv[3])
        t0 = time.perf_counter()
        for _ in range(n):
            s.sendall(b"p")
            if s.recv(1) != b"p":
                return 1
        print(f"{(time.perf_counter() - t0) / n * 1000:.3f}")
    elif cmd == "send":
        n = int(sys.argv[3])
        chunk = b"x" * (1 << 16)
        t0 = time.perf_counter()
        sent = 0
        while sent < n - 1:
            k = min(len(chunk), n - 1 - sent)
            s.sendall(chunk[:k])
            sent += k
        s.sendall(b"!")
        if s.recv(1) != b"k":
            return 1
        print(f"{n * 8 / (time.perf_counter() - t0) / 1e6:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
