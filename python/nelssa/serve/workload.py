# SPDX-License-Identifier: MIT
"""Workloads: requests from the Mooncake traces, or a fixed mixed set.

A Mooncake trace (``shared/data/mooncake/*.jsonl``) is one JSON object a
line with ``input_length`` and ``output_length`` in tokens.  Real lengths
(median input 6,900 tokens, tail past 100,000 in the conversation trace)
would keep a 2-core machine busy for hours, so both lengths are divided by
``scale`` (default 16) and clamped to [``min_len``, ``max_len``].  The
trace's timestamps are not used: arrivals are a Poisson process at
``rate`` requests/s (``rate`` 0: all at time 0).  Prompts are random token
ids: the model's weights decide what attention looks like, not the text.
"""

import dataclasses
import json
import random


@dataclasses.dataclass
class Request:
    rid: int
    prompt: list
    max_new: int
    arrival: float = 0.0

    @property
    def final_len(self):
        return len(self.prompt) + self.max_new


def _prompt(rng, vocab, n):
    return [rng.randrange(vocab) for _ in range(n)]


def _arrivals(rng, n, rate):
    t, out = 0.0, []
    for _ in range(n):
        if rate > 0:
            t += rng.expovariate(rate)
        out.append(t)
    return out


def from_trace(path, *, n, vocab, scale=16.0, rate=0.0, seed=0, min_len=16, max_len=16384,
               out_min=4, out_max=64, skip=0):
    """n requests from lines skip.. of a Mooncake trace, lengths / scale."""
    if scale <= 0 or n <= 0:
        raise ValueError("trace workload: n and scale must be > 0")
    rng = random.Random(seed)
    reqs = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if lineno <= skip:
                continue
            if len(reqs) == n:
                break
            try:
                d = json.loads(line)
                ilen, olen = int(d["input_length"]), int(d["output_length"])
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError("%s:%d: not a Mooncake trace line (%s)" % (path, lineno, e)) \
                    from None
            plen = min(max_len, max(min_len, round(ilen / scale)))
            new = min(out_max, max(out_min, round(olen / scale)))
            reqs.append(Request(len(reqs), _prompt(rng, vocab, plen), new))
    if len(reqs) < n:
        raise ValueError("%s: %d requests asked for, %d lines after the first %d"
                         % (path, n, len(reqs), skip))
    for r, t in zip(reqs, _arrivals(rng, n, rate)):
        r.arrival = t
    return reqs


def mixed(*, vocab, short=24, long=4, short_len=(64, 512), long_len=(3072, 6144),
          new=(8, 24), rate=0.0, seed=0):
    """A fixed mixed set: short requests with a few long ones among them.

    The long ones are spread evenly through the order (every
    (short+long)/long-th request), each length uniform in its range.
    """
    rng = random.Random(seed)
    n = short + long
    every = n // long if long else n + 1
    reqs = []
    for i in range(n):
        is_long = long and i % every == every // 2 and sum(
            1 for r in reqs if len(r.prompt) >= long_len[0]) < long
        lo, hi = long_len if is_long else short_len
        reqs.append(Request(i, _prompt(rng, vocab, rng.randint(lo, hi)), rng.randint(*new)))
    for r, t in zip(reqs, _arrivals(rng, n, rate)):
        r.arrival = t
    return reqs
