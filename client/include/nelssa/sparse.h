/* SPDX-License-Identifier: MIT */
/*
 * The GPU node's half of sparse attention (DESIGN §1, §3.3-§3.5), CPU
 * reference versions: centroid scoring and Top-K selection of KV clusters,
 * local-window attention over the attention-sink and most recent tokens,
 * and the final LSE merge of the window with the PNM devices' partial
 * states.  Documentation/client.rst describes the conventions.
 */
#ifndef NELSSA_SPARSE_H
#define NELSSA_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/attention.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * nelssa_centroid_scores() - score every cluster of one KV head.
 * @q: the GQA group's queries, fp32 [@group][@head_dim].
 * @group: query rows sharing the KV head (1..NELSSA_ATTN_MAX_GROUP).
 * @head_dim: elements per row (1..NELSSA_ATTN_MAX_HEAD_DIM).
 * @scale: softmax scale, positive and finite (usually 1/sqrt(head_dim)).
 * @centroids: fp32 [@n_clusters][@head_dim].
 * @sizes: tokens per cluster [@n_clusters]; 0 marks an empty cluster.
 * @n_clusters: number of clusters.
 * @score: receives [@n_clusters].
 *
 * score[c] = sum over query rows g of softmax_c(scale * q_g . centroid_c),
 * the softmax taken over the non-empty clusters only; empty clusters score
 * -inf so that no selection picks them.  Scores of non-empty clusters sum
 * to @group.
 *
 * Return: 0; -EINVAL for a bad shape or a non-finite input; -ENOMEM.
 */
int nelssa_centroid_scores(const float *q, uint32_t group, uint32_t head_dim, float scale,
			   const float *centroids, const uint32_t *sizes, uint32_t n_clusters,
			   float *score);

/**
 * nelssa_topk() - the @k best clusters by score.
 * @score: [@n_clusters], as from nelssa_centroid_scores(); NaN is invalid.
 * @n_clusters: number of clusters.
 * @k: how many to select.
 * @ids: receives up to @k cluster ids, best first.
 *
 * Ties go to the lower id, so the result is a pure function of the input.
 * Clusters scoring -inf (empty) are never selected.
 *
 * Return: the number of ids written (min(@k, clusters scoring above
 * -inf)), or -EINVAL (NaN score), -ENOMEM.
 */
int nelssa_topk(const float *score, uint32_t n_clusters, uint32_t k, uint32_t *ids);

/**
 * nelssa_topk_ratio_count() - clusters selected for a selection ratio.
 * @n_clusters: clusters of the KV head.
 * @ratio: fraction in [0, 1].
 *
 * Return: round(@ratio * @n_clusters), at least 1 when @ratio > 0 and
 * @n_clusters > 0; 0 for a ratio outside [0, 1] or NaN.
 */
uint32_t nelssa_topk_ratio_count(uint32_t n_clusters, double ratio);

/**
 * nelssa_topk_budget() - select by score within a token budget.
 * @score: [@n_clusters].
 * @sizes: tokens per cluster [@n_clusters].
 * @n_clusters: number of clusters.
 * @budget: most tokens the selection may hold.
 * @ids: receives the ids, best first (room for @n_clusters).
 *
 * Takes clusters in nelssa_topk() order while their tokens fit in the
 * budget and stops at the first that does not fit, so the selection is
 * always a prefix of the ranking.
 *
 * Return: the number of ids written, or a negative errno as nelssa_topk().
 */
int nelssa_topk_budget(const float *score, const uint32_t *sizes, uint32_t n_clusters,
		       uint64_t budget, uint32_t *ids);

/**
 * struct nelssa_window - the tokens the GPU always attends exactly.
 * @sink: leading attention-sink tokens (default 4).
 * @recent: most recent tokens (default 64).
 */
struct nelssa_window {
	uint32_t sink;
	uint32_t recent;
};

#define NELSSA_WINDOW_DEFAULT ((struct nelssa_window){ .sink = 4, .recent = 64 })

/**
 * nelssa_window_attn() - attention over the local window with its LSE.
 * @geom: shape of the work item.
 * @q: fp32 [group][head_dim].
 * @k: K rows of the whole context in token order, [@n_tokens][head_dim].
 * @v: V rows, likewise.
 * @n_tokens: context length so far.
 * @win: the window.
 * @o: receives fp32 [group][head_dim].
 * @lse: receives fp32 [group].
 *
 * Attends tokens [0, sink) and [n - recent, n), each token once where the
 * two overlap (short contexts).  n = 0 gives (0, -inf).
 *
 * Return: 0 or -EINVAL.
 */
int nelssa_window_attn(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		       const void *v, uint32_t n_tokens, const struct nelssa_window *win, float *o,
		       float *lse);

/**
 * nelssa_final_merge() - merge the window state with the PNM states.
 * @o: receives fp32 [@rows][@d]; may alias @win_o.
 * @lse: receives fp32 [@rows]; may alias @win_lse.
 * @win_o: the local-window output.
 * @win_lse: its LSE.
 * @pnm_o: @n_pnm partial outputs, each [@rows][@d].
 * @pnm_lse: their LSEs, each [@rows].
 * @n_pnm: number of PNM states (0 leaves the window state).
 * @rows: query rows.
 * @d: head dimension.
 *
 * The numeric core's merge (Documentation/numeric-conventions.rst), so
 * empty states are neutral and the result never becomes NaN from them.
 */
void nelssa_final_merge(float *o, float *lse, const float *win_o, const float *win_lse,
			const float *const *pnm_o, const float *const *pnm_lse, size_t n_pnm,
			uint32_t rows, uint32_t d);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_SPARSE_H */
