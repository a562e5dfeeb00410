# SPDX-License-Identifier: MIT
"""Where the engine's long requests keep their KV: one nelssad it is given
(host and port), or the NELSSA nodes of a cluster that an etcd registry
lists (Documentation/cluster.rst), placed by nelssa.Placer with the C
client's policy.

A request's KV heads all stay on one node, in one of the engine's sessions
there.  A cluster's nodes are connected, and a session opened on each, the
first time a request is placed there; a node whose sessions are full gets
another (of capacity_tokens), up to 16.  One nelssad has one session:
capacity_tokens is then the tier's memory cap.  A call that finds its node
gone raises NodeLost, naming the node; the engine then takes back every
request the node held.
"""

import errno

import nelssa

# What a client call answers when nelssad is gone or cannot be reached.
LOST_ERRNOS = frozenset((errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECONNREFUSED,
                         errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNABORTED, errno.EHOSTDOWN,
                         errno.EHOSTUNREACH))
SESSIONS_PER_NODE = 16              # as the placer counts a node's sessions of ours
# What a node answers when it has no room for a session or a request now:
# memory (ENOSPC), its session limits (EBUSY), ours there (EDQUOT).
FULL_ERRNOS = frozenset((errno.ENOSPC, errno.EBUSY, errno.EDQUOT))


class NodeLost(Exception):
    """A node stopped answering: err is the nelssa.Error that said so."""

    def __init__(self, node, err):
        super().__init__("%s: %s" % (node.name, err))
        self.node, self.err = node, err


class Node:
    def __init__(self, name, host, port, index=None):
        self.name, self.host, self.port, self.index = name, host, port, index
        self.client = None
        self.slots = []                 # the engine's sessions there
        self.rids = {}                  # request id -> tokens placed (final length)


class Slot:
    """One of the engine's sessions on a node: a request's calls go through it."""

    def __init__(self, node, session):
        self.node, self.session = node, session

    @property
    def name(self):
        return self.node.name

    def call(self, fn, *args, **kw):
        """The node's client's fn(session, ...); NodeLost when the node is gone."""
        try:
            return getattr(self.node.client, fn)(self.session, *args, **kw)
        except nelssa.Error as e:
            if e.errno in LOST_ERRNOS:
                raise NodeLost(self.node, e) from e
            raise


class Nodes:
    """The engine's NELSSA nodes.  session_kw: what open_session() takes
    besides the shape; shape: (layers, q heads, KV heads, head dim);
    token_bytes: the device bytes one token takes (for placement)."""

    def __init__(self, cfg, shape, session_kw, token_bytes, log):
        self.cfg, self.shape, self.session_kw, self.log = cfg, shape, session_kw, log
        self.of = {}                    # request id -> Slot
        self.nodes = {}                 # placer index (or 0) -> Node
        self.placer = None
        if cfg.etcd:
            self.placer = nelssa.Placer(cfg.etcd, cluster=cfg.cluster, token_bytes=token_bytes,
                                        max_fill=cfg.max_fill, timeout_ms=min(cfg.timeout_ms,
                                                                              5000))
            if not self.placer.nodes():
                self.log("registry %s (cluster %s): no node yet%s" % (
                    cfg.etcd, cfg.cluster, "" if self.placer.view_age_ms is not None
                    else " (etcd not read)"))
        else:
            n = Node("%s:%d" % (cfg.host, cfg.port), cfg.host, cfg.port)
            n.client = self._connect(n)
            try:
                self._open(n)
            except BaseException:
                n.client.close()
                raise
            self.nodes[0] = n

    @property
    def single(self):
        return None if self.placer else self.nodes.get(0)

    def _connect(self, n):
        return nelssa.Client(n.host, n.port, timeout_ms=self.cfg.timeout_ms,
                             name="nelssa-serve")

    def _open(self, n):
        """Another session of the engine's on n (NodeLost, or nelssa.Error
        ENOSPC when the node has no room for one)."""
        slot = Slot(n, None)
        try:
            slot.session = n.client.open_session(*self.shape, **self.session_kw)
        except nelssa.Error as e:
            if e.errno in LOST_ERRNOS:
                raise NodeLost(n, e) from e
            raise
        n.slots.append(slot)
        if self.placer is not None:
            self.placer.own_session(n.index, slot.session)
        return slot

    def _node(self, index):
        """The placer's node index, connected (lazily)."""
        n = self.nodes.get(index)
        if n is None:
            info = self.placer.nodes()[index]
            n = Node(info["id"], info["host"], info["port"], index)
            try:
                n.client = self._connect(n)
            except nelssa.Error as e:
                if e.errno in LOST_ERRNOS:
                    raise NodeLost(n, e) from e
                raise
            self.nodes[index] = n
            self.log("node %s (%s:%d) joined" % (n.name, n.host, n.port))
        return n

    def _alloc_on(self, n, rid, final_len):
        """rid's room in one of the engine's sessions on n, another opened
        when they are full (a cluster); None when there is none."""
        for slot in n.slots:
            try:
                slot.call("alloc_request", rid, final_len, final_len)
                return slot
            except nelssa.Error as e:
                if e.errno not in FULL_ERRNOS:
                    raise
        if self.placer is None or len(n.slots) >= SESSIONS_PER_NODE or \
                final_len > self.session_kw["capacity_tokens"]:
            return None
        try:
            slot = self._open(n)
            slot.call("alloc_request", rid, final_len, final_len)
        except nelssa.Error as e:
            if e.errno not in FULL_ERRNOS:
                raise
            return None
        return slot

    def alloc(self, rid, final_len):
        """Room for request rid on a node; None when no node has room now
        (the request waits).  A node that cannot be reached is excluded and
        the next one tried."""
        if self.placer is None:
            slot = self._alloc_on(self.nodes[0], rid, final_len)
            if slot is not None:
                self._bind(slot, rid, final_len)
            return slot
        if not self.can_hold(final_len):
            return None                 # no node could: never marks one full
        for _ in range(len(self.placer.nodes()) + 1):
            try:
                index = self.placer.place(final_len)
            except nelssa.Error as e:
                if e.errno != errno.ENOSPC:
                    raise
                return None
            try:
                slot = self._alloc_on(self._node(index), rid, final_len)
            except NodeLost as e:
                self.placer.release(index, final_len)
                n = self.nodes.get(index)
                if n is not None and n.rids:
                    raise               # it holds requests: the engine takes them back
                self.log("node %s unreachable (%s): excluded" % (e.node.name, e.err))
                if n is not None:
                    self.lose(n)
                else:
                    self.placer.exclude(index)
                continue
            except BaseException:
                self.placer.release(index, final_len)
                raise
            if slot is None:
                # Its sessions are full and it has no room for more: another node.
                self.placer.release(index, final_len)
                self.placer.full(index)
                continue
            self._bind(slot, rid, final_len)
            return slot
        return None

    def can_hold(self, final_len):
        """Whether some node could ever take a request of final_len tokens
        (a session's capacity, and a node's cap)."""
        if self.placer is None:
            return True
        self.placer.sync()              # nodes may have joined since (the watch says so)
        return final_len <= self.session_kw["capacity_tokens"] and any(
            x["listed"] and not x["excluded"] and x["cap_tokens"] >= final_len
            for x in self.placer.nodes())

    def eligible(self):
        """The nodes a request may be placed on now (one nelssad: 1)."""
        if self.placer is None:
            return 1
        self.placer.sync()
        return sum(x["listed"] and not x["excluded"] for x in self.placer.nodes())

    def _bind(self, slot, rid, final_len):
        slot.node.rids[rid] = final_len
        self.of[rid] = slot

    def free(self, rid):
        """Frees rid's KV where it is; a gone node is noticed later."""
        slot = self.of.pop(rid, None)
        if slot is None:
            return
        tokens = slot.node.rids.pop(rid)
        if self.placer is not None:
            self.placer.release(slot.node.index, tokens)
        try:
            slot.call("free_request", rid)
        except NodeLost:
            pass

    def lose(self, n):
        """n is gone: forgets it and returns the request ids it held."""
        rids = list(n.rids)
        for rid in rids:
            self.of.pop(rid, None)
        if self.placer is not None:
            self.placer.release(n.index, sum(n.rids.values()))
            for slot in n.slots:
                self.placer.disown_session(n.index, slot.session)
            self.placer.exclude(n.index)
        n.rids, n.slots = {}, []
        if n.client is not None:
            try:
                n.client.close()
            except nelssa.Error:
                pass
        n.client = None
        self.nodes = {k: v for k, v in self.nodes.items() if v is not n}
        return rids

    def any_left(self):
        """Whether a node may still take requests, or holds some."""
        if self.placer is None:
            return bool(self.nodes)
        return self.eligible() > 0 or any(n.rids for n in self.nodes.values())

    def close(self):
        for n in list(self.nodes.values()):
            if n.client is not None:
                n.client.close()
                n.client = None
        self.nodes = {}
        if self.placer is not None:
            self.placer.close()
