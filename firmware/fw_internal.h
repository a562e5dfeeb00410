/* SPDX-License-Identifier: MIT */
/* Firmware internals shared by the validation, kernel and runtime files. */
#ifndef NFW_INTERNAL_H
#define NFW_INTERNAL_H

#include <stdbool.h>

#include <nelssa/fw.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "device memory is little-endian; a big-endian build needs byte swapping"
#endif

/* Tokens per SPARSE_ATTN tile in the vector kernels. */
#define NFW_TILE 32u

/* Scratch an attention kernel needs: permuted q and o, logits and weights, a zero row. */
#define NFW_ATTN_SCRATCH_BYTES \
	((2u * NFW_MAX_GROUP * NFW_MAX_HEAD_DIM + 2u * NFW_MAX_GROUP * NFW_TILE) * sizeof(float) + \
	 NFW_MAX_HEAD_DIM * sizeof(uint16_t))

/* Grow @s to @bytes (contents not kept); NULL if memory is short. */
void *nfw_scratch_get(struct nfw_scratch *s, size_t bytes);

/* 1 if [off, off + len) lies inside an operand of length @op_len. */
static inline int nfw_fits(uint64_t op_len, uint64_t off, uint64_t len)
{
	return off <= op_len && len <= op_len - off;
}

/* Device pointer of byte @off inside operand @i (validated beforehand). */
static inline uint8_t *nfw_ptr(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			       unsigned int i, uint64_t off)
{
	return mem->base + desc->op[i].offset + off;
}

/*
 * The shared command rules (driver/npnm_rules.h: header, operand slots,
 * opcode, parameter tail and reserved fields), then every used operand
 * inside device memory.
 */
uint32_t nfw_check_common(const struct nfw_mem *mem, const struct npnm_cmd *desc);

/* What parameters mean, for a descriptor nfw_check_common() accepted. */
uint32_t nfw_validate_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc);
uint32_t nfw_validate_attn(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			   struct nfw_scratch *scratch);

/* What an opcode's execute() gets beside the descriptor. */
struct nfw_exec_args {
	enum nfw_isa isa;
	uint32_t item_begin, item_end;	/* the work items this part runs */
	struct nfw_scratch *scratch;
	uint32_t *detail;		/* the completion's detail word */
};

/**
 * struct nfw_opdef - one opcode of the firmware (opdef.c).
 * @name: for logs and tests.
 * @validate: what the parameters mean, after nfw_check_common(); NULL
 *	when the common checks are all (NOP).
 * @execute: run a validated descriptor; NULL when there is nothing to do.
 * @split_items: work items may be spread over several executor threads
 *	(each part gets its own [item_begin, item_end)).
 * @short_cmd: a command of this opcode none of whose operands spans more
 *	than NFW_SHORT_BYTES is short enough for a waiting thread to run
 *	itself (nfw_runtime_help()); neither its validation nor its
 *	execution may use the scratch buffer.
 */
struct nfw_opdef {
	const char *name;
	uint32_t (*validate)(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			     struct nfw_scratch *scratch);
	uint32_t (*execute)(const struct nfw_mem *mem, const struct npnm_cmd *desc,
			    const struct nfw_exec_args *x);
	bool split_items;
	bool short_cmd;
};

/* Bytes an operand of a short_cmd command may span (a 4 KiB COPY: ~0.2 us). */
#define NFW_SHORT_BYTES 4096u

/* @desc is a command nfw_runtime_help() may run (opdef.c). */
bool nfw_cmd_is_short(const struct npnm_cmd *desc);

/* The entry of @opcode; NULL for an opcode this firmware does not run. */
const struct nfw_opdef *nfw_opdef(uint32_t opcode);

void nfw_exec_fill(const struct nfw_mem *mem, const struct npnm_cmd *desc);
void nfw_exec_copy(const struct nfw_mem *mem, const struct npnm_cmd *desc);
void nfw_exec_kv_write(const struct nfw_mem *mem, const struct npnm_cmd *desc);
uint32_t nfw_exec_attn(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		       uint32_t item_begin, uint32_t item_end, struct nfw_scratch *scratch);

/* One SPARSE_ATTN work item, resolved to host pointers. */
struct nfw_attn_args {
	const float *q;
	const uint8_t *k, *v;		/* the K and V arrays (enum npnm_kv_dtype) */
	uint64_t row_bytes;		/* a row-addressed type's row, else 0 */
	uint64_t tile_bytes;		/* a tiled type's tile, else 0 */
	uint64_t stride;		/* block of NPNM_KV_QTILE tokens to the next */
	uint32_t kv_stride;		/* the command's field: 0 when packed */
	const struct npnm_cluster *table;
	const uint32_t *sel;
	float *o, *lse;
	uint32_t nr_sel, nr_clusters, nr_tokens;
	uint32_t head_dim, group;
	uint8_t kv_dtype;
	uint32_t flags;			/* NPNM_ATTN_F_* */
	float scale;
};

/*
 * Selected cluster @s of @a, read once and checked again at use (see
 * kern_attn.c); 0 when usable.
 */
static inline int nfw_attn_cluster(const struct nfw_attn_args *a, uint32_t s,
				   struct npnm_cluster *c)
{
	uint32_t id = __atomic_load_n(&a->sel[s], __ATOMIC_RELAXED);

	if (id >= a->nr_clusters)
		return -1;
	c->first = __atomic_load_n(&a->table[id].first, __ATOMIC_RELAXED);
	c->count = __atomic_load_n(&a->table[id].count, __ATOMIC_RELAXED);
	return c->first > a->nr_tokens || c->count > a->nr_tokens - c->first ? -1 : 0;
}

typedef void (*nfw_attn_item_fn)(const struct nfw_attn_args *a, float *scratch);

void nfw_attn_item_scalar(const struct nfw_attn_args *a, float *scratch);
void nfw_attn_item_avx2(const struct nfw_attn_args *a, float *scratch);
void nfw_attn_item_avx512(const struct nfw_attn_args *a, float *scratch);
void nfw_attn_item_neon(const struct nfw_attn_args *a, float *scratch);
/* NEON built with BFDOT (Armv8.6 BF16), for NPNM_ATTN_F_BF16_DOTS. */
void nfw_attn_item_neon_bf16(const struct nfw_attn_args *a, float *scratch);
/* AVX-512 built with VDPBF16PS (AVX512_BF16), for NPNM_ATTN_F_BF16_DOTS. */
void nfw_attn_item_avx512_bf16(const struct nfw_attn_args *a, float *scratch);

/* nfw_attn_peak_flags() of each vector kernel (attn_vec.h). */
uint64_t nfw_attn_item_avx2_peak(uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
				 uint32_t flags, uint64_t passes);
uint64_t nfw_attn_item_avx512_peak(uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
				   uint32_t flags, uint64_t passes);
uint64_t nfw_attn_item_neon_peak(uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
				 uint32_t flags, uint64_t passes);
uint64_t nfw_attn_item_neon_bf16_peak(uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
				      uint32_t flags, uint64_t passes);
uint64_t nfw_attn_item_avx512_bf16_peak(uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
					uint32_t flags, uint64_t passes);

/*
 * The kernel for @isa at @head_dim and SPARSE_ATTN @flags (scalar when the
 * ISA cannot tile the dim).
 */
nfw_attn_item_fn nfw_attn_kernel(enum nfw_isa isa, uint32_t head_dim, uint32_t flags);

#endif /* NFW_INTERNAL_H */
