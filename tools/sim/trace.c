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
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/splitmix64.h>

#include "sim.h"
#include "tool_util.h"

/* The (stream + 1)-th output of splitmix64 started at @seed. */
uint64_t sim_seed_stream(uint64_t seed, uint64_t stream)
{
	uint64_t z = nelssa_splitmix64_mix(seed + (stream + 1) * NELSSA_SPLITMIX64_GAMMA);

	return z ? z : NELSSA_SPLITMIX64_GAMMA;	/* xorshift must not start at 0 */
}

/* Uniform in [0, 1) from the next 53 bits. */
static double uniform(uint64_t *s)
{
	return (tl_next(s) >> 11) * 0x1.0p-53;
}

/*
 * A minimal reader of one JSON value, enough to walk a flat object of a
 * trace line and reject what is not JSON: strings (escapes checked, not
 * decoded), numbers, true/false/null, arrays and objects (nested to 16).
 * Each returns the position after the value, or NULL.
 */
static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

static const char *json_string(const char *p)
{
	if (*p++ != '"')
		return NULL;
	for (; *p != '"'; p++) {
		if ((unsigned char)*p < 0x20)
			return NULL;	/* control characters (and the end) are not allowed */
		if (*p == '\\') {
			p++;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (!isxdigit((unsigned char)p[i]))
						return NULL;
				p += 4;
			} else if (!*p || !strchr("\"\\/bfnrt", *p)) {
				return NULL;
			}
		}
	}
	return p + 1;
}

/* A JSON number; its value in *@v when @v is not NULL. */
static const char *json_number(const char *p, double *v)
{
	const char *q = p;
	char *end;

	if (*q == '-')
		q++;
	if (*q == '0')
		q++;
	else if (isdigit((unsigned char)*q))
		while (isdigit((unsigned char)*q))
			q++;
	else
		return NULL;
	if (*q == '.') {
		if (!isdigit((unsigned char)*++q))
			return NULL;
		while (isdigit((unsigned char)*q))
			q++;
	}
	if (*q == 'e' || *q == 'E') {
		q++;
		if (*q == '+' || *q == '-')
			q++;
		if (!isdigit((unsigned char)*q))
			return NULL;
		while (isdigit((unsigned char)*q))
			q++;
	}
	if (v) {
		*v = strtod(p, &end);
		if (end != q)
			return NULL;
	}
	return q;
}

static const char *json_value(const char *p, int depth)
{
	p = json_ws(p);
	if (depth > 16)
		return NULL;
	switch (*p) {
	case '"':
		return json_string(p);
	case '[':
		p = json_ws(p + 1);
		if (*p == ']')
			return p + 1;
		for (;;) {
			p = json_value(p, depth + 1);
			if (!p)
				return NULL;
			p = json_ws(p);
			if (*p == ']')
				return p + 1;
			if (*p++ != ',')
				return NULL;
		}
	case '{':
		p = json_ws(p + 1);
		if (*p == '}')
			return p + 1;
		for (;;) {
			p = json_string(json_ws(p));
			if (!p)
				return NULL;
			p = json_ws(p);
			if (*p++ != ':')
				return NULL;
			p = json_value(p, depth + 1);
			if (!p)
				return NULL;
			p = json_ws(p);
			if (*p == '}')
				return p + 1;
			if (*p++ != ',')
				return NULL;
		}
	case 't':
		return strncmp(p, "true", 4) ? NULL : p + 4;
	case 'f':
		return strncmp(p, "false", 5) ? NULL : p + 5;
	case 'n':
		return strncmp(p, "null", 4) ? NULL : p + 4;
	default:
		return json_number(p, NULL);
	}
}

/*
 * One trace line: a JSON object with integer "input_length" and
 * "output_length" in [1, SIM_MAX_TOKENS] (other keys are ignored).
 * 0, or -1 with the reason in @why.
 */
static int parse_record(const char *line, double *in, double *out, char *why, size_t why_len)
{
	const char *p = json_ws(line);
	int have_in = 0, have_out = 0;

	if (*p++ != '{') {
		snprintf(why, why_len, "not a JSON object");
		return -1;
	}
	p = json_ws(p);
	if (*p == '}') {
		p++;
		goto end;
	}
	for (;;) {
		const char *k = json_ws(p), *ke = json_string(k);
		double v;
		int which;

		if (!ke) {
			snprintf(why, why_len, "not JSON (a key expected)");
			return -1;
		}
		which = ke - k == 14 && !strncmp(k, "\"input_length\"", 14) ? 1 :
			ke - k == 15 && !strncmp(k, "\"output_length\"", 15) ? 2 : 0;
		p = json_ws(ke);
		if (*p++ != ':') {
			snprintf(why, why_len, "not JSON (':' expected)");
			return -1;
		}
		p = json_ws(p);
		if (which) {
			const char *name = which == 1 ? "input_length" : "output_length";
			const char *e = json_number(p, &v);

			if ((which == 1 && have_in) || (which == 2 && have_out)) {
				snprintf(why, why_len, "%s given twice", name);
				return -1;
			}
			if (!e) {
				snprintf(why, why_len, "%s is not a number", name);
				return -1;
			}
			if (!(v == floor(v)) || v < 1 || v > SIM_MAX_TOKENS) {
				snprintf(why, why_len, "%s %.*s: need an integer in [1, %u]", name,
					 (int)(e - p > 40 ? 40 : e - p), p, SIM_MAX_TOKENS);
				return -1;
			}
			*(which == 1 ? in : out) = v;
			*(which == 1 ? &have_in : &have_out) = 1;
			p = e;
		} else {
			p = json_value(p, 1);
			if (!p) {
				snprintf(why, why_len, "not JSON (a bad value)");
				return -1;
			}
		}
		p = json_ws(p);
		if (*p == '}') {
			p++;
			break;
		}
		if (*p++ != ',') {
			snprintf(why, why_len, "not JSON (',' or '}' expected)");
			return -1;
		}
	}
end:
	if (*json_ws(p)) {
		snprintf(why, why_len, "text after the object");
		return -1;
	}
	if (!have_in || !have_out) {
		snprintf(why, why_len, "no %s", have_in ? "output_length" : "input_length");
		return -1;
	}
	return 0;
}

int sim_trace_load(const char *path, double scale, uint32_t max, int skip_bad,
		   struct sim_trace *t, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, why[160];
	size_t cap_line = 0;
	uint32_t cap = 1024;
	uint64_t lineno = 0;
	ssize_t got;
	int ret = 0;

	memset(t, 0, sizeof(*t));
	if (!f) {
		snprintf(err, err_len, "%s: cannot open", path);
		return -ENOENT;
	}
	t->req = calloc(cap, sizeof(*t->req));
	while (t->req && (!max || t->n < max) && (got = getline(&line, &cap_line, f)) >= 0) {
		double in = 0, out = 0, scaled;

		lineno++;
		if ((size_t)got != strlen(line)) {
			snprintf(why, sizeof(why), "a NUL byte in the line");
		} else if (!*json_ws(line)) {
			continue;	/* a blank line: no record, nothing to count */
		} else if (!parse_record(line, &in, &out, why, sizeof(why))) {
			scaled = fmax(1.0, round(in * scale));
			if (scaled <= SIM_MAX_TOKENS) {
				if (t->n == cap) {
					struct sim_req *r = realloc(t->req, sizeof(*r) * cap * 2);

					if (!r) {
						ret = -ENOMEM;
						break;
					}
					t->req = r;
					memset(t->req + cap, 0, sizeof(*r) * cap);
					cap *= 2;
				}
				t->req[t->n].input = (uint32_t)scaled;
				t->req[t->n].output = (uint32_t)out;
				t->n++;
				continue;
			}
			snprintf(why, sizeof(why), "input_length %.0f x --scale %g is over %u tokens",
				 in, scale, SIM_MAX_TOKENS);
		}
		/* A bad line: an error, or with skip_bad a counted skip. */
		if (!skip_bad) {
			snprintf(err, err_len, "%s:%llu: %s", path, (unsigned long long)lineno, why);
			ret = -EINVAL;
			break;
		}
		if (!t->skipped)
			snprintf(t->first_skip, sizeof(t->first_skip), "line %llu: %s",
				 (unsigned long long)lineno, why);
		t->skipped++;
	}
	if (!ret && ferror(f)) {
		snprintf(err, err_len, "%s: read error", path);
		ret = -EIO;
	}
	free(line);
	fclose(f);
	if (!t->req)
		ret = -ENOMEM;
	if (ret == -ENOMEM)
		snprintf(err, err_len, "%s: out of memory", path);
	if (!ret && !t->n) {
		snprintf(err, err_len, "%s: no request records", path);
		ret = -EINVAL;
	}
	if (ret)
		sim_trace_free(t);
	return ret;
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

	memset(t, 0, sizeof(*t));
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

int sim_grow(struct sim_trace *t, double ratio)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (round(t->req[i].input * ratio) > SIM_MAX_TOKENS)
			return -ERANGE;
	for (uint32_t i = 0; i < t->n; i++)
		t->req[i].output = (uint32_t)fmax(1.0, round(t->req[i].input * ratio));
	return 0;
}

void sim_trace_free(struct sim_trace *t)
{
	free(t->req);
	memset(t, 0, sizeof(*t));
}
