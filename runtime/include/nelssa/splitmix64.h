/* SPDX-License-Identifier: MIT */
/*
 * splitmix64 (Steele, Lea, Flood, OOPSLA'14; Vigna's constants): the one
 * copy the unit tests, nelssa-sim and nelssa-accuracy draw their seeded
 * data from, so that a seed means the same stream everywhere.  It lives
 * beside the runtime's headers because every test and tool already has
 * them on its include path; it is not installed (no library function uses
 * it) and is not a cryptographic generator.
 */
#ifndef NELSSA_SPLITMIX64_H
#define NELSSA_SPLITMIX64_H

#include <stdint.h>

/* 2^64 / phi, odd: the state's increment (its period is the full 2^64). */
#define NELSSA_SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

/*
 * The output function alone: a bijection of 64 bits whose every input bit
 * reaches every output bit, for deriving one seed from another.
 */
static inline uint64_t nelssa_splitmix64_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Advances @state and returns the next value of its stream. */
static inline uint64_t nelssa_splitmix64(uint64_t *state)
{
	return nelssa_splitmix64_mix(*state += NELSSA_SPLITMIX64_GAMMA);
}

#endif /* NELSSA_SPLITMIX64_H */
