# SPDX-License-Identifier: MIT
"""Model shapes the engine runs: a Llama-3-architecture decoder."""

import dataclasses
import json


@dataclasses.dataclass
class ModelConfig:
    """A Llama-3 decoder's shape (the fields of a Hugging Face config.json).

    ``rope_scaling`` is None or Llama 3.1's dict (``factor``,
    ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings``).  ``retrieval_heads`` applies to
    random weights only: how many KV heads of each layer are built to
    retrieve tokens equal to the current one (``model.py`` says how).
    """

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 8
    num_key_value_heads: int = 2
    head_dim: int = 64
    rope_theta: float = 500000.0
    rope_scaling: dict = None
    rms_norm_eps: float = 1e-5
    retrieval_heads: int = 1

    @property
    def group(self):
        return self.num_attention_heads // self.num_key_value_heads

    def check(self):
        """Raises ValueError on a shape the engine cannot run."""
        pos = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim")
        for f in pos:
            if not isinstance(getattr(self, f), int) or getattr(self, f) <= 0:
                raise ValueError("model config: %s must be a positive integer, not %r"
                                 % (f, getattr(self, f)))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("model config: num_attention_heads (%d) must be a multiple of "
                             "num_key_value_heads (%d)"
                             % (self.num_attention_heads, self.num_key_value_heads))
        if self.head_dim % 2:
            raise ValueError("model config: head_dim must be even (RoPE pairs), not %d"
                             % self.head_dim)
        if not 0 <= self.retrieval_heads <= self.num_key_value_heads:
            raise ValueError("model config: retrieval_heads must be in 0..%d"
                             % self.num_key_value_heads)
        for f in ("rope_theta", "rms_norm_eps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError("model config: %s must be a number > 0, not %r" % (f, v))
        rs = self.rope_scaling
        if rs is not None:
            keys = ("factor", "low_freq_factor", "high_freq_factor",
                    "original_max_position_embeddings")
            if not isinstance(rs, dict) or any(
                    not isinstance(rs.get(k), (int, float)) or not rs[k] > 0 for k in keys):
                raise ValueError("model config: rope_scaling must be null or Llama 3.1's "
                                 "{%s}, all > 0, not %r" % (", ".join(keys), rs))
            if not rs["high_freq_factor"] > rs["low_freq_factor"]:
                raise ValueError("model config: rope_scaling's high_freq_factor must exceed "
                                 "low_freq_factor")
        return self

    @classmethod
    def from_json(cls, path):
        """Reads a config.json; keys the engine does not use are ignored."""
        with open(path) as f:
            d = json.load(f)
        if not isinstance(d, dict):
            raise ValueError("%s: a model config is a JSON object" % path)
        names = {f.name for f in dataclasses.fields(cls)}
        cfg = cls(**{k: v for k, v in d.items() if k in names})
        if "head_dim" not in d and isinstance(cfg.hidden_size, int) and \
                isinstance(cfg.num_attention_heads, int) and cfg.num_attention_heads > 0:
            cfg.head_dim = cfg.hidden_size // cfg.num_attention_heads
        try:
            return cfg.check()
        except ValueError as e:
            raise ValueError("%s: %s" % (path, e)) from None


# Llama-3-8B's per-layer shape (32 layers in the real model; choose fewer).
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 head_dim=128, rope_theta=500000.0,
                 rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                   original_max_position_embeddings=8192),
                 rms_norm_eps=1e-5, retrieval_heads=2)

PRESETS = {
    # Runs on 2 cores: a few dozen requests in well under a minute.
    "tiny": {},
    "llama3-8b": LLAMA3_8B,
}


def preset(name, layers=None):
    """A preset's config, optionally with fewer layers."""
    if name not in PRESETS:
        raise ValueError("unknown model preset %r (known: %s)" % (name, ", ".join(PRESETS)))
    cfg = ModelConfig(**PRESETS[name])
    if layers is not None:
        cfg.num_hidden_layers = layers
    return cfg.check()
