# SPDX-License-Identifier: MIT
"""Reading and writing the safetensors format.

Debian bookworm packages no safetensors library for Python (nor a C one),
so the engine reads the format itself: an 8-byte little-endian header
length, a JSON header naming each tensor's dtype, shape and byte range,
then the raw little-endian data.  Only what Llama checkpoints use is
accepted (F32, F16, BF16); anything else, a range outside the file,
overlapping ranges or a size that disagrees with the shape is refused with
a ValueError naming the tensor.
"""

import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}
_NAMES = {v[0]: k for k, v in _DTYPES.items()}
_MAX_HEADER = 100 << 20


def load(path):
    """Every tensor of the file, as a dict name -> CPU torch.Tensor."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("%s: not a safetensors file (%d bytes)" % (path, len(raw)))
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise ValueError("%s: header length %d runs past the file (%d bytes)"
                         % (path, n, len(raw)))
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError("%s: header is not JSON: %s" % (path, e)) from None
    if not isinstance(header, dict):
        raise ValueError("%s: header is not a JSON object" % path)
    data = memoryview(raw)[8 + n:]
    out, spans = {}, []
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dt, size = _DTYPES[meta["dtype"]]
            shape = [int(s) for s in meta["shape"]]
            b, e = (int(x) for x in meta["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError("%s: tensor %r: needs dtype (F32, F16 or BF16), shape and "
                             "data_offsets, got %r" % (path, name, meta)) from None
        count = int(np.prod(shape)) if shape else 1
        if min(shape, default=0) < 0 or not 0 <= b <= e <= len(data) or e - b != count * size:
            raise ValueError("%s: tensor %r: bytes [%d, %d) do not hold shape %s of %s "
                             "(data is %d bytes)" % (path, name, b, e, shape, meta["dtype"],
                                                     len(data)))
        spans.append((b, e, name))
        words = np.frombuffer(data[b:e], dtype={4: "<u4", 2: "<u2"}[size]).copy()
        t = torch.from_numpy(words.view({4: np.int32, 2: np.int16}[size])).view(dt)
        out[name] = t.reshape(shape)
    spans.sort()
    for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise ValueError("%s: tensors %r and %r overlap" % (path, n0, n1))
    return out


def save(path, tensors, metadata=None):
    """Writes a dict name -> tensor (F32, F16 or BF16) as a safetensors file."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise ValueError("tensor %r: dtype %s cannot be saved (F32, F16, BF16)"
                             % (name, t.dtype))
        size = _DTYPES[_NAMES[t.dtype]][1]
        words = t.view({4: torch.int32, 2: torch.int16}[size]).numpy()
        blob = words.astype({4: "<i4", 2: "<i2"}[size]).tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
