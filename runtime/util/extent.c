// SPDX-License-Identifier: MIT
/*
 * Device-memory offset allocator: a sorted array of free extents, first
 * fit, coalescing on free.  Regions are few and large (KV stores, staging
 * buffers), so a linear scan costs less than any tree would.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/util.h>

int nelssa_extent_init(struct nelssa_extent_alloc *a, uint64_t size, uint64_t align)
{
	memset(a, 0, sizeof(*a));
	if (!align || (align & (align - 1)) || size <= align)
		return -EINVAL;
	a->size = size & ~(align - 1);
	a->align = align;
	a->cap = 16;
	a->free = calloc(a->cap, sizeof(*a->free));
	if (!a->free)
		return -ENOMEM;
	/* The first granule is reserved: offset 0 is never a region. */
	a->free[0] = (struct nelssa_extent){ align, a->size - align };
	a->nfree = 1;
	return 0;
}

void nelssa_extent_fini(struct nelssa_extent_alloc *a)
{
	free(a->free);
	memset(a, 0, sizeof(*a));
}

int nelssa_extent_get(struct nelssa_extent_alloc *a, uint64_t len, uint64_t *off)
{
	if (!len || len > a->size)
		return -ENOMEM;
	len = (len + a->align - 1) & ~(a->align - 1);
	for (size_t i = 0; i < a->nfree; i++) {
		struct nelssa_extent *e = &a->free[i];

		if (e->len < len)
			continue;
		*off = e->off;
		e->off += len;
		e->len -= len;
		if (!e->len) {
			memmove(e, e + 1, (a->nfree - i - 1) * sizeof(*e));
			a->nfree--;
		}
		a->used += len;
		return 0;
	}
	return -ENOMEM;
}

void nelssa_extent_put(struct nelssa_extent_alloc *a, uint64_t off, uint64_t len)
{
	size_t i = 0;

	len = (len + a->align - 1) & ~(a->align - 1);
	a->used -= len;
	while (i < a->nfree && a->free[i].off < off)
		i++;
	/* Merge with the neighbour before and/or after when they touch. */
	if (i > 0 && a->free[i - 1].off + a->free[i - 1].len == off) {
		a->free[i - 1].len += len;
		if (i < a->nfree && off + len == a->free[i].off) {
			a->free[i - 1].len += a->free[i].len;
			memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof(a->free[0]));
			a->nfree--;
		}
		return;
	}
	if (i < a->nfree && off + len == a->free[i].off) {
		a->free[i].off = off;
		a->free[i].len += len;
		return;
	}
	if (a->nfree == a->cap) {
		struct nelssa_extent *n = realloc(a->free, 2 * a->cap * sizeof(*n));

		if (!n)
			return;	/* the extent leaks; the device keeps working */
		a->free = n;
		a->cap *= 2;
	}
	memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof(a->free[0]));
	a->free[i] = (struct nelssa_extent){ off, len };
	a->nfree++;
}
