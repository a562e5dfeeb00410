/* SPDX-License-Identifier: MIT */
/* PNM User Library internals: the backend ops table and shared helpers. */
#ifndef NELSSA_PNM_INTERNAL_H
#define NELSSA_PNM_INTERNAL_H

#include <nelssa/pnm.h>
#include <nelssa/util.h>

/**
 * struct pnm_backend_ops - what a backend implements.  The front end
 * (pnm.c) parses names, checks arguments common to every backend and
 * builds mem_write/read and exec on top of these.
 */
struct pnm_backend_ops {
	const char *name;
	int (*open)(struct nelssa_pnm *pnm, const char *spec);
	void (*close)(struct nelssa_pnm *pnm);
	int (*info)(struct nelssa_pnm *pnm, struct npnm_info *info);
	int (*mem_alloc)(struct nelssa_pnm *pnm, uint64_t size, uint32_t flags, uint32_t *handle,
			 uint64_t *alloc_size);
	int (*mem_free)(struct nelssa_pnm *pnm, uint32_t handle);
	int (*mem_map)(struct nelssa_pnm *pnm, uint32_t handle, void **addr, uint64_t *size);
	int (*mem_unmap)(struct nelssa_pnm *pnm, void *addr);
	int (*submit)(struct nelssa_pnm *pnm, const struct npnm_cmd *cmds, uint32_t n,
		      uint64_t *first_seqno);
	int (*wait)(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t min,
		    uint32_t max, int64_t timeout_ns);
	int (*exec)(struct nelssa_pnm *pnm, const struct npnm_cmd *cmd,
		    struct npnm_completion *comp);
	int (*event_fd)(struct nelssa_pnm *pnm);
	uint32_t (*inflight)(struct nelssa_pnm *pnm);
};

struct nelssa_pnm {
	const struct pnm_backend_ops *ops;
	char name[128];
	void *priv;
};

extern const struct pnm_backend_ops pnm_kdev_ops;

/*
 * The sim backend lives in libnelssa-sim (the firmware and its ISA
 * kernels), which a kdev-only program never loads.  pnm_sim_find() gives
 * its ops: from the program when it linked the backend in (sim_linked.c,
 * the static build), else loaded on first use (sim_load.c, libnelssa.so).
 * NULL, with words in nelssa_pnm_strerror(), when it is not there.
 */
const struct pnm_backend_ops *pnm_sim_find(void);

/*
 * The sim backend's one entry point: its ops, or NULL when @version (the
 * caller's NELSSA_VERSION_STRING) is not its own -- the ops table is
 * private, so both sides must come from one build.
 */
const struct pnm_backend_ops *npnm_sim_backend(const char *version);

/*
 * The npnm_priv_ helpers are exported by libnelssa.so (version node
 * NELSSA_PRIVATE) for libnelssa-sim only: one thread-local error text,
 * one set of rules, whichever library reports.
 */

/* Record words for nelssa_pnm_strerror() and return @err. */
int npnm_priv_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * The command rules the driver applies at submission (driver/npnm_rules.h),
 * for command @index of a batch: 0, or -EINVAL with the rule broken in
 * nelssa_pnm_strerror().  Region bounds are the backend's to check; after
 * a 0 the operands in use are exactly those with a non-zero handle.
 */
int npnm_priv_check_rules(const struct npnm_cmd *c, uint32_t index);

/* Map a device status to a completion result. */
int npnm_priv_status_result(uint32_t status);

#endif /* NELSSA_PNM_INTERNAL_H */
