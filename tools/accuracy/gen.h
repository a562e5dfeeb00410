/* SPDX-License-Identifier: MIT */
/*
 * What both of the harness's generators (synth.c, hard.c) draw with: one
 * seeded stream (splitmix64), its uniform and Gaussian variates, and the
 * rotary position embedding of a SYNTH_D-channel key or query.  One copy,
 * so that the two generators' keys are built the same way.
 */
#ifndef NELSSA_ACCURACY_GEN_H
#define NELSSA_ACCURACY_GEN_H

#include <math.h>
#include <stdint.h>

#include <nelssa/splitmix64.h>

#include "synth.h"

#define GEN_ROPE_BASE 500000.0	/* Llama 3's theta */

struct rng {
	uint64_t s;
};

static inline uint64_t next(struct rng *r)
{
	return nelssa_splitmix64(&r->s);
}

static inline double uni(struct rng *r)
{
	return (next(r) >> 11) * 0x1.0p-53;
}

static inline double gauss(struct rng *r)
{
	double u = uni(r), v = uni(r);

	return sqrt(-2.0 * log(u + 0x1.0p-60)) * cos(6.283185307179586 * v);
}

/* Rotate channel pairs (2i, 2i+1) by pos * base^(-2i/d). */
static inline void rope(double *x, uint32_t pos)
{
	for (uint32_t i = 0; i < SYNTH_D / 2; i++) {
		double th = pos * pow(GEN_ROPE_BASE, -2.0 * i / SYNTH_D), c = cos(th), s = sin(th);
		double a = x[2 * i], b = x[2 * i + 1];

		x[2 * i] = a * c - b * s;
		x[2 * i + 1] = a * s + b * c;
	}
}

#endif
