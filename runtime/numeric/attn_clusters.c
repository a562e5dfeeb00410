// SPDX-License-Identifier: MIT
/*
 * Attention over selected clusters of a cluster-contiguous KV store
 * (DESIGN §3.3): each selected cluster is one contiguous run of tokens,
 * streamed into the same online-softmax state.  Everything is validated
 * before the first output byte is written, as the firmware must do.
 */
#include <errno.h>
#include <stdlib.h>

#include <nelssa/attention.h>

static int check_selection(const struct nelssa_cluster *table, uint32_t n_clusters,
			   uint32_t n_tokens, const uint32_t *sel, uint32_t n_sel)
{
	unsigned char *seen;
	int ret = 0;

	if (n_sel == 0)
		return 0;
	seen = calloc((n_clusters + 7u) / 8u + 1u, 1);
	if (!seen)
		return -ENOMEM;
	for (uint32_t i = 0; i < n_sel && !ret; i++) {
		uint32_t id = sel[i];
		const struct nelssa_cluster *c;

		if (id >= n_clusters || (seen[id / 8] & (1u << (id % 8)))) {
			ret = -EINVAL;
			break;
		}
		seen[id / 8] |= (unsigned char)(1u << (id % 8));
		c = &table[id];
		/* Written so that first + count cannot overflow. */
		if (c->first > n_tokens || c->count > n_tokens - c->first)
			ret = -EINVAL;
	}
	free(seen);
	return ret;
}

int nelssa_attn_clusters(const struct nelssa_attn_geom *geom, const float *q, const void *k,
			 const void *v, uint32_t n_tokens, const struct nelssa_cluster *table,
			 uint32_t n_clusters, const uint32_t *sel, uint32_t n_sel, float *o,
			 float *lse)
{
	struct nelssa_attn_run run;
	int ret;

	ret = nelssa_attn_geom_check(geom);
	if (ret)
		return ret;
	ret = check_selection(table, n_clusters, n_tokens, sel, n_sel);
	if (ret)
		return ret;

	nelssa_attn_begin(&run, geom, q, o);
	for (uint32_t i = 0; i < n_sel; i++) {
		const struct nelssa_cluster *c = &table[sel[i]];

		nelssa_attn_feed_at(&run, k, v, c->first, c->count);
	}
	nelssa_attn_end(&run, lse);
	return 0;
}
