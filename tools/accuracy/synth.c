// SPDX-License-Identifier: MIT
/*
 * The synthetic generator.  Each feature is there because a sparse method
 * must survive it in real models:
 *
 * - Attention sinks: the first SYNTH_SINKS keys align with every query
 *   and soak up a large share of the mass, as in trained LLMs.  The local
 *   window must keep them; a method that drops them fails badly.
 * - Outlier channels: four channels carry a large bias shared by every key
 *   (and a matching query component).  It shifts all logits of a row
 *   equally, so attention ignores it, but it dominates raw inner products:
 *   clustering without mean-centring lumps everything together.
 * - RoPE: keys and queries are rotated by their position (Llama-3's base
 *   500000), so the same content scores differently at different
 *   distances and high-frequency channels decorrelate over long ranges.
 * - Low-rank clustered topics: content lies in a rank-8 subspace, tokens
 *   come in runs of 16-256 on one of n/512 recurring topics, plus noise;
 *   queries mix two topics.  This is the structure clustering can exploit,
 *   and the mass is spread over many tokens, as in real long contexts.
 *   The content sits mostly on the low-frequency RoPE channels, as trained
 *   models put semantic content there and positional patterns on the fast
 *   ones (Barbero et al., "Round and Round We Go! What makes Rotary
 *   Positional Encodings useful?", ICLR 2025): spread evenly, RoPE would
 *   scramble every long-range match into random logits that no selection
 *   can capture (the oracle's error at 128K was 6-8 % that way).
 * - Needles: SYNTH_NEEDLES single tokens whose key matches one query row
 *   strongly (on the lowest-frequency channels, which RoPE barely rotates
 *   at long range, as retrieval heads do).  Missing one is a retrieval error
 *   no average metric shows, hence the needle hit rate.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/half.h>

#include "gen.h"
#include "synth.h"

#define RANK 8
/*
 * Magnitudes, calibrated so that attention is as peaked as in real long
 * contexts and the targets are reachable: the oracle selection at 4 %
 * finds every needle with a median output error under 2 % (see
 * Documentation/client.rst).  Same-topic logits reach about 20 (scaled),
 * a needle about 17 over its query row's background.
 */
#define TOPIC 1.55	/* topic centre scale */
#define SINK_K 6.0	/* sink key along the sink direction */
#define SINK_Q 1.0	/* every query's sink component */
#define NEEDLE_K 16.6	/* needle key */
#define NEEDLE_Q 16.6	/* the matching query row's needle component */
#define SEM_HI 1.0	/* topic weight on the low-frequency half of the channels */
#define SEM_LO 0.3	/* and on the high-frequency half */

/*
 * Channel weight of the topic content: semantic content lives mostly on
 * the low-frequency RoPE channels (the upper half here), which RoPE turns
 * slowly enough that a topic still matches its query from far away, while
 * the high-frequency half carries little of it.  Normalised so that the
 * expected squared norm over all channels is the unweighted one.
 */
static double semantic_weight(uint32_t i)
{
	const double hi = SEM_HI, lo = SEM_LO, norm = sqrt((hi * hi + lo * lo) / 2);

	return (i >= SYNTH_D / 2 ? hi : lo) / norm;
}

static const uint32_t outlier_ch[] = { 3, 17, 64, 100 };

/*
 * A random unit vector on the 8 lowest-frequency channels, the only ones
 * RoPE turns by less than a radian over 128K tokens.
 */
static void low_freq_unit(struct rng *r, double *x)
{
	double n = 0.0;

	for (uint32_t i = 0; i < SYNTH_D; i++) {
		x[i] = i >= SYNTH_D - 8 ? gauss(r) : 0.0;
		n += x[i] * x[i];
	}
	for (uint32_t i = 0; i < SYNTH_D; i++)
		x[i] /= sqrt(n);
}

static void store(uint16_t *dst, const double *x)
{
	for (uint32_t i = 0; i < SYNTH_D; i++)
		dst[i] = nelssa_f32_to_bf16((float)x[i]);
}

int synth_make(struct synth *s, uint32_t n, uint64_t seed)
{
	uint32_t topics = n / 512 > 2 ? n / 512 : 2, t, topic = 0, run = 0, qt[2];
	double basis[SYNTH_D][RANK], *centre, sink[SYNTH_D], nd[SYNTH_NEEDLES][SYNTH_D];
	double x[SYNTH_D];
	struct rng r = { seed };

	memset(s, 0, sizeof(*s));
	s->n = n;
	s->k = malloc(sizeof(*s->k) * (size_t)n * SYNTH_D);
	s->v = malloc(sizeof(*s->v) * (size_t)n * SYNTH_D);
	centre = malloc(sizeof(*centre) * topics * SYNTH_D);
	if (!s->k || !s->v || !centre) {
		free(centre);
		synth_free(s);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < SYNTH_D; i++)
		for (uint32_t j = 0; j < RANK; j++)
			basis[i][j] = gauss(&r) / sqrt(RANK) * semantic_weight(i);
	for (uint32_t p = 0; p < topics; p++)
		for (uint32_t i = 0; i < SYNTH_D; i++) {
			double z = 0.0;

			for (uint32_t j = 0; j < RANK; j++)
				z += basis[i][j] * gauss(&r);
			centre[p * SYNTH_D + i] = TOPIC * z;
		}
	low_freq_unit(&r, sink);
	for (uint32_t j = 0; j < SYNTH_NEEDLES; j++) {
		low_freq_unit(&r, nd[j]);
		/* Spread over the middle of the context, away from the window. */
		s->needle[j] = SYNTH_SINKS + (uint32_t)((n - 2 * SYNTH_SINKS - 128) *
							((j + 0.5 + 0.4 * (uni(&r) - 0.5)) /
							 SYNTH_NEEDLES));
	}
	for (t = 0; t < n; t++) {
		int is_needle = -1;

		for (uint32_t j = 0; j < SYNTH_NEEDLES; j++)
			if (s->needle[j] == t)
				is_needle = (int)j;
		if (!run) {
			topic = (uint32_t)(uni(&r) * topics);
			run = 16 + (uint32_t)(uni(&r) * 241);
		}
		run--;
		for (uint32_t i = 0; i < SYNTH_D; i++)
			x[i] = centre[topic * SYNTH_D + i] + 0.5 * gauss(&r);
		if (t < SYNTH_SINKS)
			for (uint32_t i = 0; i < SYNTH_D; i++)
				x[i] = SINK_K * sink[i] + 0.2 * gauss(&r);
		if (is_needle >= 0)
			for (uint32_t i = 0; i < SYNTH_D; i++)
				x[i] = NEEDLE_K * nd[is_needle][i] + 0.2 * gauss(&r);
		rope(x, t);
		for (uint32_t c = 0; c < sizeof(outlier_ch) / sizeof(outlier_ch[0]); c++)
			x[outlier_ch[c]] += 8.0;
		store(s->k + (size_t)t * SYNTH_D, x);
		for (uint32_t i = 0; i < SYNTH_D; i++)
			x[i] = gauss(&r);
		store(s->v + (size_t)t * SYNTH_D, x);
	}
	qt[0] = (uint32_t)(uni(&r) * topics);
	qt[1] = (uint32_t)(uni(&r) * topics);
	for (uint32_t g = 0; g < SYNTH_G; g++) {
		for (uint32_t i = 0; i < SYNTH_D; i++)
			x[i] = 0.8 * centre[qt[g & 1] * SYNTH_D + i] + 0.3 * centre[qt[1 - (g & 1)] *
				SYNTH_D + i] + SINK_Q * sink[i] + NEEDLE_Q * nd[g % SYNTH_NEEDLES][i] +
				0.3 * gauss(&r);
		rope(x, n);
		for (uint32_t c = 0; c < sizeof(outlier_ch) / sizeof(outlier_ch[0]); c++)
			x[outlier_ch[c]] += 2.0;
		for (uint32_t i = 0; i < SYNTH_D; i++)
			s->q[g * SYNTH_D + i] = (float)x[i];
	}
	free(centre);
	return 0;
}

void synth_free(struct synth *s)
{
	free(s->k);
	free(s->v);
	s->k = s->v = NULL;
}
