/* SPDX-License-Identifier: MIT */
/*
 * Placement of long requests across the NELSSA nodes of a cluster
 * (Documentation/cluster.rst, "Placement"): a GPU node's view of the nodes
 * an etcd registry lists, and the policy that picks one for a request.
 *
 * A placer watches the registry (a thread of its own) and reads it again
 * when it changed.  It does not connect to nodes: the caller opens a session on the
 * node a request is placed on (lazily, the first time), tells the placer
 * the session is its own (nelssa_placer_own_session()), and releases a
 * request's tokens when it frees it.  A placer is one thread's at a time.
 */
#ifndef NELSSA_PLACEMENT_H
#define NELSSA_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

struct nelssa_placer;

struct nelssa_placer_opts {
	const char *etcd;		/* endpoints, comma-separated URLs */
	const char *cluster;		/* NULL: "default" */
	const char *user, *password;	/* etcd authentication, or NULL */
	const char *cacert, *cert, *key;	/* TLS, or NULL */
	uint32_t timeout_ms;		/* each etcd call (0: 2000) */
	uint32_t refresh_ms;		/* the view is read again when older (0: 500) */
	uint64_t token_bytes;		/* device bytes one token takes on a node (> 0) */
	double max_fill;		/* a node is filled to at most this share of its KV memory (0: 0.9) */
};

/* One node as the placer sees it. */
struct nelssa_placer_node {
	char id[64];
	char host[160];			/* of its control address */
	uint16_t port, data_port;
	uint32_t devices;
	uint64_t kv_bytes_total;
	uint64_t cap_tokens;		/* max_fill of its KV memory, in tokens */
	uint64_t used_tokens;		/* held, as its record says, plus ours not yet in it */
	uint64_t placed_tokens;		/* ours, placed and not released */
	uint64_t step_us;
	uint32_t steps_in_flight;
	bool listed;			/* in the last view read */
	bool excluded;			/* nelssa_placer_exclude()d, not since registered again */
	bool full;			/* nelssa_placer_full()ed, no more free memory since */
};

/*
 * nelssa_placer_open() - a placer; reads the registry once.  Returns 0
 * (even when etcd cannot be read yet: the view is then empty, and
 * nelssa_placer_error() says why), -EINVAL (an option), -ENOMEM.
 */
int nelssa_placer_open(const struct nelssa_placer_opts *o, struct nelssa_placer **out);
void nelssa_placer_close(struct nelssa_placer *p);
const char *nelssa_placer_error(const struct nelssa_placer *p);

/*
 * nelssa_placer_refresh() - reads the registry now.  On failure the last
 * view stays (placement goes on with it) and the error is returned; then
 * nelssa_placer_sync() reads again only after a backoff (refresh_ms,
 * doubling up to 30 s), so a partitioned etcd does not stall placements.
 */
int nelssa_placer_refresh(struct nelssa_placer *p);
/*
 * nelssa_placer_sync() - reads the registry when the placer's watch saw a
 * change in it, or the view is older than refresh_ms (as a placement
 * does first).  Returns 1 when the view was read, 0 when it was fresh (or
 * could not be read: the last view stays).
 */
int nelssa_placer_sync(struct nelssa_placer *p);
/*
 * Whether the placer's watch is made and running now (1), or broken and
 * being made again (0): while it is broken, the view is read again about
 * every second instead.
 */
int nelssa_placer_watching(const struct nelssa_placer *p);
/* Milliseconds since the view was last read successfully (UINT64_MAX: never). */
uint64_t nelssa_placer_view_age_ms(const struct nelssa_placer *p);

/* Nodes known (listed now or holding our requests), in a stable order: indexes stay valid. */
uint32_t nelssa_placer_count(const struct nelssa_placer *p);
int nelssa_placer_node(const struct nelssa_placer *p, uint32_t i, struct nelssa_placer_node *out);
/* The index of node @id; -ENOENT. */
int nelssa_placer_find(const struct nelssa_placer *p, const char *id, uint32_t *i);

/*
 * nelssa_placer_place() - picks the node for a request of @tokens (its
 * final length) and counts them as placed there.  The view is read again
 * first when older than refresh_ms.  Policy: among the nodes listed, not
 * excluded, with room (used + @tokens <= cap), the one whose step would
 * stream the fewest tokens per device, (used + @tokens) / devices; ties to
 * fewer steps in flight, then the id.  Returns 0, -ENOSPC (no node has
 * room: the caller queues the request or serves it on the GPU), -EINVAL
 * (@tokens 0).
 */
int nelssa_placer_place(struct nelssa_placer *p, uint64_t tokens, uint32_t *node);
/* @tokens placed on @node no longer held (freed, or lost with the node). */
int nelssa_placer_release(struct nelssa_placer *p, uint32_t node, uint64_t tokens);
/*
 * Session @session on @node is ours: what the node's record lists under it
 * is ours already, and not counted twice.  -ENOENT, -ENOSPC (16 per node).
 */
int nelssa_placer_own_session(struct nelssa_placer *p, uint32_t node, uint64_t session);
/* Forgets session @session on @node (closed, or lost with the node). */
int nelssa_placer_disown_session(struct nelssa_placer *p, uint32_t node, uint64_t session);
/*
 * The caller found @node full (it refused a session or a request for
 * room): it is skipped until its record shows more free memory than now,
 * or tokens placed there are released.
 */
int nelssa_placer_full(struct nelssa_placer *p, uint32_t node);
/*
 * The caller found @node dead (its connection failed): nothing is placed
 * there until it registers again under a new lease.
 */
int nelssa_placer_exclude(struct nelssa_placer *p, uint32_t node);

#endif /* NELSSA_PLACEMENT_H */
