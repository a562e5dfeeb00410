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
 * The sessions and peers are the poller's (nelssad.h, "Threads"): every
 * request past HELLO's version check is a job (jobs.c) that
 * nd_control_job() runs on the poller thread, and nd_control_answer()
 * answers on the control thread.  The poller runs a connection's jobs in
 * the order they came and they come back in that order, so replies keep
 * the order of their requests; HELLO and SESSION_CREATE are barriers --
 * the frames after them wait for their answer, as what follows may need
 * it.  SESSION_CREATE takes two jobs: the poller checks the limits and
 * reserves device memory, the control thread allocates, zeroes and
 * registers it, and the poller lists the session; a connection gone in
 * between has its reservation dropped.
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/link.h>

#include "nelssad.h"

/* Poller thread from here to nd_control_job(). */

static struct nd_session *owned(struct nelssad *nd, const struct nd_peer *p, uint64_t id)
{
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->id == id && p && s->peer == p && !s->closing)
			return s;
	return NULL;
}

/* Device memory the sessions of @p reserve, on all devices. */
static uint64_t held_bytes(const struct nelssad *nd, const struct nd_peer *p)
{
	uint64_t b = 0;

	for (const struct nd_session *s = nd->sessions; s; s = s->next) {
		if (s->peer != p || s->closing)
			continue;
		for (uint32_t d = 0; d < nd->n_dev; d++)
			b += s->dev[d].arena_bytes + s->dev[d].stage_bytes;
	}
	return b;
}

/* Sessions @p holds, closing ones aside. */
static uint32_t held_sessions(const struct nelssad *nd, const struct nd_peer *p)
{
	uint32_t n = 0;

	for (const struct nd_session *s = nd->sessions; s; s = s->next)
		n += s->peer == p && !s->closing;
	return n;
}

/* Fails @j with @code and a message, as an ERROR frame will say. */
static void fail(struct nd_job *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail(struct nd_job *j, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->why, sizeof(j->why), fmt, ap);
	va_end(ap);
	j->status = code;
}

/*
 * SESSION_CREATE, first half: the limits, then the device memory reserved
 * for the session @j carries back to the control thread, which allocates it.
 */
static void create_reserve(struct nelssad *nd, struct nd_job *j)
{
	const struct nelssa_msg *m = &j->msg;
	struct nd_session *s;
	int ret;

	if (nd->n_sessions + nd->n_creating >= nd->cfg.max_sessions)
		return fail(j, -EBUSY, "the daemon serves its limit of %u sessions",
			    nd->cfg.max_sessions);
	if (held_sessions(nd, j->peer) >= nd->cfg.max_sessions_per_conn)
		return fail(j, -EDQUOT, "this connection holds its limit of %u sessions "
			    "(max-sessions-per-conn)", nd->cfg.max_sessions_per_conn);
	if (nelssa_kv_is_tiled((enum nelssa_kv_dtype)m->u.create.shape.kv_dtype) &&
	    m->u.create.placement != NELSSA_PLACE_HEADS)
		return fail(j, -EOPNOTSUPP, "8-bit KV (type %u) needs head-wise placement: its "
			    "16-token tiles cannot be split between devices",
			    m->u.create.shape.kv_dtype);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		if (!(nd->dev[d].info.kv_dtypes & (1u << m->u.create.shape.kv_dtype)))
			return fail(j, -EOPNOTSUPP, "device %u does not read KV type %u (it "
				    "reads the types of mask 0x%x)", d, m->u.create.shape.kv_dtype,
				    nd->dev[d].info.kv_dtypes);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		if (m->u.create.shape.attn_flags & ~nd->dev[d].info.attn_flags)
			return fail(j, -EOPNOTSUPP, "device %u does not take attention flags 0x%x "
				    "(it takes 0x%x: bf16 dot products need firmware 1.1)", d,
				    m->u.create.shape.attn_flags, nd->dev[d].info.attn_flags);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		if (m->u.create.shape.kv_layout == NELSSA_KV_ADJACENT &&
		    !(nd->dev[d].info.caps & NPNM_CAP_KV_STRIDE))
			return fail(j, -EOPNOTSUPP, "device %u cannot keep K and V blocks adjacent "
				    "(KV layout 1 needs kv_stride: firmware 1.2)", d);
	s = calloc(1, sizeof(*s));
	if (!s)
		return fail(j, -ENOMEM, "out of memory");
	s->tenant = m->u.create.tenant;
	s->shape = m->u.create.shape;
	s->group = s->shape.q_heads / s->shape.kv_heads;
	s->placement = m->u.create.placement;
	s->max_batch = m->u.create.max_batch;
	s->max_sel = m->u.create.max_sel;
	s->capacity_tokens = m->u.create.capacity_tokens;
	s->peer = j->peer;
	/* Its data path is bound to it: only this connection learns the token. */
	ret = nd_token_new(&s->token);
	if (ret)
		snprintf(j->why, sizeof(j->why), "no random token for the session: %s",
			 strerror(-ret));
	else
		ret = nd_session_reserve(nd, s, held_bytes(nd, j->peer), j->why, sizeof(j->why));
	if (ret) {
		free(s);
		j->status = ret;
		return;
	}
	j->s = s;
	nd->n_creating++;
}

/* SESSION_CREATE, second half: @j's session, allocated, is served from now. */
static void create_add(struct nelssad *nd, struct nd_job *j)
{
	struct nd_session *s = j->s;
	struct nelssa_msg *r = &j->msg;

	j->s = NULL;
	nd->n_creating--;
	s->id = ++nd->next_session;
	s->next = nd->sessions;
	nd->sessions = s;
	nd->n_sessions++;
	s->peer->sessions++;
	memset(&r->u, 0, sizeof(r->u));
	r->type = NELSSA_MSG_SESSION_OK;
	r->u.session_ok.session = s->id;
	r->u.session_ok.token = s->token;
	r->u.session_ok.devices = nd->n_dev;
	r->u.session_ok.flags = (s->rma ? NELSSA_SESSION_RMA : 0) |
				(s->placement == NELSSA_PLACE_HEADS ? NELSSA_SESSION_ROWS : 0);
	nd_log(nd, "session %llu: %u layers, %u/%u heads, dim %u, %llu tokens of capacity, "
	       "KV %s, K and V %s", (unsigned long long)s->id, s->shape.layers,
	       s->shape.q_heads, s->shape.kv_heads, s->shape.head_dim,
	       (unsigned long long)s->capacity_tokens,
	       s->rma ? "written by the client (zero-copy)" : "staged",
	       s->shape.kv_layout == NELSSA_KV_ADJACENT ? "blocks adjacent" : "arrays packed");
}

/*
 * HELLO: the data-path end of the connection (nelssad.h, struct nd_peer),
 * with a key no other peer has; @j->shm: its endpoints come without error
 * handling.
 */
static void add_peer(struct nelssad *nd, struct nd_job *j)
{
	struct nd_peer *p = calloc(1, sizeof(*p));
	int ret, taken;

	if (!p)
		return fail(j, -ENOMEM, "no key for the data path: out of memory");
	p->id = j->conn;
	p->shm = j->shm;
	do {
		ret = nd_token_new(&p->key);
		taken = 0;
		for (const struct nd_peer *q = nd->peers; !ret && q; q = q->next)
			taken |= q->key == p->key;
	} while (!ret && taken);
	if (ret) {
		free(p);
		return fail(j, ret, "no key for the data path: %s", strerror(-ret));
	}
	p->next = nd->peers;
	nd->peers = p;
	j->peer = p;
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
static void close_session(struct nd_session *s)
{
	struct nd_peer *p = s->peer;

	s->closing = 1;
	p->done_steps += s->steps;
	p->done_items += s->items;
	p->done_kv += s->kv_bytes;
	p->done_kv_rma += s->kv_rma_bytes;
	p->done_kv_recv += s->kv_recv_bytes;
}

/*
 * STATS: for session 0, the connection's own counters -- its sessions
 * open and closed -- or, on an admin connection (--admin-addr), the
 * daemon's, with the summed times; for a session, that session's, if the
 * connection holds it (an admin's: any session).
 */
static void stats(struct nelssad *nd, struct nd_job *j)
{
	const uint64_t id = j->msg.u.session.session;
	struct nelssa_msg *r = &j->msg;
	const struct nd_peer *p = j->peer;
	const struct nd_session *s;

	memset(&r->u, 0, sizeof(r->u));
	r->type = NELSSA_MSG_STATS_REPLY;
	if (id) {
		for (s = nd->sessions; s; s = s->next)
			if (s->id == id && !s->closing && (j->admin || s->peer == p))
				break;
		if (!s)
			return fail(j, -ENOENT, "no such session on this connection");
		r->u.stats.steps = s->steps;
		r->u.stats.items = s->items;
		r->u.stats.kv_bytes = s->kv_bytes;
		r->u.stats.kv_rma_bytes = s->kv_rma_bytes;
		r->u.stats.kv_recv_bytes = s->kv_recv_bytes;
		r->u.stats.sessions = 1;
	} else if (j->admin) {
		r->u.stats.steps = nd->stats.steps;
		r->u.stats.items = nd->stats.items;
		r->u.stats.kv_bytes = nd->stats.kv_bytes;
		r->u.stats.kv_rma_bytes = nd->stats.kv_rma_bytes;
		r->u.stats.kv_recv_bytes = nd->stats.kv_recv_bytes;
		r->u.stats.t_recv = nd->stats.t_recv;
		r->u.stats.t_dispatch = nd->stats.t_dispatch;
		r->u.stats.t_device = nd->stats.t_device;
		r->u.stats.t_aggregate = nd->stats.t_aggregate;
		r->u.stats.t_send = nd->stats.t_send;
		r->u.stats.sessions = nd->n_sessions;
	} else {
		r->u.stats.steps = p->done_steps;
		r->u.stats.items = p->done_items;
		r->u.stats.kv_bytes = p->done_kv;
		r->u.stats.kv_rma_bytes = p->done_kv_rma;
		r->u.stats.kv_recv_bytes = p->done_kv_recv;
		for (s = nd->sessions; s; s = s->next)
			if (s->peer == p && !s->closing) {
				r->u.stats.steps += s->steps;
				r->u.stats.items += s->items;
				r->u.stats.kv_bytes += s->kv_bytes;
				r->u.stats.kv_rma_bytes += s->kv_rma_bytes;
				r->u.stats.kv_recv_bytes += s->kv_recv_bytes;
				r->u.stats.sessions++;
			}
	}
	r->u.stats.devices = nd->n_dev;
}

/*
 * RKEY_GET: the packed remote key of a session's memory on one device, for
 * its own connection alone (the key lets its holder write that memory).
 */
static void rkey(struct nelssad *nd, struct nd_job *j)
{
	const uint32_t dev = j->msg.u.rkey_get.device;
	struct nelssa_msg *r = &j->msg;
	const struct nd_session *s = owned(nd, j->peer, j->msg.u.rkey_get.session);
	const struct nd_sdev *sd;

	if (!s)
		return fail(j, -ENOENT, "no such session on this connection");
	if (!s->rma)
		return fail(j, -EOPNOTSUPP, "session %llu takes KV messages only: its memory "
			    "is not registered", (unsigned long long)s->id);
	if (dev >= nd->n_dev)
		return fail(j, -EINVAL, "device %u: the daemon has %u", dev, nd->n_dev);
	sd = &s->dev[dev];
	memset(&r->u, 0, sizeof(r->u));
	r->type = NELSSA_MSG_RKEY;
	r->u.rkey.session = s->id;
	r->u.rkey.device = dev;
	r->u.rkey.base = (uint64_t)(uintptr_t)sd->arena_map;
	r->u.rkey.bytes = sd->arena_bytes;
	r->u.rkey.len = (uint32_t)sd->rkey_len;
	memcpy(r->u.rkey.key, sd->rkey, sd->rkey_len);
}

/* REQ_OK: where request @id of @s lies. */
static void req_ok(const struct nelssad *nd, struct nd_session *s, uint64_t id,
		   struct nelssa_msg *r)
{
	const struct nd_request *q = nd_request_find(s, id);

	memset(&r->u, 0, sizeof(r->u));
	r->type = NELSSA_MSG_REQ_OK;
	r->u.req_ok.request = id;
	r->u.req_ok.store_tokens = q->store_tokens;
	r->u.req_ok.store_clusters = q->store_clusters;
	r->u.req_ok.devices = nd->n_dev;
	for (uint32_t d = 0; d < nd->n_dev; d++)
		r->u.req_ok.off[d] = q->off[d];
}

/* REQ_ALLOC, REQ_FREE and CLOSE of a session of the connection's. */
static void session_op(struct nelssad *nd, struct nd_job *j)
{
	const struct nelssa_msg *m = &j->msg;
	const uint64_t rq = m->u.req.request;
	struct nd_session *s;
	int ret;

	s = owned(nd, j->peer, m->type == NELSSA_MSG_CLOSE ? m->u.session.session
							   : m->u.req.session);
	if (!s)
		return fail(j, -ENOENT, "no such session on this connection");
	switch (m->type) {
	case NELSSA_MSG_REQ_ALLOC:
		if (held_requests(s) >= nd->cfg.max_requests_per_session)
			return fail(j, -EDQUOT, "session %llu holds its limit of %u requests "
				    "(max-requests-per-session)", (unsigned long long)s->id,
				    nd->cfg.max_requests_per_session);
		ret = nd_request_alloc(nd, s, rq, m->u.req.max_tokens, m->u.req.max_clusters,
				       j->why, sizeof(j->why));
		if (ret) {
			j->status = ret;
			return;
		}
		req_ok(nd, s, rq, &j->msg);
		return;
	case NELSSA_MSG_REQ_FREE:
		/* The device may still read it, and its room go to another. */
		if (nd_step_uses(s, rq))
			return fail(j, -EBUSY, "request %llu is in the step in flight: free it "
				    "once the step is answered", (unsigned long long)rq);
		if (nd_request_free(nd, s, rq))
			return fail(j, -ENOENT, "no such request");
		break;
	default:
		close_session(s);	/* reap_sessions() frees it */
		break;
	}
	memset(&j->msg.u, 0, sizeof(j->msg.u));
	j->msg.type = NELSSA_MSG_OK;
}

/* The connection is gone: its sessions close, and its peer with them. */
static void gone(struct nelssad *nd, struct nd_job *j)
{
	int marked = 0;

	if (!j->peer)
		return;
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->peer == j->peer && !s->closing) {
			close_session(s);
			marked++;
		}
	j->peer->gone = 1;
	if (marked)
		nd_log(nd, "connection %llu closed: reclaiming %d session(s)",
		       (unsigned long long)j->conn, marked);
}

/* Runs @j on the poller thread: its answer is in @j when this returns. */
void nd_control_job(struct nelssad *nd, struct nd_job *j)
{
	switch (j->kind) {
	case ND_JOB_SESSION_ADD:
		create_add(nd, j);
		return;
	case ND_JOB_SESSION_DROP:
		nd_job_unreserve(nd, j);
		return;
	case ND_JOB_GONE:
		gone(nd, j);
		return;
	case ND_JOB_MSG:
		break;
	}
	switch (j->msg.type) {
	case NELSSA_MSG_HELLO:
		add_peer(nd, j);
		return;
	case NELSSA_MSG_SESSION_CREATE:
		create_reserve(nd, j);
		return;
	case NELSSA_MSG_STATS:
		stats(nd, j);
		return;
	case NELSSA_MSG_RKEY_GET:
		rkey(nd, j);
		return;
	default:
		session_op(nd, j);
		return;
	}
}

/* Control thread from here on. */

/*
 * Hands @m of @c to the poller; @shm: HELLO's shared memory may be granted.
 * HELLO and SESSION_CREATE are barriers (control.c, above).  Out of memory,
 * @m is refused -- and a HELLO's connection ends, as it has no data path.
 */
static int post(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m, int shm)
{
	struct nd_job *j = nd_job_new(ND_JOB_MSG, c->id);
	int ret;

	if (!j) {
		ret = nd_conn_error(nd, c, m->seq, -ENOMEM, "out of memory");
		return m->type == NELSSA_MSG_HELLO ? -ENOMEM : ret;
	}
	j->peer = c->peer;
	j->admin = c->admin;
	j->shm = shm;
	j->msg = *m;
	j->req = (uint8_t)m->type;
	c->waiting++;
	c->barrier = m->type == NELSSA_MSG_HELLO || m->type == NELSSA_MSG_SESSION_CREATE;
	nd_job_post(nd, j);
	return 0;
}

int nd_control_handle(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
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
		return post(nd, c, m, (m->u.hello.flags & NELSSA_HELLO_SHM) && nd->shm_ok &&
				      nelssa_link_is_local(c->fd));
	case NELSSA_MSG_SESSION_CREATE:
	case NELSSA_MSG_REQ_ALLOC:
	case NELSSA_MSG_REQ_FREE:
	case NELSSA_MSG_CLOSE:
	case NELSSA_MSG_STATS:
	case NELSSA_MSG_RKEY_GET:
		return post(nd, c, m, 0);
	default:
		nd_conn_error(nd, c, m->seq, -EPROTO, "%s is not a request",
			      nelssa_msg_type_str(m->type));
		return -EPROTO;
	}
}

/*
 * The connection is going: its sessions close and no reply goes to its
 * client any more (the poller closes the peer's endpoints).  Once per
 * connection, before conn.c closes its socket.  A HELLO still with the
 * poller makes a peer this cannot name: nd_control_answer() lets it go.
 */
void nd_control_gone(struct nelssad *nd, struct nd_conn *c)
{
	struct nd_job *j = nd_job_new(ND_JOB_GONE, c->id);

	if (j) {
		j->peer = c->peer;
		nd_job_post(nd, j);
		return;
	}
	/* Out of memory: the sessions stay until the daemon stops; say so. */
	nd_log(nd, "connection %llu closed: out of memory to reclaim its sessions",
	       (unsigned long long)c->id);
}

/* HELLO_OK, from the peer the poller made. */
static int hello_ok(struct nelssad *nd, struct nd_conn *c, struct nd_job *j)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_HELLO_OK, .seq = j->msg.seq };

	c->hello = 1;
	c->peer = j->peer;
	r.u.hello_ok.version = NELSSA_PROTO_VERSION;
	r.u.hello_ok.devices = (uint16_t)nd->n_dev;
	for (uint32_t d = 0; d < nd->n_dev; d++)
		r.u.hello_ok.device_bytes += nd->dev[d].info.mem_size;
	snprintf(r.u.hello_ok.name, sizeof(r.u.hello_ok.name), "%s", ND_NAME);
	r.u.hello_ok.data_port = nd->data_port;
	/* Read once, here: the poller made it and never changes these two. */
	r.u.hello_ok.key = c->peer->key;
	r.u.hello_ok.flags = c->peer->shm ? NELSSA_HELLO_SHM : 0;
	return nd_conn_send(nd, c, &r);
}

/*
 * SESSION_CREATE between its jobs: the memory the poller reserved is
 * allocated, zeroed and registered here, where no step waits for it, then
 * the session goes back to be listed -- or, refused, to be unreserved.
 */
static int create_alloc(struct nelssad *nd, struct nd_conn *c, struct nd_job *j)
{
	const uint32_t seq = j->msg.seq;
	char why[NELSSA_PROTO_ERR_LEN] = "";
	int ret = nd_session_alloc(nd, j->s, why, sizeof(why));

	j->kind = ret ? ND_JOB_SESSION_DROP : ND_JOB_SESSION_ADD;
	nd_job_post(nd, j);
	if (!ret)
		return 0;	/* still waiting, for SESSION_OK */
	c->waiting--;
	c->barrier = 0;
	nd_log(nd, "session refused: %s", why);
	return nd_conn_error(nd, c, seq, ret, "%s", why);
}

/*
 * @j back from the poller, for @c (NULL: the connection closed meanwhile).
 * Returns as nd_control_handle() does; @j is consumed.
 */
int nd_control_answer(struct nelssad *nd, struct nd_conn *c, struct nd_job *j)
{
	int ret = 0;

	if (j->kind == ND_JOB_MSG && j->s && c && !c->gone)
		return create_alloc(nd, c, j);
	if (j->kind == ND_JOB_MSG && (!c || c->gone) && !j->status &&
	    (j->s || j->req == NELSSA_MSG_HELLO)) {
		/*
		 * What the poller made for a connection gone meanwhile goes
		 * back to be undone: a reservation, or a peer its GONE could
		 * not name.  (A session listed after it left is closed by
		 * that GONE, which came later.)
		 */
		j->kind = j->s ? ND_JOB_SESSION_DROP : ND_JOB_GONE;
		nd_job_post(nd, j);
		return 0;
	}
	if (!c || c->gone || j->kind == ND_JOB_GONE || j->kind == ND_JOB_SESSION_DROP) {
		nd_job_free(nd, j);
		return 0;
	}
	c->waiting--;
	c->barrier = 0;		/* a barrier is the last job of its connection */
	if (j->status) {
		if (j->req == NELSSA_MSG_SESSION_CREATE)
			nd_log(nd, "session refused: %s", j->why);
		ret = nd_conn_error(nd, c, j->msg.seq, j->status, "%s", j->why);
		if (j->req == NELSSA_MSG_HELLO && !ret)
			ret = j->status;	/* no data path: the connection ends */
	} else if (j->req == NELSSA_MSG_HELLO) {
		ret = hello_ok(nd, c, j);
	} else {
		if (j->kind == ND_JOB_SESSION_ADD)
			c->n_sessions++;
		else if (j->req == NELSSA_MSG_CLOSE)
			c->n_sessions--;
		ret = nd_conn_send(nd, c, &j->msg);
	}
	nd_job_free(nd, j);
	return ret;
}
