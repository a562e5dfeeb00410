/* SPDX-License-Identifier: MIT */
/*
 * The spread estimate's gain, shared by the CPU estimate (estimate.c) and
 * its CUDA twin (cuda/estimate.cu), so both weigh a cluster alike.
 */
#ifndef NELSSA_ESTIMATE_RULE_H
#define NELSSA_ESTIMATE_RULE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define NELSSA_HOST_DEVICE __host__ __device__
#else
#define NELSSA_HOST_DEVICE
#endif

/*
 * What a cluster's spread adds to the log of its members' mean weight,
 * given @half_var, half the variance of the members' logits (scale^2 / 2
 * sum_i q_i^2 m2_i), and its @n members (n >= 1).
 *
 * The log-normal mean, @half_var, is the mean weight of many members.  n
 * of them spread by sigma have a mean weight carried by the largest,
 * about sigma sqrt(2 ln n) above the mean logit and one in n of them, so
 * past sigma^2 = 2 ln n, where the two agree (at ln n, with the same
 * slope), the gain is sigma sqrt(2 ln n) - ln n.  Without that bound a
 * peaked head -- logits spread by 7 in a 16-token cluster -- had each
 * unselected cluster overstated by some 17 nats (e^17), and the estimate
 * outweighed every selected token (Documentation/client.rst).
 */
static inline NELSSA_HOST_DEVICE float nelssa_spread_gain(float half_var, uint32_t n)
{
	const float ln = logf((float)n);

	return half_var <= ln ? half_var : sqrtf(2.0f * half_var) * sqrtf(2.0f * ln) - ln;
}

#endif
