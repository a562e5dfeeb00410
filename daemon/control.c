// SPDX-License-Identifier: MIT
/*
 * The control messages (DESIGN §3.6): HELLO, sessions, KV allocation,
 * stats.  conn.c owns the connections -- sockets, buffers, timeouts, the
 * poll loop -- and hands each whole, decoded frame to
 * nd_control_handle(); replies are queued on the connection, never
 * written here.  Anything out of order (no HELLO first) gets an ERROR
 * frame and the connection is closed -- the daemon and every other
 * connection carry on.  A session belongs to the connection that created
 * it: when that connection goes (client exit, crash, kill, a limit), its
 * sessions are marked closing and the poller thread frees them once no
 * step of theirs is in flight.
 *
 * A connection is a tenant (the SESSION_CREATE tenant field is a label
 * the client chooses, not an identity), and the per-connection limits
 * bound it: sessions, requests per session, device memory.  A request
 * beyond one is refused with -EDQUOT and a message naming the limit;
 * nothing else changes.  STATS shows a connection its own counters, and
 * the whole daemon's only to a connection from an --admin-addr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/link.h>

#include "nelssad.h"

static struct nd_session *owned(struct nelssad *nd, struct nd_conn *c, uint64_t id)
{
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->id == id && s->ctl_fd == c->fd && !s->closing)
			return s;
	return NULL;
}

/* Device memory the sessions @c holds reserve, on all devices.  With the lock held. */
static uint64_t held_bytes(const struct nelssad *nd, const struct nd_conn *c)
{
	uint64_t b = 0;

	for (const struct nd_session *s = nd->sessions; s; s = s->next) {
		if (s->ctl_fd != c->fd || s->closing)
			continue;
		for (uint32_t d = 0; d < nd->n_dev; d++)
			b += s->dev[d].arena_bytes + s->dev[d].stage_bytes;
	}
	return b;
}

static int do_create(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_SESSION_OK, .seq = m->seq };
	struct nd_session *s;
	char why[NELSSA_PROTO_ERR_LEN] = "";
	int ret;

	pthread_mutex_lock(&nd->lock);
	if (nd->n_sessions >= nd->cfg.max_sessions) {
		pthread_mutex_unlock(&nd->lock);
		return nd_conn_error(nd, c, m->seq, -EBUSY, "the daemon serves its limit of %u sessions",
				     nd->cfg.max_sessions);
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		pthread_mutex_unlock(&nd->lock);
		return nd_conn_error(nd, c, m->seq, -ENOMEM, "out of memory");
	}
	s->tenant = m->u.create.tenant;
	s->shape = m->u.create.shape;
	s->group = s->shape.q_heads / s->shape.kv_heads;
	s->placement = m->u.create.placement;
	s->max_batch = m->u.create.max_batch;
	s->max_sel = m->u.create.max_sel;
	s->capacity_tokens = m->u.create.capacity_tokens;
	s->ctl_fd = c->fd;
	s->peer = c->peer;
	/* Its data path is bound to it: only this connection learns the token. */
	ret = nd_token_new(&s->token);
	if (ret)
		snprintf(why, sizeof(why), "no random token for the session: %s", strerror(-ret));
	else
		ret = nd_session_reserve(nd, s, held_bytes(nd, c), why, sizeof(why));
	pthread_mutex_unlock(&nd->lock);
	/*
	 * Allocating, zeroing and registering take their time: the poller
	 * serves every other session meanwhile, as the memory is reserved
	 * and the session in no list yet.
	 */
	if (!ret) {
		ret = nd_session_alloc(nd, s, why, sizeof(why));
		if (ret) {
			pthread_mutex_lock(&nd->lock);
			nd_session_unreserve(nd, s);
			pthread_mutex_unlock(&nd->lock);
		}
	}
	if (ret) {
		free(s);
		nd_log(nd, "session refused: %s", why);
		return nd_conn_error(nd, c, m->seq, ret, "%s", why);
	}
	pthread_mutex_lock(&nd->lock);
	s->id = ++nd->next_session;
	s->next = nd->sessions;
	nd->sessions = s;
	nd->n_sessions++;
	if (s->peer)
		s->peer->sessions++;
	pthread_mutex_unlock(&nd->lock);
	nd_log(nd, "session %llu: %u layers, %u/%u heads, dim %u, %llu tokens of capacity, "
	       "KV %s", (unsigned long long)s->id, s->shape.layers, s->shape.q_heads,
	       s->shape.kv_heads, s->shape.head_dim, (unsigned long long)s->capacity_tokens,
	       s->rma ? "written by the client (zero-copy)" : "staged");
	r.u.session_ok.session = s->id;
	r.u.session_ok.token = s->token;
	r.u.session_ok.devices = nd->n_dev;
	r.u.session_ok.flags = s->rma ? NELSSA_SESSION_RMA : 0;
	return nd_conn_send(nd, c, &r);
}

/*
 * The data-path end of @c (nelssad.h, struct nd_peer), with a key no other
 * peer has; @shm: its endpoints come without error handling.
 */
static int add_peer(struct nelssad *nd, struct nd_conn *c, int shm)
{
	struct nd_peer *p = calloc(1, sizeof(*p));
	int ret, taken;

	if (!p)
		return -ENOMEM;
	p->id = c->id;
	p->shm = shm;
	pthread_mutex_lock(&nd->lock);
	do {
		ret = nd_token_new(&p->key);
		taken = 0;
		for (const struct nd_peer *q = nd->peers; !ret && q; q = q->next)
			taken |= q->key == p->key;
	} while (!ret && taken);
	if (!ret) {
		p->next = nd->peers;
		nd->peers = p;
		c->peer = p;
	}
	pthread_mutex_unlock(&nd->lock);
	if (ret)
		free(p);
	return ret;
}

/* Sessions @c holds, closing ones aside.  With the lock held. */
static uint32_t held_sessions(const struct nelssad *nd, const struct nd_conn *c)
{
	uint32_t n = 0;

	for (const struct nd_session *s = nd->sessions; s; s = s->next)
		n += s->ctl_fd == c->fd && !s->closing;
	return n;
}

uint32_t nd_control_sessions(struct nelssad *nd, const struct nd_conn *c)
{
	uint32_t n;

	pthread_mutex_lock(&nd->lock);
	n = held_sessions(nd, c);
	pthread_mutex_unlock(&nd->lock);
	return n;
}

/* SESSION_CREATE within the connection's limits: the count, then the memory. */
static int create(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	uint32_t held;

	pthread_mutex_lock(&nd->lock);
	held = held_sessions(nd, c);
	pthread_mutex_unlock(&nd->lock);
	if (held >= nd->cfg.max_sessions_per_conn)
		return nd_conn_error(nd, c, m->seq, -EDQUOT,
				     "this connection holds its limit of %u sessions "
				     "(max-sessions-per-conn)", nd->cfg.max_sessions_per_conn);
	return do_create(nd, c, m);
}

/* Requests @s holds. */
static uint32_t held_requests(const struct nd_session *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->n_req; i++)
		n += s->req[i].used != 0;
	return n;
}

/* A session's counters go to its connection's when it closes. */
static void close_session(struct nd_conn *c, struct nd_session *s)
{
	s->closing = 1;
	c->done_steps += s->steps;
	c->done_items += s->items;
	c->done_kv += s->kv_bytes;
	c->done_kv_rma += s->kv_rma_bytes;
}

/*
 * STATS: for session 0, the connection's own counters -- its sessions
 * open and closed -- or, on an admin connection (--admin-addr), the
 * daemon's, with the summed times; for a session, that session's, if the
 * connection holds it (an admin's: any session).
 */
static int stats(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_STATS_REPLY, .seq = m->seq };
	const uint64_t id = m->u.session.session;
	const struct nd_session *s;

	pthread_mutex_lock(&nd->lock);
	if (id) {
		for (s = nd->sessions; s; s = s->next)
			if (s->id == id && !s->closing && (c->admin || s->ctl_fd == c->fd))
				break;
		if (!s) {
			pthread_mutex_unlock(&nd->lock);
			return nd_conn_error(nd, c, m->seq, -ENOENT,
					     "no such session on this connection");
		}
		r.u.stats.steps = s->steps;
		r.u.stats.items = s->items;
		r.u.stats.kv_bytes = s->kv_bytes;
		r.u.stats.kv_rma_bytes = s->kv_rma_bytes;
		r.u.stats.sessions = 1;
	} else if (c->admin) {
		r.u.stats.steps = nd->stats.steps;
		r.u.stats.items = nd->stats.items;
		r.u.stats.kv_bytes = nd->stats.kv_bytes;
		r.u.stats.kv_rma_bytes = nd->stats.kv_rma_bytes;
		r.u.stats.t_recv = nd->stats.t_recv;
		r.u.stats.t_dispatch = nd->stats.t_dispatch;
		r.u.stats.t_device = nd->stats.t_device;
		r.u.stats.t_aggregate = nd->stats.t_aggregate;
		r.u.stats.t_send = nd->stats.t_send;
		r.u.stats.sessions = nd->n_sessions;
	} else {
		r.u.stats.steps = c->done_steps;
		r.u.stats.items = c->done_items;
		r.u.stats.kv_bytes = c->done_kv;
		r.u.stats.kv_rma_bytes = c->done_kv_rma;
		for (s = nd->sessions; s; s = s->next)
			if (s->ctl_fd == c->fd && !s->closing) {
				r.u.stats.steps += s->steps;
				r.u.stats.items += s->items;
				r.u.stats.kv_bytes += s->kv_bytes;
				r.u.stats.kv_rma_bytes += s->kv_rma_bytes;
				r.u.stats.sessions++;
			}
	}
	r.u.stats.devices = nd->n_dev;
	pthread_mutex_unlock(&nd->lock);
	return nd_conn_send(nd, c, &r);
}

/*
 * RKEY_GET: the packed remote key of a session's memory on one device, for
 * its own connection alone (the key lets its holder write that memory).
 */
static int rkey(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg *r;
	const struct nd_sdev *sd;
	struct nd_session *s;
	int ret;

	pthread_mutex_lock(&nd->lock);
	s = owned(nd, c, m->u.rkey_get.session);
	if (!s || !s->rma || m->u.rkey_get.device >= nd->n_dev) {
		pthread_mutex_unlock(&nd->lock);
		if (!s)
			return nd_conn_error(nd, c, m->seq, -ENOENT,
					     "no such session on this connection");
		if (!s->rma)
			return nd_conn_error(nd, c, m->seq, -EOPNOTSUPP, "session %llu takes KV "
					     "messages only: its memory is not registered",
					     (unsigned long long)s->id);
		return nd_conn_error(nd, c, m->seq, -EINVAL, "device %u: the daemon has %u",
				     m->u.rkey_get.device, nd->n_dev);
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&nd->lock);
		return nd_conn_error(nd, c, m->seq, -ENOMEM, "out of memory");
	}
	sd = &s->dev[m->u.rkey_get.device];
	r->type = NELSSA_MSG_RKEY;
	r->seq = m->seq;
	r->u.rkey.session = s->id;
	r->u.rkey.device = m->u.rkey_get.device;
	r->u.rkey.base = (uint64_t)(uintptr_t)sd->arena_map;
	r->u.rkey.bytes = sd->arena_bytes;
	r->u.rkey.len = (uint32_t)sd->rkey_len;
	memcpy(r->u.rkey.key, sd->rkey, sd->rkey_len);
	pthread_mutex_unlock(&nd->lock);
	ret = nd_conn_send(nd, c, r);
	free(r);
	return ret;
}

/* REQ_OK: where request @id of @s lies.  With the lock held. */
static void req_ok(const struct nelssad *nd, struct nd_session *s, uint64_t id,
		   struct nelssa_msg *r)
{
	const struct nd_request *q = nd_request_find(s, id);

	r->type = NELSSA_MSG_REQ_OK;
	r->u.req_ok.request = id;
	r->u.req_ok.store_tokens = q->store_tokens;
	r->u.req_ok.store_clusters = q->store_clusters;
	r->u.req_ok.devices = nd->n_dev;
	for (uint32_t d = 0; d < nd->n_dev; d++)
		r->u.req_ok.off[d] = q->off[d];
}

int nd_control_handle(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_OK, .seq = m->seq };
	char why[NELSSA_PROTO_ERR_LEN] = "";
	struct nd_session *s;
	int ret = 0;

	if (!c->hello && m->type != NELSSA_MSG_HELLO) {
		nd_conn_error(nd, c, m->seq, -EPROTO, "HELLO must come first");
		return -EPROTO;
	}
	switch (m->type) {
	case NELSSA_MSG_HELLO:
		if (c->hello) {
			nd_conn_error(nd, c, m->seq, -EPROTO, "HELLO was already exchanged");
			return -EPROTO;
		}
		if (m->u.hello.min_version > NELSSA_PROTO_VERSION ||
		    m->u.hello.max_version < NELSSA_PROTO_VERSION) {
			nd_conn_error(nd, c, m->seq, -EPROTONOSUPPORT,
				      "this daemon speaks protocol version %u only",
				      NELSSA_PROTO_VERSION);
			return -EPROTONOSUPPORT;
		}
		/* Shared memory: on this host alone, and only where UCX has it. */
		ret = add_peer(nd, c, (m->u.hello.flags & NELSSA_HELLO_SHM) && nd->shm_ok &&
				      nelssa_link_is_local(c->fd));
		if (ret) {
			nd_conn_error(nd, c, m->seq, ret, "no key for the data path: %s",
				      strerror(-ret));
			return ret;
		}
		c->hello = 1;
		r.type = NELSSA_MSG_HELLO_OK;
		r.u.hello_ok.version = NELSSA_PROTO_VERSION;
		r.u.hello_ok.devices = (uint16_t)nd->n_dev;
		for (uint32_t d = 0; d < nd->n_dev; d++)
			r.u.hello_ok.device_bytes += nd->dev[d].info.mem_size;
		snprintf(r.u.hello_ok.name, sizeof(r.u.hello_ok.name), "%s", ND_NAME);
		r.u.hello_ok.data_port = nd->data_port;
		r.u.hello_ok.key = c->peer->key;
		r.u.hello_ok.flags = c->peer->shm ? NELSSA_HELLO_SHM : 0;
		return nd_conn_send(nd, c, &r);
	case NELSSA_MSG_SESSION_CREATE:
		return create(nd, c, m);
	case NELSSA_MSG_REQ_ALLOC:
	case NELSSA_MSG_REQ_FREE:
	case NELSSA_MSG_CLOSE:
		pthread_mutex_lock(&nd->lock);
		s = owned(nd, c, m->type == NELSSA_MSG_CLOSE ? m->u.session.session : m->u.req.session);
		if (!s) {
			ret = -ENOENT;
			snprintf(why, sizeof(why), "no such session on this connection");
		} else if (m->type == NELSSA_MSG_REQ_ALLOC &&
			   held_requests(s) >= nd->cfg.max_requests_per_session) {
			ret = -EDQUOT;
			snprintf(why, sizeof(why), "session %llu holds its limit of %u requests "
				 "(max-requests-per-session)", (unsigned long long)s->id,
				 nd->cfg.max_requests_per_session);
		} else if (m->type == NELSSA_MSG_REQ_ALLOC) {
			ret = nd_request_alloc(nd, s, m->u.req.request, m->u.req.max_tokens,
					       m->u.req.max_clusters, why, sizeof(why));
			if (!ret)
				req_ok(nd, s, m->u.req.request, &r);
		} else if (m->type == NELSSA_MSG_REQ_FREE && nd_step_uses(s, m->u.req.request)) {
			/* The device may still read it, and its room go to another. */
			ret = -EBUSY;
			snprintf(why, sizeof(why), "request %llu is in the step in flight: free it "
				 "once the step is answered", (unsigned long long)m->u.req.request);
		} else if (m->type == NELSSA_MSG_REQ_FREE) {
			ret = nd_request_free(nd, s, m->u.req.request);
			if (ret)
				snprintf(why, sizeof(why), "no such request");
		} else {
			close_session(c, s);
		}
		pthread_mutex_unlock(&nd->lock);
		if (m->type == NELSSA_MSG_CLOSE && !ret)
			nd_dataplane_wake(nd);
		if (ret)
			return nd_conn_error(nd, c, m->seq, ret, "%s", why);
		return nd_conn_send(nd, c, &r);
	case NELSSA_MSG_STATS:
		return stats(nd, c, m);
	case NELSSA_MSG_RKEY_GET:
		return rkey(nd, c, m);
	default:
		nd_conn_error(nd, c, m->seq, -EPROTO, "%s is not a request",
			      nelssa_msg_type_str(m->type));
		return -EPROTO;
	}
}

/*
 * The connection is going: its sessions close and no reply goes to its
 * client any more (the poller closes the peer's endpoints).  Once per
 * connection, before conn.c closes its socket.
 */
void nd_control_gone(struct nelssad *nd, struct nd_conn *c)
{
	int marked = 0;

	pthread_mutex_lock(&nd->lock);
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->ctl_fd == c->fd && !s->closing) {
			close_session(c, s);
			marked++;
		}
	if (c->peer)
		c->peer->gone = 1;
	pthread_mutex_unlock(&nd->lock);
	if (marked)
		nd_log(nd, "connection %llu closed: reclaiming %d session(s)",
		       (unsigned long long)c->id, marked);
	if (marked || c->peer)
		nd_dataplane_wake(nd);
}
