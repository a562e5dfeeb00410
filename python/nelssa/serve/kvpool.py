# SPDX-License-Identifier: MIT
"""A paged KV pool with a fixed budget: the "GPU memory" of the engine.

As in vLLM, KV lives in fixed-size blocks of ``block`` tokens (all layers
and KV heads of those tokens) and each request owns a list of blocks, its
block table; a request grows a block at a time and frees its blocks when
it ends, is preempted or migrates.  Blocks may also be held without data
(``reserve``): a NELSSA request's window and centroids are charged to the
pool that way, so the budget covers everything the GPU keeps.
"""

import torch


class PoolFull(Exception):
    """No free block: the caller preempts or waits."""


class KVPool:
    def __init__(self, blocks, block, layers, kv_heads, head_dim):
        if blocks <= 0 or block <= 0:
            raise ValueError("KV pool: blocks (%d) and block size (%d) must be > 0"
                             % (blocks, block))
        self.block, self.blocks = block, blocks
        shape = (blocks, layers, kv_heads, block, head_dim)
        self.k = torch.zeros(shape, dtype=torch.bfloat16)
        self.v = torch.zeros(shape, dtype=torch.bfloat16)
        self.free = list(range(blocks - 1, -1, -1))
        self.tables = {}        # request -> [block ids]
        self.lengths = {}       # request -> tokens stored
        self.reserved = {}      # request -> blocks held without data

    @property
    def used(self):
        return self.blocks - len(self.free)

    def usage(self):
        return self.used / self.blocks

    def blocks_for(self, tokens):
        return -(-tokens // self.block)

    def can_fit(self, tokens):
        return self.blocks_for(tokens) <= len(self.free)

    def _take(self, n):
        if n > len(self.free):
            raise PoolFull("%d blocks wanted, %d free" % (n, len(self.free)))
        return [self.free.pop() for _ in range(n)]

    def extend(self, req, n=1):
        """Makes room for n tokens more of req (raises PoolFull, nothing taken)."""
        table = self.tables.setdefault(req, [])
        have = self.lengths.get(req, 0)
        table += self._take(max(0, self.blocks_for(have + n) - len(table)))
        self.lengths[req] = have + n

    def blocks_needed(self, req, n=1):
        """Blocks extend(req, n) would take."""
        have = self.lengths.get(req, 0)
        return max(0, self.blocks_for(have + n) - len(self.tables.get(req, [])))

    def truncate(self, req, n):
        """Forgets req's tokens from n on (its blocks stay with it)."""
        self.lengths[req] = min(self.lengths.get(req, 0), n)

    def put(self, req, layer, pos, k, v):
        """One token's K and V of one layer, (Hkv, D) each, at position pos."""
        b = self.tables[req][pos // self.block]
        self.k[b, layer, :, pos % self.block] = k
        self.v[b, layer, :, pos % self.block] = v

    def write_prompt(self, req, ks, vs):
        """A prompt's KV: ks, vs lists per layer of (Hkv, n, D)."""
        k = torch.stack(ks)
        v = torch.stack(vs)
        n = k.shape[2]
        if req in self.tables:
            raise ValueError("request %r already has KV in the pool" % (req,))
        # Blocks reserved for the prompt at admission are used first.
        table = self.reserved.pop(req, [])
        table += self._take(max(0, self.blocks_for(n) - len(table)))
        self.tables[req], self.lengths[req] = table, n
        used = self.blocks_for(n)
        pad = used * self.block - n
        if pad:
            z = torch.zeros(k.shape[:2] + (pad, k.shape[3]), dtype=k.dtype)
            k, v = torch.cat([k, z], 2), torch.cat([v, z], 2)
        L, H, _, D = k.shape
        kb = k.view(L, H, used, self.block, D).permute(2, 0, 1, 3, 4)
        vb = v.view(L, H, used, self.block, D).permute(2, 0, 1, 3, 4)
        idx = torch.as_tensor(table[:used])
        self.k[idx] = kb
        self.v[idx] = vb

    def read(self, req, layer):
        """req's K and V of one layer, (Hkv, n, D) bf16 (a gathered copy)."""
        table, n = self.tables[req], self.lengths[req]
        idx = torch.as_tensor(table)
        k = self.k[idx, layer]          # (blocks, Hkv, block, D)
        v = self.v[idx, layer]
        H, D = k.shape[1], k.shape[3]
        k = k.permute(1, 0, 2, 3).reshape(H, -1, D)[:, :n]
        v = v.permute(1, 0, 2, 3).reshape(H, -1, D)[:, :n]
        return k, v

    def read_all(self, req):
        """req's whole KV: lists per layer of (Hkv, n, D)."""
        pairs = [self.read(req, layer) for layer in range(self.k.shape[1])]
        return [p[0] for p in pairs], [p[1] for p in pairs]

    def reserve(self, req, blocks):
        """Holds blocks more for req without data (raises PoolFull)."""
        self.reserved.setdefault(req, []).extend(self._take(blocks))

    def release(self, req):
        """Frees everything req holds; returns how many blocks."""
        blocks = self.tables.pop(req, []) + self.reserved.pop(req, [])
        self.lengths.pop(req, None)
        self.free.extend(reversed(blocks))
        return len(blocks)
