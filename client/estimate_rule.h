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
 * The largest of @n standard normal draws, in expectation: Blom's plotting
 * position, Phi^-1((n - 0.375) / (n + 0.25)), by Acklam's rational
 * approximation of Phi^-1 (relative error below 1.2e-9) for p >= 0.5; 0
 * for n = 1 (p = 0.5).  Within 0.03 of the exact expectation for n <= 64.
 */
static inline NELSSA_HOST_DEVICE float nelssa_normal_max(uint32_t n)
{
	const double p = (n - 0.375) / (n + 0.25);
	double q, r;

	if (p <= 1.0 - 0.02425) {
		q = p - 0.5;
		r = q * q;
		return (float)((((((-3.969683028665376e+01 * r + 2.209460984245205e+02) * r -
				   2.759285104469687e+02) * r + 1.383577518672690e+02) * r -
				 3.066479806614716e+01) * r + 2.506628277459239e+00) * q /
			       (((((-5.447609879822406e+01 * r + 1.615858368580409e+02) * r -
				   1.556989798598866e+02) * r + 6.680131188771972e+01) * r -
				 1.328068155288572e+01) * r + 1.0));
	}
	q = sqrt(-2.0 * log(1.0 - p));
	return (float)(-(((((-7.784894002430293e-03 * q - 3.223964580411365e-01) * q -
			    2.400758277161838e+00) * q - 2.549732539343734e+00) * q +
			  4.374664141464968e+00) * q + 2.938163982698783e+00) /
		       ((((7.784695709041462e-03 * q + 3.224671290700398e-01) * q +
			  2.445134137142996e+00) * q + 3.754408661907416e+00) * q + 1.0));
}

/*
 * What a cluster's spread adds to the log of its members' mean weight,
 * given @half_var, half the variance sigma^2 of the members' logits
 * (scale^2 / 2 sum_i q_i^2 m2_i), and its @n members (n >= 1).
 *
 * The log-normal mean, @half_var, is the mean weight of many members.  n
 * of them spread by sigma have a mean weight carried by the largest, some
 * a_n sigma above the mean logit (a_n: nelssa_normal_max()): past sigma =
 * a_n the gain follows the tangent of the log-normal's of slope a_n,
 * a_n sigma - a_n^2 / 2.  Against the median of log mean exp(sigma Z) over
 * 16 draws: 10.8 for 9.5 at sigma 7, 16.1 for 14.6 at 10, where the
 * log-normal says 24.5 and 50.  Unbounded, a peaked head -- logits spread
 * by 7 in 16-token clusters -- had its estimate outweigh every selected
 * token (Documentation/client.rst).
 */
static inline NELSSA_HOST_DEVICE float nelssa_spread_gain(float half_var, uint32_t n)
{
	const float a = nelssa_normal_max(n);

	return half_var <= 0.5f * a * a ? half_var : a * sqrtf(2.0f * half_var) - 0.5f * a * a;
}

#endif
