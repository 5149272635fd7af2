#!/usr/bin/env python3
"""Records the bytes of DNS exchanges between dig and dnsmasq.

Listens on 127.0.0.1:5300 (UDP and TCP), forwards each query to dnsmasq on
127.0.0.1:5353 and writes <name>.query.bin and <name>.answer.bin (the DNS
message alone: no TCP length prefix). The name of the next exchange is read
from the file `next` in the output directory. See README.md for the run.
"""
import os, socket, sys, threading

out = sys.argv[1]
UP = ("127.0.0.1", 5353)

def name():
    with open(os.path.join(out, "next")) as f:
        return f.read().strip()

def save(n, q, a):
    for kind, data in (("query", q), ("answer", a)):
        with open(os.path.join(out, f"{n}.{kind}.bin"), "wb") as f:
            f.write(data)

def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 5300))
    while True:
        q, peer = s.recvfrom(65535)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(q, UP)
        a, _ = u.recvfrom(65535)
        save(name(), q, a)
        s.sendto(a, peer)

def read_msg(c):
    def exact(n):
        b = b""
        while len(b) < n:
            chunk = c.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b
    n = int.from_bytes(exact(2), "big")
    return exact(n)

def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 5300))
    s.listen()
    while True:
        c, _ = s.accept()
        q = read_msg(c)
        u = socket.create_connection(UP)
        u.sendall(len(q).to_bytes(2, "big") + q)
        a = read_msg(u)
        save(name(), q, a)
        c.sendall(len(a).to_bytes(2, "big") + a)
        c.close()

threading.Thread(target=tcp, daemon=True).start()
udp()
