/* SPDX-License-Identifier: MIT */
/*
 * The cluster registry (Documentation/cluster.rst): NELSSA nodes announce
 * themselves in etcd, under a lease, and GPU nodes and nelssactl read the
 * announcements back.  Not an API (the header is not installed): nelssad,
 * libnelssa-client and nelssactl link it.
 *
 * Two parts, one concern each:
 *
 *   etcd.c  a client of etcd's v3 API through its JSON gateway (libcurl +
 *           json-c): leases, put, prefix range, delete.  Debian packages
 *           no C client of etcd's gRPC API; the gateway is the v3 API's
 *           documented HTTP face, the same calls and the same semantics.
 *   node.c  what a node's announcement holds, its JSON, its key, and the
 *           rules a reader applies before believing one.
 *   view.c  the cluster's nodes as a reader sees them: every record
 *           believed, or set aside with the reason.
 */
#ifndef NELSSA_REGISTRY_H
#define NELSSA_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- etcd v3, through its JSON gateway ---- */

struct nelssa_etcd;

struct nelssa_etcd_opts {
	/* Comma-separated base URLs (http://127.0.0.1:2379,...); tried in order. */
	const char *endpoints;
	/* etcd authentication: user and password, or NULL for none. */
	const char *user, *password;
	/* TLS (https:// endpoints): CA bundle, client certificate and key; NULL: defaults. */
	const char *cacert, *cert, *key;
	/*
	 * Each call's deadline over all endpoints, in ms (0: 2000); each endpoint
	 * tried gets an equal share of what is left.
	 */
	uint32_t timeout_ms;
};

/*
 * nelssa_etcd_open() - a handle on an etcd cluster.  Nothing is sent until
 * the first call (an authenticated handle authenticates then).  A handle
 * is one thread's at a time.  Returns 0, or -EINVAL (@why says which
 * endpoint is malformed), -ENOMEM.
 */
int nelssa_etcd_open(const struct nelssa_etcd_opts *o, struct nelssa_etcd **out, char *why,
		     size_t why_len);
void nelssa_etcd_close(struct nelssa_etcd *e);

/*
 * Every call below returns 0 or a negative errno, and leaves what went
 * wrong in nelssa_etcd_error():
 *   -EHOSTDOWN  no endpoint answered (refused, reset, unreachable);
 *   -ETIMEDOUT  the deadline passed;
 *   -EACCES     etcd refused the credentials or the permission;
 *   -ENOENT     the lease is not (or no longer) known to etcd;
 *   -EPROTO     an answer that is not the v3 gateway's JSON;
 *   -EIO        any other error etcd reported.
 */
const char *nelssa_etcd_error(const struct nelssa_etcd *e);
/* The endpoint that answered last (or is tried first next). */
const char *nelssa_etcd_endpoint(const struct nelssa_etcd *e);

int nelssa_etcd_lease_grant(struct nelssa_etcd *e, uint32_t ttl_s, int64_t *id, uint32_t *ttl);
/* One keep-alive; @ttl receives the lease's renewed TTL.  -ENOENT: it expired. */
int nelssa_etcd_lease_keepalive(struct nelssa_etcd *e, int64_t id, uint32_t *ttl);
/* Revokes @id, deleting every key attached to it; an unknown lease is not an error. */
int nelssa_etcd_lease_revoke(struct nelssa_etcd *e, int64_t id);

/* @lease 0: none.  -ENOENT when @lease is unknown. */
int nelssa_etcd_put(struct nelssa_etcd *e, const char *key, const void *val, size_t len,
		    int64_t lease);
/* Deletes @key, or with @prefix every key that starts with it; @n: how many (may be NULL). */
int nelssa_etcd_delete(struct nelssa_etcd *e, const char *key, bool prefix, uint64_t *n);

struct nelssa_etcd_kv {
	char *key;		/* NUL-terminated */
	char *value;		/* @value_len bytes, and a NUL after them */
	size_t value_len;
	int64_t mod_revision, lease;
};

/*
 * Every key under @prefix, in key order, at one revision (@revision, may
 * be NULL).  Free with nelssa_etcd_kvs_free().
 */
int nelssa_etcd_get_prefix(struct nelssa_etcd *e, const char *prefix, struct nelssa_etcd_kv **kvs,
			   size_t *n, int64_t *revision);
void nelssa_etcd_kvs_free(struct nelssa_etcd_kv *kvs, size_t n);

/*
 * nelssa_etcd_watch() - watches every key under @prefix (etcd's watch,
 * streamed) and calls @fn(@arg, revision, events) once the watch is made
 * (events 0) and for each batch of changes after, until @fn returns
 * non-zero or *@stop becomes non-zero (looked at about once a second on
 * an idle stream: nelssa_etcd_watch_abort() ends it at once).
 * Blocks: a watch has no deadline, only its connection has.  Returns 0
 * when stopped, -ECONNRESET when etcd ended the stream, -ESTALE when etcd
 * cancelled the watch, or an error of the connection as for the calls
 * above.  Use a handle of its own: it is busy until this returns.
 */
int nelssa_etcd_watch(struct nelssa_etcd *e, const char *prefix,
		      int (*fn)(void *arg, int64_t revision, size_t events), void *arg,
		      const volatile int *stop);
/*
 * From another thread: ends @e's watch at once (its connection shut down),
 * instead of at the next look at *stop.  Safe at any time, even with no
 * watch under way.
 */
void nelssa_etcd_watch_abort(struct nelssa_etcd *e);

/* ---- a NELSSA node's announcement ---- */

#define NELSSA_NODE_SCHEMA "nelssa.node/1"
#define NELSSA_NAME_MAX 63		/* a cluster's or a node's name */
#define NELSSA_NODE_MAX_HELD 1024	/* requests listed; beyond, counted */
#define NELSSA_NODE_MAX_BYTES (256u << 10)	/* an announcement's JSON, at most */

/* A request a node holds: the session (the node's number) and the client's request id. */
struct nelssa_node_held {
	uint64_t session, request;
	uint32_t tokens;		/* stored for it (layer 0, KV head 0) */
};

struct nelssa_node {
	char id[NELSSA_NAME_MAX + 1];
	char version[32];		/* nelssad's */
	char control[160];		/* HOST:PORT of the control protocol */
	uint16_t data_port;		/* the UCX listener's, at the control host */
	uint32_t devices;
	uint64_t kv_bytes_total;	/* device memory for KV, all devices */
	uint64_t kv_bytes_free;		/* ... not reserved by a session */
	uint64_t tokens_held;		/* stored for the requests held */
	uint32_t max_sessions, sessions, requests;
	uint32_t steps_in_flight;	/* now */
	uint32_t kv_in_flight;		/* KV receives under way */
	uint64_t step_us;		/* mean step latency over the last period; 0: no step */
	uint64_t steps;			/* served since start */
	uint64_t updated_ms;		/* wall clock (CLOCK_REALTIME) of this announcement */
	uint32_t n_held;		/* entries in @held (at most NELSSA_NODE_MAX_HELD) */
	uint32_t held_more;		/* requests held and not listed */
	struct nelssa_node_held *held;	/* malloc'd, or NULL */
	int64_t lease;			/* the key's, as read (not in the JSON) */
};

/* Whether @s names a cluster or a node: 1 to NELSSA_NAME_MAX of [A-Za-z0-9._-], not "." or "..". */
bool nelssa_registry_name_ok(const char *s);
/* "/nelssa/CLUSTER/nodes/" (@id NULL or "") or "/nelssa/CLUSTER/nodes/ID"; -ENAMETOOLONG, -EINVAL. */
int nelssa_node_key(char *buf, size_t len, const char *cluster, const char *id);

/* @n as JSON, NUL-terminated, malloc'd; NULL when out of memory. */
char *nelssa_node_to_json(const struct nelssa_node *n);
/*
 * nelssa_node_from_json() - believes an announcement only if it is whole:
 * the schema NELSSA_NODE_SCHEMA, every field present with its type and
 * range, the id equal to @key_id (the key's last part) when given.
 * Returns 0, or -EINVAL with @why saying what is wrong; @n is then empty.
 * Free @n with nelssa_node_release().
 */
int nelssa_node_from_json(const char *json, size_t len, const char *key_id,
			  struct nelssa_node *n, char *why, size_t why_len);
void nelssa_node_release(struct nelssa_node *n);

/* ---- the cluster as the registry shows it ---- */

/* Called for a record that is not believed: its key and why (for a log line). */
typedef void (*nelssa_registry_bad_fn)(void *arg, const char *key, const char *why);

/*
 * nelssa_registry_nodes() - the nodes of @cluster, in key order, at one
 * revision (@revision, may be NULL).  Every record under the cluster's
 * prefix goes through nelssa_node_from_json(); one that fails, or whose
 * key holds no node name, is left out and given to @bad (may be NULL).
 * Free with nelssa_registry_nodes_free().  Returns 0 or an error of the
 * etcd calls (-EINVAL: @cluster is not a name).
 */
int nelssa_registry_nodes(struct nelssa_etcd *e, const char *cluster, struct nelssa_node **nodes,
			  size_t *n, int64_t *revision, nelssa_registry_bad_fn bad, void *arg);
void nelssa_registry_nodes_free(struct nelssa_node *nodes, size_t n);

#endif /* NELSSA_REGISTRY_H */
