// SPDX-License-Identifier: MIT
/*
 * The node's announcement in the cluster registry (--etcd;
 * Documentation/cluster.rst).
 *
 * A thread of its own talks to etcd, so that etcd being slow or gone never
 * delays a step or a control reply.  It registers the node under a lease,
 * renews the lease at a third of its TTL, rewrites the record when the
 * load changed (at most once per --etcd-update-ms), and when etcd is
 * unreachable or has forgotten the lease it registers again as soon as
 * etcd answers.  On a clean exit it revokes the lease, which deletes the
 * record at once; a node that dies leaves it for the lease's TTL.
 *
 * What the record says of sessions and load is the poller's (it owns
 * them): nd_registry_tick(), on the poller's turn, builds a snapshot once
 * per period and swaps it in under @lock, which is held for nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nelssa/registry.h>

#include "nelssad.h"

struct nd_registry {
	pthread_t thread;
	int running;			/* @thread started, not joined */
	pthread_mutex_t lock;		/* @snap, @stop and @wake */
	pthread_cond_t wake;
	int stop;
	struct nelssa_node *snap;	/* the poller's latest, not yet taken */
	/* Poller thread. */
	uint64_t next_snap_ns;
	uint64_t last_steps, last_step_ns;
	uint64_t step_us;
	/* Registry thread. */
	struct nelssa_etcd *etcd;
	struct nelssa_node node;	/* as last announced (or to be) */
	char key[256];
	char password[256];
	int64_t lease;			/* 0: not registered */
	uint32_t ttl;
	int dirty;			/* @node changed since written */
	/*
	 * Test hook, from NELSSAD_TEST_REGISTRY_STALL: once registered, the
	 * node neither renews its lease nor writes -- a node cut off from
	 * etcd but not from its clients.
	 */
	int stall;
	int down_logged;
	uint64_t keepalive_due, write_due;
};

static void free_node(struct nelssa_node *n)
{
	if (n) {
		nelssa_node_release(n);
		free(n);
	}
}

/* Wall clock in ms, for the record's 'updated_ms'. */
static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * Poller thread: what the record says of the node now.  Steps' mean
 * latency is that of the steps served since the last snapshot; with none
 * it keeps the last mean, so that an idle node does not look fast.
 */
void nd_registry_tick(struct nelssad *nd)
{
	struct nd_registry *r = nd->reg;
	const uint64_t now = nd_now_ns();
	const struct nd_stats *st = &nd->stats;
	uint64_t steps_ns, total = 0, free_bytes = 0;
	struct nelssa_node *n;

	if (!r || now < r->next_snap_ns)
		return;
	r->next_snap_ns = now + (uint64_t)nd->cfg.etcd_update_ms * 1000000u;
	steps_ns = st->t_recv + st->t_dispatch + st->t_device + st->t_aggregate + st->t_send;
	if (st->steps > r->last_steps)
		r->step_us = (steps_ns - r->last_step_ns) / (st->steps - r->last_steps) / 1000u;
	r->last_steps = st->steps;
	r->last_step_ns = steps_ns;

	n = calloc(1, sizeof(*n));
	if (!n)
		return;
	for (uint32_t d = 0; d < nd->n_dev; d++) {
		total += nd->dev[d].info.mem_size;
		free_bytes += nd->dev[d].info.mem_size - nd->dev[d].reserved;
	}
	n->devices = nd->n_dev;
	n->kv_bytes_total = total;
	n->kv_bytes_free = free_bytes;
	n->max_sessions = nd->cfg.max_sessions;
	n->kv_in_flight = nd->rndv;
	n->step_us = r->step_us;
	n->steps = st->steps;
	for (struct nd_session *s = nd->sessions; s; s = s->next) {
		const size_t cells = (size_t)s->shape.layers * s->shape.kv_heads;

		n->sessions++;
		n->steps_in_flight += s->step != NULL;
		for (uint32_t i = 0; i < s->n_req; i++) {
			const struct nd_request *q = &s->req[i];
			uint64_t tokens = 0;

			if (!q->used)
				continue;
			for (uint32_t d = 0; d < nd->n_dev; d++)
				tokens += q->nr_tokens[d * cells];
			n->requests++;
			n->tokens_held += tokens;
			if (n->n_held == NELSSA_NODE_MAX_HELD) {
				n->held_more++;
				continue;
			}
			if (!n->held) {
				n->held = calloc(NELSSA_NODE_MAX_HELD, sizeof(*n->held));
				if (!n->held) {
					free_node(n);
					return;
				}
			}
			n->held[n->n_held++] = (struct nelssa_node_held){
				.session = s->id, .request = q->id,
				.tokens = tokens > UINT32_MAX ? UINT32_MAX : (uint32_t)tokens,
			};
		}
	}
	pthread_mutex_lock(&r->lock);
	free_node(r->snap);
	r->snap = n;
	pthread_mutex_unlock(&r->lock);
}

/* Registry thread: takes the poller's snapshot into @node, keeping the identity. */
static void take_snapshot(struct nd_registry *r)
{
	struct nelssa_node *n;

	pthread_mutex_lock(&r->lock);
	n = r->snap;
	r->snap = NULL;
	pthread_mutex_unlock(&r->lock);
	if (!n)
		return;
	memcpy(n->id, r->node.id, sizeof(n->id));
	memcpy(n->version, r->node.version, sizeof(n->version));
	memcpy(n->control, r->node.control, sizeof(n->control));
	n->data_port = r->node.data_port;
	/* The time alone changing is no reason to write. */
	n->updated_ms = r->node.updated_ms;
	if (n->n_held == r->node.n_held &&
	    !memcmp(n, &r->node, offsetof(struct nelssa_node, held)) &&
	    (!n->n_held || !memcmp(n->held, r->node.held, n->n_held * sizeof(*n->held)))) {
		free_node(n);
		return;
	}
	nelssa_node_release(&r->node);
	r->node = *n;
	free(n);
	r->dirty = 1;
}

static int write_record(struct nelssad *nd, struct nd_registry *r)
{
	char *json;
	int ret;

	r->node.updated_ms = wall_ms();
	json = nelssa_node_to_json(&r->node);
	if (!json)
		return -ENOMEM;
	ret = nelssa_etcd_put(r->etcd, r->key, json, strlen(json), r->lease);
	free(json);
	if (!ret)
		r->dirty = 0;
	(void)nd;
	return ret;
}

static void went_down(struct nelssad *nd, struct nd_registry *r, const char *what)
{
	if (!r->down_logged)
		nd_log(nd, "registry: %s: %s; registering again when etcd answers", what,
		       nelssa_etcd_error(r->etcd));
	r->down_logged = 1;
	r->lease = 0;
}

static void registry_turn(struct nelssad *nd, struct nd_registry *r, uint64_t now)
{
	const uint64_t update_ms = nd->cfg.etcd_update_ms;
	uint32_t ttl;
	int ret;

	take_snapshot(r);
	if (!r->lease) {
		ret = nelssa_etcd_lease_grant(r->etcd, nd->cfg.etcd_ttl, &r->lease, &r->ttl);
		if (!ret) {
			ret = write_record(nd, r);
			if (ret) {
				/* The key must not stay without its record: drop the lease. */
				nelssa_etcd_lease_revoke(r->etcd, r->lease);
				r->lease = 0;
			}
		}
		if (ret) {
			went_down(nd, r, "cannot register");
			return;
		}
		nd_log(nd, "registry: registered %s at %s (lease %llx, TTL %u s)", r->key,
		       nelssa_etcd_endpoint(r->etcd), (unsigned long long)r->lease, r->ttl);
		r->down_logged = 0;
		r->keepalive_due = now + r->ttl * 1000ull / 3;
		r->write_due = now + update_ms;
		return;
	}
	if (r->stall)
		return;
	if (now >= r->keepalive_due) {
		ret = nelssa_etcd_lease_keepalive(r->etcd, r->lease, &ttl);
		if (ret) {
			went_down(nd, r, ret == -ENOENT ? "the lease expired" : "cannot renew the lease");
			return;
		}
		r->keepalive_due = now + r->ttl * 1000ull / 3;
	}
	if (r->dirty && now >= r->write_due) {
		ret = write_record(nd, r);
		if (ret) {
			went_down(nd, r, ret == -ENOENT ? "the lease expired" : "cannot update");
			return;
		}
		r->write_due = now + update_ms;
	}
}

static void *registry_main(void *arg)
{
	struct nelssad *nd = arg;
	struct nd_registry *r = nd->reg;

	for (;;) {
		uint64_t now = nelssa_now_ms(), next;
		struct timespec ts;

		registry_turn(nd, r, now);
		/* Next: the keep-alive or write due, or a retry; never later than the update period. */
		next = now + nd->cfg.etcd_update_ms;
		if (!r->lease)
			next = now + (nd->cfg.etcd_ttl * 1000ull / 3 < 1000 ?
				      nd->cfg.etcd_ttl * 1000ull / 3 : 1000);
		else if (!r->stall && r->keepalive_due < next)
			next = r->keepalive_due;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		{
			uint64_t wait_ns = (next > now ? next - now : 1) * 1000000ull +
					   (uint64_t)ts.tv_nsec;

			ts.tv_sec += (time_t)(wait_ns / 1000000000ull);
			ts.tv_nsec = (long)(wait_ns % 1000000000ull);
		}
		pthread_mutex_lock(&r->lock);
		while (!r->stop && pthread_cond_timedwait(&r->wake, &r->lock, &ts) != ETIMEDOUT)
			;
		if (r->stop) {
			pthread_mutex_unlock(&r->lock);
			break;
		}
		pthread_mutex_unlock(&r->lock);
	}
	if (r->lease) {
		if (nelssa_etcd_lease_revoke(r->etcd, r->lease))
			nd_log(nd, "registry: cannot withdraw %s (%s): it goes when its lease expires",
			       r->key, nelssa_etcd_error(r->etcd));
		else
			nd_log(nd, "registry: withdrew %s", r->key);
	}
	return NULL;
}

static int read_password(struct nelssad *nd, struct nd_registry *r)
{
	FILE *f = fopen(nd->cfg.etcd_password_file, "re");
	size_t n;

	if (!f) {
		nd_log(nd, "registry: cannot read %s: %s", nd->cfg.etcd_password_file,
		       strerror(errno));
		return -1;
	}
	n = fread(r->password, 1, sizeof(r->password) - 1, f);
	fclose(f);
	r->password[n] = 0;
	r->password[strcspn(r->password, "\r\n")] = 0;
	return 0;
}

/* The address clients reach the control protocol at: --advertise, else the listen host. */
static void advertised(struct nelssad *nd, char *buf, size_t len)
{
	const char *host = nd->cfg.advertise[0] ? nd->cfg.advertise : nd->cfg.listen_host;
	char name[256];

	if (!nd->cfg.advertise[0] && (!strcmp(host, "0.0.0.0") || !strcmp(host, "::"))) {
		if (gethostname(name, sizeof(name)) == 0) {
			name[sizeof(name) - 1] = 0;
			host = name;
		}
	}
	snprintf(buf, len, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, nd->cfg.port);
}

int nd_registry_init(struct nelssad *nd)
{
	struct nelssa_etcd_opts o = {
		.endpoints = nd->cfg.etcd,
		.timeout_ms = nd->cfg.etcd_timeout_ms,
	};
	struct nd_registry *r;
	char why[256];
	int ret;

	if (!nd->cfg.etcd[0])
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -1;
	if (nd->cfg.etcd_password_file[0] && read_password(nd, r)) {
		free(r);
		return -1;
	}
	o.user = nd->cfg.etcd_user[0] ? nd->cfg.etcd_user : NULL;
	o.password = o.user ? r->password : NULL;
	o.cacert = nd->cfg.etcd_cacert[0] ? nd->cfg.etcd_cacert : NULL;
	o.cert = nd->cfg.etcd_cert[0] ? nd->cfg.etcd_cert : NULL;
	o.key = nd->cfg.etcd_key[0] ? nd->cfg.etcd_key : NULL;
	ret = nelssa_etcd_open(&o, &r->etcd, why, sizeof(why));
	explicit_bzero(r->password, sizeof(r->password));
	if (ret) {
		nd_log(nd, "registry: %s", ret == -EINVAL ? why : strerror(-ret));
		free(r);
		return -1;
	}
	pthread_mutex_init(&r->lock, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&r->wake, &ca);
		pthread_condattr_destroy(&ca);
	}
	r->stall = getenv("NELSSAD_TEST_REGISTRY_STALL") != NULL;
	nd->reg = r;
	return 0;
}

/* After the listeners are up: the record's addresses are known, the thread starts. */
int nd_registry_start(struct nelssad *nd)
{
	struct nd_registry *r = nd->reg;

	if (!r)
		return 0;
	if (nd->cfg.node_id[0]) {
		snprintf(r->node.id, sizeof(r->node.id), "%s", nd->cfg.node_id);
	} else {
		/* HOSTNAME-PORT, with what a name may not hold made '-'. */
		char host[256] = "node";

		gethostname(host, sizeof(host));
		host[sizeof(host) - 1] = 0;
		snprintf(r->node.id, sizeof(r->node.id), "%.50s-%u", host, nd->cfg.port);
		for (char *p = r->node.id; *p; p++)
			if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
				    *p))
				*p = '-';
	}
	if (nelssa_node_key(r->key, sizeof(r->key), nd->cfg.cluster, r->node.id)) {
		nd_log(nd, "registry: cannot name the node '%s' in cluster '%s'", r->node.id,
		       nd->cfg.cluster);
		return -1;
	}
	snprintf(r->node.version, sizeof(r->node.version), "%s", NELSSA_VERSION);
	advertised(nd, r->node.control, sizeof(r->node.control));
	r->node.data_port = nd->data_port;
	r->node.devices = nd->n_dev;
	r->node.max_sessions = nd->cfg.max_sessions;
	for (uint32_t d = 0; d < nd->n_dev; d++) {
		r->node.kv_bytes_total += nd->dev[d].info.mem_size;
		r->node.kv_bytes_free += nd->dev[d].info.mem_size - nd->dev[d].reserved;
	}
	if (pthread_create(&r->thread, NULL, registry_main, nd)) {
		nd_log(nd, "registry: cannot start its thread");
		return -1;
	}
	r->running = 1;
	return 0;
}

/*
 * Withdraws the record (revokes the lease) and stops the thread: before
 * the node stops serving, so that no client places a request on it meanwhile.
 */
void nd_registry_stop(struct nelssad *nd)
{
	struct nd_registry *r = nd->reg;

	if (!r || !r->running)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = 1;
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	r->running = 0;
}

/* Once the poller no longer runs (it takes snapshots into @reg). */
void nd_registry_free(struct nelssad *nd)
{
	struct nd_registry *r = nd->reg;

	if (!r)
		return;
	nd_registry_stop(nd);
	nelssa_etcd_close(r->etcd);
	nelssa_node_release(&r->node);
	free_node(r->snap);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	nd->reg = NULL;
	free(r);
}
