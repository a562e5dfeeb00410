# SPDX-License-Identifier: MIT
"""nelssa.serve: a split-batch serving engine for a Llama-architecture model
on NELSSA, in PyTorch (CPU stands in for the GPU).

``python3 -m nelssa.serve --port PORT`` runs a workload in GPU-only and
NELSSA mode side by side; ``Engine``, ``EngineConfig``, ``Model``,
``ModelConfig`` and ``workload`` are the pieces.  Documentation/serve.rst.
"""

from .config import ModelConfig, preset  # noqa: F401
from .engine import Engine, EngineConfig  # noqa: F401
from .model import Model  # noqa: F401
