// SPDX-License-Identifier: MIT
/*
 * Placement of long requests across a cluster's NELSSA nodes
 * (<nelssa/placement.h>; Documentation/cluster.rst, "Placement").
 *
 * The view is the registry's records read at one revision, kept when a
 * read fails.  What a node holds is counted once: its record's tokens,
 * less what the record lists under our own sessions, plus what we placed
 * there (at the requests' final lengths) -- so our requests count from
 * the moment they are placed, before the node's next record says so, and
 * others' as the node reports them.
 *
 * A thread of the placer's own watches the cluster's prefix in etcd (a
 * handle of its own): any change, or the watch made again after it broke,
 * marks the view stale, and the next placement reads it again.  The view
 * is also read again when older than refresh_ms, whatever the watch says.
 * The thread touches nothing but @changed and @stop.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nelssa/log.h>
#include <nelssa/placement.h>
#include <nelssa/policy.h>
#include <nelssa/registry.h>
#include <nelssa/util.h>

#define PLACER_SESSIONS 16	/* of ours, per node */

struct pnode {
	struct nelssa_node rec;		/* the last record read, its list of requests ours */
	bool listed, excluded;
	bool full;			/* nelssa_placer_full(): skipped until its record changes */
	uint64_t full_free;		/* its free bytes then */
	int64_t excluded_lease;		/* the lease it had when excluded */
	uint64_t placed;		/* ours, at final lengths */
	uint64_t sessions[PLACER_SESSIONS];
	uint32_t n_sessions;
};

struct nelssa_placer {
	struct nelssa_etcd *etcd;
	char cluster[NELSSA_NAME_MAX + 1];
	uint32_t refresh_ms;
	uint64_t token_bytes;
	double max_fill;
	uint64_t read_ms;		/* when the view was read; 0: never */
	uint64_t failed_ms;		/* when a read last failed; 0: the last read worked */
	uint32_t backoff_ms;		/* reads wait this long after a failed one */
	struct pnode *node;
	uint32_t n, cap;
	char err[256];
	/* The watch. */
	struct nelssa_etcd *wetcd;
	pthread_t watcher;
	int watching;			/* @watcher runs */
	atomic_int changed;		/* the watch saw a change: read the view again */
	atomic_int up;			/* a watch is made and running */
	volatile int stop;		/* the watcher's cue */
	pthread_mutex_t lock;		/* @wake, with @stop */
	pthread_cond_t wake;
};

const char *nelssa_placer_error(const struct nelssa_placer *p)
{
	return p->err;
}

static bool ours(const struct pnode *n, uint64_t session)
{
	for (uint32_t i = 0; i < n->n_sessions; i++)
		if (n->sessions[i] == session)
			return true;
	return false;
}

static struct pnode *find(struct nelssa_placer *p, const char *id)
{
	for (uint32_t i = 0; i < p->n; i++)
		if (!strcmp(p->node[i].rec.id, id))
			return &p->node[i];
	return NULL;
}

static void on_bad(void *arg, const char *key, const char *why)
{
	char msg[512];

	(void)arg;
	snprintf(msg, sizeof(msg), "registry: ignoring %s: %s", key, why);
	nelssa_log(NELSSA_LOG_WARNING, "client", msg);
}

int nelssa_placer_refresh(struct nelssa_placer *p)
{
	struct nelssa_node *nodes;
	size_t cnt;
	int ret;

	ret = nelssa_registry_nodes(p->etcd, p->cluster, &nodes, &cnt, NULL, on_bad, NULL);
	if (ret) {
		/*
		 * etcd away: the last view goes on, and reads back off (refresh_ms,
		 * doubling to 30 s) so that a partitioned etcd, which answers
		 * nothing until the deadline, does not stall every placement.
		 */
		snprintf(p->err, sizeof(p->err), "%s", nelssa_etcd_error(p->etcd));
		p->failed_ms = nelssa_now_ms();
		p->backoff_ms = p->backoff_ms ? (p->backoff_ms >= 15000 ? 30000 : 2 * p->backoff_ms)
					      : (p->refresh_ms < 30000 ? p->refresh_ms : 30000);
		return ret;
	}
	p->failed_ms = 0;
	p->backoff_ms = 0;
	for (uint32_t i = 0; i < p->n; i++)
		p->node[i].listed = false;
	for (size_t k = 0; k < cnt; k++) {
		struct nelssa_node *r = &nodes[k];
		struct pnode *n = find(p, r->id);

		if (!n) {
			if (p->n == p->cap) {
				uint32_t cap = p->cap ? 2 * p->cap : 8;
				struct pnode *a = realloc(p->node, cap * sizeof(*a));

				if (!a) {
					nelssa_registry_nodes_free(nodes, cnt);
					snprintf(p->err, sizeof(p->err), "out of memory");
					return -ENOMEM;
				}
				p->node = a;
				p->cap = cap;
			}
			n = &p->node[p->n++];
			memset(n, 0, sizeof(*n));
		}
		/* A node excluded comes back only under a new lease (it registered again). */
		if (n->excluded && r->lease != n->excluded_lease)
			n->excluded = false;
		/*
		 * One found full is tried again once it says it has more room,
		 * or registered again; the view it was found full in may have
		 * been stale, so the mark follows what it says since.
		 */
		if (n->full && (r->kv_bytes_free > n->full_free || r->lease != n->rec.lease))
			n->full = false;
		else if (n->full)
			n->full_free = r->kv_bytes_free;
		free(n->rec.held);
		n->rec = *r;		/* its list of requests moves here */
		r->held = NULL;
		r->n_held = 0;
		n->listed = true;
	}
	nelssa_registry_nodes_free(nodes, cnt);
	p->read_ms = nelssa_now_ms();
	if (!p->read_ms)
		p->read_ms = 1;
	return 0;
}

static int on_watch(void *arg, int64_t revision, size_t events)
{
	struct nelssa_placer *p = arg;

	(void)revision;
	(void)events;	/* made (events 0: what happened before it is unseen) or changed */
	atomic_store(&p->up, 1);
	atomic_store(&p->changed, 1);
	return p->stop;
}

/* Watches the cluster's prefix; after a broken watch, again within a second. */
static void *watcher(void *arg)
{
	struct nelssa_placer *p = arg;
	char prefix[128];

	nelssa_node_key(prefix, sizeof(prefix), p->cluster, NULL);
	while (!p->stop) {
		struct timespec ts;

		nelssa_etcd_watch(p->wetcd, prefix, on_watch, p, &p->stop);
		atomic_store(&p->up, 0);
		/* Broken: whatever happened meanwhile was not seen. */
		atomic_store(&p->changed, 1);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		pthread_mutex_lock(&p->lock);
		while (!p->stop && pthread_cond_timedwait(&p->wake, &p->lock, &ts) != ETIMEDOUT)
			;
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

int nelssa_placer_watching(const struct nelssa_placer *p)
{
	return atomic_load(&((struct nelssa_placer *)p)->up);
}

int nelssa_placer_sync(struct nelssa_placer *p)
{
	/* etcd failed us just now: the last view, not another wait -- unless the watch is back. */
	if (p->failed_ms && nelssa_now_ms() - p->failed_ms < p->backoff_ms &&
	    !(atomic_load(&p->up) && atomic_load(&p->changed)))
		return 0;
	if (!atomic_exchange(&p->changed, 0) && nelssa_placer_view_age_ms(p) < p->refresh_ms)
		return 0;
	/* A failed read leaves the last view; the next placement tries again. */
	return nelssa_placer_refresh(p) ? 0 : 1;
}

int nelssa_placer_open(const struct nelssa_placer_opts *o, struct nelssa_placer **out)
{
	struct nelssa_etcd_opts eo = {
		.endpoints = o->etcd, .user = o->user, .password = o->password,
		.cacert = o->cacert, .cert = o->cert, .key = o->key, .timeout_ms = o->timeout_ms,
	};
	const char *cluster = o->cluster ? o->cluster : "default";
	struct nelssa_placer *p;
	char why[256] = "";
	int ret;

	*out = NULL;
	if (!nelssa_registry_name_ok(cluster) || !o->token_bytes || o->max_fill < 0 ||
	    o->max_fill > 1 || o->max_fill != o->max_fill)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	ret = nelssa_etcd_open(&eo, &p->etcd, why, sizeof(why));
	if (!ret)
		ret = nelssa_etcd_open(&eo, &p->wetcd, why, sizeof(why));
	if (ret) {
		if (why[0])
			nelssa_log(NELSSA_LOG_WARNING, "client", why);
		nelssa_etcd_close(p->etcd);
		free(p);
		return ret;
	}
	snprintf(p->cluster, sizeof(p->cluster), "%s", cluster);
	p->refresh_ms = o->refresh_ms ? o->refresh_ms : 500;
	p->token_bytes = o->token_bytes;
	p->max_fill = o->max_fill > 0 ? o->max_fill : 0.9;
	nelssa_placer_refresh(p);	/* a failure leaves the view empty, and says so */
	pthread_mutex_init(&p->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&p->wake, &ca);
		pthread_condattr_destroy(&ca);
	}
	/* Without the watch, the view is still read every refresh_ms. */
	p->watching = !pthread_create(&p->watcher, NULL, watcher, p);
	*out = p;
	return 0;
}

void nelssa_placer_close(struct nelssa_placer *p)
{
	if (!p)
		return;
	if (p->watching) {
		pthread_mutex_lock(&p->lock);
		p->stop = 1;
		pthread_cond_signal(&p->wake);
		pthread_mutex_unlock(&p->lock);
		nelssa_etcd_watch_abort(p->wetcd);
		pthread_join(p->watcher, NULL);
	}
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	nelssa_etcd_close(p->wetcd);
	nelssa_etcd_close(p->etcd);
	for (uint32_t i = 0; i < p->n; i++)
		free(p->node[i].rec.held);
	free(p->node);
	free(p);
}

uint64_t nelssa_placer_view_age_ms(const struct nelssa_placer *p)
{
	return p->read_ms ? nelssa_now_ms() - p->read_ms : UINT64_MAX;
}

uint32_t nelssa_placer_count(const struct nelssa_placer *p)
{
	return p->n;
}

static uint64_t cap_tokens(const struct nelssa_placer *p, const struct pnode *n)
{
	return (uint64_t)((double)n->rec.kv_bytes_total * p->max_fill / (double)p->token_bytes);
}

/* The record's tokens, less what it lists under our sessions, plus ours at final length. */
static uint64_t used_tokens(const struct pnode *n)
{
	uint64_t mine = 0;

	for (uint32_t h = 0; h < n->rec.n_held; h++)
		if (ours(n, n->rec.held[h].session))
			mine += n->rec.held[h].tokens;
	return (n->rec.tokens_held > mine ? n->rec.tokens_held - mine : 0) + n->placed;
}

int nelssa_placer_node(const struct nelssa_placer *p, uint32_t i, struct nelssa_placer_node *out)
{
	const struct pnode *n;
	const char *colon;
	size_t hl;

	if (i >= p->n)
		return -ENOENT;
	n = &p->node[i];
	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", n->rec.id);
	/* HOST:PORT, a v6 host in brackets (the record was checked whole). */
	colon = strrchr(n->rec.control, ':');
	hl = (size_t)(colon - n->rec.control);
	if (n->rec.control[0] == '[' && hl >= 2 && n->rec.control[hl - 1] == ']')
		snprintf(out->host, sizeof(out->host), "%.*s", (int)(hl - 2), n->rec.control + 1);
	else
		snprintf(out->host, sizeof(out->host), "%.*s", (int)hl, n->rec.control);
	out->port = (uint16_t)atoi(colon + 1);
	out->data_port = n->rec.data_port;
	out->devices = n->rec.devices;
	out->kv_bytes_total = n->rec.kv_bytes_total;
	out->cap_tokens = cap_tokens(p, n);
	out->used_tokens = used_tokens(n);
	out->placed_tokens = n->placed;
	out->step_us = n->rec.step_us;
	out->steps_in_flight = n->rec.steps_in_flight;
	out->listed = n->listed;
	out->excluded = n->excluded;
	out->full = n->full;
	return 0;
}

int nelssa_placer_find(const struct nelssa_placer *p, const char *id, uint32_t *i)
{
	for (uint32_t k = 0; k < p->n; k++)
		if (!strcmp(p->node[k].rec.id, id)) {
			*i = k;
			return 0;
		}
	return -ENOENT;
}

int nelssa_placer_place(struct nelssa_placer *p, uint64_t tokens, uint32_t *node)
{
	struct nelssa_place_node *v;
	int best;

	if (!tokens)
		return -EINVAL;
	nelssa_placer_sync(p);	/* else the last view: etcd away stops nothing */
	v = calloc(p->n ? p->n : 1, sizeof(*v));
	if (!v) {
		snprintf(p->err, sizeof(p->err), "out of memory");
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < p->n; i++) {
		const struct pnode *n = &p->node[i];

		v[i] = (struct nelssa_place_node){
			.used_tokens = (double)used_tokens(n), .cap_tokens = (double)cap_tokens(p, n),
			.devices = n->rec.devices, .steps_in_flight = n->rec.steps_in_flight,
			.eligible = n->listed && !n->excluded && !n->full, .id = n->rec.id,
		};
	}
	best = nelssa_place_pick(v, p->n, (double)tokens);
	free(v);
	if (best < 0) {
		snprintf(p->err, sizeof(p->err), "no node of cluster '%s' has room for %llu tokens "
			 "(%u known)", p->cluster, (unsigned long long)tokens, p->n);
		return -ENOSPC;
	}
	p->node[best].placed += tokens;
	*node = (uint32_t)best;
	return 0;
}

int nelssa_placer_release(struct nelssa_placer *p, uint32_t node, uint64_t tokens)
{
	if (node >= p->n)
		return -ENOENT;
	if (tokens > p->node[node].placed)
		return -EINVAL;
	p->node[node].placed -= tokens;
	p->node[node].full = false;	/* our sessions there have room again */
	return 0;
}

int nelssa_placer_own_session(struct nelssa_placer *p, uint32_t node, uint64_t session)
{
	struct pnode *n;

	if (node >= p->n)
		return -ENOENT;
	n = &p->node[node];
	if (ours(n, session))
		return 0;
	if (n->n_sessions == PLACER_SESSIONS)
		return -ENOSPC;
	n->sessions[n->n_sessions++] = session;
	return 0;
}

int nelssa_placer_disown_session(struct nelssa_placer *p, uint32_t node, uint64_t session)
{
	struct pnode *n;

	if (node >= p->n)
		return -ENOENT;
	n = &p->node[node];
	for (uint32_t i = 0; i < n->n_sessions; i++)
		if (n->sessions[i] == session) {
			n->sessions[i] = n->sessions[--n->n_sessions];
			return 0;
		}
	return -ENOENT;
}

int nelssa_placer_full(struct nelssa_placer *p, uint32_t node)
{
	if (node >= p->n)
		return -ENOENT;
	p->node[node].full = true;
	p->node[node].full_free = p->node[node].rec.kv_bytes_free;
	return 0;
}

int nelssa_placer_exclude(struct nelssa_placer *p, uint32_t node)
{
	if (node >= p->n)
		return -ENOENT;
	p->node[node].excluded = true;
	p->node[node].excluded_lease = p->node[node].rec.lease;
	return 0;
}
