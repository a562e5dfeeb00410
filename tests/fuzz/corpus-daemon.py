#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpus of fuzz_daemon (tests/fuzz/corpus-daemon/).

An input of fuzz_daemon.c is a sequence of operations: a kind byte (below,
modulo their number), a slot byte (the low two bits: connection slot 0..3;
slots 2 and 3 connect from 127.0.0.2, which is not an admin address, 0 and
1 from 127.0.0.1 unless flag 4 is set; on a control request, flag 0x10 sends
the first bytes of another frame in the same write) and the kind's fields,
little-endian, zeros past the end.  A slot's KV and STEP messages go from
its current link -- a UCX worker of its own and its one endpoint to the
daemon's listener, made with the connection's key (HELLO_OK) as client id
when the slot has none open, or by "link" with any key.  The
encoders here mirror the decoders of fuzz_daemon.c field by field; change
both together.  A session is named by its index among the SESSION_OKs of
the input (any slot's), or by a literal id (0xe0 + id, id < 16), or
0xf0 and a u64.

    python3 tests/fuzz/corpus-daemon.py [DIR]   (default: next to this file)
"""
import base64
import os
import struct
import sys

KINDS = ["connect", "hello", "create", "alloc", "free", "close", "stats", "raw", "kv",
         "step", "am_other", "tick", "disconnect", "ep_close", "settle", "flood", "link",
         "hold"]
K = {k: i for i, k in enumerate(KINDS)}
DIMS = [8, 16, 32, 64, 128, 256, 512, 4]
CAPS = [16, 64, 256, 1024, 4096, 65536, 1 << 22, 1 << 33]
TOKS = [1, 16, 64, 256, 1024, 4096, 1 << 20]   # index 7: a u32 follows
TICKS = {"1ms": 0, "100ms": 1, "hello": 2, "frame": 3, "idle": 4, "10s": 5, "0": 6, "500ms": 7}
# HELLO: shared memory not asked for, asked for, a flag no version has (refused), or
# a HELLO as version 2 wrote it, with a worker address (refused, the address unread).
HELLO = {"tcp": 0, "shm": 1, "flag": 2, "v2": 3}
# A link's client id: its connection's key, one off by a bit, none sent, another
# slot's connection's key, the slot's connection before this one's.
KEY = {"right": 0, "wrong": 1, "none": 2, "other": 3, "stale": 4}
VERSION = {"ok": 0, "range": 1, "future": 2, "old": 3}
TOKEN = {"right": 0, "zero": 1, "flip": 2, "other": 3, "random": 4}
SEND = {"auto": 0, "eager": 1, "rndv": 2}


def op(kind, slot=0, flags=0, fields=b""):
    return bytes([K[kind], slot | flags]) + fields


def u8(*v):
    return bytes(v)


def sess(s):
    """A session: an index among those learned, or ('id', n), or ('u64', v)."""
    if isinstance(s, tuple) and s[0] == "id":
        return u8(0xe0 + s[1])
    if isinstance(s, tuple):
        return u8(0xf0) + struct.pack("<Q", s[1])
    return u8(s)


def tok(t, other=0, value=0):
    b = u8(TOKEN[t] | other << 3)
    return b + struct.pack("<Q", value) if t == "random" else b


def connect(slot, non_admin=False):
    return op("connect", slot, 4 if non_admin else 0)


def hello(slot, mode="shm", version="ok", flag=0, addr=b""):
    """HELLO; flag: which undefined flag bit (1..31) for "flag"; addr: "v2"'s address."""
    if mode == "v2":
        return op("hello", slot, 0, u8(HELLO[mode], VERSION[version], len(addr) - 1) + addr)
    return op("hello", slot, 0, u8(HELLO[mode] | (flag - 1 if flag else 0) << 2,
                                   VERSION[version]))


def link(slot, key="right", bits=0, flip_eh=False):
    """A new link for the slot: its key mode; bits: which bit "wrong" flips (0..15), for
    "other" which slot (next + bits % 3); flip_eh: error handling other than the daemon's
    end has (peer where shared memory was granted, none where it was not)."""
    return op("link", slot, 0, u8(KEY[key] | bits << 3 | (0x80 if flip_eh else 0)))


ATTN = {"fp32": 0, "bf16": 4, "bad": 8}   # a session's dot products; "bad": a flag no version has


def create_fields(layers=1, kv_heads=2, group=2, dim=64, dtype="bf16", placement="heads",
                  batch=2, sel=8, cap=1024, tenant=0, attn="fp32"):
    kind2 = (1 if dtype == "fp16" else 0) | (2 if placement == "clusters" else 0) | \
        ATTN[attn] | tenant << 4
    return u8(layers - 1, kv_heads - 1, group - 1, DIMS.index(dim), kind2, batch - 1, sel - 1,
              CAPS.index(cap))


def create(slot, tail=False, **kw):
    """tail: a partial frame's first bytes in the same write (the daemon reads both)."""
    return op("create", slot, 0x10 if tail else 0, create_fields(**kw))


def alloc_fields(s=0, req=0, tokens=1024, clusters=256):
    f = sess(s) + u8(req)
    extra = b""
    for v in (tokens, clusters):
        if v in TOKS:
            f += u8(TOKS.index(v))
        else:
            f += u8(7)
            extra += struct.pack("<I", v)
    return f + extra


def alloc(slot, s=0, req=0, tokens=1024, clusters=256):
    return op("alloc", slot, 0, alloc_fields(s, req, tokens, clusters))


def free(slot, s=0, req=0):
    return op("free", slot, 0, sess(s) + u8(req))


def close(slot, s=0):
    return op("close", slot, 0, sess(s))


def stats(slot, s=None):
    return op("stats", slot, 0, u8(0xff) if s is None else sess(s))


def tick(what, extra_ms=0):
    return op("tick", 0, 0, u8(TICKS[what] | extra_ms << 3))


def disconnect(slot, rst=False, half=False):
    return op("disconnect", slot, (4 if rst else 0) | (8 if half else 0))


def smode(send="auto", nowait=False, other_worker=False, hdr=0, peer=False, new_link=False):
    """other_worker: from the next slot's link; peer: a link it makes has peer error
    handling even where shared memory was granted; new_link: one more link first."""
    return (SEND[send] | (4 if nowait else 0) | (8 if other_worker else 0) | hdr << 4 |
            (0x40 if peer else 0) | (0x80 if new_link else 0))


PARTS = {"k": 1, "v": 2, "table": 3, "none": 0, "bad": 4}


def kv(slot, s=0, token="right", other=0, req=0, layer=0, head=0, first_token=0, tokens=64,
       first_cluster=0, clusters=4, data=0, table=0, send="auto", nowait=False,
       other_worker=False, hdr=0, hdr_len=0, new_link=False, part=None, mixed=False):
    """part: a KV_ROWS message of that part instead (mixed: its unused fields kept)."""
    if part is not None:
        table = 0xc0 | PARTS[part] << 2 | (2 if mixed else 0)
    f = sess(s) + tok(token, other) + u8(req, layer, head)
    f += struct.pack("<HHHB", first_token, tokens, first_cluster, clusters)
    f += u8(data, table, smode(send, nowait, other_worker, hdr, new_link=new_link))
    if hdr == 1:
        f += u8(hdr_len)
    elif hdr == 3:
        f += u8(0)
    return op("kv", slot, 0, f)


def step(slot, s=0, token="right", other=0, layer=0, items=((0, 0, (0, 1)),), data=0,
         send="auto", nowait=False, other_worker=False, short_hdr=None, new_link=False):
    f = sess(s) + tok(token, other) + u8(layer, len(items))
    for req, head, ids in items:
        f += u8(req, head, len(ids)) + bytes(ids)
    f += u8(data, smode(send, nowait, other_worker, 1 if short_hdr is not None else 0,
                        new_link=new_link))
    if short_hdr is not None:
        f += u8(short_hdr)
    return op("step", slot, 0, f)


def am_other(slot, am_id, hdr_len=8, data16=4, send="auto"):
    return op("am_other", slot, 0, struct.pack("<HBHB", am_id, hdr_len, data16, SEND[send]))


def raw_bytes(slot, data):
    return op("raw", slot, 0, u8(0, len(data)) + data)


def raw_mutated(slot, kind, fields, at, xor):
    return op("raw", slot, 0, u8(1, K[kind] - K["hello"]) + fields + struct.pack("<HB", at, xor))


def raw_cut(slot, kind, fields, keep):
    return op("raw", slot, 0, u8(2, K[kind] - K["hello"]) + fields + u8(keep))


def raw_header(slot, version, mtype, length, seq=1, more=b""):
    return op("raw", slot, 0, u8(3) + struct.pack("<HHII", version, mtype, length, seq) +
              u8(len(more)) + more)


def flood(slot, n):
    return op("flood", slot, 0, u8(n - 1))


def settle():
    return op("settle")


def hold():
    """The poller stops turning, or turns again (a settle also lets it go)."""
    return op("hold")


def ep_close(slot):
    return op("ep_close", slot)


def session(slot, non_admin=False, mode="shm", **kw):
    """connect, HELLO, SESSION_CREATE."""
    return connect(slot, non_admin) + hello(slot, mode) + create(slot, **kw)


SEEDS = {
    # --- the reproducers of issue 16, items 1-6 ---
    # 1: REQ_ALLOC beyond the session's room (-ENOSPC), then the connection closes:
    #    the request's arrays were freed twice.
    "repro1-enospc-then-close": session(0, cap=256) + alloc(0, 0, 0, tokens=1 << 20,
                                                              clusters=16) + disconnect(0),
    "repro1-enospc-after-alloc-rst": session(0, cap=1024) + alloc(0, 0, 0, 256, 64) +
        alloc(0, 0, 1, tokens=1 << 20, clusters=1024) + alloc(0, 0, 2, 64, 16) +
        disconnect(0, rst=True),
    "repro1-enospc-close-session": session(0, cap=256) + alloc(0, 0, 3, tokens=4096,
                                                               clusters=1024) + close(0, 0),
    # 3: the data path naming another connection's session: token 0, a wrong one, its own.
    "repro3-kv-other-session": session(0) + alloc(0, 0, 0) + session(2, non_admin=True) +
        kv(2, 0, "zero") + kv(2, 0, "flip", 5) + kv(2, 0, "other", 1) + kv(2, ("id", 1), "zero") +
        kv(0, 0),
    "repro3-step-other-session": session(0) + alloc(0, 0, 0) + kv(0, 0) +
        session(2, non_admin=True) + step(2, 0, "zero") + step(2, 0, "flip", 9) +
        step(2, 0, "other", 1) + step(0, 0),
    "repro3-control-other-session": session(0) + alloc(0, 0, 0) + session(3, non_admin=True) +
        alloc(3, 0, 1) + free(3, 0, 0) + close(3, 0) + stats(3, 0) + stats(3) + stats(0, 1) +
        close(0, 0) + alloc(0, 0, 1),
    # 4: an active message of an unregistered id, eager and rendezvous; a rendezvous
    #    message to a session that does not exist; a client gone with its step in flight.
    "repro4-am-unknown-ids": connect(0) + hello(0) + am_other(0, 0) + am_other(0, 2) +
        am_other(0, 4, 0, 0) + am_other(0, 5, 40, 512, "rndv") + am_other(0, 65535, 64, 4096,
                                                                           "rndv") +
        am_other(0, 9, 1, 1, "eager") + am_other(0, 300, 79, 100, "rndv") + settle() +
        session(1) + alloc(1, 0, 0) + kv(1, 0),
    "repro4-rndv-no-session": connect(0) + hello(0) + kv(0, ("id", 5), "zero", tokens=1000,
                                                          clusters=10, send="rndv") +
        kv(0, ("u64", 1 << 60), "random", tokens=1023, clusters=200, send="rndv") +
        step(0, ("id", 3), "zero", items=((0, 0, (0,)),) * 8, send="rndv"),
    "repro4-step-in-flight-close": session(0) + alloc(0, 0, 0) + kv(0, 0) +
        step(0, 0, nowait=True) + disconnect(0) + settle(),
    "repro4-step-in-flight-close-again": session(0, mode="tcp") + alloc(0, 0, 0) +
        kv(0, 0) + step(0, 0) + step(0, 0, nowait=True) + disconnect(0) + settle() +
        session(0, mode="tcp") + alloc(0, 0, 0) + kv(0, 0) + step(0, 0),
    "repro4-step-in-flight-rst": session(0, kv_heads=4, batch=4) + alloc(0, 0, 0) +
        alloc(0, 0, 1) + kv(0, 0, head=1) + kv(0, 0, req=1, head=3) +
        step(0, 0, items=((0, 1, (0, 1, 2, 3)), (1, 3, (3, 2))), nowait=True) +
        disconnect(0, rst=True),
    "repro4-step-in-flight-ep-close": session(0) + alloc(0, 0, 0) + kv(0, 0) +
        step(0, 0, nowait=True) + ep_close(0) + disconnect(0, half=True) + settle(),
    # 5: connections that never speak (the fourth refused), partial frames.
    "repro5-silent-connections": connect(0) + connect(1) + connect(2) + connect(3) +
        tick("hello") + tick("frame") + connect(3) + hello(3),
    "repro5-partial-frames": connect(0) + raw_cut(0, "hello", u8(1, 0), 20) + connect(1) +
        hello(1) + raw_cut(1, "create", create_fields(), 30) + tick("500ms") +
        tick("frame") + connect(2) + raw_cut(2, "stats", u8(0xff), 3) + tick("hello"),
    "repro5-dribble": connect(0) + raw_bytes(0, struct.pack("<IHH", 0x41534c4e, 2, 1)) +
        tick("500ms") + raw_bytes(0, b"\x28\x00") + tick("frame"),
    # --- issue 20: a poller held (busy) while a connection's barrier request waits there:
    # neither its HELLO clock, a partial frame's nor its idle clock may run out meanwhile ---
    "held-hello-timers": connect(0) + hold() + hello(0) + tick("hello") + tick("frame") +
        raw_cut(0, "stats", u8(0xff), 9) + tick("frame") + tick("hello") + hold() + tick("100ms"),
    "held-create-partial-frame": session(0, mode="tcp") + hold() + create(0, cap=256, tail=True) +
        tick("frame") + tick("frame") + hold() + tick("1ms") + tick("frame"),
    # ... nor its idle clock: the frames behind the barrier wait unread in the socket
    "held-hello-idle": connect(0) + hold() + hello(0) + create(0) + tick("idle") + tick("idle") +
        hold() + tick("1ms") + tick("frame"),
    # ... nor when the clock has moved past it before the frames in the socket are read
    "held-hello-idle-late-read": connect(0) + hold() + hello(0) + create(0) + tick("idle") +
        tick("idle") + hold() + tick("10s", 24),
    # ... and a request behind a held create may name the session it makes, whose id the
    # fuzzer cannot know yet: any guessed id is then not "certainly -ENOENT"
    "held-create-then-guess": connect(0) + hold() + hello(0) + create(0) + hold() +
        b"".join(alloc(0, ("id", n), 0) for n in range(1, 16)) + close(0, ("id", 1)),
    # 6: a step of no items.
    "repro6-step-no-items": session(0) + alloc(0, 0, 0) + step(0, 0, items=()) +
        step(0, 0, items=(), send="rndv") + step(0, 0),
    # --- the protocol's paths ---
    "life-other-endpoint": session(0, kv_heads=3, group=1, dim=16) + alloc(0, 0, 0) +
        kv(0, 0, head=2) + step(0, 0, items=((0, 2, (0, 3)),)) + step(0, 0, items=((0, 2, (1,)),)) +
        kv(0, 0, head=1, other_worker=True) + step(0, 0, items=((0, 1, (2,)),), other_worker=True) +
        close(0, 0),
    "life-heads": session(0, layers=2, kv_heads=2, group=4, dim=64) + alloc(0, 0, 0) +
        kv(0, 0, layer=0, head=0) + kv(0, 0, layer=0, head=1) + kv(0, 0, layer=1, head=0) +
        step(0, 0, items=((0, 0, (0, 1, 2)), (0, 1, (3,)))) + step(0, 0, layer=1) +
        stats(0) + stats(0, 0) + free(0, 0, 0) + close(0, 0),
    # bf16 dot products: sessions of them served (head-wise and cluster-wise); a
    # CREATE with a flag no version defines is malformed (its connection closed).
    "life-bf16-dots": session(0, attn="bf16", kv_heads=2, group=4, dim=64) + alloc(0, 0, 0) +
        kv(0, 0, head=0) + kv(0, 0, head=1) + step(0, 0, items=((0, 0, (0, 1)), (0, 1, (2,)))) +
        create(0, attn="bf16", placement="clusters", kv_heads=1) +
        alloc(0, 1, 0) + kv(0, 1, clusters=4) + step(0, 1, items=((0, 0, (0, 3)),)) +
        close(0, 0) + close(0, 1) + session(1, attn="bad"),
    "life-clusters": session(0, placement="clusters", kv_heads=1, group=2, dim=32) +
        alloc(0, 0, 0) + kv(0, 0, clusters=4) + kv(0, 0, first_token=64, first_cluster=4,
                                                   clusters=3) +
        kv(0, 0, first_cluster=2, clusters=2) +
        step(0, 0, items=((0, 0, (0, 1, 5, 6)),)) + close(0, 0),
    "life-rndv-kv": session(0, kv_heads=1, dim=128) + alloc(0, 0, 0, 4096, 1024) +
        kv(0, 0, tokens=1000, clusters=10, send="rndv") +
        kv(0, 0, first_token=1000, tokens=1000, first_cluster=10, clusters=10, send="rndv") +
        step(0, 0, items=((0, 0, (0, 11, 19)),), send="rndv") + settle(),
    # KV_ROWS: each part into place, rendezvous and eager; then hostile ones.
    "life-rows": session(0, kv_heads=1, dim=128) + alloc(0, 0, 0, 4096, 1024) +
        kv(0, 0, tokens=1000, part="k", send="rndv") + kv(0, 0, tokens=1000, part="v") +
        kv(0, 0, clusters=10, part="table", send="eager") + step(0, 0, items=((0, 0, (0,)),)) +
        settle(),
    "rows-hostile": session(0) + session(2, non_admin=True) + alloc(0, 0, 0) + alloc(2, 1, 0) +
        kv(2, 0, "right", part="k", send="rndv") + kv(2, 0, "other", 1, part="k") +
        kv(0, 0, part="none") + kv(0, 0, part="bad", send="rndv") +
        kv(0, 0, part="k", mixed=True, send="rndv") + kv(0, 0, part="table", mixed=True) +
        kv(0, 0, part="v", data=1, send="rndv") + kv(0, 0, part="k", first_token=4000) +
        kv(0, 0, part="k", req=3, send="rndv") + kv(0, 0, part="k", hdr=3) + settle(),
    "rows-clusters": session(0, placement="clusters", kv_heads=1, group=2, dim=32) +
        alloc(0, 0, 0) + kv(0, 0, part="k", send="rndv") + kv(0, 0, part="table") + close(0, 0),
    "rows-close-in-flight": session(0, kv_heads=1, dim=128) + alloc(0, 0, 0, 4096, 1024) +
        kv(0, 0, tokens=1000, part="k", send="rndv", nowait=True) + close(0, 0) +
        kv(0, 0, tokens=1000, part="v", send="rndv", nowait=True) + disconnect(0) + settle(),
    "life-fp16-big-group": session(0, dtype="fp16", kv_heads=1, group=4, dim=16, sel=16) +
        alloc(0, 0, 0) + kv(0, 0) + step(0, 0, items=((0, 0, tuple(range(4)) * 4),)),
    "two-tenants": session(0) + session(2, non_admin=True, kv_heads=3) + alloc(0, 0, 0) +
        alloc(2, 1, 0) + kv(0, 0) + kv(2, 1, head=2) + step(2, 1, items=((0, 2, (0,)),)) +
        step(0, 0) + stats(2) + stats(0),
    "step-busy": session(0) + alloc(0, 0, 0) + kv(0, 0) + step(0, 0, nowait=True) +
        step(0, 0) + settle(),
    "step-refusals": session(0) + alloc(0, 0, 0) + kv(0, 0) +
        step(0, 0, items=((0, 0, (9,)),)) + step(0, 0, items=((5, 0, (0,)),)) +
        step(0, 0, items=((0, 7, (0,)),)) + step(0, 0, layer=3) +
        step(0, 0, items=((0, 0, (0,)),) * 5) + step(0, 0, data=1) + step(0, 0, data=6) +
        step(0, 0, short_hdr=20),
    "step-tcp": connect(0) + hello(0, "tcp") + create(0) + alloc(0, 0, 0) + kv(0, 0) +
        step(0, 0) + kv(0, 0, send="rndv", tokens=1000, clusters=10, new_link=True) +
        step(0, 0, send="rndv"),
    # The data path's own: endpoints of another connection, keys wrong, none, stale,
    # more endpoints than a connection may have, error handling unlike the daemon's.
    "step-other-connection": session(0) + session(1, mode="tcp") + alloc(0, 0, 0) + kv(0, 0) +
        kv(1, 0) + step(1, 0) + step(1, 0, send="rndv") + kv(0, 0, other_worker=True) +
        step(0, 0) + stats(0, 0),
    "link-keys": session(0) + alloc(0, 0, 0) + link(0, "wrong", 5) + kv(0, 0) + step(0, 0) +
        link(0, "none") + kv(0, 0) + step(0, 0, send="rndv") + connect(1) + hello(1) +
        link(0, "other") + kv(0, 0) + step(0, 0) + link(1, "other", 2) + kv(1, 0) +
        step(1, 0) + link(0) + kv(0, 0) + step(0, 0),
    "link-stale": session(0) + alloc(0, 0, 0) + kv(0, 0) + disconnect(0) + session(0) +
        link(0, "stale") + kv(0, 0) + step(0, 0) + kv(0, 1) + link(0) + alloc(0, 1, 0) +
        kv(0, 1) + step(0, 1),
    "link-limit": session(0) + alloc(0, 0, 0) + kv(0, 0) + link(0) + kv(0, 0) + link(0) +
        kv(0, 0) + step(0, 0) + link(0, flip_eh=True) + kv(0, 0, send="rndv") +
        ep_close(0) + link(0) + kv(0, 0) + step(0, 0, new_link=True) + settle(),
    "link-limit-tcp": session(0, mode="tcp") + alloc(0, 0, 0) + link(0) + link(0) + kv(0, 0) +
        ep_close(0) + settle() + link(0) + kv(0, 0) + step(0, 0) + link(0) + link(0) +
        step(0, 0),
    "link-eh-unlike": session(0) + alloc(0, 0, 0) + link(0, flip_eh=True) + kv(0, 0) +
        step(0, 0) + session(1, mode="tcp") + alloc(1, 1, 0) + link(1, flip_eh=True) +
        kv(1, 1) + step(1, 1) + ep_close(1) + disconnect(0) + settle(),
    "link-other-key": session(0) + alloc(0, 0, 0) + link(2, "other", 1) + kv(2, 0) +
        step(2, 0) + link(3, "other", 0) + kv(3, 0) + kv(0, 0) + step(0, 0),
    "hello-flags": connect(0) + hello(0, "flag", flag=1) + connect(1) +
        hello(1, "flag", flag=31) + connect(2) + hello(2, "v2", addr=bytes(range(1, 40))) +
        connect(3) + hello(3, "tcp") + create(3) + hello(3, "shm"),
    "kv-refusals": session(0) + alloc(0, 0, 0, 256, 64) + kv(0, 0, req=3) + kv(0, 0, layer=2) +
        kv(0, 0, head=2) + kv(0, 0, first_token=250) + kv(0, 0, first_cluster=62) +
        kv(0, 0, data=1) + kv(0, 0, data=2) + kv(0, 0, data=7) + kv(0, 0, hdr=1, hdr_len=20) +
        kv(0, 0, hdr=2) + kv(0, 0, hdr=3) + kv(0, 0, table=1),
    "kv-clusters-out-of-order": session(0, placement="clusters") + alloc(0, 0, 0) +
        kv(0, 0, first_cluster=3) + kv(0, 0, table=1) + kv(0, 0, tokens=1000, clusters=255) +
        step(0, 0),
    "limits-sessions": session(0, cap=16) + create(0, cap=16) + create(0, cap=16) +
        session(1, cap=16) + create(1, cap=16) + session(2, non_admin=True, cap=16) +
        stats(0),
    "limits-requests": session(0) + alloc(0, 0, 0, 16, 16) + alloc(0, 0, 1, 16, 16) +
        alloc(0, 0, 2, 16, 16) + alloc(0, 0, 3, 16, 16) + alloc(0, 0, 0, 16, 16) +
        free(0, 0, 1) + alloc(0, 0, 3, 16, 16) + free(0, 0, 7),
    "limits-memory": session(0, layers=4, kv_heads=4, cap=65536) +
        create(0, layers=4, kv_heads=4, cap=65536) + session(1, layers=4, kv_heads=5, cap=65536),
    "limits-connections": connect(0) + connect(1, non_admin=True) + connect(2) + connect(3) +
        hello(0) + hello(1) + hello(2) + disconnect(0) + connect(3) + hello(3),
    "session-refused-shapes": connect(0) + hello(0) +
        create(0, dim=512) + create(0, dim=256, group=4) + create(0, cap=1 << 33) +
        create(0, cap=1 << 22) + create(0, layers=4, kv_heads=5, dim=256, cap=65536) + stats(0),
    # Findings (tests/fuzz/README.md), each fixed in the commit that added it here.
    # (Since protocol version 3 no HELLO carries an address: one of version 2 must be
    # refused without the address being read.)
    "finding-hello-address-version": connect(0) +
        hello(0, "v2", addr=bytes([0x06, 0x00]) + bytes(range(1, 31))) + create(0) +
        alloc(0, 0, 0) + kv(0, 0) + step(0, 0) + connect(1) +
        hello(1, "v2", addr=bytes([0x0f]) + bytes(40)) + create(1) + step(1, 1),
    # A KV_ROWS part of no bytes, received by rendezvous: copied into device
    # memory from no buffer (memcpy() given NULL, UBSan).  libFuzzer's input, as found.
    "finding-kv-rows-empty-part": base64.b64decode(
        "AAABAAEAAgAAAQEDAAEHAwAGAQIBAAICAAEBAwABBwMDAAAABAMDAgEABAMIAgAAAAAAAABAAAAABADEAggAAABr"
        "AAAAAEAAAAAEAMQACAAAAAAAAAAAQAAAAAQAwAAIAAAAAAAAAAAAAEAABADQAggAAAAAAAAAAEAAAAAEAMYCCAAA"
        "AAAAAAAAQAAAAAQAzgAIAAAAAAAAAABAAAAABAHIAggAAAAAAACgD0AAAAAEAOQACAAAAAMAAAAAQAAAAAQAxAII"
        "AAAAAAAAAABAAAAABADENQAOAA=="),
    "hello-twice": connect(0) + hello(0) + hello(0) + create(0),
    "hello-versions": connect(0) + hello(0, "tcp", version="future") + connect(1) +
        hello(1, version="range") + connect(2) + hello(2, version="old"),
    "before-hello": connect(0) + create(0) + connect(1) + stats(1),
    "timeouts-idle": connect(0) + hello(0) + session(1) + tick("idle") + tick("idle") +
        stats(1) + alloc(1, 0, 0),
    "raw-garbage": connect(0) + raw_bytes(0, b"\xff" * 40) + connect(1) +
        raw_header(1, 2, 9, 0) + connect(2) + raw_header(2, 2, 1, 1 << 20) +
        connect(3) + raw_header(3, 7, 3, 32, more=bytes(32)),
    "raw-mutated": session(0) + raw_mutated(0, "alloc", alloc_fields(0, 0), 20, 0x80) +
        session(1) + raw_mutated(1, "create", create_fields(), 16 + 12, 0xff),
    "flood-stats": session(0) + flood(0, 64) + flood(0, 10) + stats(0, 0),
    "close-reopen": session(0) + alloc(0, 0, 0) + close(0, 0) + close(0, 0) + create(0) +
        alloc(0, 1, 0) + kv(0, 1) + kv(0, 0) + step(0, 1) + disconnect(0, half=True) +
        connect(0) + hello(0) + create(0) + step(0, 2),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "corpus-daemon")
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(SEEDS.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(SEEDS)} inputs in {out}")


if __name__ == "__main__":
    main()
