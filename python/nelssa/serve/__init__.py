# SPDX-License-Identifier: MIT
"""nelssa.serve: a split-batch serving engine for a Llama-architecture model
on NELSSA, in PyTorch (CPU stands in for the GPU).

``python3 -m nelssa.serve --port PORT`` runs a workload in GPU-only and
NELSSA mode side by side; ``Engine``, ``EngineConfig``, ``Model``,
``ModelConfig`` and ``workload`` are the pieces.  Documentation/serve.rst.
"""

from .config import ModelConfig, preset
from .engine import Engine, EngineConfig
from .model import Model

__all__ = ["Engine", "EngineConfig", "Model", "ModelConfig", "preset"]
