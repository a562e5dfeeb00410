/* SPDX-License-Identifier: MIT */
/*
 * Builds SPARSE_ATTN commands in a private device memory for firmware
 * tests: random cluster-contiguous stores, random selections, and the
 * float64 check of every item's output.
 */
#ifndef NELSSA_FWFIXTURE_H
#define NELSSA_FWFIXTURE_H

#include <nelssa/fw.h>

#include "testutil.h"

#define FX_MAX_ITEMS 16

struct fx_item {
	uint32_t n_tokens, n_clusters, n_sel;
	uint64_t k, v, table, q, sel, o, lse;	/* offsets inside their operands */
};

struct fx {
	struct nfw_mem mem;
	struct nfw_scratch scratch;
	struct npnm_cmd cmd;
	uint32_t d, g, nr_items;
	uint8_t dtype;
	uint32_t flags;		/* NPNM_ATTN_F_*, 0 from fx_init() */
	/*
	 * The command's kv_stride, 0 (packed) from fx_init(); set before
	 * adding items.  Each item's V blocks then start half a stride
	 * (rounded down to 64 bytes) after its K blocks, and the gaps hold
	 * 0xff bytes, NaN in every type, which a stray read would show.
	 */
	uint32_t kv_stride;
	float scale;
	struct fx_item it[FX_MAX_ITEMS];
	uint64_t kv_used, in_used, out_used;
};

/* Device memory layout: items | KV | IN | OUT, each operand 4 KiB aligned. */
#define FX_ITEMS_OFF 0ull
#define FX_KV_OFF (1ull << 16)

void fx_init(struct fx *f, uint64_t mem_bytes, uint32_t d, uint32_t g, uint8_t dtype);
void fx_free(struct fx *f);
/*
 * Add an item: @n_tokens tokens in clusters of 1..@max_cluster tokens,
 * @sel_permille of them selected in random order (0 and 1000 allowed).
 */
void fx_add_item(struct fx *f, struct tu_rng *rng, uint32_t n_tokens, uint32_t max_cluster,
		 uint32_t sel_permille);
/* Finish the descriptor (operands sized to what was used). */
void fx_finish(struct fx *f);
/* Check item @i's output against float64; 0 when within the bound. */
int fx_check(const struct fx *f, uint32_t i, const char *what);

static inline uint8_t *fx_kv(const struct fx *f)
{
	return f->mem.base + f->cmd.op[NPNM_ATTN_KV].offset;
}

#endif /* NELSSA_FWFIXTURE_H */
