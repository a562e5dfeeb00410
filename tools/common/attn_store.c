// SPDX-License-Identifier: MIT
/* The SPARSE_ATTN benchmarks' synthetic KV stores (attn_store.h). */
#include <string.h>

#include <linux/nelssa_pnm.h>

#include "npnm_rules.h"

#include "attn_store.h"
#include "tool_util.h"

static const char *const dtype_names[] = {
	[NPNM_DTYPE_BF16] = "bf16", [NPNM_DTYPE_FP16] = "fp16",
	[NPNM_DTYPE_FP8_E4M3] = "fp8", [NPNM_DTYPE_INT8] = "int8",
};

uint8_t tl_kv_dtype_parse(const char *name)
{
	for (unsigned int i = 1; i < sizeof(dtype_names) / sizeof(dtype_names[0]); i++)
		if (!strcmp(name, dtype_names[i]))
			return (uint8_t)i;
	return 0;
}

const char *tl_kv_dtype_name(uint8_t kv_dtype)
{
	return kv_dtype && kv_dtype < sizeof(dtype_names) / sizeof(dtype_names[0]) ?
	       dtype_names[kv_dtype] : "?";
}

int tl_attn_dots_parse(const char *name, uint32_t *flags)
{
	if (strcmp(name, "fp32") && strcmp(name, "bf16"))
		return -1;
	*flags = strcmp(name, "bf16") ? 0 : NPNM_ATTN_F_BF16_DOTS;
	return 0;
}

const char *tl_attn_dots_name(uint32_t flags)
{
	return flags & NPNM_ATTN_F_BF16_DOTS ? "bf16" : "fp32";
}

int tl_kv_layout_parse(const char *name)
{
	if (!strcmp(name, "packed"))
		return 0;
	return strcmp(name, "adjacent") ? -1 : 1;
}

const char *tl_kv_layout_name(const struct tl_attn_store *s)
{
	return s->kv_stride ? "adjacent" : "packed";
}

int tl_attn_store_plan(struct tl_attn_store *s, uint8_t kv_dtype, uint32_t head_dim,
		       uint32_t context, uint32_t cluster, int adjacent)
{
	const uint64_t kv = npnm_kv_bytes(kv_dtype, head_dim, context);
	const uint64_t block = npnm_kv_block_bytes(kv_dtype, head_dim);

	if (!kv)
		return -1;
	s->context = context;
	s->cluster = cluster;
	s->head_dim = head_dim;
	s->kv_dtype = kv_dtype;
	s->nclusters = (context + cluster - 1) / cluster;
	s->token_bytes = 2.0 * (double)npnm_kv_bytes(kv_dtype, head_dim, NPNM_KV_QTILE) /
			 NPNM_KV_QTILE;
	/* Blocks are whole: a 16-bit row type's block is 32 * head_dim bytes. */
	s->kv_stride = adjacent && block % NPNM_KV_STRIDE_ALIGN == 0 ? (uint32_t)(2 * block) : 0;
	s->v_off = s->kv_stride ? block : kv;
	s->table_off = s->kv_stride ? (context + NPNM_KV_QTILE - 1) / NPNM_KV_QTILE * 2 * block :
		       2 * kv;
	s->bytes = (s->table_off + (uint64_t)s->nclusters * sizeof(struct npnm_cluster) + 4095) &
		   ~4095ull;
	return 0;
}

void tl_attn_store_unpack(const struct tl_attn_store *s, const uint8_t *store, uint8_t *k,
			  uint8_t *v)
{
	const uint64_t packed = npnm_kv_bytes(s->kv_dtype, s->head_dim, s->context);
	const uint64_t block = npnm_kv_block_bytes(s->kv_dtype, s->head_dim);
	const uint64_t stride = s->kv_stride ? s->kv_stride : block;

	for (uint64_t at = 0, b = 0; at < packed; at += block, b++) {
		const uint64_t n = packed - at < block ? packed - at : block;

		memcpy(k + at, store + b * stride, n);
		memcpy(v + at, store + s->v_off + b * stride, n);
	}
}

void tl_attn_store_fill(const struct tl_attn_store *s, uint8_t *store, uint64_t *rng)
{
	uint64_t *w = (uint64_t *)store;
	struct npnm_cluster *t = (struct npnm_cluster *)(store + s->table_off);

	if (npnm_kv_is_tiled(s->kv_dtype)) {
		const uint64_t tile = npnm_kv_tile_bytes(s->head_dim);
		const uint64_t codes = (uint64_t)NPNM_KV_QTILE * s->head_dim;
		const uint32_t groups = (s->head_dim + NPNM_KV_QGROUP - 1) / NPNM_KV_QGROUP;
		const float scale = s->kv_dtype == NPNM_DTYPE_INT8 ? 2.0f / 127 : 2.0f / 448;

		/* Codes of magnitude at most 0x5f (E4M3: at most 30, never NaN). */
		for (uint64_t i = 0; i < s->table_off / 8; i++)
			w[i] = tl_next(rng) & 0xdfdfdfdfdfdfdfdfull;
		for (uint64_t at = 0; at < s->table_off; at += tile) {
			for (uint32_t g = 0; g < groups; g++)
				memcpy(store + at + codes + 4 * g, &scale, 4);
			memset(store + at + codes + 4 * groups, 0, tile - codes - 4 * groups);
		}
	} else {
		for (uint64_t i = 0; i < s->table_off / 8; i++)
			w[i] = (tl_next(rng) & 0x807f807f807f807full) | 0x3f003f003f003f00ull;
	}
	for (uint32_t c = 0; c < s->nclusters; c++) {
		uint32_t first = c * s->cluster;

		t[c] = (struct npnm_cluster){ first, first + s->cluster > s->context ?
						     s->context - first : s->cluster };
	}
}

void tl_attn_select(const struct tl_attn_store *s, uint32_t *sel, uint32_t n, uint32_t *perm,
		    uint64_t *rng)
{
	for (uint32_t c = 0; c < s->nclusters; c++)
		perm[c] = c;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i + (uint32_t)(tl_next(rng) % (s->nclusters - i)), x = perm[i];

		perm[i] = perm[j];
		perm[j] = x;
		sel[i] = perm[i];
	}
}
