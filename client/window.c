// SPDX-License-Identifier: MIT
/*
 * Local-window attention: the attention sinks and the most recent tokens
 * stay on the GPU and are attended exactly every step; their state is
 * later merged with the PNM devices' states over the selected clusters.
 */
#include <errno.h>

#include <nelssa/lse.h>
#include <nelssa/sparse.h>

int nelssa_window_attn(const struct nelssa_attn_geom *geom, const float *q, const void *k,
		       const void *v, uint32_t n_tokens, const struct nelssa_window *win, float *o,
		       float *lse)
{
	struct nelssa_attn_run run;
	uint32_t sink, from;
	int ret = nelssa_attn_begin(&run, geom, q, o);

	if (ret)
		return ret;
	sink = win->sink < n_tokens ? win->sink : n_tokens;
	/* Recent tokens start after the sinks, so none is counted twice. */
	from = n_tokens - sink > win->recent ? n_tokens - win->recent : sink;
	/* By token range: a KV store of any type, 8-bit tiles included. */
	nelssa_attn_feed_at(&run, k, v, 0, sink);
	nelssa_attn_feed_at(&run, k, v, from, n_tokens - from);
	nelssa_attn_end(&run, lse);
	return 0;
}

void nelssa_final_merge(float *o, float *lse, const float *win_o, const float *win_lse,
			const float *const *pnm_o, const float *const *pnm_lse, size_t n_pnm,
			uint32_t rows, uint32_t d)
{
	if (o != win_o)
		for (size_t i = 0; i < (size_t)rows * d; i++)
			o[i] = win_o[i];
	if (lse != win_lse)
		for (uint32_t r = 0; r < rows; r++)
			lse[r] = win_lse[r];
	for (size_t s = 0; s < n_pnm; s++)
		nelssa_lse_merge(o, lse, pnm_o[s], pnm_lse[s], rows, d);
}
