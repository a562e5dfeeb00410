# SPDX-License-Identifier: MIT
"""The split-batch decode engine: continuous batching over a paged KV pool,
with long requests' attention on NELSSA.

One engine iteration admits waiting requests (FCFS; each admission is a
prefill that yields the request's next token), then runs one decode step
of every running request.  A step runs layer by layer: QKV for the whole
batch, then attention split by where each request lives, then the output
projection and MLP for the whole batch again.

* ``mode="gpu"``: every request's KV is in the pool; when a step needs a
  block and none is free, the most recently admitted request is preempted
  and later recomputed (vLLM's default).
* ``mode="nelssa"``: a request the router sends to the PNM tier (at or
  above the threshold, or too long for the pool) is prefilled, clustered
  with segmented k-means per (layer, KV head) and offloaded to nelssad; the
  pool keeps only its window (attention sinks and recent tokens, charged as
  blocks) and its centroids.  At each layer its attention is sent with
  ``step_send()`` *before* the GPU requests' dense attention runs and
  collected after it, then merged with the window (the split batch).  Its
  decode-time tokens stay in the window until a chunk is complete, then are
  clustered and appended.  Under memory pressure the router picks a GPU
  request past the threshold (largest context first) and it migrates in
  the background, one layer per iteration while it keeps decoding; its
  pool blocks are freed when the last layer has landed.

Documentation/serve.rst describes the engine, its options and its output.
"""

import dataclasses
import errno
import math
import time

import numpy as np
import torch

import nelssa

from .kvpool import KVPool
from .model import dense_attn
from .nodes import LOST_ERRNOS, NodeLost, Nodes  # noqa: F401 (LOST_ERRNOS: for callers)


# What stands in for the clusters a step does not select: the centroid
# (nelssa_estimate_attn()), the centroid weighted by its members' key
# spread (nelssa_estimate_attn_spread(), the client library's shipped
# default), or nothing.  "mean" is the default here: on the random model
# it is as accurate on the retrieval heads and a little ahead on the
# others (Documentation/serve.rst).
ESTIMATES = ("mean", "spread", "none")
KV_LAYOUTS = {"packed": nelssa.KV_PACKED, "adjacent": nelssa.KV_ADJACENT}


@dataclasses.dataclass
class EngineConfig:
    mode: str = "nelssa"            # "gpu" or "nelssa"
    pool_tokens: int = 32768        # GPU KV budget, tokens (all layers)
    block: int = 16                 # tokens a pool block
    max_batch: int = 32             # running requests at most
    threshold: float = None         # routing threshold; None: the router's crossover
    profile: str = "h100-nvl"       # hardware profile for the router (name or file)
    devices: int = 4                # PNM devices the router assumes
    adaptive: bool = False          # load-adaptive threshold (ThresholdCtl)
    adapt_period: float = 10.0      # its decision period, seconds (hold: twice that)
    select: float = 0.04            # token budget, fraction of what a head stored
    min_select: int = 64            # at least this many tokens a head
    estimate: str = "mean"          # over unselected clusters: "mean", "spread" or "none"
    sink: int = 4
    recent: int = 64
    chunk: int = 64                 # decode-time tokens clustered and appended together
    high_water: float = 0.9         # pool use from which a migration may start
    migrate: bool = True
    accuracy_every: int = 4         # compare PNM attention with dense every N steps (0: never)
    host: str = "127.0.0.1"
    port: int = 0
    etcd: str = None                # a cluster's registry (URLs): its nodes instead of host:port
    cluster: str = "default"
    max_fill: float = 0.9           # a node filled to at most this share of its memory
    tenant: int = 0                 # the sessions' tenant label (0..255)
    timeout_ms: int = 30000
    capacity_tokens: int = 131072   # the nelssad session's capacity, tokens
    kv_layout: str = "packed"       # the sessions' KV layout: "packed" or "adjacent"
    kmeans_iters: int = 10
    prefill_chunk: int = 512        # prompt tokens prefilled between two decode steps
    prefill_elsewhere: bool = False # prefill not on the clock (as nelssa-sim models it)

    def check(self):
        if self.mode not in ("gpu", "nelssa"):
            raise ValueError("engine mode must be 'gpu' or 'nelssa', not %r" % (self.mode,))
        if self.pool_tokens < self.block or self.block <= 0 or self.max_batch <= 0:
            raise ValueError("engine: pool_tokens >= block > 0 and max_batch > 0")
        if not 0 < self.select <= 1:
            raise ValueError("engine: select must be in (0, 1], not %r" % (self.select,))
        if self.sink < 0 or self.recent < 1 or self.chunk < 1 or self.prefill_chunk < 1:
            raise ValueError("engine: sink >= 0, recent >= 1, chunk >= 1, prefill_chunk >= 1")
        if self.mode == "nelssa" and not self.port and not self.etcd:
            raise ValueError("engine: NELSSA mode needs nelssad's port, or a cluster's etcd")
        if not self.timeout_ms > 0:
            raise ValueError("engine: timeout_ms must be > 0 (the most a step is waited for)")
        if self.kv_layout not in KV_LAYOUTS:
            raise ValueError("engine: kv_layout must be one of %s, not %r"
                             % (", ".join(sorted(KV_LAYOUTS)), self.kv_layout))
        if self.estimate not in ESTIMATES:
            raise ValueError("engine: estimate must be one of %s, not %r"
                             % (", ".join(ESTIMATES), self.estimate))
        return self


@dataclasses.dataclass
class Seq:
    """A request inside the engine."""
    req: object
    tokens: list
    where: str = None               # "gpu" or "pnm" once admitted
    prev: str = None                # where it ran before a preemption
    pf: dict = None                 # prefill in progress: KV so far
    admitted: int = 0               # admission order (preemption picks the latest)
    t_first: float = None
    t_tokens: list = dataclasses.field(default_factory=list)
    preemptions: int = 0
    migrated: bool = False
    refused: str = None
    pnm: object = None
    moving: object = None
    due: float = 0.0                # paced PNM request: no token before this time
    pnm_wait: float = None          # since when it waits for room on NELSSA (None: not)
    gpu_now: bool = False           # the idle GPU takes it instead
    dues: list = dataclasses.field(default_factory=list)   # every due set, for tests
    joins: list = dataclasses.field(default_factory=list)  # (time, due, estimate) it stepped

    @property
    def kv_len(self):
        return len(self.tokens) - 1

    @property
    def generated(self):
        return len(self.tokens) - len(self.req.prompt)

    @property
    def done(self):
        return self.generated >= self.req.max_new


def _bits(t):
    """A bf16 tensor's bits as a C-contiguous int16 numpy array (no copy)."""
    return t.contiguous().view(torch.int16).numpy()


class PnmState:
    """What the GPU node keeps of a request whose KV is on NELSSA.

    keep: host copies of the offloaded rows, for the accuracy check's
    dense reference alone -- offloads and appends need the rows they send
    only (Client.append(base=)), so without the check the GPU node keeps
    none of them."""

    def __init__(self, layers, kv_heads, head_dim, cap, keep=True):
        self.n_off = 0                  # tokens each head stored on the PNM tier
        self.sink_k, self.sink_v = [None] * layers, [None] * layers
        self.tail_k, self.tail_v = [None] * layers, [None] * layers
        # Host memory, not the GPU pool.
        self.host_k = [torch.empty((kv_heads, cap, head_dim), dtype=torch.bfloat16)
                       for _ in range(layers)] if keep else None
        self.host_v = [torch.empty((kv_heads, cap, head_dim), dtype=torch.bfloat16)
                       for _ in range(layers)] if keep else None
        self.ix = [[None] * kv_heads for _ in range(layers)]
        self.meta = [[None] * kv_heads for _ in range(layers)]
        self.reserved = 0


class Engine:
    def __init__(self, model, cfg, log=None):
        self.m, self.cfg = model, cfg.check()
        c = model.cfg
        self.L, self.Hq, self.Hkv, self.D = (c.num_hidden_layers, c.num_attention_heads,
                                             c.num_key_value_heads, c.head_dim)
        self.G = c.group
        self.log = log or (lambda msg: None)
        self.pool = KVPool(cfg.pool_tokens // cfg.block, cfg.block, self.L, self.Hkv, self.D)
        if cfg.mode == "nelssa" and self._window_blocks(cfg.block) > self.pool.blocks:
            raise ValueError("engine: a %d-token pool cannot hold a NELSSA request's window "
                             "and centroids" % cfg.pool_tokens)
        self.nodes = self.router = self.ctl = None
        self.node_losses = []           # dict(node, t, why, requests) a lost node each
        if cfg.mode == "nelssa":
            self._connect()

    @property
    def client(self):
        """The nelssad client of a single-node engine (None once lost)."""
        n = self.nodes.single if self.nodes is not None else None
        return n.client if n is not None else None

    @client.setter
    def client(self, c):
        self.nodes.single.client = c

    # --- set-up -------------------------------------------------------------

    def _connect(self):
        cfg = self.cfg
        self.nodes = Nodes(cfg, (self.L, self.Hq, self.Hkv, self.D),
                           dict(max_batch=cfg.max_batch, max_sel=65536,
                                capacity_tokens=cfg.capacity_tokens, tenant=cfg.tenant,
                                kv_layout=KV_LAYOUTS[cfg.kv_layout]),
                           self.m.kv_bytes_per_token, self.log)
        try:
            self.router = nelssa.Router(cfg.profile, layers=self.L, kv_heads=self.Hkv,
                                        head_dim=self.D, weights=self.m.weight_bytes,
                                        select=cfg.select, devices=cfg.devices)
        except BaseException:
            self.nodes.close()
            self.nodes = None
            raise
        # A request's KV stays on one node (the router's devices), but the
        # engine's long requests spread over a cluster's nodes: its memory
        # cap covers them all (the placer keeps each node's own).
        if cfg.etcd:
            self.router.cap_pnm_mem *= max(1, self.nodes.eligible())
        self.router.gpu_kv = self.pool.blocks * cfg.block * self.m.kv_bytes_per_token
        self.router.window = cfg.sink + cfg.recent + cfg.chunk
        # nelssad's session holds capacity_tokens: the tier's memory cap (a
        # cluster's nodes are capped each by the placer).
        if not cfg.etcd:
            self.router.cap_pnm_mem = min(self.router.cap_pnm_mem, cfg.capacity_tokens * (
                self.router.kv_bytes_per_token / (self.router.pnm_mem * cfg.devices)))
        if cfg.threshold is not None:
            self.router.t_input = cfg.threshold
        if cfg.adaptive:
            # The controller's defaults (a minute a decision) suit a service;
            # a run of this engine lasts a minute or two.
            self.ctl = nelssa.ThresholdCtl(self.router.t_input)
            self.ctl.period, self.ctl.hold = cfg.adapt_period, 2 * cfg.adapt_period

    def close(self):
        if self.nodes is not None:
            self.nodes.close()
            self.nodes = None

    # --- PNM tier -----------------------------------------------------------

    def _window_blocks(self, final_len):
        """Pool blocks a PNM request holds for its end: its window, and per
        layer and KV head its clusters' centroids, far-member keys and (with
        an estimate) value sums and (with "spread") key spreads, float32,
        for final_len tokens in clusters of 16 (and a sixteenth more for
        outliers)."""
        c = self.cfg
        clusters = math.ceil(final_len / 16 * 17 / 16) + 1
        arrays = 2 + (c.estimate != "none") + (c.estimate == "spread")
        meta = self.L * self.Hkv * clusters * self.D * 4 * arrays
        return self.pool.blocks_for(c.sink + c.recent + c.chunk) + math.ceil(
            meta / (self.m.kv_bytes_per_token * c.block))

    def _refresh(self, st, layer, h, k, v, first=0, base=0):
        """The head's selection and estimate arrays from k and v, the rows
        of its tokens from base on; after an append, from cluster first on
        only (the clusters before keep their members)."""
        ix = st.ix[layer][h]
        est = self.cfg.estimate
        new = (ix.far_keys(k, first=first, base=base),
               ix.value_sums(v, first=first, base=base) if est != "none" else None,
               ix.key_spread(k, first=first, base=base) if est == "spread" else None)
        if first:
            old = st.meta[layer][h][2:]
            new = tuple(n if n is None else np.concatenate([o[:first], n])
                        for o, n in zip(old, new))
        st.meta[layer][h] = (ix.centroids, ix.sizes) + new

    def _kmeans(self, k):
        return nelssa.ClusterIndex(k, iters=self.cfg.kmeans_iters)

    def _offload_layer(self, seq, st, layer, k, v, n_keep):
        """Clusters and sends one layer's middle [sink, n_keep) of (Hkv, n, D)."""
        c = self.cfg
        st.sink_k[layer], st.sink_v[layer] = k[:, :c.sink].clone(), v[:, :c.sink].clone()
        n_off = n_keep - c.sink
        if st.host_k is not None:
            st.host_k[layer][:, :n_off] = k[:, c.sink:n_keep]
            st.host_v[layer][:, :n_off] = v[:, c.sink:n_keep]
        for h in range(self.Hkv):
            kb = _bits(k[h, c.sink:n_keep])
            vb = _bits(v[h, c.sink:n_keep])
            ix = self._kmeans(kb)
            self.nodes.of[seq.req.rid].call("offload", seq.req.rid, layer, h, ix, kb, vb)
            st.ix[layer][h] = ix
            st.n_off = n_off
            self._refresh(st, layer, h, kb, vb)

    def _pnm_split(self, n):
        """Tokens kept at the end of a context of n when it moves to PNM."""
        return max(self.cfg.sink, n - self.cfg.recent)

    def _offload_next_layer(self, seq):
        """One layer of a prefilled PNM request's KV (pf's lists per layer
        of (Hkv, n, D)) to the PNM tier; True once every layer is there.

        A layer an iteration, as a migration moves: clustering and sending
        a long prompt's every layer at once stalled the running requests'
        decode for all of it.  seq.pnm is the state being filled, so that a
        node lost meanwhile frees its indices.
        """
        pf = seq.pf
        if seq.pnm is None:
            pf["layer"], pf["keep"] = 0, self._pnm_split(pf["ks"][0].shape[1])
            seq.pnm = PnmState(self.L, self.Hkv, self.D, seq.req.final_len,
                               keep=self.cfg.accuracy_every > 0)
        layer, keep, st = pf["layer"], pf["keep"], seq.pnm
        self._offload_layer(seq, st, layer, pf["ks"][layer], pf["vs"][layer], keep)
        st.tail_k[layer] = pf["ks"][layer][:, keep:].clone()
        st.tail_v[layer] = pf["vs"][layer][:, keep:].clone()
        pf["layer"] += 1
        if pf["layer"] < self.L:
            return False
        st.reserved = len(self.pool.reserved.get(seq.req.rid, []))
        return True

    def _append_chunk(self, seq):
        """Moves the window's oldest chunk to the PNM tier when it is complete."""
        st, c = seq.pnm, self.cfg
        if st.tail_k[0].shape[1] < c.recent + c.chunk:
            return
        a, b = st.n_off, st.n_off + c.chunk
        firsts = [[0] * self.Hkv for _ in range(self.L)]
        rows = [None] * self.L
        for layer in range(self.L):
            # The chunk's rows: all an append of 16-bit KV reads (base=a).
            kc, vc = st.tail_k[layer][:, :c.chunk], st.tail_v[layer][:, :c.chunk]
            if st.host_k is not None:
                st.host_k[layer][:, a:b] = kc
                st.host_v[layer][:, a:b] = vc
            st.tail_k[layer] = st.tail_k[layer][:, c.chunk:].clone()
            st.tail_v[layer] = st.tail_v[layer][:, c.chunk:].clone()
            rows[layer] = [(_bits(kc[h]), _bits(vc[h])) for h in range(self.Hkv)]
            for h in range(self.Hkv):
                ix = st.ix[layer][h]
                kb, vb = rows[layer][h]
                old = ix.append(kb, iters=c.kmeans_iters)
                self.nodes.of[seq.req.rid].call("append", seq.req.rid, layer, h, ix,
                                                kb, vb, old, base=a)
                firsts[layer][h] = old
        st.n_off = b
        for layer in range(self.L):
            for h in range(self.Hkv):
                self._refresh(st, layer, h, *rows[layer][h], first=firsts[layer][h], base=a)

    def _pnm_items(self, seqs, q, layer):
        items, qs = [], []
        for i, s in seqs:
            st = s.pnm
            budget = max(self.cfg.min_select, math.ceil(self.cfg.select * st.n_off))
            for h in range(self.Hkv):
                qh = np.ascontiguousarray(q[i, h * self.G:(h + 1) * self.G].numpy())
                cent, sizes, far = st.meta[layer][h][:3]
                ids, _ = nelssa.select(qh, cent, sizes, budget, far=far)
                items.append((s.req.rid, h, ids))
                qs.append(qh)
        return items, np.stack(qs) if qs else None

    def _collect(self, pending, layer):
        """The PNM tier's (o, lse) of a step; ETIMEDOUT after timeout_ms.

        A step's Pending has no deadline of its own: a stopped nelssad
        would be waited for forever.
        """
        t0 = time.monotonic()
        deadline = t0 + self.cfg.timeout_ms / 1000
        try:
            while not pending.poll(100):
                if time.monotonic() >= deadline:
                    pending.cancel()
                    raise nelssa.Error(errno.ETIMEDOUT, "layer %d's step not answered in %d ms"
                                       % (layer, self.cfg.timeout_ms))
            return pending.result()
        finally:
            self.step_wait += time.monotonic() - t0

    def _pnm_merge(self, seqs, qs, layer, items, po, pl, out):
        """Merges each item's PNM state with its window and estimate; qs are
        the items' queries as _pnm_items() made them."""
        it = 0
        for i, s in seqs:
            st = s.pnm
            for h in range(self.Hkv):
                qh = qs[it]
                k = torch.cat([st.sink_k[layer][h], st.tail_k[layer][h]])
                v = torch.cat([st.sink_v[layer][h], st.tail_v[layer][h]])
                wo, wl = nelssa.window_attn(qh, _bits(k), _bits(v), sink=st.sink_k[0].shape[1],
                                            recent=st.tail_k[layer].shape[1])
                states_o, states_l = [po[it]], [pl[it]]
                cent, sizes, _, vsum, m2 = st.meta[layer][h]
                if vsum is not None:
                    rest = nelssa.unselected(items[it][2], sizes)
                    eo, el = nelssa.estimate_attn(qh, cent, vsum, sizes, rest, m2=m2)
                    states_o.append(eo)
                    states_l.append(el)
                o, _ = nelssa.final_merge(wo, wl, states_o, states_l)
                out[i, h * self.G:(h + 1) * self.G] = torch.from_numpy(o)
                it += 1

    def _full_kv(self, seq, layer):
        st = seq.pnm
        k = torch.cat([st.sink_k[layer], st.host_k[layer][:, :st.n_off], st.tail_k[layer]], 1)
        v = torch.cat([st.sink_v[layer], st.host_v[layer][:, :st.n_off], st.tail_v[layer]], 1)
        return k, v

    # --- the loop -----------------------------------------------------------

    def _now(self):
        return time.perf_counter() - self.t0 - self.overhead

    def _prefill_step(self, running):
        """One chunk of the oldest prompt in prefill; a finished one starts decoding.

        With prefill_elsewhere a request's first prefill (its clustering
        and offload included) is off the clock, as nelssa-sim models a
        decode node; a recompute after a preemption is on it, as there.
        """
        seq = self.prefilling[0]
        pf = seq.pf
        pf.setdefault("off_clock", self.cfg.prefill_elsewhere and seq.t_first is None)
        t0 = time.perf_counter()
        try:
            if "first" in pf:
                # Prefilled: its KV goes to the PNM tier, a layer a call.
                if not self._offload_next_layer(seq):
                    return
            else:
                toks = seq.tokens[pf["pos"]:pf["pos"] + self.cfg.prefill_chunk]
                logits, pf["ks"], pf["vs"] = self.m.prefill_chunk(toks, pf["ks"], pf["vs"])
                self.prefill_log.append((len(toks), pf["pos"], time.perf_counter() - t0))
                pf["pos"] += len(toks)
                if pf["pos"] < len(seq.tokens):
                    return
                pf["first"] = int(logits.argmax())
                if seq.where == "gpu":
                    self.pool.write_prompt(seq.req.rid, pf["ks"], pf["vs"])
                elif not self._offload_next_layer(seq):
                    return
        finally:
            if pf["off_clock"]:
                self.overhead += time.perf_counter() - t0
        # Placed: its first token counts from here (if nelssad failed before,
        # the request was still in prefill).
        self.prefilling.pop(0)
        seq.pf = None
        seq.tokens.append(pf["first"])
        t = self._now()
        if seq.t_first is None:
            seq.t_first = t
        seq.t_tokens.append(t)
        if seq.done:
            self._finish(seq)
        else:
            running.append(seq)

    def _route(self, seq):
        if self.router is not None and not self.nodes.can_hold(seq.req.final_len):
            # No node of the cluster could ever hold it (a session's capacity,
            # each node's cap, or no node at all): the GPU, or refused.
            if self.pool.blocks_for(seq.req.final_len) <= self.pool.blocks:
                return "gpu"
            seq.refused = ("its KV (%d tokens) fits neither the pool nor any NELSSA node" %
                           seq.req.final_len)
            return None
        if seq.gpu_now:
            return "gpu"
        if self.router is None:
            if not self.pool.blocks_for(seq.req.final_len) <= self.pool.blocks:
                seq.refused = "its KV (%d tokens) is larger than the pool" % seq.req.final_len
                return None
            return "gpu"
        free = len(self.pool.free) * self.cfg.block * self.m.kv_bytes_per_token
        r = self.router.route(len(seq.tokens), seq.req.final_len, gpu_free=free,
                              prev={None: -1, "gpu": nelssa.ROUTE_GPU,
                                    "pnm": nelssa.ROUTE_PNM}[seq.prev])
        if r == nelssa.ROUTE_REFUSE:
            seq.refused = self.router.why or "fits neither tier"
            return None
        if r == nelssa.ROUTE_QUEUE:
            return "queue"
        return "pnm" if r == nelssa.ROUTE_PNM else "gpu"

    def _alloc_pnm(self, seq, n):
        """Room on a node for seq; False (the router's count undone) when
        no node has room (its session, or every node of the cluster full):
        the request waits, as for any other cap.  NodeLost (its count
        undone too) when the node chosen is found gone."""
        try:
            slot = self.nodes.alloc(seq.req.rid, seq.req.final_len)
        except NodeLost:
            self.router.leave(n, seq.req.final_len)
            raise
        if slot is None:
            self.router.leave(n, seq.req.final_len)
            if seq.pnm_wait is None:
                seq.pnm_wait = self._now()
            return False
        seq.pnm_wait = None
        return True

    def _admit(self, seq, running):
        """Starts seq's prefill where the router says, its pool blocks
        reserved; False when it must wait."""
        where = self._route(seq)
        if where is None:
            self.refused.append(seq)
            return True
        if where == "queue":
            return False
        if where == "pnm" and len(seq.tokens) < self.cfg.sink + self.cfg.recent + 2 * self.cfg.block:
            # Too short to leave anything beyond the window on the PNM tier.
            self.router.leave(len(seq.tokens), seq.req.final_len)
            where = "gpu"
        need = self.pool.blocks_for(len(seq.tokens) + 1) if where == "gpu" else \
            self._window_blocks(seq.req.final_len)
        # The running GPU requests' next tokens come first: admitting into
        # their blocks would only preempt one of them.
        theirs = sum(self.pool.blocks_needed(s.req.rid) for s in running if s.where == "gpu")
        if need + theirs > len(self.pool.free):
            if where == "pnm":
                self.router.leave(len(seq.tokens), seq.req.final_len)
            return False
        if where == "pnm" and not self._alloc_pnm(seq, len(seq.tokens)):
            return False
        self.pool.reserve(seq.req.rid, need)
        seq.pf = dict(ks=None, vs=None, pos=0)
        seq.where = where
        self.admissions += 1
        seq.admitted = self.admissions
        return True

    def _preempt_for_step(self, running):
        """Frees blocks until every GPU request can take its next token."""
        while True:
            gpu = [s for s in running if s.where == "gpu"]
            need = sum(self.pool.blocks_needed(s.req.rid) for s in gpu)
            if need <= len(self.pool.free) or not gpu:
                return
            victim = max(gpu, key=lambda s: s.admitted)
            self._abort_move(victim)
            self.pool.release(victim.req.rid)
            victim.where, victim.prev = None, "gpu"
            victim.preemptions += 1
            self.preemptions += 1
            running.remove(victim)
            self.waiting.insert(0, victim)

    def _finish(self, seq):
        # Counted as finished before nelssad is told: if it is gone, the
        # request's tokens are still all there.
        self.pool.release(seq.req.rid)
        self.finished.append(seq)
        if seq.where == "pnm":
            self.router.leave(seq.kv_len, seq.req.final_len)
            self._free_indices(seq.pnm)
            # A lost node is noticed by the next call that needs it.
            self.nodes.free(seq.req.rid)
        self._abort_move(seq)

    def _lose_node(self, lost, running):
        """A node is gone (lost: NodeLost): its requests are prefilled again.

        Every request it held (running, in prefill or migrating there) goes
        back to the head of the queue, to be prefilled again from its prompt
        and the tokens it produced -- preemption by recompute -- and routed
        again: onto another node of the cluster, or the GPU.  When no node
        is left (a single nelssad, or every node of the cluster lost),
        routing stops: from then on the engine runs GPU-only, refusing what
        the pool cannot hold.
        """
        err, node = lost.err, lost.node
        self.lost = "%s: %s (errno %d)" % (node.name, err.strerror or err, err.errno)
        rids = set(self.nodes.lose(node))
        for s in [s for s in running if s.done and s.req.rid in rids]:
            # Its tokens are all there: finished, not recomputed.
            running.remove(s)
            self._finish(s)
        mine = [s for s in running + self.prefilling if s.req.rid in rids]
        back = [s for s in mine if s.where == "pnm"]
        moves = [s for s in mine if s.where != "pnm" and s.moving is not None]
        left = self.nodes.any_left()
        self.node_losses.append(dict(node=node.name, t=self._now(), mono=time.monotonic(),
                                     why=self.lost, requests=sorted(s.req.rid for s in back),
                                     moves_dropped=sorted(s.req.rid for s in moves)))
        self.log("node %s lost: %s; its %d requests are prefilled again, %d moves there "
                 "dropped%s" % (node.name, self.lost, len(back), len(moves),
                                "" if left else ", and the engine runs GPU-only from now on"))
        for s in moves:
            # Still on the GPU: the move is dropped, the request stays.
            self._free_indices(s.moving["st"])
            self.router.leave(s.moving["n"], s.req.final_len)
            s.moving = None
        for s in sorted(back, key=lambda s: s.admitted, reverse=True):
            (running if s in running else self.prefilling).remove(s)
            self.router.leave(s.kv_len if s.pf is None else len(s.tokens), s.req.final_len)
            if s.pnm is not None:
                self._free_indices(s.pnm)
            self.pool.release(s.req.rid)
            s.pnm, s.pf, s.where, s.prev, s.due = None, None, None, None, 0.0
            self.lost_requests += 1
            self.waiting.insert(0, s)
        if not left:
            for s in running:
                if s.moving is not None:
                    self._free_indices(s.moving["st"])
                    s.moving = None
            self.nodes.close()
            self.nodes = self.router = self.ctl = None

    @staticmethod
    def _free_indices(st):
        for row in st.ix:
            for ix in row:
                if ix is not None:
                    ix.free()

    def _step(self, running):
        t0 = self._now()
        gpu_kv = sum(s.kv_len for s in running if s.where == "gpu")
        pnm_kv = sum(s.kv_len for s in running if s.where == "pnm")
        n_pnm = sum(s.where == "pnm" for s in running)
        self.step_wait = 0.0
        self._step_inner(running)
        # What nelssa-sim's step model is fitted to (calibrate.py), and the
        # time the step waited for nelssad.
        self.step_log.append((self._now() - t0, len(running) - n_pnm, gpu_kv, n_pnm, pnm_kv,
                              self.step_wait))

    def _step_inner(self, running):
        pos = torch.tensor([s.kv_len for s in running])
        x = self.m.embed(torch.tensor([s.tokens[-1] for s in running]))
        gpu = [(i, s) for i, s in enumerate(running) if s.where == "gpu"]
        pnm = [(i, s) for i, s in enumerate(running) if s.where == "pnm"]
        for _, s in gpu:
            self.pool.extend(s.req.rid)
        try:
            self._layers(running, x, pos, gpu, pnm)
        except BaseException:
            # A step that did not finish leaves no token in the pool.
            for _, s in gpu:
                self.pool.truncate(s.req.rid, s.kv_len)
            raise

    def _layers(self, running, x, pos, gpu, pnm):
        c, B = self.cfg, len(running)
        check = c.accuracy_every and self.steps % c.accuracy_every == 0
        for layer in range(self.L):
            q, k, v = self.m.qkv(layer, x, pos)
            out = torch.empty(B, self.Hq, self.D)
            for i, s in pnm:
                st = s.pnm
                st.tail_k[layer] = torch.cat([st.tail_k[layer], k[i][:, None]], 1)
                st.tail_v[layer] = torch.cat([st.tail_v[layer], v[i][:, None]], 1)
            # The split batch: each session's share sent before the GPU's attention.
            sent = []
            for slot, group in self._by_session(pnm):
                items, qs = self._pnm_items(group, q, layer)
                sent.append((slot, group, items, qs,
                             slot.call("step_send", layer, items, qs)))
            for i, s in gpu:
                self.pool.put(s.req.rid, layer, s.kv_len, k[i], v[i])
                kk, vv = self.pool.read(s.req.rid, layer)
                out[i] = dense_attn(q[i], kk, vv)[0]
            for j, (slot, group, items, qs, pending) in enumerate(sent):
                try:
                    po, pl = self._collect(pending, layer)
                except nelssa.Error as e:
                    for rest in sent[j + 1:]:
                        rest[4].cancel()    # the other sessions' replies are not waited for
                    if e.errno in LOST_ERRNOS:
                        raise NodeLost(slot.node, e) from e
                    raise
                self._pnm_merge(group, qs, layer, items, po, pl, out)
            if pnm and check:
                t = time.perf_counter()
                for i, s in pnm:
                    kk, vv = self._full_kv(s, layer)
                    od = dense_attn(q[i], kk, vv)[0].view(self.Hkv, -1)
                    err = (out[i].view(self.Hkv, -1) - od).norm(dim=1) / od.norm(dim=1)
                    for h, e in enumerate(err.tolist()):
                        self.errors[layer][h].append(e)
                self.overhead += time.perf_counter() - t
            x = self.m.finish(layer, x, out.view(B, -1))
        nxt = self.m.logits(x).argmax(-1).tolist()
        t = self._now()
        for s, tok in zip(running, nxt):
            s.tokens.append(tok)
            s.t_tokens.append(t)
            if s.where == "pnm":
                self.router.grow(1, s.req.final_len)
        self.steps += 1

    def _by_session(self, pnm):
        """pnm's (index, seq) pairs grouped by the session holding them (a
        step is a session's), in the order each first appears."""
        groups = {}
        for i, s in pnm:
            slot = self.nodes.of[s.req.rid]
            groups.setdefault(id(slot), (slot, []))[1].append((i, s))
        return list(groups.values())

    def _pace(self, stepped):
        """Spaces the tokens of requests only the PNM tier can hold.

        The policy (nelssa_pnm_step_of(), Documentation/policy.rst) lets
        such a request -- its KV at its end is over the GPU's pool -- take
        at most a set share of the GPU's time for its centroids and window
        and of the devices' beside the others: a token every
        Router.pnm_step_of(final_len, this GPU step) seconds, the GPU step
        being this step's time less its waits for nelssad.  It joins the
        first step that would end at or after that time.  Requests the
        GPU could also hold are not paced: their attention is in every step.
        """
        if self.router is None:
            return
        # The GPU's step: this one less its waits for nelssad.
        t_gpu = self.step_log[-1][0] - self.step_log[-1][5]
        now = self._now()
        for s in stepped:
            if s.where == "pnm" and not self.router.fits(s.req.final_len) & nelssa.FITS_GPU:
                s.due = now + self.router.pnm_step_of(s.req.final_len, t_gpu)
                s.dues.append(s.due)
                self.paced += 1

    def _maintain(self, running):
        for s in running:
            if s.where == "pnm" and not s.done:
                self._append_chunk(s)

    # --- migration ----------------------------------------------------------

    def _abort_move(self, seq):
        mv = seq.moving
        if mv is None:
            return
        seq.moving = None
        self._free_indices(mv["st"])
        if self.nodes is not None:
            self.router.leave(mv["n"], seq.req.final_len)
            self.nodes.free(seq.req.rid)

    def _migrate(self, running):
        if not (self.cfg.migrate and self.router is not None):
            return
        moving = [s for s in running if s.moving is not None]
        for s in moving:
            self._move_one_layer(s)
        if moving or self.pool.usage() < self.cfg.high_water:
            return
        gpu = [s for s in running if s.where == "gpu" and not s.done]
        i = self.router.pick_migration([s.kv_len for s in gpu],
                                       [s.req.final_len for s in gpu],
                                       self.pool.usage(), self.cfg.high_water)
        if i < 0:
            return
        s = gpu[i]
        if self.router.route(s.kv_len, s.req.final_len) != nelssa.ROUTE_PNM:
            return
        n = s.kv_len
        if n - self.cfg.recent <= self.cfg.sink + 2 * self.cfg.block:
            self.router.leave(n, s.req.final_len)
            return
        if not self._alloc_pnm(s, n):
            return
        s.moving = dict(n=n, layer=0, st=PnmState(self.L, self.Hkv, self.D, s.req.final_len,
                                                   keep=self.cfg.accuracy_every > 0))
        self.log("migrating request %d (%d tokens) to NELSSA" % (s.req.rid, n))
        self._move_one_layer(s)

    def _move_one_layer(self, s):
        mv = s.moving
        layer, n, st = mv["layer"], mv["n"], mv["st"]
        k, v = self.pool.read(s.req.rid, layer)
        self._offload_layer(s, st, layer, k[:, :n], v[:, :n], self._pnm_split(n))
        mv["layer"] += 1
        if mv["layer"] < self.L:
            return
        keep = self._pnm_split(n)
        for layer in range(self.L):
            k, v = self.pool.read(s.req.rid, layer)
            st.tail_k[layer], st.tail_v[layer] = k[:, keep:].clone(), v[:, keep:].clone()
        self.pool.release(s.req.rid)
        # Admitted at n tokens; it decoded on the GPU while it moved.
        self.router.grow(s.kv_len - n, s.req.final_len)
        need = self._window_blocks(s.req.final_len)
        self.pool.reserve(s.req.rid, min(need, len(self.pool.free)))
        st.reserved = len(self.pool.reserved.get(s.req.rid, []))
        s.pnm, s.moving, s.where, s.migrated = st, None, "pnm", True
        self.migrations += 1

    # --- driver -------------------------------------------------------------

    def run(self, requests, progress=None):
        """Serves requests (workload.Request, arrivals in seconds from now)."""
        pending = sorted((Seq(r, list(r.prompt)) for r in requests),
                         key=lambda s: (s.req.arrival, s.req.rid))
        self.waiting, self.prefilling, running = [], [], []
        self.running = running          # for observers (progress callbacks)
        self.finished, self.refused, self.timeline = [], [], []
        # Relative error of PNM requests' attention vs dense, per layer and KV head.
        self.errors = [[[] for _ in range(self.Hkv)] for _ in range(self.L)]
        self.steps = self.preemptions = self.migrations = self.admissions = 0
        self.t0, self.overhead = time.perf_counter(), 0.0
        self.last_step, self.lost, self.lost_requests = 0.0, None, 0
        self.idle_since = None          # since when nothing runs while the head waits for room
        self.step_log = []
        self.prefill_log = []           # (chunk tokens, tokens before it, seconds)
        self.paced = 0
        while pending or self.waiting or self.prefilling or running:
            now = self._now()
            while pending and pending[0].req.arrival <= now:
                self.waiting.append(pending.pop(0))
            try:
                if not self._iteration(running, pending):
                    continue
            except NodeLost as e:
                self._lose_node(e, running)
                continue
            self.timeline.append(dict(
                t=self.last_step, batch=len(running), pool=self.pool.usage(),
                pnm=sum(s.where == "pnm" for s in running), waiting=len(self.waiting),
                threshold=self.router.t_input if self.router else None))
            if progress:
                progress(self)
        self.wall = self._now()
        return self.finished

    def _iteration(self, running, pending):
        """Admission, a prefill chunk and a decode step; False if no step ran."""
        for s in [s for s in running if s.done]:
            running.remove(s)
            self._finish(s)
        while self.waiting and len(running) + len(self.prefilling) < self.cfg.max_batch:
            if not self._admit(self.waiting[0], running):
                break
            s = self.waiting.pop(0)
            if s.refused is None:
                self.prefilling.append(s)
        if self.prefilling:
            self._prefill_step(running)
        # A request the prefill node prepared arrives with its KV (as in
        # nelssa-sim): all first prefills done, offload included, before
        # the step.
        while self.cfg.prefill_elsewhere and self.prefilling and \
                self.prefilling[0].t_first is None:
            self._prefill_step(running)
        if not running:
            if self.prefilling:
                return False
            if pending and not self.waiting:
                time.sleep(max(0.0, pending[0].req.arrival - self._now()))
            elif self.waiting and self.waiting[0].pnm_wait is not None:
                self._wait_for_room(self.waiting[0])
            elif self.waiting:
                raise RuntimeError("request %d cannot be admitted with nothing running "
                                   "(pool %d blocks)" % (self.waiting[0].req.rid,
                                                         self.pool.blocks))
            return False
        self._preempt_for_step(running)
        if not running:
            return False
        now = self._now()
        # A paced request joins the step that would end after its due time
        # (as the policy's model has it), the last step's time the estimate.
        est = self.step_log[-1][0] if self.step_log else 0.0
        active = [s for s in running if s.due - est <= now]
        if not active:
            # Only paced requests, none due: the GPU idles until the first is
            # -- unless a prompt is in prefill, or a request arrives first.
            if not self.prefilling:
                wake = min(s.due for s in running) - est
                if pending:
                    wake = min(wake, pending[0].req.arrival)
                time.sleep(max(0.0, wake - now))
            return False
        for s in active:
            if s.due:
                s.joins.append((now, s.due, est))
        self.idle_since = None          # something runs: no one waits idle
        self._step(active)
        self._pace(active)
        self._maintain(running)
        self._migrate(running)
        if self.ctl is not None:
            self._adapt(self._now() - self.last_step)
        self.last_step = self._now()
        return True

    def _wait_for_room(self, seq):
        """Nothing runs and the head of the queue waits for room on NELSSA
        nodes that other clients hold: the idle GPU takes it when its pool
        can; else it waits, up to timeout_ms of nothing running, and is
        then refused."""
        if self.pool.blocks_for(seq.req.final_len) <= self.pool.blocks:
            seq.gpu_now = True
            return
        if self.idle_since is None:
            self.idle_since = self._now()
        if self._now() - self.idle_since > self.cfg.timeout_ms / 1000:
            self.waiting.pop(0)
            seq.refused = "no NELSSA node had room for %d tokens within %d ms" % (
                seq.req.final_len, self.cfg.timeout_ms)
            self.refused.append(seq)
            return
        time.sleep(0.05)

    def _adapt(self, dt):
        """Feeds the threshold controller each tier's pressure over dt seconds.

        GPU: how far the pool is past 75 % full (1 when full), plus 1 while
        requests wait; PNM: how far the tier's modelled step time
        (Router.pnm_step_time) is past 75 % of its deadline.
        """
        if dt <= 0:
            return
        u_gpu = max(0.0, (self.pool.usage() - 0.75) / 0.25) + (1.0 if self.waiting else 0.0)
        t_pnm = self.router.pnm_step_time(self.router.pnm_tokens, self.router.pnm_requests)
        u_pnm = max(0.0, (t_pnm / self.router.cap_step - 0.75) / 0.25) \
            if self.router.cap_step > 0 else 0.0
        self.router.t_input = self.ctl.update(u_gpu, u_pnm, dt)
