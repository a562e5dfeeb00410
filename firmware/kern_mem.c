// SPDX-License-Identifier: MIT
/* Memory-class kernels: FILL and COPY (NOP has no kernel). */
#include <string.h>

#include "fw_internal.h"

void nfw_exec_fill(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	const struct npnm_fill_params *f = &desc->p.fill;
	uint8_t *dst = nfw_ptr(mem, desc, NPNM_FILL_DST, 0);
	uint64_t len = desc->op[NPNM_FILL_DST].len;
	uint8_t pat[64];

	if (f->width == 1) {
		memset(dst, (int)f->pattern, len);
		return;
	}
	/* Replicate the little-endian pattern into a 64-byte block. */
	for (unsigned int i = 0; i < sizeof(pat); i++)
		pat[i] = (uint8_t)(f->pattern >> (8 * (i % f->width)));
	while (len >= sizeof(pat)) {
		memcpy(dst, pat, sizeof(pat));
		dst += sizeof(pat);
		len -= sizeof(pat);
	}
	memcpy(dst, pat, len);
}

void nfw_exec_copy(const struct nfw_mem *mem, const struct npnm_cmd *desc)
{
	memmove(nfw_ptr(mem, desc, NPNM_COPY_DST, 0), nfw_ptr(mem, desc, NPNM_COPY_SRC, 0),
		desc->op[NPNM_COPY_DST].len);
}
