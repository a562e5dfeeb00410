/* SPDX-License-Identifier: MIT */
/*
 * The synthetic KV stores the SPARSE_ATTN benchmarks read ('nelssactl bench
 * attn' through a device, nelssa-fw-bench straight into the firmware): per
 * work item the K array, then the V array (rows, or tiles of an 8-bit
 * type), then a table of equal clusters, the whole 4 KiB aligned; and
 * random selections of distinct clusters.  Or, with the adjacent layout,
 * each 16-token block of K followed by its block of V (kv_stride twice a
 * block), then the table.
 */
#ifndef NELSSA_ATTN_STORE_H
#define NELSSA_ATTN_STORE_H

#include <stdint.h>

struct tl_attn_store {
	uint32_t context, cluster, nclusters, head_dim;
	uint8_t kv_dtype;	/* enum npnm_kv_dtype */
	double token_bytes;	/* K and V bytes of one token, scales included */
	uint32_t kv_stride;	/* the commands' kv_stride: 0 packed, else adjacent */
	uint64_t v_off;		/* the V array, from the start of a store */
	uint64_t table_off;	/* the cluster table */
	uint64_t bytes;		/* one store, rounded up to 4 KiB */
};

/*
 * The layout of one store of @context tokens of @kv_dtype (enum
 * npnm_kv_dtype), K and V blocks @adjacent or packed; 0 if known.
 */
int tl_attn_store_plan(struct tl_attn_store *s, uint8_t kv_dtype, uint32_t head_dim,
		       uint32_t context, uint32_t cluster, int adjacent);
/*
 * The K and V arrays of the store at @store, in the packed layout, into
 * @k and @v (npnm_kv_bytes(context) bytes each): what a reference that
 * knows only the packed layout reads.
 */
void tl_attn_store_unpack(const struct tl_attn_store *s, const uint8_t *store, uint8_t *k,
			  uint8_t *v);
/* --kv-layout: "packed" (0) or "adjacent" (1); -1 for another name. */
int tl_kv_layout_parse(const char *name);
/* The --kv-layout name of @s. */
const char *tl_kv_layout_name(const struct tl_attn_store *s);
/*
 * K and V as random values in +-[0.5, 2) (16-bit types), or random codes
 * of that range with scales (8-bit types), and the table, into @store.
 */
void tl_attn_store_fill(const struct tl_attn_store *s, uint8_t *store, uint64_t *rng);
/*
 * @n distinct cluster ids of @s in random order into @sel (a partial
 * Fisher-Yates shuffle); @perm is scratch for s->nclusters ids.
 */
void tl_attn_select(const struct tl_attn_store *s, uint32_t *sel, uint32_t n, uint32_t *perm,
		    uint64_t *rng);

/* @name ("bf16", "fp16", "fp8", "int8") as an npnm_kv_dtype; 0 if unknown. */
uint8_t tl_kv_dtype_parse(const char *name);
/* The short name of @kv_dtype, "?" if unknown. */
const char *tl_kv_dtype_name(uint8_t kv_dtype);
/*
 * --attn-dots: "fp32" (0) or "bf16" (NPNM_ATTN_F_BF16_DOTS, the same bit
 * as NELSSA_ATTN_BF16_DOTS) into *@flags; -1 for another name.
 */
int tl_attn_dots_parse(const char *name, uint32_t *flags);
/* The --attn-dots name of SPARSE_ATTN @flags. */
const char *tl_attn_dots_name(uint32_t flags);

#endif /* NELSSA_ATTN_STORE_H */
