// SPDX-License-Identifier: MIT
/*
 * The daemon's open UCX endpoints by handle, for the poller to find the
 * struct nd_ep of every active message's reply endpoint without walking
 * the list of them all: open addressing with linear probing, at most half
 * full, deletions by backward shift (no tombstones, so a table that has
 * seen many endpoints come and go probes no longer than a fresh one).
 * Room is reserved before an endpoint is made, so adding one never fails
 * once UCX has made it.  Poller thread only, as the list.
 */
#include <errno.h>
#include <stdlib.h>

#include "nelssad.h"

#define EPT_MIN_BITS 4u

/* Fibonacci hashing: handles are aligned allocations, their low bits alike. */
static uint32_t ept_home(const struct nd_ep_table *t, ucp_ep_h ep)
{
	return (uint32_t)(((uint64_t)(uintptr_t)ep * 0x9e3779b97f4a7c15ull) >> (64 - t->bits));
}

static void ept_place(struct nd_ep_table *t, ucp_ep_h ep, struct nd_ep *e)
{
	const uint32_t mask = (1u << t->bits) - 1;
	uint32_t i = ept_home(t, ep);

	while (t->slot[i].ep)
		i = (i + 1) & mask;
	t->slot[i].ep = ep;
	t->slot[i].e = e;
}

int nd_ep_table_reserve(struct nd_ep_table *t, uint32_t n)
{
	struct nd_ep_slot *old = t->slot;
	const uint32_t old_cap = t->slot ? 1u << t->bits : 0;
	uint32_t bits = EPT_MIN_BITS;

	if (n <= old_cap / 2)
		return 0;
	while (bits < 31 && (1u << bits) / 2 < n)
		bits++;
	if ((1u << bits) / 2 < n)
		return -ENOMEM;
	t->slot = calloc(1u << bits, sizeof(*t->slot));
	if (!t->slot) {
		t->slot = old;
		return -ENOMEM;
	}
	t->bits = bits;
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i].ep)
			ept_place(t, old[i].ep, old[i].e);
	free(old);
	return 0;
}

void nd_ep_table_add(struct nd_ep_table *t, ucp_ep_h ep, struct nd_ep *e)
{
	ept_place(t, ep, e);
	t->n++;
}

/* The slot holding @ep, or -1. */
static int64_t ept_slot(const struct nd_ep_table *t, ucp_ep_h ep)
{
	uint32_t mask, i;

	if (!t->slot || !ep)
		return -1;
	mask = (1u << t->bits) - 1;
	for (i = ept_home(t, ep); t->slot[i].ep; i = (i + 1) & mask)
		if (t->slot[i].ep == ep)
			return i;
	return -1;
}

struct nd_ep *nd_ep_table_find(const struct nd_ep_table *t, ucp_ep_h ep)
{
	const int64_t i = ept_slot(t, ep);

	return i < 0 ? NULL : t->slot[i].e;
}

void nd_ep_table_del(struct nd_ep_table *t, ucp_ep_h ep)
{
	const int64_t at = ept_slot(t, ep);
	uint32_t mask, hole, j;

	if (at < 0)
		return;
	mask = (1u << t->bits) - 1;
	hole = (uint32_t)at;
	/*
	 * Backward shift: an entry further on the probe run moves into the
	 * hole when the hole lies between its home slot and where it is, so
	 * that no lookup meets an empty slot before the entry it looks for.
	 */
	for (j = (hole + 1) & mask; t->slot[j].ep; j = (j + 1) & mask) {
		const uint32_t home = ept_home(t, t->slot[j].ep);

		if (((j - home) & mask) >= ((j - hole) & mask)) {
			t->slot[hole] = t->slot[j];
			hole = j;
		}
	}
	t->slot[hole].ep = NULL;
	t->slot[hole].e = NULL;
	t->n--;
}

void nd_ep_table_free(struct nd_ep_table *t)
{
	free(t->slot);
	t->slot = NULL;
	t->bits = 0;
	t->n = 0;
}
