// SPDX-License-Identifier: MIT
/* Helpers shared by the benchmark and demo programs (tool_util.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nelssa/util.h>

#include "tool_util.h"

double tl_now(void)
{
	return (double)nelssa_now_ns() * 1e-9;
}

void *tl_calloc(const char *prog, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p) {
		fprintf(stderr, "%s: out of memory (%zu x %zu bytes)\n", prog, n, size);
		exit(1);
	}
	return p;
}

uint64_t tl_next(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

float tl_frand(uint64_t *state)
{
	return (float)((tl_next(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

uint32_t tl_vary_sizes(uint64_t *state, uint32_t *sizes, uint32_t n, uint32_t context)
{
	uint32_t max = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (i % 2)
			sizes[i] = 32 - sizes[i - 1];
		else if (i + 1 < n)
			sizes[i] = 1 + (uint32_t)(tl_next(state) % 31);
		else
			sizes[i] = 16;
		if (i + 1 == n)
			sizes[i] += context - 16 * n;
		max = sizes[i] > max ? sizes[i] : max;
	}
	return max;
}

int tl_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double tl_percentile(double *v, size_t n, double p)
{
	if (!n)
		return 0.0;
	qsort(v, n, sizeof(*v), tl_cmp_double);
	return v[(size_t)(p * (double)(n - 1))];
}

int tl_parse_u32(const char *prog, const char *s, uint32_t lo, uint32_t hi, uint32_t *out,
		 const char *what)
{
	uint64_t v;

	if (nelssa_parse_u64(s, lo, hi, &v)) {
		fprintf(stderr, "%s: %s %s: need an integer in [%u, %u]\n", prog, what, s, lo, hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* Whether @flags, a cpuinfo "flags"/"Features" line, lists @flag as a whole word. */
static int has_flag(const char *flags, const char *flag)
{
	const size_t n = strlen(flag);

	for (const char *p = strstr(flags, flag); p; p = strstr(p + 1, flag))
		if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
		    (p[n] == ' ' || p[n] == '\n' || p[n] == 0))
			return 1;
	return 0;
}

const char *tl_cpu_isa(void)
{
	static const char *const isa[][2] = { { "avx512f", "avx512" }, { "avx2", "avx2" },
					      { "asimd", "neon" } };
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	const char *best = "scalar";

	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) && strncmp(line, "Features", 8))
			continue;
		for (size_t i = 0; i < sizeof(isa) / sizeof(isa[0]); i++)
			if (has_flag(line, isa[i][0])) {
				best = isa[i][1];
				break;
			}
		break;
	}
	if (f)
		fclose(f);
	return best;
}

const char *tl_cpu_model(char *buf, size_t len)
{
	static const char *const keys[] = { "model name", "CPU part" };
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];

	snprintf(buf, len, "unknown");
	for (size_t k = 0; f && k < sizeof(keys) / sizeof(keys[0]); k++) {
		rewind(f);
		while (fgets(line, sizeof(line), f)) {
			char *colon = strchr(line, ':');
			size_t n;

			if (strncmp(line, keys[k], strlen(keys[k])) || !colon)
				continue;
			colon += 1 + strspn(colon + 1, " \t");
			n = strcspn(colon, "\n");
			snprintf(buf, len, "%.*s", (int)n, colon);
			/* Printed inside JSON strings: no quote, backslash or control byte. */
			for (char *c = buf; *c; c++)
				if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
					*c = ' ';
			fclose(f);
			return buf;
		}
	}
	if (f)
		fclose(f);
	return buf;
}

double tl_stream_read(const void *p, uint64_t bytes)
{
	const uint64_t *w = p;
	static volatile uint64_t sink;
	double best = 0.0;

	for (int pass = 0; pass < 3; pass++) {
		uint64_t a = 0, b = 0, c = 0, d = 0;
		double t0 = tl_now(), dt;

		for (uint64_t i = 0; i + 4 <= bytes / 8; i += 4) {
			a += w[i];
			b += w[i + 1];
			c += w[i + 2];
			d += w[i + 3];
		}
		dt = tl_now() - t0;
		sink += a + b + c + d;
		if (dt > 0.0 && (double)bytes / dt / 1e9 > best)
			best = (double)bytes / dt / 1e9;
	}
	return best;
}
