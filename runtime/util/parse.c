// SPDX-License-Identifier: MIT
/*
 * Number and size parsing for every option, config file and device spec:
 * one grammar, so "64M" means the same to nelssad, nelssa-devemu and a
 * sim: device, and a negative or overflowing value is refused everywhere.
 */
#include <errno.h>
#include <string.h>

#include <nelssa/util.h>

/* Digits of @s in @base into *v; the first byte after them in *end. */
static int digits(const char *s, unsigned int base, uint64_t *v, const char **end)
{
	uint64_t x = 0;
	const char *p = s;

	for (;; p++) {
		unsigned int d;

		if (*p >= '0' && *p <= '9')
			d = (unsigned int)(*p - '0');
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = (unsigned int)(*p - 'a' + 10);
		else if (base == 16 && *p >= 'A' && *p <= 'F')
			d = (unsigned int)(*p - 'A' + 10);
		else
			break;
		if (x > (UINT64_MAX - d) / base)
			return -EINVAL;
		x = x * base + d;
	}
	if (p == s)
		return -EINVAL;
	*v = x;
	*end = p;
	return 0;
}

static int number(const char *s, uint64_t *v, const char **end)
{
	if (!s)
		return -EINVAL;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
		return digits(s + 2, 16, v, end);
	return digits(s, 10, v, end);
}

int nelssa_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *end;
	uint64_t v;

	if (number(s, &v, &end) || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int nelssa_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *end, *u;
	unsigned int shift = 0;
	uint64_t v;

	if (number(s, &v, &end))
		return -EINVAL;
	if (*end) {
		char c = *end >= 'a' && *end <= 'z' ? (char)(*end - 'a' + 'A') : *end;

		u = strchr(units, c);
		if (!c || !u || end[1])
			return -EINVAL;
		shift = 10u * (unsigned int)(u - units + 1);
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}
