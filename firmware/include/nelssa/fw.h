/* SPDX-License-Identifier: MIT */
/*
 * NELSSA PNM firmware: the Device Runtime and its compute kernels.
 *
 * This is the code that runs on the card's cores.  It sees device memory
 * as one flat byte array and command descriptors in the uapi v1 format
 * (struct npnm_cmd) whose operands have already been resolved by the host
 * side (driver or sim backend): in the device's copy of a descriptor, a
 * used operand has a non-zero handle, offset is a byte offset into device
 * memory and len bounds every access.  The firmware trusts nothing else
 * in a descriptor: every field is checked, and a malformed command
 * completes with a specific NPNM_ST_* status without touching memory.
 *
 * The same code runs in the in-process sim backend, in nelssa-devemu
 * behind the QEMU test rig, and (cross-compiled) on the card.
 */
#ifndef NELSSA_FW_H
#define NELSSA_FW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/nelssa_pnm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A spin-wait hint for threads polling the runtime or its completions. */
static inline void nfw_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Limits of this firmware, reported through struct npnm_info. */
#define NFW_MAX_HEAD_DIM 256u
/* KV element types the kernels read (&npnm_info.kv_dtypes). */
#define NFW_KV_DTYPES ((1u << NPNM_DTYPE_BF16) | (1u << NPNM_DTYPE_FP16) | \
		       (1u << NPNM_DTYPE_FP8_E4M3) | (1u << NPNM_DTYPE_INT8))
#define NFW_MAX_GROUP 16u
/* SPARSE_ATTN flags this firmware accepts (&npnm_info.attn_flags): all it knows. */
#define NFW_ATTN_FLAGS NPNM_ATTN_F_BF16_DOTS
/* Interface 1.1: NPNM_ATTN_F_BF16_DOTS; 1.2: kv_stride (NPNM_CAP_KV_STRIDE). */
#define NFW_FW_VERSION ((1u << 16) | 2u)

/**
 * enum nfw_isa - SPARSE_ATTN implementation.
 * @NFW_ISA_AUTO: the best one this CPU supports.
 * @NFW_ISA_SCALAR: portable C (the numeric core's streaming kernel).
 * @NFW_ISA_AVX2: x86-64 AVX2 + FMA (head_dim a multiple of 16).
 * @NFW_ISA_AVX512: x86-64 AVX-512F (head_dim a multiple of 32).
 * @NFW_ISA_NEON: AArch64 Advanced SIMD (head_dim a multiple of 8).
 * @NFW_ISA_AVX512_BF16: AVX-512F whose NPNM_ATTN_F_BF16_DOTS items over
 *	bf16 KV take VDPBF16PS (AVX512_BF16); @NFW_ISA_AUTO picks it where
 *	the CPU has it, and @NFW_ISA_AVX512 keeps binary32 FMAs on the
 *	rounded operands for those items, to compare against.
 * @NFW_ISA_COUNT: one past the last.
 *
 * A vector path falls back to scalar for a head_dim it cannot tile.
 */
enum nfw_isa {
	NFW_ISA_AUTO = 0,
	NFW_ISA_SCALAR,
	NFW_ISA_AVX2,
	NFW_ISA_AVX512,
	NFW_ISA_NEON,
	NFW_ISA_AVX512_BF16,
	NFW_ISA_COUNT
};

/* Name of an ISA ("scalar", "avx2", ...); parse one back (-1 if unknown). */
const char *nfw_isa_name(enum nfw_isa isa);
int nfw_isa_parse(const char *name);
/* 1 if this CPU and build can run @isa. */
int nfw_isa_supported(enum nfw_isa isa);
/* @isa, or the best supported one for NFW_ISA_AUTO. */
enum nfw_isa nfw_isa_resolve(enum nfw_isa isa);

/*
 * The compute ceiling of the SPARSE_ATTN kernel that @isa runs at
 * @head_dim (the scalar one where that ISA cannot tile it): @passes passes
 * of that kernel's inner-loop instruction mix -- bf16 rows widened from L1,
 * one FMA per element and query row (scalar: the vectorisable P.V form of
 * the numeric core's kernel), @group query rows -- over 48 cache-resident
 * tokens, on the calling thread.  Time it to get the fp32 flop rate a kernel of this ISA could
 * reach on this core if memory cost nothing; SPARSE_ATTN does 2 * @group
 * flops per KV element, so KV bytes/s = flops/s / @group.  Returns the flops
 * done (an FMA counts 2), 0 for an unsupported ISA or bad shape.
 */
uint64_t nfw_attn_peak(enum nfw_isa isa, uint32_t head_dim, uint32_t group, uint64_t passes);

/*
 * nfw_attn_peak() for the instruction mix of KV type @kv_dtype (enum
 * npnm_kv_dtype): the vector kernels' widening of that type -- for the
 * 8-bit ones the extending loads, decoding and scale multiply -- with the
 * same FMAs; the scalar kernel's ceiling stays its 16-bit mix.  0 for an
 * unknown type too.  The flops are counted as nfw_attn_peak() counts them.
 */
uint64_t nfw_attn_peak_kv(enum nfw_isa isa, uint32_t head_dim, uint32_t group, uint8_t kv_dtype,
			  uint64_t passes);
/*
 * nfw_attn_peak_kv() of the kernel SPARSE_ATTN @flags select: with
 * NPNM_ATTN_F_BF16_DOTS over bf16 KV on a CPU with native bf16 dot
 * products (Arm BF16) the BFDOT mix, else the same ceiling as without
 * the flag (the rounding costs nothing in the logit loop).  0 for a flag
 * this firmware does not take.
 */
uint64_t nfw_attn_peak_flags(enum nfw_isa isa, uint32_t head_dim, uint32_t group,
			     uint8_t kv_dtype, uint32_t flags, uint64_t passes);
/* The ISA whose SPARSE_ATTN kernel @isa really runs at @head_dim (scalar where it cannot tile). */
enum nfw_isa nfw_attn_isa(enum nfw_isa isa, uint32_t head_dim);

/* Device memory as the firmware sees it. */
struct nfw_mem {
	uint8_t *base;
	uint64_t size;
};

/* Per-executor scratch: tiles, accumulators, duplicate-check bitmaps. */
struct nfw_scratch {
	void *buf;
	size_t cap;
};

void nfw_scratch_free(struct nfw_scratch *s);

/* Outcome of one command. */
struct nfw_result {
	uint32_t status;	/* enum npnm_status */
	uint32_t detail;	/* opcode-specific, e.g. SELFTEST's failed mask */
	uint64_t device_ns;	/* time from first pick-up to completion */
};

/*
 * Validate a descriptor completely (header, operands, parameters and, for
 * SPARSE_ATTN and KV_WRITE, everything they reference in device memory).
 * Returns NPNM_ST_OK or the status the command must complete with.
 */
uint32_t nfw_validate(const struct nfw_mem *mem, const struct npnm_cmd *desc,
		      struct nfw_scratch *scratch);

/*
 * Execute a validated descriptor.  For SPARSE_ATTN only work items
 * [@item_begin, @item_end) are computed, so that the runtime can spread one
 * command's batch across cores; other opcodes ignore the range.  Returns
 * NPNM_ST_OK or NPNM_ST_SELFTEST_FAIL with *@detail set.
 */
uint32_t nfw_execute(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		     uint32_t item_begin, uint32_t item_end, struct nfw_scratch *scratch,
		     uint32_t *detail);

/* Validate and execute in one call, on the calling thread. */
uint32_t nfw_run(const struct nfw_mem *mem, const struct npnm_cmd *desc, enum nfw_isa isa,
		 struct nfw_scratch *scratch, uint32_t *detail);

/* Bits of NPNM_OP_SELFTEST's mask and detail. */
#define NFW_SELFTEST_MEMOPS	(1u << 0)	/* FILL, COPY */
#define NFW_SELFTEST_KV_WRITE	(1u << 1)	/* dense and scatter writes, appends */
#define NFW_SELFTEST_ATTN	(1u << 2)	/* SPARSE_ATTN, every supported ISA */
#define NFW_SELFTEST_ATTN_FP16	(1u << 3)	/* SPARSE_ATTN on fp16 KV */
#define NFW_SELFTEST_VALIDATE	(1u << 4)	/* malformed descriptors are rejected */
#define NFW_SELFTEST_ATTN_BF16_DOTS (1u << 5)	/* SPARSE_ATTN, NPNM_ATTN_F_BF16_DOTS (1.1) */
#define NFW_SELFTEST_ALL	0x3fu

/* Run the built-in checks in @mask (0 = all); returns the failed mask. */
uint32_t nfw_selftest(uint32_t mask, struct nfw_scratch *scratch);

/*
 * The Device Runtime: a queue of commands served by CMD Executor threads,
 * one per core.  Each submitted command completes exactly once through
 * @complete, called on an executor thread (on a thread in
 * nfw_runtime_help() for a short command it ran, or on the cancelling or
 * destroying thread for NPNM_ST_ABORTED).
 */
struct nfw_runtime;

typedef void (*nfw_complete_fn)(void *owner, uint64_t cookie, const struct nfw_result *res);

/**
 * struct nfw_runtime_config - how to build a runtime.
 * @mem: device memory.
 * @cores: executor threads (1..256).
 * @isa: SPARSE_ATTN implementation (NFW_ISA_AUTO: best supported).
 * @spin_ns: how long an idle executor polls before sleeping; trades CPU
 *	for submit-to-start latency.  0 sleeps at once.
 * @cpu_first: with @cpu_count > 0, executor i runs only on host CPU
 *	@cpu_first + i % @cpu_count.  The scheduler otherwise may stack the
 *	executors of one batch on a CPU for tens of milliseconds (measured:
 *	two cores doing the work of one), which matters when they stand for
 *	the cores of a card and are being measured.
 * @cpu_count: CPUs in that range; 0 leaves placement to the scheduler.
 *	The range must be CPUs the process may use; where the system then
 *	still refuses to set an affinity, executors run unpinned.
 * @complete: completion callback.
 */
struct nfw_runtime_config {
	struct nfw_mem mem;
	unsigned int cores;
	enum nfw_isa isa;
	uint64_t spin_ns;
	unsigned int cpu_first, cpu_count;
	nfw_complete_fn complete;
};

/* -EINVAL for a CPU range this process may not run on. */
int nfw_runtime_create(const struct nfw_runtime_config *cfg, struct nfw_runtime **out);
/* Queue a copy of @desc; -ESHUTDOWN once destruction has begun. */
int nfw_runtime_submit(struct nfw_runtime *rt, const struct npnm_cmd *desc, void *owner,
		       uint64_t cookie);
/*
 * Lend the calling thread to the device: if the command at the head of
 * the queue is short (NOP, or FILL or COPY of at most 4 KiB an operand),
 * take it off the queue, run it and complete it here, through @complete,
 * and return true; otherwise return false at once.  For a thread about to
 * wait for a completion: with no free CPU for an executor, that wait is
 * a futex wake-up and a spin window per command.  The caller must hold
 * no lock @complete takes.  nfw_runtime_destroy() waits for a command a
 * helper took, as for one an executor runs; a call after it has begun
 * returns false.
 */
bool nfw_runtime_help(struct nfw_runtime *rt);
/* Complete every queued, not yet started command of @owner as ABORTED. */
unsigned int nfw_runtime_cancel(struct nfw_runtime *rt, void *owner);
/* Abort what is queued, wait for what runs, stop the executors. */
void nfw_runtime_destroy(struct nfw_runtime *rt);
enum nfw_isa nfw_runtime_isa(const struct nfw_runtime *rt);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_FW_H */
