/* SPDX-License-Identifier: MIT */
/*
 * A seeded synthetic decode step for the accuracy harness: keys, values
 * and one GQA group's queries whose structure imitates what makes real
 * attention hard for a sparse method (see synth.c for why each feature is
 * there).
 */
#ifndef NELSSA_SYNTH_H
#define NELSSA_SYNTH_H

#include <stdint.h>

#define SYNTH_D 128
#define SYNTH_G 4
#define SYNTH_SINKS 4
#define SYNTH_NEEDLES 4

struct synth {
	uint32_t n;			/* context length */
	uint16_t *k, *v;		/* bf16 [n][SYNTH_D] */
	float q[SYNTH_G * SYNTH_D];	/* the decode step's queries, at position n */
	uint32_t needle[SYNTH_NEEDLES];	/* token ids of the planted needles */
};

/* 0 or -ENOMEM; free with synth_free(). */
int synth_make(struct synth *s, uint32_t n, uint64_t seed);
void synth_free(struct synth *s);

#endif /* NELSSA_SYNTH_H */
