/* SPDX-License-Identifier: MIT */
/*
 * The harder generator of the accuracy harness (issue 17): seven families of
 * synthetic attention heads on a language-like background, each built
 * around one way a sparse selection goes wrong in real long-context
 * models.  hard.c says why each feature exists and cites the literature.
 */
#ifndef NELSSA_HARD_H
#define NELSSA_HARD_H

#include <stdint.h>

#include "synth.h"

enum hard_family {
	HARD_COPY,	/* copying heads: several targets a row, RoPE fading */
	HARD_NEEDLE,	/* needles with look-alike distractors */
	HARD_ENTROPY,	/* high-entropy rows, no targets */
	HARD_DRIFT,	/* key mean drifting along the context */
	HARD_HIDDEN,	/* strong members whose cluster mean hides them */
	HARD_MASSIVE,	/* massive outlier channels and deep attention sinks */
	HARD_SPREAD,	/* members spread heavy-tailed along a few directions */
	HARD_N_FAMILIES
};

#define HARD_MAX_TARGETS 32

extern const char *const hard_family_name[HARD_N_FAMILIES];

/*
 * One generated decode step: the same shape as struct synth (D = 128,
 * group of 4), with a list of planted target tokens.  A target is what a
 * selection must not miss; the harness counts only those whose dense
 * attention mass makes them matter (a faded copy source does not).
 */
struct hard_case {
	uint32_t n;
	uint16_t *k, *v;			/* bf16 [n][SYNTH_D] */
	float q[SYNTH_G * SYNTH_D];
	uint32_t target[HARD_MAX_TARGETS];
	uint32_t n_targets;
};

/* 0, -EINVAL (family) or -ENOMEM; free with hard_free(). */
int hard_make(struct hard_case *c, enum hard_family f, uint32_t n, uint64_t seed);
void hard_free(struct hard_case *c);
/* The family named @name, or -1. */
int hard_family_by_name(const char *name);

#endif /* NELSSA_HARD_H */
