// SPDX-License-Identifier: MIT
/*
 * Workloads for nelssa-sim: Mooncake's JSONL traces (FAST'25; one object
 * per line with "input_length" and "output_length", see
 * ../shared/data/mooncake) with optional length scaling, synthetic mixes,
 * and Poisson re-timing at a chosen request rate.
 *
 * Every random stream (the synthetic lengths, the arrivals, a burst) is
 * its own xorshift generator started from splitmix64(seed, stream), so
 * seeds 2 and 3 are as different as any two, and no stream starts on the
 * small first outputs a small seed gives xorshift.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"
#include "tool_util.h"

uint64_t sim_seed_stream(uint64_t seed, uint64_t stream)
{
	uint64_t z = seed + (stream + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 0x9e3779b97f4a7c15ull;	/* xorshift must not start at 0 */
}

/* Uniform in [0, 1) from the next 53 bits. */
static double uniform(uint64_t *s)
{
	return (tl_next(s) >> 11) * 0x1.0p-53;
}

static int field(const char *line, const char *key, double *v)
{
	const char *p = strstr(line, key);
	char *end;

	if (!p)
		return -1;
	p = strchr(p + strlen(key), ':');
	if (!p)
		return -1;
	*v = strtod(p + 1, &end);
	return end == p + 1 ? -1 : 0;
}

int sim_trace_load(const char *path, double scale, uint32_t max, struct sim_trace *t)
{
	FILE *f = fopen(path, "r");
	char line[1 << 16];
	uint32_t cap = 1024;

	memset(t, 0, sizeof(*t));
	if (!f)
		return -ENOENT;
	t->req = calloc(cap, sizeof(*t->req));
	while (t->req && fgets(line, sizeof(line), f) && (!max || t->n < max)) {
		double in, out;

		if (field(line, "\"input_length\"", &in) || field(line, "\"output_length\"", &out) ||
		    in < 1 || out < 1)
			continue;	/* not a request record */
		if (t->n == cap) {
			struct sim_req *r = realloc(t->req, sizeof(*r) * cap * 2);

			if (!r)
				break;
			t->req = r;
			memset(t->req + cap, 0, sizeof(*r) * cap);
			cap *= 2;
		}
		t->req[t->n].input = (uint32_t)fmax(1.0, round(in * scale));
		t->req[t->n].output = (uint32_t)out;
		t->n++;
	}
	fclose(f);
	if (!t->req)
		return -ENOMEM;
	return t->n ? 0 : -EINVAL;
}

/* A long request's input: uniform in [@lo, @hi]. */
static uint32_t long_input(uint64_t *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)((tl_next(s) >> 11) % ((uint64_t)hi - lo + 1));
}

int sim_trace_synthetic(uint32_t n, double long_frac, uint32_t long_lo, uint32_t long_hi,
			uint32_t out_len, uint64_t seed, struct sim_trace *t)
{
	uint64_t s = sim_seed_stream(seed, SIM_STREAM_LENGTHS);

	t->n = n;
	t->req = calloc(n ? n : 1, sizeof(*t->req));
	if (!t->req)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		double u = uniform(&s);

		t->req[i].input = u < long_frac ? long_input(&s, long_lo, long_hi)
						: 1024 + (uint32_t)((tl_next(&s) >> 11) % 7168);
		t->req[i].output = out_len;
	}
	return 0;
}

void sim_retime(struct sim_trace *t, double rps, const struct sim_rate_step *steps, uint32_t n,
		uint64_t seed)
{
	uint64_t s = sim_seed_stream(seed, SIM_STREAM_ARRIVALS);
	double now = 0.0;
	uint32_t k = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		double u = ((tl_next(&s) >> 11) + 1) * 0x1.0p-53;	/* (0, 1] */

		t->req[i].arrival = now;
		now += -log(u) / rps;
		/* Memoryless: a gap that crosses a step restarts at the new rate. */
		while (k < n && now >= steps[k].at) {
			now = steps[k].at + (now - steps[k].at) * rps / steps[k].rps;
			rps = steps[k++].rps;
		}
	}
}

void sim_burst(struct sim_trace *t, double from, double len, double frac, uint32_t long_lo,
	       uint32_t long_hi, uint64_t seed)
{
	uint64_t s = sim_seed_stream(seed, SIM_STREAM_BURST);

	for (uint32_t i = 0; i < t->n; i++)
		if (t->req[i].arrival >= from && t->req[i].arrival < from + len && uniform(&s) < frac)
			t->req[i].input = long_input(&s, long_lo, long_hi);
}

void sim_grow(struct sim_trace *t, double ratio)
{
	for (uint32_t i = 0; i < t->n; i++)
		t->req[i].output = (uint32_t)fmax(1.0, round(t->req[i].input * ratio));
}

void sim_trace_free(struct sim_trace *t)
{
	free(t->req);
	memset(t, 0, sizeof(*t));
}
