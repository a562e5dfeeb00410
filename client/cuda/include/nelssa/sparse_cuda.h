/* SPDX-License-Identifier: MIT */
/*
 * CUDA twins of <nelssa/sparse.h>: the same algorithms, batched over KV
 * heads (or work items) the way a decode step runs them.  Pointers named
 * "device" are CUDA device memory; @stream is a cudaStream_t (NULL: the
 * default stream), kept opaque so that C callers need no CUDA headers.
 * Launches are stream-ordered and return at once unless a function says
 * otherwise; the return value reports shape errors (-EINVAL), allocation
 * (-ENOMEM), no usable device (-ENODEV) and other CUDA failures (-EIO).
 * Data errors that the CPU versions report with -EINVAL (non-finite
 * logits, NaN scores) are reported per head in device memory instead, so
 * nothing has to wait for the GPU.  Documentation/client.rst, "CUDA".
 */
#ifndef NELSSA_SPARSE_CUDA_H
#define NELSSA_SPARSE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/sparse.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * nelssa_cuda_device_count() - CUDA devices usable by this process.
 *
 * Return: the count; 0 when there is no GPU or no driver (not an error:
 * callers and tests fall back to, or compare with, the CPU versions).
 */
int nelssa_cuda_device_count(void);

/**
 * nelssa_cuda_centroid_scores() - nelssa_centroid_scores() for many heads.
 * @q: device fp32 [@n_heads][@group][@head_dim].
 * @n_heads: KV heads.
 * @group: query rows per KV head (1..NELSSA_ATTN_MAX_GROUP).
 * @head_dim: 1..NELSSA_ATTN_MAX_HEAD_DIM.
 * @scale: softmax scale, positive and finite.
 * @centroids: device fp32 [@n_heads][@n_clusters][@head_dim].
 * @sizes: device [@n_heads][@n_clusters]; 0 marks an empty (or padding)
 *	cluster, so heads with fewer clusters pad with zeros.
 * @n_clusters: clusters per head (the row stride of @centroids).
 * @score: device [@n_heads][@n_clusters], as the CPU version; a head with
 *	a non-finite logit gets NaN for every non-empty cluster, which
 *	nelssa_cuda_topk() reports as -EINVAL for that head.
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_centroid_scores(const float *q, uint32_t n_heads, uint32_t group,
				uint32_t head_dim, float scale, const float *centroids,
				const uint32_t *sizes, uint32_t n_clusters, float *score,
				void *stream);

/**
 * nelssa_cuda_topk() - nelssa_topk() for many heads.
 * @score: device [@n_heads][@n_clusters].
 * @n_heads: heads.
 * @n_clusters: clusters per head.
 * @k: clusters to select per head (the stride of @ids; more than
 *	@n_clusters selects them all, as on the CPU).
 * @ids: device [@n_heads][@k]: each head's ids, best first, ties to the
 *	lower id, empty (-inf) clusters never selected.
 * @count: device int32 [@n_heads]: ids written for the head, or -EINVAL
 *	when a score of the head is NaN.
 * @stream: cudaStream_t.
 *
 * A stable segmented sort (CUB) of each head's scores, so the order is the
 * CPU version's exactly.  At most 2^31 - 1 scores in all.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_topk(const float *score, uint32_t n_heads, uint32_t n_clusters, uint32_t k,
		     uint32_t *ids, int32_t *count, void *stream);

/**
 * nelssa_cuda_topk_budget() - nelssa_topk_budget() for many heads.
 * @score: device [@n_heads][@n_clusters].
 * @sizes: device [@n_heads][@n_clusters].
 * @n_heads: heads.
 * @n_clusters: clusters per head.
 * @budget: most tokens a head's selection may hold.
 * @ids: device [@n_heads][@n_clusters]: the whole ranking, best first; the
 *	first count[h] entries are the selection.
 * @count: device int32 [@n_heads], as nelssa_cuda_topk().
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_topk_budget(const float *score, const uint32_t *sizes, uint32_t n_heads,
			    uint32_t n_clusters, uint64_t budget, uint32_t *ids, int32_t *count,
			    void *stream);

/**
 * nelssa_cuda_topk_fill() - nelssa_topk_fill() for many heads.
 * @score: device [@n_heads][@n_clusters].
 * @sizes: device [@n_heads][@n_clusters].
 * @n_heads: heads.
 * @n_clusters: clusters per head.
 * @budget: tokens to fill per head.
 * @ids: device [@n_heads][@n_clusters]: the first count[h] entries of a
 *	head's row are its selection, in rank order (the rest is scratch).
 * @count: device int32 [@n_heads], as nelssa_cuda_topk().
 * @tokens: device [@n_heads] or NULL: tokens each selection holds.
 * @stream: cudaStream_t.
 *
 * The same ranking as nelssa_cuda_topk(), then a scan per head (a thread
 * each) that skips clusters which would overflow the budget and reads on,
 * as the CPU version does.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_topk_fill(const float *score, const uint32_t *sizes, uint32_t n_heads,
			  uint32_t n_clusters, uint64_t budget, uint32_t *ids, int32_t *count,
			  uint64_t *tokens, void *stream);

/**
 * nelssa_cuda_far_probs() - nelssa_far_probs() for many heads.
 * @q: device fp32 [@n_heads][@group][@head_dim].
 * @n_heads: KV heads.
 * @group: query rows per KV head.
 * @head_dim: elements per row.
 * @scale: softmax scale, positive and finite.
 * @centroids: device fp32 [@n_heads][@n_clusters][@head_dim].
 * @far: device fp32, likewise: each cluster's farthest member.
 * @sizes: device [@n_heads][@n_clusters]; 0 marks an empty cluster.
 * @n_clusters: clusters per head.
 * @score: device [@n_heads][@n_clusters], as the CPU version (the CPU
 *	sums its products in float64, the GPU in fp32); NaN per head as
 *	nelssa_cuda_centroid_scores().
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_far_probs(const float *q, uint32_t n_heads, uint32_t group, uint32_t head_dim,
			  float scale, const float *centroids, const float *far,
			  const uint32_t *sizes, uint32_t n_clusters, float *score, void *stream);

/**
 * nelssa_cuda_select_hybrid2() - nelssa_select_hybrid() of two lists, many heads.
 * @first: device [@n_heads][@n_clusters]: the ranking that fills @share
 *	first (the far-member scores in nelssa_select()).
 * @second: device, likewise: the ranking that fills the rest.
 * @share: fraction of @budget @first fills, in [0, 1].
 * @sizes: device [@n_heads][@n_clusters].
 * @n_heads: heads.
 * @n_clusters: clusters per head.
 * @budget: tokens to fill per head.
 * @ids: device [@n_heads][@n_clusters]: the first count[h] entries of a
 *	head's row are its selection, in the CPU version's order.
 * @count: device int32 [@n_heads], as nelssa_cuda_topk().
 * @tokens: device [@n_heads] or NULL: tokens each selection holds.
 * @stream: cudaStream_t.
 *
 * With nelssa_cuda_far_probs() and nelssa_cuda_centroid_scores(), the GPU
 * form of nelssa_select().
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_select_hybrid2(const float *first, const float *second, double share,
			       const uint32_t *sizes, uint32_t n_heads, uint32_t n_clusters,
			       uint64_t budget, uint32_t *ids, int32_t *count, uint64_t *tokens,
			       void *stream);

/**
 * nelssa_cuda_window_attn() - nelssa_window_attn() for a batch of items.
 * @geom: shape shared by the items.
 * @n_items: work items (sequence x KV head).
 * @q: device fp32 [@n_items][group][head_dim].
 * @k: device K rows; item i's token t is row i * @kv_stride + t.
 * @v: device V rows, likewise.
 * @kv_stride: rows between consecutive items' first tokens.
 * @n_tokens: device [@n_items]: each item's context length (<= @kv_stride).
 * @win: the window (host).
 * @o: device fp32 [@n_items][group][head_dim].
 * @lse: device fp32 [@n_items][group].
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno (-EOPNOTSUPP for @geom->flags: its products
 *	are binary32).
 */
int nelssa_cuda_window_attn(const struct nelssa_attn_geom *geom, uint32_t n_items,
			    const float *q, const void *k, const void *v, uint64_t kv_stride,
			    const uint32_t *n_tokens, const struct nelssa_window *win, float *o,
			    float *lse, void *stream);

/**
 * nelssa_cuda_final_merge() - nelssa_final_merge() on the GPU.
 * @o: device [@rows][@d]; may alias @win_o.
 * @lse: device [@rows]; may alias @win_lse.
 * @win_o: device window outputs [@rows][@d].
 * @win_lse: device [@rows].
 * @pnm_o: device [@n_pnm][@rows][@d]: the PNM states, contiguous.
 * @pnm_lse: device [@n_pnm][@rows].
 * @n_pnm: number of PNM states.
 * @rows: query rows (items x group).
 * @d: head dimension.
 * @stream: cudaStream_t.
 *
 * Merges the states one after another in the order given, with the
 * numeric core's rules for empty and NaN states.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_final_merge(float *o, float *lse, const float *win_o, const float *win_lse,
			    const float *pnm_o, const float *pnm_lse, uint32_t n_pnm,
			    uint32_t rows, uint32_t d, void *stream);

/**
 * nelssa_cuda_estimate_attn() - nelssa_estimate_attn() for a batch of items.
 * @geom: shape shared by the items (kv_dtype unused).
 * @n_items: work items.
 * @q: device fp32 [@n_items][group][head_dim].
 * @centroids: device fp32 [@n_items][@n_clusters][head_dim].
 * @vsum: device fp32 [@n_items][@n_clusters][head_dim].
 * @sizes: device [@n_items][@n_clusters].
 * @n_clusters: clusters per item (row stride of the three above).
 * @ids: device [@n_items][@ids_stride]: clusters to estimate.
 * @ids_stride: entries between items' id lists.
 * @n_ids: device [@n_items]: ids used per item (<= @ids_stride).
 * @o: device fp32 [@n_items][group][head_dim].
 * @lse: device fp32 [@n_items][group].
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_estimate_attn(const struct nelssa_attn_geom *geom, uint32_t n_items,
			      const float *q, const float *centroids, const float *vsum,
			      const uint32_t *sizes, uint32_t n_clusters, const uint32_t *ids,
			      uint32_t ids_stride, const uint32_t *n_ids, float *o, float *lse,
			      void *stream);

/**
 * nelssa_cuda_estimate_attn_spread() - nelssa_estimate_attn_spread() for a batch.
 * @geom: shape shared by the items (kv_dtype unused).
 * @n_items: work items.
 * @q: device fp32 [@n_items][group][head_dim].
 * @centroids: device fp32 [@n_items][@n_clusters][head_dim].
 * @m2: device fp32 [@n_items][@n_clusters][head_dim], from
 *	nelssa_cluster_key_spread(); NULL gives nelssa_cuda_estimate_attn().
 * @vsum: device fp32 [@n_items][@n_clusters][head_dim].
 * @sizes: device [@n_items][@n_clusters].
 * @n_clusters: clusters per item.
 * @ids: device [@n_items][@ids_stride]: clusters to estimate.
 * @ids_stride: entries between items' id lists.
 * @n_ids: device [@n_items]: ids used per item (at most @ids_stride are
 *	read).
 * @o: device fp32 [@n_items][group][head_dim].
 * @lse: device fp32 [@n_items][group].
 * @stream: cudaStream_t.
 *
 * Splits each item's list into chunks of 128 ids, one warp per (row,
 * chunk), and merges the chunks' states in order: deterministic, and
 * within a few fp32 roundings of the CPU version.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_estimate_attn_spread(const struct nelssa_attn_geom *geom, uint32_t n_items,
				     const float *q, const float *centroids, const float *m2,
				     const float *vsum, const uint32_t *sizes,
				     uint32_t n_clusters, const uint32_t *ids,
				     uint32_t ids_stride, const uint32_t *n_ids, float *o,
				     float *lse, void *stream);

/**
 * nelssa_cuda_unselected() - nelssa_unselected() for a batch of heads.
 * @ids: device [@n_heads][@ids_stride]: each head's selection, as the
 *	fills leave it.
 * @ids_stride: entries between heads' selections.
 * @count: device int32 [@n_heads]: ids used per head; a negative count
 *	(an invalid head) leaves nothing to estimate.
 * @sizes: device [@n_heads][@n_clusters].
 * @n_heads: heads.
 * @n_clusters: clusters per head.
 * @left: device [@n_heads][@n_clusters]: each head's unselected non-empty
 *	clusters, ascending, as nelssa_cuda_estimate_attn_spread() takes them
 *	(ids_stride @n_clusters).
 * @n_left: device [@n_heads]: how many.
 * @stream: cudaStream_t.
 *
 * With the selection's ids and count, the GPU's whole path to the
 * estimation term: no list crosses to the host.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_unselected(const uint32_t *ids, uint32_t ids_stride, const int32_t *count,
			   const uint32_t *sizes, uint32_t n_heads, uint32_t n_clusters,
			   uint32_t *left, uint32_t *n_left, void *stream);

/**
 * nelssa_cuda_kmeans_build() - nelssa_kmeans_build() with the work on the GPU.
 * @ix: host index to fill, exactly as the CPU version lays it out.
 * @cfg: parameters.
 * @dtype: element type of @k.
 * @k: device keys [@n_tokens][@head_dim].
 * @n_tokens: number of keys.
 * @head_dim: 1..NELSSA_ATTN_MAX_HEAD_DIM.
 * @stream: cudaStream_t.
 *
 * Same segmentation, initialisation, float64 centroid sums and update
 * order as the CPU version; only the assignment's dot products round
 * differently, so a token whose two best centroids tie to within rounding
 * may land in the other one.  Synchronous: returns when @ix is complete.
 *
 * Return: 0 or a negative errno (then @ix is empty).
 */
int nelssa_cuda_kmeans_build(struct nelssa_cluster_index *ix,
			     const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
			     const void *k, uint32_t n_tokens, uint32_t head_dim, void *stream);

/**
 * nelssa_cuda_kmeans_append() - nelssa_kmeans_append() with the work on the GPU.
 * @ix: an index from either build function.
 * @cfg: parameters.
 * @dtype: element type of @k.
 * @k: device keys of the new tokens [@n_new][head_dim].
 * @n_new: number of new keys.
 * @stream: cudaStream_t.
 *
 * Synchronous.
 *
 * Return: 0 or a negative errno (then @ix is unchanged).
 */
int nelssa_cuda_kmeans_append(struct nelssa_cluster_index *ix,
			      const struct nelssa_kmeans_cfg *cfg, enum nelssa_kv_dtype dtype,
			      const void *k, uint32_t n_new, void *stream);

/**
 * nelssa_cuda_kv_quantize() - nelssa_kv_quantize() on the GPU, from 16-bit rows.
 * @dtype: NELSSA_KV_FP8_E4M3 or NELSSA_KV_INT8.
 * @head_dim: 1..NELSSA_ATTN_MAX_HEAD_DIM.
 * @src_dtype: NELSSA_KV_BF16 or NELSSA_KV_FP16, the type of @src.
 * @src: device rows [*][@head_dim] in token order.
 * @perm: device, or NULL: row i of the store is @src row @perm[@first + i]
 *	(an index's cluster order, as the client's offload gathers it); NULL
 *	takes row @first + i.
 * @first: see @perm.
 * @n_tokens: rows to quantise: tokens [0, @n_tokens) of @dst.
 * @dst: device, nelssa_kv_bytes(@dtype, @head_dim, @n_tokens) bytes.
 * @status: device int32: 0, or -EINVAL when a value is not finite (then
 *	@dst is unspecified), the CPU version's return value.
 * @stream: cudaStream_t.
 *
 * The same bytes as widening the rows and calling nelssa_kv_quantize().
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_kv_quantize(enum nelssa_kv_dtype dtype, uint32_t head_dim,
			    enum nelssa_kv_dtype src_dtype, const void *src, const uint32_t *perm,
			    uint32_t first, uint32_t n_tokens, void *dst, int32_t *status,
			    void *stream);

/**
 * nelssa_cuda_kv_reorder() - nelssa_kv_reorder() on the GPU.
 * @perm: device [@n_tokens]: the index's permutation.
 * @n_tokens: rows.
 * @row_bytes: bytes per row (a multiple of 2).
 * @src: device rows in token order.
 * @dst: device rows in cluster-contiguous order: dst[i] = src[perm[i]].
 * @stream: cudaStream_t.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_cuda_kv_reorder(const uint32_t *perm, uint32_t n_tokens, size_t row_bytes,
			   const void *src, void *dst, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_SPARSE_CUDA_H */
