# SPDX-License-Identifier: MIT
"""Where the engine's long requests keep their KV: one nelssad it is given
(host and port), or the NELSSA nodes of a cluster that an etcd registry
lists (Documentation/cluster.rst), placed by nelssa.Placer with the C
client's policy.

A request's KV heads all stay on one node.  A cluster's nodes are
connected, and a session opened on each, the first time a request is
placed there.  A call that finds its node gone raises NodeLost, naming the
node; the engine then takes back every request the node held.
"""

import errno

import nelssa

# What a client call answers when nelssad is gone or cannot be reached.
LOST_ERRNOS = frozenset((errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ECONNREFUSED,
                         errno.ENOTCONN, errno.ESHUTDOWN, errno.ECONNABORTED, errno.EHOSTDOWN,
                         errno.EHOSTUNREACH))


class NodeLost(Exception):
    """A node stopped answering: err is the nelssa.Error that said so."""

    def __init__(self, node, err):
        super().__init__("%s: %s" % (node.name, err))
        self.node, self.err = node, err


class Node:
    def __init__(self, name, host, port, index=None):
        self.name, self.host, self.port, self.index = name, host, port, index
        self.client = self.session = None
        self.rids = {}                  # request id -> tokens placed (final length)

    def call(self, fn, *args, **kw):
        """self.client's fn(session, ...); NodeLost when the node is gone."""
        try:
            return getattr(self.client, fn)(self.session, *args, **kw)
        except nelssa.Error as e:
            if e.errno in LOST_ERRNOS:
                raise NodeLost(self, e) from e
            raise


class Nodes:
    """The engine's NELSSA nodes.  session_kw: what open_session() takes
    besides the shape; shape: (layers, q heads, KV heads, head dim);
    token_bytes: the device bytes one token takes (for placement)."""

    def __init__(self, cfg, shape, session_kw, token_bytes, log):
        self.cfg, self.shape, self.session_kw, self.log = cfg, shape, session_kw, log
        self.of = {}                    # request id -> Node
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
            self._open(n)
            self.nodes[0] = n

    @property
    def single(self):
        return None if self.placer else self.nodes.get(0)

    def _open(self, n):
        n.client = nelssa.Client(n.host, n.port, timeout_ms=self.cfg.timeout_ms,
                                 name="nelssa-serve")
        try:
            n.session = n.client.open_session(*self.shape, **self.session_kw)
        except BaseException:
            n.client.close()
            n.client = None
            raise

    def _node(self, index):
        """The placer's node index, connected and with our session (lazily)."""
        n = self.nodes.get(index)
        if n is None:
            info = self.placer.nodes()[index]
            n = Node(info["id"], info["host"], info["port"], index)
            self._open(n)
            self.placer.own_session(index, n.session)
            self.nodes[index] = n
            self.log("node %s (%s:%d) joined: session %d" % (n.name, n.host, n.port,
                                                              n.session))
        return n

    def alloc(self, rid, final_len):
        """Room for request rid on a node; None when no node has room now
        (the request waits).  A node that cannot be reached is excluded and
        the next one tried."""
        if self.placer is None:
            n = self.nodes[0]
            try:
                n.call("alloc_request", rid, final_len, final_len)
            except nelssa.Error as e:
                if e.errno != errno.ENOSPC:
                    raise
                return None
            self._bind(n, rid, final_len)
            return n
        for _ in range(len(self.placer.nodes()) + 1):
            try:
                index = self.placer.place(final_len)
            except nelssa.Error as e:
                if e.errno != errno.ENOSPC:
                    raise
                return None
            try:
                n = self._node(index)
                n.call("alloc_request", rid, final_len, final_len)
            except (nelssa.Error, NodeLost) as e:
                err = e.err if isinstance(e, NodeLost) else e
                self.placer.release(index, final_len)
                if err.errno == errno.ENOSPC:
                    return None         # its session is full: wait
                if err.errno not in LOST_ERRNOS:
                    raise
                self.log("node %s unreachable (%s): excluded" % (
                    self.placer.nodes()[index]["id"], err))
                if index in self.nodes:
                    self.lose(self.nodes[index])
                else:
                    self.placer.exclude(index)
                continue
            self._bind(n, rid, final_len)
            return n
        return None

    def _bind(self, n, rid, final_len):
        n.rids[rid] = final_len
        self.of[rid] = n

    def free(self, rid):
        """Frees rid's KV where it is; a gone node is noticed later."""
        n = self.of.pop(rid, None)
        if n is None:
            return
        tokens = n.rids.pop(rid)
        if self.placer is not None:
            self.placer.release(n.index, tokens)
        try:
            n.call("free_request", rid)
        except NodeLost:
            pass

    def lose(self, n):
        """n is gone: forgets it and returns the request ids it held."""
        rids = list(n.rids)
        for rid in rids:
            self.of.pop(rid, None)
        if self.placer is not None:
            self.placer.release(n.index, sum(n.rids.values()))
            self.placer.disown_session(n.index, n.session)
            self.placer.exclude(n.index)
        n.rids = {}
        try:
            n.client.close()
        except nelssa.Error:
            pass
        n.client = None
        self.nodes = {k: v for k, v in self.nodes.items() if v is not n}
        return rids

    def any_left(self):
        """Whether a node may still take requests."""
        if self.placer is None:
            return bool(self.nodes)
        return any(x["listed"] and not x["excluded"] for x in self.placer.nodes())

    def close(self):
        for n in list(self.nodes.values()):
            if n.client is not None:
                n.client.close()
                n.client = None
        self.nodes = {}
        if self.placer is not None:
            self.placer.close()
