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

/**
 * struct nelssa_placer_opts - what nelssa_placer_open() takes.
 * @etcd: the registry's endpoints, comma-separated URLs.
 * @cluster: the cluster's name; NULL: "default".
 * @user: etcd authentication, or NULL.
 * @password: its password.
 * @cacert: TLS: the CA bundle, or NULL.
 * @cert: TLS: the client certificate, or NULL.
 * @key: TLS: its key, or NULL.
 * @timeout_ms: each etcd call's deadline (0: 2000).
 * @refresh_ms: the view is read again when older (0: 500).
 * @token_bytes: device bytes one token takes on a node (> 0).
 * @max_fill: a node is filled to at most this share of its KV memory (0: 0.9).
 */
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

/**
 * nelssa_placer_open() - a placer for one cluster.
 * @o: the registry, the cluster, and the placement's parameters.
 * @out: receives the placer.
 *
 * Reads the registry once and starts the watch.
 *
 * Return: 0 (even when etcd cannot be read yet: the view is then empty,
 * and nelssa_placer_error() says why), -EINVAL (an option), -ENOMEM.
 */
int nelssa_placer_open(const struct nelssa_placer_opts *o, struct nelssa_placer **out);

/**
 * nelssa_placer_close() - stop the watch and free the placer.
 * @p: the placer, or NULL.
 */
void nelssa_placer_close(struct nelssa_placer *p);

/**
 * nelssa_placer_error() - what went wrong last.
 * @p: the placer.
 *
 * Return: a message, "" when nothing did.
 */
const char *nelssa_placer_error(const struct nelssa_placer *p);

/**
 * nelssa_placer_refresh() - read the registry now.
 * @p: the placer.
 *
 * On failure the last view stays (placement goes on with it); then
 * nelssa_placer_sync() reads again only after a backoff (refresh_ms,
 * doubling up to 30 s), so that a partitioned etcd does not stall
 * placements.
 *
 * Return: 0, or an error of the etcd calls (-EHOSTDOWN, -ETIMEDOUT,
 * -EACCES, -EPROTO, -EIO).
 */
int nelssa_placer_refresh(struct nelssa_placer *p);

/**
 * nelssa_placer_sync() - read the registry if it may have changed.
 * @p: the placer.
 *
 * Reads it when the placer's watch saw a change, or the view is older than
 * refresh_ms -- as a placement does first.
 *
 * Return: 1 when the view was read, 0 when it was fresh (or could not be
 * read: the last view stays).
 */
int nelssa_placer_sync(struct nelssa_placer *p);

/**
 * nelssa_placer_watching() - whether the watch on the registry runs.
 * @p: the placer.
 *
 * While the watch is broken and being made again, the view is read about
 * every second instead.
 *
 * Return: 1 when the watch is made and running, 0 otherwise.
 */
int nelssa_placer_watching(const struct nelssa_placer *p);

/**
 * nelssa_placer_view_age_ms() - how old the view is.
 * @p: the placer.
 *
 * Return: milliseconds since the view was last read successfully,
 * UINT64_MAX when it never was.
 */
uint64_t nelssa_placer_view_age_ms(const struct nelssa_placer *p);

/**
 * nelssa_placer_count() - nodes known.
 * @p: the placer.
 *
 * Nodes listed now, or listed once and holding our requests, in a stable
 * order: a node's index never changes.
 *
 * Return: how many.
 */
uint32_t nelssa_placer_count(const struct nelssa_placer *p);

/**
 * nelssa_placer_node() - one node as the placer sees it.
 * @p: the placer.
 * @i: its index.
 * @out: receives it.
 *
 * Return: 0, or -ENOENT.
 */
int nelssa_placer_node(const struct nelssa_placer *p, uint32_t i, struct nelssa_placer_node *out);

/**
 * nelssa_placer_find() - a node's index by its name.
 * @p: the placer.
 * @id: the node's name.
 * @i: receives its index.
 *
 * Return: 0, or -ENOENT.
 */
int nelssa_placer_find(const struct nelssa_placer *p, const char *id, uint32_t *i);

/**
 * nelssa_placer_place() - the node for a request, its tokens counted there.
 * @p: the placer.
 * @tokens: the request's tokens at its end.
 * @node: receives the node's index.
 *
 * nelssa_placer_sync() first; then nelssa_place_pick() over the nodes
 * listed, not excluded and not full: the one whose step would stream the
 * fewest tokens per device afterwards, among those with room.
 *
 * Return: 0, -ENOSPC (no node has room: the caller queues the request or
 * serves it on the GPU), -EINVAL (@tokens 0), -ENOMEM.
 */
int nelssa_placer_place(struct nelssa_placer *p, uint64_t tokens, uint32_t *node);

/**
 * nelssa_placer_release() - tokens placed on a node no longer held.
 * @p: the placer.
 * @node: the node's index.
 * @tokens: the tokens (freed, or lost with the node).
 *
 * Also ends a nelssa_placer_full() mark: our sessions there have room.
 *
 * Return: 0, -ENOENT (no such node), -EINVAL (more than placed there).
 */
int nelssa_placer_release(struct nelssa_placer *p, uint32_t node, uint64_t tokens);

/**
 * nelssa_placer_own_session() - a session on a node is the caller's.
 * @p: the placer.
 * @node: the node's index.
 * @session: the session's id there.
 *
 * What the node's record lists under it is the caller's already, and not
 * counted twice.
 *
 * Return: 0, -ENOENT (no such node), -ENOSPC (16 sessions on that node).
 */
int nelssa_placer_own_session(struct nelssa_placer *p, uint32_t node, uint64_t session);

/**
 * nelssa_placer_disown_session() - forget a session of the caller's.
 * @p: the placer.
 * @node: the node's index.
 * @session: the session's id (closed, or lost with the node).
 *
 * Return: 0, or -ENOENT.
 */
int nelssa_placer_disown_session(struct nelssa_placer *p, uint32_t node, uint64_t session);

/**
 * nelssa_placer_full() - a node refused room.
 * @p: the placer.
 * @node: the node's index.
 *
 * It refused a session or a request for room: it is skipped until its
 * record shows more free memory than now, or tokens placed there are
 * released.
 *
 * Return: 0, or -ENOENT.
 */
int nelssa_placer_full(struct nelssa_placer *p, uint32_t node);

/**
 * nelssa_placer_exclude() - a node was found dead.
 * @p: the placer.
 * @node: the node's index.
 *
 * Its connection failed: nothing is placed there until it registers
 * again under a new lease.
 *
 * Return: 0, or -ENOENT.
 */
int nelssa_placer_exclude(struct nelssa_placer *p, uint32_t node);

#endif /* NELSSA_PLACEMENT_H */
