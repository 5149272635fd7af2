#!/usr/bin/env python3
"""Records a DHCP exchange with dnsmasq: DISCOVER, OFFER, REQUEST, ACK, and a
REQUEST for an address outside the range, which dnsmasq NAKs.

Runs in the client's namespace, on interface argv[1] (no address on it), and
writes <name>.bin (the DHCP message alone, the UDP payload) to argv[2]. The
client's messages are put together here with struct, byte by byte from
RFC 2131 and RFC 2132, not by linerate. See README.md for the run.
"""
import os, socket, struct, sys

dev, out = sys.argv[1], sys.argv[2]
MAC = bytes([0x02, 0x4c, 0x52, 0x00, 0x00, 0x38])
COOKIE = bytes([99, 130, 83, 99])

def msg(xid, mtype, opts=b""):
    head = struct.pack("!BBBBIHH4s4s4s4s16s64s128s", 1, 1, 6, 0, xid, 0, 0x8000,
                       bytes(4), bytes(4), bytes(4), bytes(4), MAC + bytes(10),
                       bytes(64), bytes(128))
    body = COOKIE + bytes([53, 1, mtype]) + bytes([61, 7, 1]) + MAC + opts
    body += bytes([55, 6, 1, 3, 6, 26, 58, 59, 255])
    m = head + body
    return m + bytes(max(0, 300 - len(m)))

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
s.bind(("0.0.0.0", 68))
s.settimeout(5)

def exchange(name, m, want):
    with open(os.path.join(out, f"{name}.request.bin"), "wb") as f:
        f.write(m)
    s.sendto(m, ("255.255.255.255", 67))
    while True:
        r, _ = s.recvfrom(2048)
        if r[4:8] == m[4:8] and want in r[240:]:
            with open(os.path.join(out, f"{name}.bin"), "wb") as f:
                f.write(r)
            return r

offer = exchange("offer", msg(0x4c520001, 1), bytes([53, 1, 2]))
yiaddr = offer[16:20]
server = bytes([10, 38, 0, 1])
exchange("ack", msg(0x4c520002, 3, bytes([50, 4]) + yiaddr + bytes([54, 4]) + server),
         bytes([53, 1, 5]))
exchange("nak", msg(0x4c520003, 3, bytes([50, 4, 10, 38, 9, 9])), bytes([53, 1, 6]))
