# SPDX-License-Identifier: MIT
"""A Llama-3-architecture decoder in PyTorch: RMSNorm, RoPE (with Llama 3.1
frequency scaling), grouped-query attention, SwiGLU.

The engine calls the pieces of a layer separately -- QKV, attention,
output projection and MLP -- because it batches QKV and MLP for every
request while it splits attention between dense attention on the "GPU"
and sparse attention on NELSSA.  Compute is float32; K and V are kept as
bf16 (the KV cache's type here and on the PNM devices) and every
attention reads the bf16 values, so the dense and the PNM paths attend
to exactly the same keys.

Weights come from a safetensors file with Hugging Face's Llama names, or
are random from a seed.  Random weights give near-uniform attention, over
which any sparse selection is as good as any other, so the random model
is given structure on purpose (``retrieval_heads`` KV heads a layer):

* embeddings have unit variance and the output projections of attention
  and MLP are small (std 0.02 / sqrt(in)), so every layer's normalised
  input stays close to the current token's embedding;
* a retrieval head's Q and K projections are the same random projection
  P (hidden -> r = min(16, D/2) dims) scaled by ``RETRIEVAL_GAIN``, written
  into the r head dimensions RoPE rotates slowest (frequency pairs
  D/2-r/2..D/2-1: for D = 64 at theta 500,000 under 0.3 rad over 5,000
  positions), zero elsewhere; so the head's logit for an earlier token is
  the similarity of the two tokens' embeddings in those r dimensions,
  whatever the distance.  An earlier occurrence of the current token
  scores r g^2 / sqrt(D), another token about sqrt(r) g^2 / sqrt(D) (g the
  gain): the head attends to a few tokens, the earlier occurrences of the
  current one and the nearest look-alikes, a sparse, needle-like pattern
  (sharper with larger r);
* every other weight is Gaussian, std 1/sqrt(in); norm weights are 1.

Nothing else about the random model means anything; accuracy figures
from it describe the attention, not a language model.
"""

import math

import torch

from . import safetensors

RETRIEVAL_GAIN = 4.0


def _names(i):
    p = "model.layers.%d." % i
    return dict(attn_norm=p + "input_layernorm.weight",
                wq=p + "self_attn.q_proj.weight", wk=p + "self_attn.k_proj.weight",
                wv=p + "self_attn.v_proj.weight", wo=p + "self_attn.o_proj.weight",
                mlp_norm=p + "post_attention_layernorm.weight",
                w_gate=p + "mlp.gate_proj.weight", w_up=p + "mlp.up_proj.weight",
                w_down=p + "mlp.down_proj.weight")


def _shapes(cfg):
    H, D, F = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    qd, kd = cfg.num_attention_heads * D, cfg.num_key_value_heads * D
    s = {"model.embed_tokens.weight": (cfg.vocab_size, H), "model.norm.weight": (H,),
         "lm_head.weight": (cfg.vocab_size, H)}
    for i in range(cfg.num_hidden_layers):
        n = _names(i)
        s.update({n["attn_norm"]: (H,), n["wq"]: (qd, H), n["wk"]: (kd, H), n["wv"]: (kd, H),
                  n["wo"]: (H, qd), n["mlp_norm"]: (H,), n["w_gate"]: (F, H),
                  n["w_up"]: (F, H), n["w_down"]: (H, F)})
    return s


def inv_freq(cfg):
    """RoPE inverse frequencies, with Llama 3.1's scaling when configured."""
    D = cfg.head_dim
    f = 1.0 / (cfg.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    rs = cfg.rope_scaling
    if not rs:
        return f
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    smooth = (old / wavelen - lo) / (hi - lo)
    mid = (1 - smooth) * f / factor + smooth * f
    return torch.where(wavelen > old / lo, f / factor,
                       torch.where(wavelen < old / hi, f, mid))


def random_weights(cfg, seed):
    """Deterministic random weights with retrieval heads (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, shape in _shapes(cfg).items():
        if len(shape) == 1:
            w[name] = torch.ones(shape)
            continue
        std = 1.0 if name == "model.embed_tokens.weight" else 1.0 / math.sqrt(shape[1])
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            std *= 0.02
        w[name] = torch.randn(shape, generator=g) * std
    D, H, grp = cfg.head_dim, cfg.hidden_size, cfg.group
    r = min(16, D // 2)
    half = r // 2
    dims = list(range(D // 2 - half, D // 2)) + list(range(D - half, D))
    for i in range(cfg.num_hidden_layers):
        n = _names(i)
        for h in range(cfg.retrieval_heads):
            P = torch.randn((r, H), generator=g) / math.sqrt(H) * RETRIEVAL_GAIN
            w[n["wk"]][h * D:(h + 1) * D] = 0
            w[n["wk"]][[h * D + d for d in dims]] = P
            for qh in range(h * grp, (h + 1) * grp):
                w[n["wq"]][qh * D:(qh + 1) * D] = 0
                w[n["wq"]][[qh * D + d for d in dims]] = P
    return w


def bf16_round(x):
    """float32 -> the nearest bf16 (round to nearest even), as bfloat16."""
    return x.to(torch.bfloat16)


class Model:
    """The decoder's weights and the pieces of its forward pass."""

    def __init__(self, cfg, weights):
        self.cfg = cfg.check()
        want = _shapes(cfg)
        missing = [n for n in want if n not in weights]
        if missing:
            raise ValueError("weights lack %d tensors the config needs, e.g. %s"
                             % (len(missing), missing[0]))
        for n, s in want.items():
            if tuple(weights[n].shape) != s:
                raise ValueError("weight %s has shape %s, the config needs %s"
                                 % (n, tuple(weights[n].shape), s))
        self.w = {n: weights[n].to(torch.float32).contiguous() for n in want}
        self.layers = [{k: self.w[v] for k, v in _names(i).items()}
                       for i in range(cfg.num_hidden_layers)]
        self.inv_freq = inv_freq(cfg)

    #: KV heads a layer built to retrieve (random weights only; 0 for loaded ones).
    retrieval_heads = 0

    @classmethod
    def random(cls, cfg, seed=0):
        m = cls(cfg, random_weights(cfg, seed))
        m.retrieval_heads = cfg.retrieval_heads
        return m

    @classmethod
    def load(cls, cfg, path):
        return cls(cfg, safetensors.load(path))

    @property
    def kv_bytes_per_token(self):
        c = self.cfg
        return 2 * 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim

    @property
    def weight_bytes(self):
        return 2 * sum(t.numel() for t in self.w.values())

    def _norm(self, x, w):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        return x * w

    def _rope(self, x, pos):
        ang = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1).to(torch.float32)[:, None, :]
        sin = torch.cat([ang.sin(), ang.sin()], -1).to(torch.float32)[:, None, :]
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def embed(self, tokens):
        return self.w["model.embed_tokens.weight"][tokens]

    def qkv(self, layer, x, pos):
        """q (n, Hq, D) float32; k, v (n, Hkv, D) bf16; k and q after RoPE."""
        c, L = self.cfg, self.layers[layer]
        h = self._norm(x, L["attn_norm"])
        n = x.shape[0]
        q = (h @ L["wq"].T).view(n, c.num_attention_heads, c.head_dim)
        k = (h @ L["wk"].T).view(n, c.num_key_value_heads, c.head_dim)
        v = (h @ L["wv"].T).view(n, c.num_key_value_heads, c.head_dim)
        return self._rope(q, pos), bf16_round(self._rope(k, pos)), bf16_round(v)

    def finish(self, layer, x, attn):
        """Residual add of the attention output (n, Hq*D), then the MLP."""
        L = self.layers[layer]
        x = x + attn @ L["wo"].T
        h = self._norm(x, L["mlp_norm"])
        h = torch.nn.functional.silu(h @ L["w_gate"].T) * (h @ L["w_up"].T)
        return x + h @ L["w_down"].T

    def logits(self, x):
        return self._norm(x, self.w["model.norm.weight"]) @ self.w["lm_head.weight"].T

    def prefill_chunk(self, tokens, ks=None, vs=None):
        """Causal forward over the next chunk of a prompt.

        ks, vs: per layer the bf16 K and V (Hkv, start, D) of the tokens
        before the chunk (None: the chunk starts the prompt).  Returns
        (logits of the chunk's last token, ks, vs) with the chunk's K and V
        appended.  An engine interleaves chunks with decode steps (chunked
        prefill) so that a long prompt does not stall the running batch;
        prefill() is the same computation over a whole prompt.
        """
        c = self.cfg
        start = 0 if ks is None else ks[0].shape[1]
        n = len(tokens)
        pos = torch.arange(start, start + n)
        x = self.embed(torch.as_tensor(tokens))
        out_k, out_v = [], []
        mask = torch.arange(start + n)[None, :] > pos[:, None]
        for layer in range(c.num_hidden_layers):
            q, k, v = self.qkv(layer, x, pos)
            kt, vt = k.transpose(0, 1), v.transpose(0, 1)
            if ks is not None:
                kt, vt = torch.cat([ks[layer], kt], 1), torch.cat([vs[layer], vt], 1)
            kt, vt = kt.contiguous(), vt.contiguous()
            out_k.append(kt)
            out_v.append(vt)
            qc = q.view(n, c.num_key_value_heads, c.group, c.head_dim)
            sc = torch.einsum("tkgd,knd->kgtn", qc, kt.float()) / math.sqrt(c.head_dim)
            sc.masked_fill_(mask, float("-inf"))
            o = torch.einsum("kgtn,knd->tkgd", sc.softmax(-1), vt.float())
            x = self.finish(layer, x, o.reshape(n, -1))
        return self.logits(x[-1:])[0], out_k, out_v

    def prefill(self, tokens, chunk=512):
        """Causal forward over a whole prompt, chunk tokens at a time.

        Returns (logits of the last token, ks, vs): per layer K and V as
        bf16 (Hkv, n, D).
        """
        ks = vs = logits = None
        for s in range(0, len(tokens), chunk):
            logits, ks, vs = self.prefill_chunk(tokens[s:s + chunk], ks, vs)
        return logits, ks, vs


def dense_attn(q, k, v):
    """One request's decode attention: q (Hq, D) float32 over k, v (Hkv, n, D).

    Returns (o (Hq, D), lse (Hq,)) in float32, accumulated in float32.
    """
    hkv, n, d = k.shape
    qg = q.view(hkv, -1, d)
    s = torch.einsum("kgd,knd->kgn", qg, k.float()) / math.sqrt(d)
    lse = torch.logsumexp(s, -1)
    o = torch.einsum("kgn,knd->kgd", torch.exp(s - lse[..., None]), v.float())
    return o.reshape(-1, d), lse.reshape(-1)
