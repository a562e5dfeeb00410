/* SPDX-License-Identifier: MIT */
/*
 * The embedded "sim" backend: an emulated PNM device in this process.
 * sim_dev.c owns devices (memory, allocator, the firmware's runtime) and
 * sim_ctx.c the contexts opened on them (regions, queues, completions).
 */
#ifndef NELSSA_PNM_SIM_H
#define NELSSA_PNM_SIM_H

#include <pthread.h>

#include <nelssa/fw.h>

#include "pnm_internal.h"

#define SIM_ALIGN 4096u
#define SIM_MAX_BATCH 1024u
#define SIM_MAX_INFLIGHT 4096u

struct sim_opts {
	unsigned int index;
	uint64_t mem;
	unsigned int cores;
	enum nfw_isa isa;
	uint64_t spin_ns;
	unsigned int cpu_first, cpu_count;	/* cpus=: executors pinned; 0: not */
	int no_kv_stride;	/* kv_stride=off: a card with firmware before 1.2 */
	unsigned int set;	/* SIM_OPT_* given explicitly */
};

#define SIM_OPT_MEM (1u << 0)
#define SIM_OPT_CORES (1u << 1)
#define SIM_OPT_ISA (1u << 2)
#define SIM_OPT_SPIN (1u << 3)
#define SIM_OPT_CPUS (1u << 4)
#define SIM_OPT_KV_STRIDE (1u << 5)

struct sim_dev {
	struct sim_dev *next;
	unsigned int refs;
	struct sim_opts opts;
	uint8_t *mem;
	pthread_mutex_t lock;	/* allocator */
	struct nelssa_extent_alloc alloc;
	struct nfw_runtime *rt;
};

extern const struct pnm_backend_ops pnm_sim_ops;

int sim_parse(const char *spec, struct sim_opts *o);
/* Find or create device opts->index; -EBUSY if explicit options conflict. */
int sim_dev_get(const struct sim_opts *o, struct sim_dev **out);
void sim_dev_put(struct sim_dev *dev);

/* Completion callback of every sim device's runtime (sim_ctx.c). */
void sim_complete(void *owner, uint64_t cookie, const struct nfw_result *res);

#endif /* NELSSA_PNM_SIM_H */
