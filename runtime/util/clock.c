// SPDX-License-Identifier: MIT
/* The one monotonic clock of the userspace stack. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include <nelssa/util.h>

uint64_t nelssa_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
