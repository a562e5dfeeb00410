// SPDX-License-Identifier: MIT
/*
 * nelssad's endpoints by UCX handle (daemon/ep_table.c): against a plain
 * array as the model, through random adds and removals that grow the
 * table and leave long probe runs to shift back -- handles of one
 * allocator's stride, and ones that collide in their home slot -- every
 * handle added and not removed is found with its endpoint, and no other.
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

#include "nelssad.h"
#include "testutil.h"

#define MAX_EPS 2000u

/* A fake handle: never dereferenced, only hashed and compared. */
static ucp_ep_h handle(uintptr_t v)
{
	return (ucp_ep_h)v;
}

static void empty_table_finds_nothing(void **state)
{
	struct nd_ep_table t = { 0 };
	struct nd_ep e = { 0 };

	(void)state;
	assert_null(nd_ep_table_find(&t, handle(0x1000)));
	assert_null(nd_ep_table_find(&t, NULL));
	nd_ep_table_del(&t, handle(0x1000));	/* not in it: nothing happens */
	assert_int_equal(nd_ep_table_reserve(&t, 0), 0);
	assert_int_equal(nd_ep_table_reserve(&t, 1), 0);
	assert_null(nd_ep_table_find(&t, handle(0x1000)));
	nd_ep_table_add(&t, handle(0x1000), &e);
	assert_ptr_equal(nd_ep_table_find(&t, handle(0x1000)), &e);
	assert_null(nd_ep_table_find(&t, NULL));
	nd_ep_table_del(&t, handle(0x1000));
	assert_null(nd_ep_table_find(&t, handle(0x1000)));
	assert_int_equal(t.n, 0);
	nd_ep_table_free(&t);
	assert_null(t.slot);
	assert_null(nd_ep_table_find(&t, handle(0x1000)));
}

/* Reserving room never loses what is in it, and never shrinks it. */
static void reserve_keeps_entries(void **state)
{
	static struct nd_ep e[300];
	struct nd_ep_table t = { 0 };

	(void)state;
	for (uint32_t i = 0; i < 300; i++) {
		const uint32_t bits = t.bits;

		assert_int_equal(nd_ep_table_reserve(&t, i + 1), 0);
		assert_true(t.bits >= bits);
		assert_true((1u << t.bits) / 2 >= i + 1);
		nd_ep_table_add(&t, handle(0x10000 + 0x340 * i), &e[i]);
		for (uint32_t j = 0; j <= i; j++)
			assert_ptr_equal(nd_ep_table_find(&t, handle(0x10000 + 0x340 * j)), &e[j]);
	}
	assert_int_equal(t.n, 300);
	assert_int_equal(nd_ep_table_reserve(&t, 10), 0);
	assert_int_equal(t.n, 300);
	assert_ptr_equal(nd_ep_table_find(&t, handle(0x10000 + 0x340 * 299)), &e[299]);
	nd_ep_table_free(&t);
}

/*
 * Random adds and removals against the model.  @stride: the handles' step
 * (an allocator's, or one that puts many in one home slot of a small
 * table); each turn checks every handle ever used.
 */
static void against_model(uint64_t variant, uintptr_t stride, uint32_t live_max)
{
	static struct nd_ep e[MAX_EPS];
	static int in[MAX_EPS];
	struct nd_ep_table t = { 0 };
	struct tu_rng rng;
	uint32_t n = 0;

	tu_rng_for(&rng, "ep_table", variant);
	memset(in, 0, sizeof(in));
	for (uint32_t turn = 0; turn < 20000; turn++) {
		const uint32_t i = tu_below(&rng, MAX_EPS);
		const ucp_ep_h h = handle(0x7f0000000000ull + stride * (i + 1));

		if (in[i]) {
			nd_ep_table_del(&t, h);
			in[i] = 0;
			n--;
		} else if (n < live_max) {
			assert_int_equal(nd_ep_table_reserve(&t, n + 1), 0);
			nd_ep_table_add(&t, h, &e[i]);
			in[i] = 1;
			n++;
		}
		assert_int_equal(t.n, n);
		if (turn % 64 && turn < 19990)
			continue;
		for (uint32_t j = 0; j < MAX_EPS; j++) {
			const ucp_ep_h hj = handle(0x7f0000000000ull + stride * (j + 1));

			if (in[j])
				assert_ptr_equal(nd_ep_table_find(&t, hj), &e[j]);
			else
				assert_null(nd_ep_table_find(&t, hj));
		}
	}
	/* Everything out again: the table is empty, not one stale entry. */
	for (uint32_t j = 0; j < MAX_EPS; j++)
		if (in[j])
			nd_ep_table_del(&t, handle(0x7f0000000000ull + stride * (j + 1)));
	assert_int_equal(t.n, 0);
	for (uint32_t s = 0; t.slot && s < 1u << t.bits; s++)
		assert_null(t.slot[s].ep);
	nd_ep_table_free(&t);
}

static void random_ops_allocator_stride(void **state)
{
	(void)state;
	against_model(0, 0x2d0, 600);	/* struct-sized steps, a table grown to 2048 */
	against_model(1, 0x40, 40);	/* a few live, many come and go */
	against_model(4, 0x40, 8);	/* 16 slots: probe runs wrap around the end */
}

/* Handles 2^k apart: the low bits alike, only the hash tells them apart. */
static void random_ops_aligned_handles(void **state)
{
	(void)state;
	against_model(2, 0x100000, 900);
	against_model(3, (uintptr_t)1 << 32, 300);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_table_finds_nothing),
		cmocka_unit_test(reserve_keeps_entries),
		cmocka_unit_test(random_ops_allocator_stride),
		cmocka_unit_test(random_ops_aligned_handles),
	};

	tu_init("daemon_ep_table");
	return cmocka_run_group_tests_name("daemon_ep_table", tests, NULL, NULL);
}
