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
 * nelssa_topk() - the k best clusters by score.
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
 * nelssa_topk_fill() - fill a token budget from a ranking.
 * @score: [@n_clusters], as for nelssa_topk().
 * @sizes: tokens per cluster [@n_clusters].
 * @n_clusters: number of clusters.
 * @budget: tokens to fill.
 * @ids: receives the ids taken, in rank order (room for @n_clusters).
 * @tokens: if not NULL, receives the tokens the selection holds.
 *
 * Unlike nelssa_topk_budget(), a cluster that would overflow the budget is
 * skipped and the ranking read on, so the selection fills the budget to
 * within the size of the smallest remaining cluster: the budget is what
 * is read, whatever the cluster sizes.
 *
 * Return: the number of ids written, or a negative errno as nelssa_topk().
 */
int nelssa_topk_fill(const float *score, const uint32_t *sizes, uint32_t n_clusters,
		     uint64_t budget, uint32_t *ids, uint64_t *tokens);

#define NELSSA_SELECT_MAX_LISTS 4

/**
 * nelssa_select_hybrid() - fill a token budget from several rankings.
 * @score: @n_lists score arrays, each [@n_clusters] (e.g. centroid scores
 *	and bound scores of the same clusters).
 * @share: the fraction of @budget each list fills first, in [0, 1].
 * @n_lists: 1..NELSSA_SELECT_MAX_LISTS.
 * @sizes: tokens per cluster.
 * @n_clusters: number of clusters.
 * @budget: tokens to fill.
 * @ids: receives the ids taken, each once (room for @n_clusters).
 * @tokens: if not NULL, receives the tokens the selection holds.
 *
 * List l takes its clusters, in its own rank order and as
 * nelssa_topk_fill() does, until the selection holds the running sum of
 * the shares up to l of the budget; then each list in turn tops the
 * selection up to the whole budget.  A cluster is taken once.
 *
 * Return: the number of ids written; -EINVAL (bad list count or share,
 * NaN score), -ENOMEM.
 */
int nelssa_select_hybrid(const float *const *score, const double *share, uint32_t n_lists,
			 const uint32_t *sizes, uint32_t n_clusters, uint64_t budget,
			 uint32_t *ids, uint64_t *tokens);

/**
 * enum nelssa_estimate - what stands in for the clusters not selected.
 * @NELSSA_ESTIMATE_NONE: nothing: their mass is lost.
 * @NELSSA_ESTIMATE_MEAN: nelssa_estimate_attn(), each cluster weighted
 *	as its mean key (never more than the members' mass, by Jensen).
 * @NELSSA_ESTIMATE_SPREAD: nelssa_estimate_attn_spread(), each cluster
 *	weighted by its members' mean weight to second order (needs
 *	nelssa_cluster_key_spread()).
 */
enum nelssa_estimate {
	NELSSA_ESTIMATE_NONE,
	NELSSA_ESTIMATE_MEAN,
	NELSSA_ESTIMATE_SPREAD,
};

/**
 * struct nelssa_select_cfg - the shipped cluster selection.
 * @far_share: fraction of the token budget filled first by
 *	nelssa_far_probs() (mean and farthest member) before the centroid
 *	scores fill the rest (default 0.25; 0 ranks by centroids alone).
 * @estimate: what the caller adds over every cluster not selected
 *	(default NELSSA_ESTIMATE_SPREAD).
 *
 * The defaults are chosen by measurement (Documentation/client.rst).
 */
struct nelssa_select_cfg {
	double far_share;
	enum nelssa_estimate estimate;
};

#define NELSSA_SELECT_DEFAULT \
	((struct nelssa_select_cfg){ .far_share = 0.25, .estimate = NELSSA_ESTIMATE_SPREAD })

/**
 * nelssa_select() - the shipped selection of one KV head's clusters.
 * @cfg: parameters (@cfg->estimate is the caller's to apply).
 * @q: the GQA group's queries, fp32 [@group][@head_dim].
 * @group: query rows.
 * @head_dim: elements per row.
 * @scale: softmax scale.
 * @centroids: fp32 [@n_clusters][@head_dim].
 * @far: fp32 [@n_clusters][@head_dim] from nelssa_cluster_far_keys();
 *	may be NULL when @cfg->far_share is 0.
 * @sizes: tokens per cluster.
 * @n_clusters: number of clusters.
 * @budget: tokens to fill.
 * @ids: receives the ids taken (room for @n_clusters).
 * @tokens: if not NULL, receives the tokens the selection holds.
 *
 * nelssa_select_hybrid() over the nelssa_far_probs() ranking (share
 * @cfg->far_share) and the nelssa_centroid_scores() ranking (the rest);
 * with a zero share, nelssa_topk_fill() over the centroid scores.
 *
 * Return: the number of ids written; -EINVAL (bad share, missing @far,
 * bad shape or non-finite input), -ENOMEM.
 */
int nelssa_select(const struct nelssa_select_cfg *cfg, const float *q, uint32_t group,
		  uint32_t head_dim, float scale, const float *centroids, const float *far,
		  const uint32_t *sizes, uint32_t n_clusters, uint64_t budget, uint32_t *ids,
		  uint64_t *tokens);

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
 * @k: K rows of the whole context in token order, [@n_tokens][head_dim]
 *	(or a KV store of an 8-bit type: nelssa_attn_feed_at()).
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

/**
 * struct nelssa_kmeans_cfg - segmented k-means parameters.
 * @segment: tokens per prefill segment (default 8192); each segment is
 *	clustered on its own.
 * @cluster_tokens: average tokens per cluster (default 16).
 * @iters: iterations per segment, the last being the final assignment
 *	(default 10).
 * @chunk: decode-time tokens clustered together by nelssa_kmeans_append()
 *	(default 1024; advisory, for callers batching new tokens).
 * @outlier_per_mille: most tokens per thousand of a segment that may
 *	become clusters of their own (default 16; 0 disables).
 * @outlier_cos: a token whose cosine with its final centroid is below
 *	this is an outlier (default 0.5): a key unlike its cluster, which
 *	the cluster's mean would hide from every query (a "needle").
 * @outlier_ratio: so is a token whose distance from its cluster's mean
 *	is above this many times the cluster's median distance (default
 *	1.15; 0 disables): a strong member that still points the cluster's
 *	way.  Over the cap, the largest such ratios split first.
 */
struct nelssa_kmeans_cfg {
	uint32_t segment;
	uint32_t cluster_tokens;
	uint32_t iters;
	uint32_t chunk;
	uint32_t outlier_per_mille;
	float outlier_cos;
	float outlier_ratio;
};

#define NELSSA_KMEANS_DEFAULT                                                                    \
	((struct nelssa_kmeans_cfg){ .segment = 8192, .cluster_tokens = 16, .iters = 10,         \
				     .chunk = 1024, .outlier_per_mille = 16, .outlier_cos = 0.5f, \
				     .outlier_ratio = 1.15f })

/**
 * struct nelssa_cluster_index - the clustering of one (layer, KV head).
 * @head_dim: elements per key.
 * @n_tokens: tokens clustered so far (token ids 0..n_tokens-1 of the
 *	caller's range, e.g. the context minus its attention sinks).
 * @n_clusters: clusters so far; none is empty.
 * @perm: [n_tokens]: the token at cluster-contiguous position i is perm[i].
 * @table: [n_clusters]: positions [first, first + count) of each cluster.
 * @centroids: fp32 [n_clusters][head_dim]: each cluster's mean key (the
 *	Centroid Meta-Info kept on the GPU).
 * @key_mean: fp32 [head_dim]: the prefill keys' mean, subtracted before
 *	clustering (also from later chunks).
 * @cap_tokens: allocated room, in tokens (internal).
 * @cap_clusters: allocated room, in clusters (internal).
 */
struct nelssa_cluster_index {
	uint32_t head_dim;
	uint32_t n_tokens;
	uint32_t n_clusters;
	uint32_t *perm;
	struct nelssa_cluster *table;
	float *centroids;
	float *key_mean;
	uint32_t cap_tokens;
	uint32_t cap_clusters;
};

/**
 * nelssa_kmeans_build() - cluster the prefill keys of one KV head.
 * @ix: the index to fill (any previous content is not freed).
 * @cfg: parameters.
 * @dtype: element type of @k.
 * @k: keys [@n_tokens][@head_dim].
 * @n_tokens: number of keys.
 * @head_dim: 1..NELSSA_ATTN_MAX_HEAD_DIM.
 *
 * Keys are mean-centred; the tokens are split into max(1, round(n /
 * segment)) segments of near-equal length, each clustered with
 * round(len / cluster_tokens) (at least 1) centroids: deterministic strided
 * initialisation, @iters - 1 rounds of spherical k-means (inner-product
 * assignment, L2-normalised mean update, empty clusters keep their
 * centroid), then a last assignment.  Clusters left empty are dropped.
 * Clusters are numbered segment by segment; members of a cluster keep
 * their token order.  Deterministic: no randomness anywhere.
 *
 * Return: 0; -EINVAL for a bad configuration or shape; -ENOMEM.
 */
int nelssa_kmeans_build(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
			enum nelssa_kv_dtype dtype, const void *k, uint32_t n_tokens,
			uint32_t head_dim);

/**
 * nelssa_kmeans_append() - cluster new tokens and append their clusters.
 * @ix: an index from nelssa_kmeans_build().
 * @cfg: parameters (@segment is ignored: the chunk is one segment).
 * @dtype: element type of @k.
 * @k: the new keys [@n_new][head_dim], tokens n_tokens..n_tokens+n_new-1.
 * @n_new: number of new keys.
 *
 * Centred with the prefill mean and clustered alone; existing clusters,
 * their table entries, centroids and permutation are not touched.
 *
 * Return: 0; -EINVAL; -ENOMEM (the index is unchanged then).
 */
int nelssa_kmeans_append(struct nelssa_cluster_index *ix, const struct nelssa_kmeans_cfg *cfg,
			 enum nelssa_kv_dtype dtype, const void *k, uint32_t n_new);

/**
 * nelssa_kmeans_free() - free what an index holds.
 * @ix: an index from nelssa_kmeans_build() (not NULL); a zeroed one is fine.
 *
 * Frees the index's arrays and zeroes it; the struct itself is the
 * caller's.
 */
void nelssa_kmeans_free(struct nelssa_cluster_index *ix);

/**
 * nelssa_kv_reorder() - gather rows into cluster-contiguous order.
 * @ix: the index.
 * @row_bytes: bytes per K or V row.
 * @src: rows in token order [ix->n_tokens].
 * @dst: receives rows in cluster-contiguous order: dst[i] = src[perm[i]].
 */
void nelssa_kv_reorder(const struct nelssa_cluster_index *ix, size_t row_bytes, const void *src,
		       void *dst);

/**
 * nelssa_cluster_value_sums() - per-cluster sum of member V rows.
 * @ix: the index.
 * @dtype: element type of @v.
 * @v: V rows in token order [ix->n_tokens][ix->head_dim].
 * @vsum: receives fp32 [ix->n_clusters][ix->head_dim].
 *
 * With the centroids, the Centroid Meta-Info the estimation term needs.
 */
void nelssa_cluster_value_sums(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			       const void *v, float *vsum);

/**
 * nelssa_unselected() - the clusters a selection left, for the estimate.
 * @ids: the selection (any order; repeats and ids past @n_clusters are
 *	ignored).
 * @n_ids: entries of @ids.
 * @sizes: tokens per cluster.
 * @n_clusters: clusters of the head.
 * @out: receives, in ascending order, every non-empty cluster not in
 *	@ids (room for @n_clusters).
 *
 * Return: the number written; -EINVAL (more than INT32_MAX clusters),
 * -ENOMEM.
 */
int nelssa_unselected(const uint32_t *ids, uint32_t n_ids, const uint32_t *sizes,
		      uint32_t n_clusters, uint32_t *out);

/**
 * nelssa_estimate_attn() - approximate attention over unselected clusters.
 * @geom: shape (kv_dtype unused: centroids and sums are fp32; flags unused:
 *	an estimate is no attention to match a kernel's products to).
 * @q: fp32 [group][head_dim].
 * @centroids: fp32 [..][head_dim], indexed by @ids.
 * @vsum: fp32 [..][head_dim], member V sums, indexed by @ids.
 * @sizes: tokens per cluster, indexed by @ids.
 * @ids: the clusters to estimate (the "estimation zone").
 * @n_ids: how many.
 * @o: receives fp32 [group][head_dim].
 * @lse: receives fp32 [group].
 *
 * Each cluster stands in for its members as one pseudo-token whose key is
 * the centroid, weighted by the member count: with s_c = scale * q.c_c,
 *
 *	o   = sum_c exp(s_c) vsum_c / sum_c size_c exp(s_c)
 *	lse = log sum_c size_c exp(s_c)
 *
 * exact when every member's key equals the centroid.  The state merges
 * like any other; no ids (or only empty clusters) give (0, -inf).
 *
 * Return: 0 or -EINVAL.
 */
int nelssa_estimate_attn(const struct nelssa_attn_geom *geom, const float *q,
			 const float *centroids, const float *vsum, const uint32_t *sizes,
			 const uint32_t *ids, uint32_t n_ids, float *o, float *lse);

/**
 * nelssa_cluster_key_spread() - each cluster's per-channel key spread.
 * @ix: the index.
 * @dtype: element type of @k.
 * @k: keys in token order [ix->n_tokens][ix->head_dim].
 * @m2: receives fp32 [ix->n_clusters][ix->head_dim]: the mean over the
 *	cluster's members of (k_i - centroid_i)^2, accumulated in float64;
 *	0 for an empty cluster.
 *
 * d floats per cluster beside the centroid, like the V sums; what
 * nelssa_estimate_attn_spread() needs to weigh a cluster by its members'
 * mean weight instead of its mean key's.
 */
void nelssa_cluster_key_spread(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			       const void *k, float *m2);

/**
 * nelssa_estimate_attn_spread() - the estimate, weighted by the members' spread.
 * @geom: shape (kv_dtype unused).
 * @q: fp32 [group][head_dim].
 * @centroids: fp32 [..][head_dim], indexed by @ids.
 * @m2: fp32 [..][head_dim] from nelssa_cluster_key_spread(), indexed by
 *	@ids; NULL gives nelssa_estimate_attn().
 * @vsum: fp32 [..][head_dim], member V sums, indexed by @ids.
 * @sizes: tokens per cluster, indexed by @ids.
 * @ids: the clusters to estimate.
 * @n_ids: how many.
 * @o: receives fp32 [group][head_dim].
 * @lse: receives fp32 [group].
 *
 * As nelssa_estimate_attn() with s_c raised to the second-order mean of
 * the members' logits,
 *
 *	h_c = scale^2 / 2 * sum_i q_i^2 m2_ci,
 *	s_c = scale q.c_c + h_c,
 *
 * the log-normal mean: exp(q.c) alone is the weight of the mean key,
 * which by Jensen's inequality is below the members' mean weight by about
 * exp(var / 2) -- a factor of 4 when the members' logits spread by 1.7
 * about the centroid's.  Exact for many members spread normally and
 * independently per channel; it can overstate a cluster (it is an
 * estimate, no longer a lower bound).  A cluster of n_c members spread by
 * sigma = sqrt(2 h_c) past a_n, the expected largest of n_c normal draws
 * (Blom: Phi^-1((n - 0.375) / (n + 0.25))), gains a_n sigma - a_n^2 / 2
 * instead: so few members' mean weight is carried by the largest of them
 * (Documentation/client.rst).
 *
 * Return: 0 or -EINVAL (bad shape, non-finite weight).
 */
int nelssa_estimate_attn_spread(const struct nelssa_attn_geom *geom, const float *q,
				const float *centroids, const float *m2, const float *vsum,
				const uint32_t *sizes, const uint32_t *ids, uint32_t n_ids,
				float *o, float *lse);

/*
 * Comparison baselines for the accuracy harness: what a perfect token
 * selection and a Quest-style page selection pick at the same budget.
 */

/**
 * nelssa_token_mass() - attention mass of every token, summed over rows.
 * @geom: shape of the work item.
 * @q: fp32 [group][head_dim].
 * @k: K rows [@n_tokens][head_dim].
 * @n_tokens: number of tokens.
 * @mass: receives [@n_tokens]: sum over rows r of softmax_t(scale q_r.k_t),
 *	computed in float64; the masses sum to the group size.
 *
 * The baselines read rows of a 16-bit type; an 8-bit kv_dtype is -EINVAL.
 *
 * Return: 0, -EINVAL or -ENOMEM.
 */
int nelssa_token_mass(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		      uint32_t n_tokens, double *mass);

/**
 * nelssa_oracle_tokens() - the budget tokens of largest attention mass.
 * @geom: shape.
 * @q: fp32 [group][head_dim].
 * @k: K rows [@n_tokens][head_dim].
 * @n_tokens: number of tokens.
 * @budget: tokens to select.
 * @tok: receives the token ids, largest mass first.
 *
 * The best mass recall any selection of @budget tokens can reach.
 *
 * Return: the number selected, or a negative errno.
 */
int nelssa_oracle_tokens(const struct nelssa_attn_geom *geom, const float *q, const void *k,
			 uint32_t n_tokens, uint32_t budget, uint32_t *tok);

/**
 * nelssa_quest_pages() - Quest-style page selection.
 * @geom: shape.
 * @q: fp32 [group][head_dim].
 * @k: K rows [@n_tokens][head_dim], in token order.
 * @n_tokens: number of tokens.
 * @page: tokens per page (Quest uses 16); the last page may be shorter.
 * @n_sel: pages to select.
 * @pages: receives page ids (page p = tokens [p*page, (p+1)*page)), best
 *	first.
 *
 * Each page keeps the per-channel minimum and maximum of its keys; its
 * score for query row r is the upper bound sum_i max(q_ri max_i, q_ri min_i)
 * of any q_r.k in the page, summed over the group's rows.
 *
 * Return: the number selected, or a negative errno.
 */
int nelssa_quest_pages(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		       uint32_t n_tokens, uint32_t page, uint32_t n_sel, uint32_t *pages);

/**
 * nelssa_cluster_bounds() - per-cluster, per-channel key extremes.
 * @ix: the index.
 * @dtype: element type of @k.
 * @k: keys in token order [ix->n_tokens][ix->head_dim].
 * @lo: receives fp32 [ix->n_clusters][ix->head_dim] channel minima.
 * @hi: receives the channel maxima, likewise.
 */
void nelssa_cluster_bounds(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			   const void *k, float *lo, float *hi);

/**
 * nelssa_bound_scores() - score clusters by an upper bound of q.k.
 * @q: fp32 [@group][@head_dim].
 * @group: query rows.
 * @head_dim: elements per row.
 * @lo: channel minima [@n_clusters][@head_dim].
 * @hi: channel maxima, likewise.
 * @sizes: tokens per cluster; 0 scores -inf.
 * @n_clusters: number of clusters.
 * @score: receives [@n_clusters]: sum over rows of
 *	sum_i max(q_i hi_i, q_i lo_i), which no member's q.k exceeds.
 *
 * Quest's page bound applied to clusters: unlike a mean key, a bound is
 * not diluted by the other members, so one strongly matching token keeps
 * its cluster high.
 */
void nelssa_bound_scores(const float *q, uint32_t group, uint32_t head_dim, const float *lo,
			 const float *hi, const uint32_t *sizes, uint32_t n_clusters, float *score);

/**
 * nelssa_bound_probs() - bound scores normalised like centroid scores.
 * @q: fp32 [@group][@head_dim].
 * @group: query rows.
 * @head_dim: elements per row.
 * @scale: softmax scale, positive and finite.
 * @lo: channel minima [@n_clusters][@head_dim].
 * @hi: channel maxima, likewise.
 * @sizes: tokens per cluster; 0 scores -inf.
 * @n_clusters: number of clusters.
 * @score: receives [@n_clusters]: sum over rows r of softmax_c(scale *
 *	u_rc), u_rc = sum_i max(q_ri hi_ci, q_ri lo_ci) the bound of
 *	nelssa_bound_scores() for row r alone.
 *
 * Summing raw bounds over the rows (nelssa_bound_scores()) lets the
 * rows' loose bounds outvote the one row a strong key matches; the
 * per-row softmax gives each row one unit of score, as the centroid
 * scores do, so a cluster that one row needs ranks high.
 *
 * Return: 0; -EINVAL for a bad shape or a non-finite bound; -ENOMEM.
 */
int nelssa_bound_probs(const float *q, uint32_t group, uint32_t head_dim, float scale,
		       const float *lo, const float *hi, const uint32_t *sizes,
		       uint32_t n_clusters, float *score);

/**
 * nelssa_cluster_far_keys() - each cluster's member farthest from its mean.
 * @ix: the index.
 * @dtype: element type of @k.
 * @k: keys in token order [ix->n_tokens][ix->head_dim].
 * @far: receives fp32 [ix->n_clusters][ix->head_dim]: the raw key of the
 *	member with the largest L2 distance (float64) from the cluster's
 *	centroid; ties to the earlier member in cluster order; zeros for an
 *	empty cluster.
 *
 * The second probe of nelssa_far_probs(): d floats per cluster beside the
 * centroid, half the metadata of the per-channel box.
 */
void nelssa_cluster_far_keys(const struct nelssa_cluster_index *ix, enum nelssa_kv_dtype dtype,
			     const void *k, float *far);

/**
 * nelssa_far_probs() - cluster scores from the mean and the farthest member.
 * @q: fp32 [@group][@head_dim].
 * @group: query rows.
 * @head_dim: elements per row.
 * @scale: softmax scale, positive and finite.
 * @centroids: fp32 [@n_clusters][@head_dim].
 * @far: fp32 [@n_clusters][@head_dim], from nelssa_cluster_far_keys().
 * @sizes: tokens per cluster; 0 scores -inf.
 * @n_clusters: number of clusters.
 * @score: receives [@n_clusters]: sum over rows r of softmax_c(scale *
 *	max(q_r . centroid_c, q_r . far_c, q_r . rest_c)), rest_c = (size_c
 *	centroid_c - far_c) / (size_c - 1) the other members' mean (its
 *	logit from the other two; in a pair, the other member's key), fp32
 *	products (nelssa_dot_f32())
 *	and a float64 softmax.
 *
 * Normalised per row like nelssa_centroid_scores(), so a cluster one row
 * needs ranks high; a strong member the mean dilutes keeps its exact
 * logit when it is the member farthest from the mean.
 *
 * Return: 0; -EINVAL for a bad shape or a non-finite logit; -ENOMEM.
 */
int nelssa_far_probs(const float *q, uint32_t group, uint32_t head_dim, float scale,
		     const float *centroids, const float *far, const uint32_t *sizes,
		     uint32_t n_clusters, float *score);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_SPARSE_H */
