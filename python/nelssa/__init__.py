# SPDX-License-Identifier: MIT
"""NELSSA for Python: the GPU node's side of sparse decode attention.

A long request's KV cache lives on processing-near-memory (PNM) devices
behind a NELSSA node (``nelssad``).  Each decode step the GPU node picks,
per KV head, the KV clusters worth attending, sends the queries and the
cluster ids to the node, attends its own local window, and merges the
node's partial state (output, log-sum-exp) with the window's.  This
package wraps the C client library that does all of that:

Connection (``Client``)
    ``Client(host, port, timeout_ms=...)`` connects; ``open_session()``,
    ``alloc_request()``, ``offload()`` / ``append()`` send clustered KV;
    ``step()`` runs one layer's decode step and returns ``(o, lse)``;
    ``step_send()`` returns a ``Pending`` to ``poll()`` later (split
    batch); ``stats()``, ``devices``, ``set_timeout()``, ``close()``.

Clustering (``ClusterIndex``, ``kmeans_build``)
    Segmented k-means over one (layer, KV head)'s keys; ``append()`` for
    decode-time chunks; ``perm``, ``table``, ``sizes``, ``centroids``.

Placement (``Router``, ``ThresholdCtl``, ``Placer``)
    The routing policy of ``<nelssa/policy.h>``: crossover, admission
    with the PNM tier's caps, migration picks, the adaptive threshold;
    and ``<nelssa/placement.h>``: which NELSSA node of a cluster, as its
    etcd registry lists them, takes a long request.

Selection and attention
    ``centroid_scores``, ``topk``, ``select``, ``unselected``,
    ``window_attn``, ``attn_dense``, ``estimate_attn``, ``final_merge``,
    ``lse_merge``.

Arrays go in through the buffer protocol (numpy arrays, zero-copy when
C-contiguous) or as CPU ``torch.Tensor`` objects (through
``tensor.numpy()``, zero-copy); queries and outputs are float32, K and V
bf16 bits (``uint16``/``int16`` arrays, or ``torch.bfloat16`` tensors) or
float16.  Outputs are new numpy arrays, or written into ``out=`` arrays.

Failures raise ``nelssa.Error``, an ``OSError`` with the library's errno
and its words; wrong dtypes raise ``TypeError``, wrong shapes or layouts
``ValueError``.  Blocking calls and long computations release the GIL;
each thread should use its own ``Client``.

See Documentation/python.rst for a worked example.
"""

from nelssa._nelssa import (  # noqa: F401
    ATTN_BF16_DOTS,
    ATTN_MAX_GROUP,
    ATTN_MAX_HEAD_DIM,
    KV_ADJACENT,
    KV_BF16,
    KV_FP8_E4M3,
    KV_FP16,
    KV_INT8,
    KV_PACKED,
    LOG_DEBUG,
    LOG_ERR,
    LOG_INFO,
    LOG_WARNING,
    PLACE_CLUSTERS,
    PLACE_HEADS,
    ROUTE_GPU,
    ROUTE_PNM,
    ROUTE_QUEUE,
    ROUTE_REFUSE,
    FITS_GPU,
    FITS_PNM,
    Client,
    ClusterIndex,
    Error,
    Pending,
    Placer,
    Router,
    ThresholdCtl,
    attn_dense,
    centroid_scores,
    estimate_attn,
    final_merge,
    lse_merge,
    select,
    set_log_fn,
    topk,
    unselected,
    version,
    window_attn,
)

__all__ = [
    "ATTN_BF16_DOTS", "ATTN_MAX_GROUP", "ATTN_MAX_HEAD_DIM", "KV_BF16", "KV_FP16", "KV_FP8_E4M3",
    "KV_INT8", "KV_ADJACENT", "KV_PACKED", "LOG_DEBUG",
    "LOG_ERR", "LOG_INFO", "LOG_WARNING", "PLACE_CLUSTERS", "PLACE_HEADS",
    "ROUTE_GPU", "ROUTE_PNM", "ROUTE_QUEUE", "ROUTE_REFUSE", "FITS_GPU", "FITS_PNM",
    "Placer", "Router", "ThresholdCtl", "Client", "ClusterIndex", "Error", "Pending", "attn_dense",
    "centroid_scores", "estimate_attn", "final_merge", "kmeans_build",
    "lse_merge", "select", "set_log_fn", "topk", "unselected", "version",
    "window_attn",
]

__version__ = version()


def kmeans_build(k, **cfg):
    """Cluster one (layer, KV head)'s prefill keys: ``ClusterIndex(k, **cfg)``.

    ``k`` is (tokens, head_dim), bf16 bits or float16; ``cfg`` takes the
    keyword parameters of ``ClusterIndex`` (segment, cluster_tokens,
    iters, chunk, outlier_per_mille, outlier_cos, outlier_ratio).
    """
    return ClusterIndex(k, **cfg)
