#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Send malformed control frames to nelssad; each must get an ERROR frame
(and the connection closed) without disturbing the daemon.

usage: bad-frames.py PORT        exit 0 when every case behaved
"""
import socket
import struct
import sys

MAGIC = 0x41534C4E
VERSION = 7  # NELSSA_PROTO_VERSION
HELLO, ERROR, STATS = 1, 11, 8


def frame(typ, payload, version=VERSION, magic=MAGIC, length=None, seq=7):
    n = len(payload) if length is None else length
    return struct.pack("<IHHII", magic, version, typ, n, seq) + payload


def hello(version=VERSION, lo=VERSION, hi=VERSION):
    return frame(HELLO, struct.pack("<HHI", lo, hi, 0) + b"bad-frames".ljust(32, b"\0"),
                 version=version)


def exchange(port, data, close_after=False):
    """Send @data; return (error code or None, closed?)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    if close_after:
        s.close()
        return None, True
    buf = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    except socket.timeout:
        return "timeout", False
    s.close()
    # Walk the frames: the last must be an ERROR and the socket closed.
    err = None
    while len(buf) >= 16:
        magic, _, typ, n, _ = struct.unpack("<IHHII", buf[:16])
        if magic != MAGIC:
            return "bad magic in reply", True
        if typ == ERROR:
            code = struct.unpack("<i", buf[16:20])[0]
            msg = buf[24:24 + 128].split(b"\0")[0].decode()
            err = (code, msg)
        buf = buf[16 + n:]
    return err, True


def main():
    port = int(sys.argv[1])
    good_hello = hello()
    cases = [
        ("wrong magic", frame(HELLO, b"\0" * 40, magic=0xDEADBEEF)),
        ("unknown type", good_hello + frame(99, b"")),
        ("oversized length", good_hello + frame(STATS, b"", length=1 << 20)),
        ("wrong version on a request", good_hello + frame(STATS, b"\0" * 8, version=VERSION + 1)),
        ("the previous version on a request", good_hello + frame(STATS, b"\0" * 8,
                                                                 version=VERSION - 1)),
        ("HELLO speaking only the previous version", hello(lo=VERSION - 1, hi=VERSION - 1)),
        ("HELLO speaking only the next version", hello(version=VERSION + 1, lo=VERSION + 1,
                                                        hi=VERSION + 1)),
        ("a request before HELLO", frame(STATS, b"\0" * 8)),
        ("payload too short for its type", good_hello + frame(STATS, b"\0" * 4)),
        ("an unknown HELLO flag", frame(HELLO, struct.pack("<HHI", VERSION, VERSION, 2) +
                                        b"x".ljust(32, b"\0"))),
        # Version 2's HELLO carried a UCX worker address after the name.
        ("a version-2 HELLO with its worker address",
         frame(HELLO, struct.pack("<HHI", 2, 2, 64) + b"old".ljust(32, b"\0") + bytes(range(64)),
               version=2)),
        ("name without a NUL", frame(HELLO, struct.pack("<HHI", VERSION, VERSION, 0) + b"y" * 32)),
        ("a second HELLO", good_hello + good_hello),
        ("a reply type sent as a request", good_hello + frame(7, b"")),
    ]
    failed = 0
    for name, data in cases:
        err, closed = exchange(port, data)
        if not isinstance(err, tuple) or err[0] >= 0 or not closed:
            print(f"# FAILED {name}: got {err!r}, closed={closed}")
            failed += 1
        else:
            print(f"# {name}: ERROR {err[0]} '{err[1]}'")
    # Truncated frames and abrupt closes must not hurt either.
    exchange(port, good_hello[:10], close_after=True)
    exchange(port, good_hello + frame(STATS, b"\0" * 8)[:20], close_after=True)
    # The daemon still answers a well-formed conversation.
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(good_hello)
    head = s.recv(16)
    s.close()
    if len(head) < 16 or struct.unpack("<IHHII", head)[2] != 2:
        print("# FAILED: no HELLO_OK after the bad frames")
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
