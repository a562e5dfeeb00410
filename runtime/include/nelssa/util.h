/* SPDX-License-Identifier: MIT */
/*
 * Small shared utilities, a leaf every layer may use (not installed, not
 * part of any library's API): the monotonic clock, number and size
 * parsing, and the device-memory extent allocator.  One copy each, so a
 * rule -- what a size may look like, which clock deadlines use -- is
 * written once.
 */
#ifndef NELSSA_UTIL_H
#define NELSSA_UTIL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Hand @msg to the function of nelssa_set_log_fn() (<nelssa/log.h>), if
 * one is installed; @source names the library part ("pnm", "client").
 */
void nelssa_log(int level, const char *source, const char *msg);

/* CLOCK_MONOTONIC in ns: every deadline and interval uses this clock. */
uint64_t nelssa_now_ns(void);

static inline uint64_t nelssa_now_ms(void)
{
	return nelssa_now_ns() / 1000000u;
}

/**
 * nelssa_parse_u64() - an unsigned integer within [@min, @max].
 * @s: decimal digits, or 0x and hex digits; nothing else (no sign, no
 *	space, no suffix; a leading 0 is decimal, never octal).
 * @min: smallest value accepted.
 * @max: largest value accepted.
 * @out: receives the value; untouched on error.
 *
 * Return: 0, or -EINVAL (malformed, overflow, out of range).
 */
int nelssa_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/**
 * nelssa_parse_size() - a byte size: "4096", "64K", "256M", "2G", "1T".
 * @s: a number as nelssa_parse_u64() reads it, then at most one binary
 *	unit K, M, G or T (either case).
 * @out: receives the bytes; untouched on error.
 *
 * Return: 0, or -EINVAL (malformed, or the bytes overflow 64 bits).
 */
int nelssa_parse_size(const char *s, uint64_t *out);

/*
 * A first-fit allocator of device-memory offsets with coalescing, the
 * userspace counterpart of the driver's genalloc pool.  Offset 0 is never
 * handed out (the first granule is reserved), so 0 can mean "none".
 */
struct nelssa_extent {
	uint64_t off, len;
};

struct nelssa_extent_alloc {
	uint64_t size, align, used;
	struct nelssa_extent *free;	/* sorted by offset, never adjacent */
	size_t nfree, cap;
};

/* 0, -EINVAL (align not a power of two, or size <= align), -ENOMEM. */
int nelssa_extent_init(struct nelssa_extent_alloc *a, uint64_t size, uint64_t align);
void nelssa_extent_fini(struct nelssa_extent_alloc *a);
/* 0 with *off set, or -ENOMEM. */
int nelssa_extent_get(struct nelssa_extent_alloc *a, uint64_t len, uint64_t *off);
void nelssa_extent_put(struct nelssa_extent_alloc *a, uint64_t off, uint64_t len);

#endif /* NELSSA_UTIL_H */
