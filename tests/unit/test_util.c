// SPDX-License-Identifier: MIT
/*
 * The shared utilities (<nelssa/util.h>): number and size parsing against
 * known answers, hostile strings included, and the extent allocator
 * against a byte map of which offsets are handed out.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/log.h>
#include <nelssa/util.h>
#include <nelssa/version.h>

#include "testutil.h"

static void parse_u64_known_answers(void **state)
{
	static const struct {
		const char *s;
		uint64_t want;
	} good[] = {
		{ "0", 0 }, { "7", 7 }, { "010", 10 }, { "0x10", 16 }, { "0XfF", 255 },
		{ "18446744073709551615", UINT64_MAX }, { "0xffffffffffffffff", UINT64_MAX },
	};
	static const char *const bad[] = {
		"", "-1", "+1", " 1", "1 ", "1K", "0x", "x1", "18446744073709551616",
		"0x10000000000000000", "1.5", "0b1",
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 42;
		assert_int_equal(0, nelssa_parse_u64(good[i].s, 0, UINT64_MAX, &v));
		assert_true(v == good[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		assert_int_equal(-EINVAL, nelssa_parse_u64(bad[i], 0, UINT64_MAX, &v));
		assert_true(v == 42);	/* untouched */
	}
	assert_int_equal(-EINVAL, nelssa_parse_u64(NULL, 0, 1, &v));
	assert_int_equal(-EINVAL, nelssa_parse_u64("5", 6, 9, &v));
	assert_int_equal(-EINVAL, nelssa_parse_u64("10", 6, 9, &v));
	assert_int_equal(0, nelssa_parse_u64("9", 6, 9, &v));
	assert_true(v == 9);
}

static void parse_size_known_answers(void **state)
{
	static const struct {
		const char *s;
		uint64_t want;
	} good[] = {
		{ "4096", 4096 }, { "64K", 64ull << 10 }, { "64k", 64ull << 10 },
		{ "256M", 256ull << 20 }, { "2G", 2ull << 30 }, { "1T", 1ull << 40 },
		{ "0x10M", 16ull << 20 }, { "16777215T", 16777215ull << 40 }, { "0", 0 },
	};
	static const char *const bad[] = {
		"", "M", "-1M", "1MB", "1KiB", "1P", "1 M", "16777216T", "1.5G", "8GB",
	};
	uint64_t v;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 42;
		assert_int_equal(0, nelssa_parse_size(good[i].s, &v));
		assert_true(v == good[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 42;
		assert_int_equal(-EINVAL, nelssa_parse_size(bad[i], &v));
		assert_true(v == 42);
	}
}

static void clock_is_monotonic(void **state)
{
	uint64_t a = nelssa_now_ns(), b = nelssa_now_ns();

	(void)state;
	assert_true(a > 0 && b >= a);
	assert_true(nelssa_now_ms() >= a / 1000000u);
}

/*
 * Random gets and puts against a byte map of the granules handed out:
 * nothing handed out twice, offset 0 never, everything inside the size,
 * aligned, the used count right, and once all is put back one extent
 * holds the whole space again (coalescing).
 */
static void extents_against_a_map(void **state)
{
	enum { GRAN = 64, GRANS = 512, LIVE = 96 };
	struct nelssa_extent_alloc a;
	unsigned char map[GRANS] = { 0 };
	uint64_t off[LIVE] = { 0 }, len[LIVE] = { 0 }, used = 0;
	struct tu_rng rng;

	(void)state;
	tu_rng_for(&rng, __func__, 0);
	assert_int_equal(-EINVAL, nelssa_extent_init(&a, GRAN * GRANS, 48));
	assert_int_equal(-EINVAL, nelssa_extent_init(&a, GRAN, GRAN));
	assert_int_equal(0, nelssa_extent_init(&a, GRAN * GRANS, GRAN));
	for (int step = 0; step < 20000; step++) {
		uint32_t i = tu_below(&rng, LIVE);

		if (len[i]) {
			nelssa_extent_put(&a, off[i], len[i]);
			for (uint64_t g = off[i] / GRAN; g < (off[i] + len[i] + GRAN - 1) / GRAN; g++)
				map[g] = 0;
			used -= (len[i] + GRAN - 1) / GRAN * GRAN;
			len[i] = 0;
		} else {
			uint64_t want = 1 + tu_below(&rng, 8 * GRAN);

			if (nelssa_extent_get(&a, want, &off[i]))
				continue;	/* fragmented or full: allowed */
			assert_true(off[i] >= GRAN && off[i] % GRAN == 0);
			assert_true(off[i] + want <= (uint64_t)GRAN * GRANS);
			for (uint64_t g = off[i] / GRAN; g < (off[i] + want + GRAN - 1) / GRAN; g++) {
				assert_int_equal(0, map[g]);
				map[g] = 1;
			}
			len[i] = want;
			used += (want + GRAN - 1) / GRAN * GRAN;
		}
		assert_true(a.used == used);
	}
	for (uint32_t i = 0; i < LIVE; i++)
		if (len[i])
			nelssa_extent_put(&a, off[i], len[i]);
	assert_true(a.used == 0);
	assert_int_equal(1, (int)a.nfree);
	assert_true(a.free[0].off == GRAN && a.free[0].len == (uint64_t)GRAN * (GRANS - 1));
	/* Nothing larger than the space, nothing empty. */
	assert_int_equal(-ENOMEM, nelssa_extent_get(&a, (uint64_t)GRAN * GRANS, &off[0]));
	assert_int_equal(-ENOMEM, nelssa_extent_get(&a, 0, &off[0]));
	nelssa_extent_fini(&a);
}

struct captured {
	int calls, level;
	char source[16], msg[64];
};

static void capture(void *ctx, int level, const char *source, const char *msg)
{
	struct captured *c = ctx;

	c->calls++;
	c->level = level;
	snprintf(c->source, sizeof(c->source), "%s", source);
	snprintf(c->msg, sizeof(c->msg), "%s", msg);
}

/* Messages reach the installed function, with its context, and stop when it is removed. */
static void log_hook(void **state)
{
	struct captured c = { 0 };

	(void)state;
	nelssa_log(NELSSA_LOG_ERR, "pnm", "before any hook");	/* nowhere, no crash */
	nelssa_set_log_fn(capture, &c);
	nelssa_log(NELSSA_LOG_WARNING, "client", "hello");
	assert_int_equal(1, c.calls);
	assert_int_equal(NELSSA_LOG_WARNING, c.level);
	assert_string_equal("client", c.source);
	assert_string_equal("hello", c.msg);
	nelssa_set_log_fn(NULL, NULL);
	nelssa_log(NELSSA_LOG_ERR, "pnm", "after");
	assert_int_equal(1, c.calls);
}

/* MAJOR.MINOR.PATCH, each a decimal number. */
static void version_string(void **state)
{
	unsigned int major, minor, patch;
	char end;

	(void)state;
	assert_non_null(nelssa_version());
	assert_int_equal(3, sscanf(nelssa_version(), "%u.%u.%u%c", &major, &minor, &patch, &end));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_u64_known_answers),
		cmocka_unit_test(parse_size_known_answers),
		cmocka_unit_test(clock_is_monotonic),
		cmocka_unit_test(extents_against_a_map),
		cmocka_unit_test(log_hook),
		cmocka_unit_test(version_string),
	};

	tu_init("util");
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
