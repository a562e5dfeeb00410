// SPDX-License-Identifier: MIT
/*
 * The data path: one UCX worker owned by one poller thread.  Clients send
 * KV rows and decode steps as active messages; small ones arrive whole in
 * the callback (eager), large ones as rendezvous descriptors that the
 * poller receives into a buffer first: one of a few staging slots
 * registered with UCX once at start (no registration per message; with
 * RDMA the client's rendezvous writes land there directly), or a plain
 * allocation when all are busy or the message is larger -- but only once
 * the message has shown it is its session's (below) and no larger than
 * that session could send.  Clients connect through UCX's listener
 * (nelssa/link.h); the endpoints are the daemon's own, made from the
 * connection requests of keys its control connections gave out.  The
 * poller's loop progresses the worker, closes the endpoints of
 * connections gone or failed (tend_peers()), reaps device completions
 * (which finish steps), closes sessions
 * marked by the control thread, and then sleeps in epoll on the worker's
 * event fd, the devices' event fds and a wake-up eventfd -- or spins, in
 * busy-poll mode, where a core can be spared for latency.
 *
 * Every KV and STEP message names its session by id and token; the token
 * went to the session's own connection alone (SESSION_OK), and the
 * message must come on an endpoint of that connection, so a message that
 * does not carry both or comes on another's endpoint is answered exactly
 * as one naming a session that never existed: -ENOENT, before anything
 * else about it -- request, layer, head, lengths -- is looked at.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nelssa/link.h>

#include "nelssad.h"

/* Active-message ids with a handler: all of them (the wire carries 16 bits). */
#define ND_AM_IDS (1u << 16)

struct rndv_ctx {
	struct nelssad *nd;
	unsigned int id;
	struct nd_ep *e;	/* it came on (a reference) */
	uint64_t session;	/* whose count of receives in flight it is on */
	uint8_t hdr[NELSSA_KV_HDR_BYTES > NELSSA_STEP_HDR_BYTES ? NELSSA_KV_HDR_BYTES
								: NELSSA_STEP_HDR_BYTES];
	size_t hdr_len, len;
	uint64_t t_arrive;
	uint8_t *buf;
	int slot;		/* staging slot, or -1 for a malloc'd buffer */
	int direct;		/* KV_ROWS into the session's arena: @buf is there */
};

/* A session's token: 64 random bits, never 0 (which no message may use). */
int nd_token_new(uint64_t *token)
{
	do {
		ssize_t n = getrandom(token, sizeof(*token), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(*token))
			return n < 0 ? -errno : -EIO;
	} while (!*token);
	return 0;
}

/* The endpoint a message came on, while open; poller thread. */
static struct nd_ep *ep_find(struct nelssad *nd, ucp_ep_h ep)
{
	return nd_ep_table_find(&nd->ep_table, ep);
}

/*
 * The session a KV or STEP header names, if the header also carries its
 * token, the message came on an endpoint of the session's connection
 * (@e) and the session is not closing; NULL otherwise, whatever the
 * reason.  Every session is compared in full, without stopping at the
 * first id that matches, so neither the answer nor its time says which
 * part was wrong.  Poller thread.
 */
static struct nd_session *find_session(struct nelssad *nd, const struct nd_ep *e,
				       const uint8_t *hdr, size_t hdr_len)
{
	struct nd_session *found = NULL;
	uint64_t id, token;

	if (nelssa_am_session_get(hdr, hdr_len, &id, &token))
		return NULL;
	for (struct nd_session *s = nd->sessions; s; s = s->next) {
		const uint64_t diff = (s->id ^ id) | (s->token ^ token) |
				      (uint64_t)((uintptr_t)s->peer ^ (uintptr_t)e->peer);

		found = diff || s->closing ? found : s;
	}
	return found;
}

/* A session by id alone, closing or not: for the daemon's own bookkeeping. */
static struct nd_session *session_by_id(struct nelssad *nd, uint64_t id)
{
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void kv_ack(struct nelssad *nd, ucp_ep_h ep, uint64_t cookie, int status)
{
	const struct nelssa_ack_hdr a = { .cookie = cookie, .status = status };
	uint8_t out[NELSSA_ACK_HDR_BYTES];

	nelssa_ack_hdr_put(out, &a);
	nd_send(nd, ep, NELSSA_AM_KV_ACK, out, sizeof(out), NULL, 0, 0);
}

/*
 * Answers a KV or STEP message refused on arrival with @status: an ack with
 * its cookie, or a step reply with its step id, as far as the header holds
 * them -- read the same way whichever session it names.
 */
static void refuse(struct nelssad *nd, unsigned int id, ucp_ep_h ep, const uint8_t *hdr,
		   size_t hdr_len, size_t len, int status)
{
	if (id == NELSSA_AM_KV || id == NELSSA_AM_KV_COMMIT || id == NELSSA_AM_KV_ROWS) {
		static const struct nelssa_kv_fmt any = { NELSSA_KV_BF16, 1, NELSSA_KV_PACKED };
		struct nelssa_kv_hdr h = { 0 };

		nelssa_kv_hdr_get(hdr, hdr_len, len, &any, &h);	/* only for the cookie */
		kv_ack(nd, ep, h.cookie, status);
	} else {
		uint64_t step = 0;

		/* The step id, bytes 16..23 (nelssa_step_hdr_put()). */
		for (int i = 23; i >= 16 && hdr_len >= NELSSA_STEP_HDR_BYTES; i--)
			step = step << 8 | hdr[i];
		nd_step_reply_error(nd, ep, step, status);
	}
}

/*
 * --require-rdma: 0 when @ep may carry @s's data, else -EPROTONOSUPPORT
 * (the client says "requires RDMA").  Checked once per endpoint a session
 * uses, not per message.  Poller thread.  A daemon with RDMA can still
 * reach a client that has none over TCP or shared memory: every lane
 * that carries data must be RDMA (nelssa_link_ep_rdma_only()).
 */
static int check_rdma(struct nelssad *nd, struct nd_session *s, ucp_ep_h ep)
{
	char tl[32];

	if (!nd->cfg.require_rdma || s->rdma_ep == ep)
		return 0;
	if (nelssa_link_ep_rdma_only(ep, tl, sizeof(tl))) {
		s->rdma_ep = ep;
		return 0;
	}
	nd_log(nd, "--require-rdma: session %llu reaches its client over %s, not RDMA: refused",
	       (unsigned long long)s->id, tl);
	return -EPROTONOSUPPORT;
}

/*
 * --zero-copy=require: a session's KV comes only by the client's RMA
 * writes, so a KV message carrying rows is refused before its data is
 * taken (-EOPNOTSUPP: "not supported").
 */
static int kv_staging_refused(const struct nelssad *nd)
{
	return nd->cfg.zero_copy == ND_ZERO_COPY_REQUIRE;
}

/* How a KV, KV_ROWS or KV_COMMIT message's bytes got in (process_kv()). */
enum kv_how {
	KV_COPIED,		/* the daemon copied them in */
	KV_RECEIVED,		/* UCX received them into place (a KV_ROWS rendezvous) */
	KV_PUT,			/* the client put them (a commit of a session with RMA) */
	KV_COUNTED,		/* counted already, as KV_ROWS (a commit of one without) */
};

static void kv_count(struct nelssad *nd, struct nd_session *s, uint64_t bytes, enum kv_how how)
{
	if (how == KV_COUNTED)
		return;
	nd->stats.kv_bytes += bytes;
	s->kv_bytes += bytes;
	if (how == KV_PUT) {
		nd->stats.kv_rma_bytes += bytes;
		s->kv_rma_bytes += bytes;
	} else if (how == KV_RECEIVED) {
		nd->stats.kv_recv_bytes += bytes;
		s->kv_recv_bytes += bytes;
	}
}

/*
 * NELSSA_AM_KV, NELSSA_AM_KV_ROWS and NELSSA_AM_KV_COMMIT go through the
 * same checks in the same order -- the session, the header,
 * --require-rdma -- and are acknowledged the same way; then each has its
 * own.  A KV message's rows, and a KV_ROWS part that came whole or through
 * a staging buffer, are copied in, unless --zero-copy=require refuses them;
 * a KV_ROWS part UCX received into place (@data NULL: struct rndv_ctx's @direct)
 * was checked before it came and only counts here.  A commit names rows
 * already in the session's memory, put there by the client or by KV_ROWS:
 * only the store's counts change, no byte is copied (the @kv_rma_bytes
 * counters say how many the client put).
 */
static void process_kv(struct nelssad *nd, unsigned int id, struct nd_ep *e, const uint8_t *hdr,
		       size_t hdr_len, const uint8_t *data, size_t len)
{
	const int commit = id == NELSSA_AM_KV_COMMIT, rows = id == NELSSA_AM_KV_ROWS;
	const char *what = commit ? "KV commit" : rows ? "KV rows" : "KV message";
	struct nelssa_kv_hdr h = { 0 };
	enum kv_how how = KV_COPIED;
	struct nelssa_kv_fmt fmt;
	struct nd_session *s;
	uint64_t bytes = len;
	int ret;

	s = find_session(nd, e, hdr, hdr_len);
	if (!s) {
		if (nd->cfg.verbose)
			nd_log(nd, "%s refused: no such session", what);
		refuse(nd, id, e->ep, hdr, hdr_len, len, -ENOENT);
		return;
	}
	fmt = nd_kv_fmt(s);
	if (commit)
		ret = nelssa_kv_commit_get(hdr, hdr_len, len, &h);
	else if (rows)
		ret = nelssa_kv_rows_get(hdr, hdr_len, len, &fmt, &h);
	else
		ret = nelssa_kv_hdr_get(hdr, hdr_len, len, &fmt, &h);
	if (!ret)
		ret = check_rdma(nd, s, e->ep);
	if (!ret && commit) {
		ret = nd_kv_commit(nd, s, &h);
		/* What the puts or parts wrote: in an adjacent store, whole blocks. */
		bytes = nelssa_kv_fmt_write_bytes(&fmt, h.first_token, h.nr_tokens) +
			8ull * h.nr_clusters;
		how = h.part == NELSSA_KV_COMMIT_SENT ? KV_COUNTED : KV_PUT;
	} else if (!ret && rows && !data && len) {
		how = KV_RECEIVED;
	} else if (!ret && kv_staging_refused(nd)) {
		ret = -EOPNOTSUPP;
	} else if (!ret) {
		ret = rows ? nd_kv_rows_write(nd, s, &h, data) : nd_kv_ingest(nd, s, &h, data);
	}
	if (!ret)
		kv_count(nd, s, bytes, how);
	if (ret && nd->cfg.verbose)
		nd_log(nd, "%s refused: %s", what, strerror(-ret));
	kv_ack(nd, e->ep, h.cookie, ret);
}

/*
 * Where a reply on @e may go: its endpoint, NULL once it failed, closed
 * or its connection is gone.  Poller thread.
 */
ucp_ep_h nd_ep_live(const struct nd_ep *e)
{
	return e && !e->failed && !e->peer->gone ? e->ep : NULL;
}

static void process_step(struct nelssad *nd, struct nd_ep *e, const uint8_t *hdr, size_t hdr_len,
			 const uint8_t *data, size_t len, uint64_t t_arrive)
{
	struct nd_session *s;
	int ret;

	s = find_session(nd, e, hdr, hdr_len);
	ret = s ? check_rdma(nd, s, e->ep) : -ENOENT;
	if (!ret)
		nd_step_start(nd, s, e, hdr, hdr_len, data, len, t_arrive);
	else
		refuse(nd, NELSSA_AM_STEP, e->ep, hdr, hdr_len, len, ret);
}

static void dispatch_msg(struct nelssad *nd, unsigned int id, struct nd_ep *e, const uint8_t *hdr,
			 size_t hdr_len, const uint8_t *data, size_t len, uint64_t t_arrive)
{
	if (id == NELSSA_AM_KV || id == NELSSA_AM_KV_COMMIT || id == NELSSA_AM_KV_ROWS)
		process_kv(nd, id, e, hdr, hdr_len, data, len);
	else
		process_step(nd, e, hdr, hdr_len, data, len, t_arrive);
}

/*
 * Most bytes a step message of @s can have: every item it may hold with
 * every cluster it may select (the session's device staging holds as much).
 */
static uint64_t step_bytes_max(const struct nd_session *s)
{
	const uint64_t items = (uint64_t)s->max_batch * s->shape.kv_heads;

	return items * (NELSSA_STEP_ITEM_BYTES + 4ull * s->group * s->shape.head_dim +
			4ull * s->max_sel);
}

/*
 * A rendezvous message, before anything is allocated or fetched for it:
 * 0 when its data may come, counted as in flight; else the status it is
 * refused with.  That is what the whole message would get from what its
 * header says alone -- -ENOENT for a session that is not the sender's,
 * with nothing else looked at; for the session's own, its header checked
 * against the session (a KV message's request, layer, head and ranges,
 * and its length, exactly; a step's length against step_bytes_max()) --
 * or -EMSGSIZE beyond ND_RNDV_BYTES, or -EBUSY when too many receives
 * are in flight, the session's or the daemon's.  Poller thread.
 */
static int rndv_admit(struct nelssad *nd, unsigned int id, const struct nd_ep *e,
		      const uint8_t *hdr, size_t hdr_len, size_t len, uint64_t *session,
		      void **direct, ucp_mem_h *memh)
{
	struct nd_session *s = find_session(nd, e, hdr, hdr_len);
	struct nelssa_kv_fmt fmt;
	int ret;

	*direct = NULL;
	if (!s)
		return -ENOENT;
	fmt = nd_kv_fmt(s);
	ret = check_rdma(nd, s, e->ep);
	if (!ret && id == NELSSA_AM_KV_COMMIT) {
		ret = -EBADMSG;		/* a commit carries no data */
	} else if (!ret && id == NELSSA_AM_KV_ROWS) {
		struct nelssa_kv_hdr h;
		uint64_t off, bytes;
		uint32_t d;

		ret = nelssa_kv_rows_get(hdr, hdr_len, len, &fmt, &h);
		if (!ret)
			ret = nd_kv_rows_place(nd, s, &h, &d, &off, &bytes);
		if (!ret && kv_staging_refused(nd))
			ret = -EOPNOTSUPP;
		if (!ret)
			*direct = nd_kv_rows_target(s, d, off, memh);
	} else if (!ret && id == NELSSA_AM_KV) {
		struct nelssa_kv_hdr h;

		ret = nelssa_kv_hdr_get(hdr, hdr_len, len, &fmt, &h);
		if (!ret)
			ret = nd_kv_check(s, &h);
		if (!ret && kv_staging_refused(nd))
			ret = -EOPNOTSUPP;
	} else if (!ret) {
		if (hdr_len != NELSSA_STEP_HDR_BYTES)
			ret = -EBADMSG;
		else if (len > step_bytes_max(s))
			ret = -EMSGSIZE;
	}
	if (!ret && len > ND_RNDV_BYTES)
		ret = -EMSGSIZE;
	if (!ret && (s->rndv >= ND_RNDV_PER_SESSION || nd->rndv >= ND_RNDV_MAX ||
		     nd->rndv_bytes + len > ND_RNDV_BYTES))
		ret = -EBUSY;
	if (ret)
		return ret;
	s->rndv++;
	s->rndv_direct += *direct != NULL;
	nd->rndv++;
	nd->rndv_bytes += len;
	*session = s->id;
	return 0;
}

/*
 * A rendezvous receive is over: off the counts (its session may be gone,
 * unless the receive went into its arena, which holds it).
 */
static void rndv_retire(struct nelssad *nd, uint64_t session, size_t len, int direct)
{
	struct nd_session *s;

	s = session_by_id(nd, session);
	if (s) {
		s->rndv--;
		s->rndv_direct -= direct;
	}
	nd->rndv--;
	nd->rndv_bytes -= len;
}

static void rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct rndv_ctx *c = user_data;

	(void)length;
	rndv_retire(c->nd, c->session, c->len, c->direct);
	c->e->refs--;
	/*
	 * Its endpoint closed meanwhile: nobody to answer, nothing to do.  A
	 * part received into place is counted, not copied (NULL data).
	 */
	if (status == UCS_OK && !c->nd->draining && c->e->ep)
		dispatch_msg(c->nd, c->id, c->e, c->hdr, c->hdr_len, c->direct ? NULL : c->buf,
			     c->len, c->t_arrive);
	else if (status != UCS_OK)
		nd_log(c->nd, "receiving a message failed: %s", ucs_status_string(status));
	if (request)
		ucp_request_free(request);
	if (c->slot >= 0)
		c->nd->stage_free |= 1u << c->slot;
	else if (!c->direct)
		free(c->buf);
	free(c);
}

/* A free registered staging slot for @len bytes, or -1. */
static int stage_get(struct nelssad *nd, size_t len)
{
	if (!nd->stage || len > ND_STAGE_BYTES || !nd->stage_free)
		return -1;
	for (int i = 0; i < ND_STAGE_SLOTS; i++)
		if (nd->stage_free & (1u << i)) {
			nd->stage_free &= ~(1u << i);
			return i;
		}
	return -1;
}

static ucs_status_t on_am(struct nelssad *nd, unsigned int id, const void *header,
			  size_t header_length, void *data, size_t length,
			  const ucp_am_recv_param_t *param)
{
	const uint64_t t = nd_now_ns();
	ucp_request_param_t prm = { 0 };
	struct rndv_ctx *c;
	struct nd_ep *e;
	ucs_status_ptr_t sp;
	ucp_mem_h memh = NULL;
	uint64_t session = 0;
	void *direct;
	int ret;

	if (nd->draining)
		return UCS_OK;	/* shutting down: nothing new starts */
	/*
	 * The reply endpoint is the daemon's own one the message came on
	 * (the client sends with UCP_AM_SEND_FLAG_REPLY); without it, or on
	 * one closed, there is nobody to answer.
	 */
	e = param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP ? ep_find(nd, param->reply_ep)
							       : NULL;
	if (!e) {
		if (nd->cfg.verbose)
			nd_log(nd, "message %u not on an endpoint of a connection: dropped", id);
		return param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? UCS_ERR_UNSUPPORTED : UCS_OK;
	}
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		dispatch_msg(nd, id, e, header, header_length, data, length, t);
		return UCS_OK;
	}
	/*
	 * Rendezvous: the header decides whether the data is fetched at all.
	 * One refused is answered as a whole message would be, and UCX drops
	 * its data and completes the sender's send when this returns UCS_OK
	 * without a receive (ucp_def.h, ucp_am_recv_callback_t): the sender
	 * waits for nothing and learns why from the answer.
	 */
	ret = rndv_admit(nd, id, e, header, header_length, length, &session, &direct, &memh);
	if (ret) {
		if (nd->cfg.verbose)
			nd_log(nd, "rendezvous message %u of %zu bytes refused: %s", id, length,
			       ret == -ENOENT ? "no such session" : strerror(-ret));
		refuse(nd, id, param->reply_ep, header, header_length, length, ret);
		return UCS_OK;
	}
	c = calloc(1, sizeof(*c));
	if (c && header_length <= sizeof(c->hdr) && direct) {
		c->slot = -1;
		c->buf = direct;
		c->direct = 1;
	} else if (c && header_length <= sizeof(c->hdr)) {
		c->slot = stage_get(nd, length);
		c->buf = c->slot >= 0 ? nd->stage + (size_t)c->slot * ND_STAGE_BYTES
				      : malloc(length ? length : 1);
		memh = c->slot >= 0 ? nd->stage_memh : NULL;
	}
	if (!c || header_length > sizeof(c->hdr) || !c->buf) {
		free(c);
		rndv_retire(nd, session, length, direct != NULL);
		nd_log(nd, "message %u of %zu bytes refused: no memory for it", id, length);
		refuse(nd, id, param->reply_ep, header, header_length, length, -ENOMEM);
		return UCS_OK;
	}
	c->nd = nd;
	c->session = session;
	c->id = id;
	c->e = e;
	e->refs++;
	memcpy(c->hdr, header, header_length);
	c->hdr_len = header_length;
	c->len = length;
	c->t_arrive = t;
	if (nd->cfg.verbose)
		nd_log(nd, "rendezvous message %u, %zu bytes, into %s", id, length,
		       c->direct ? "its place in device memory" :
		       c->slot >= 0 ? "a registered staging slot" : "a plain buffer");
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	prm.cb.recv_am = rndv_done;
	prm.user_data = c;
	if (memh) {
		prm.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
		prm.memh = memh;
	}
	sp = ucp_am_recv_data_nbx(nd->worker, data, c->buf, length, &prm);
	if (sp == NULL)
		rndv_done(NULL, UCS_OK, length, c);
	else if (UCS_PTR_IS_ERR(sp))
		rndv_done(NULL, UCS_PTR_STATUS(sp), 0, c);
	return UCS_OK;
}

static ucs_status_t am_kv(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param)
{
	return on_am(arg, NELSSA_AM_KV, header, header_length, data, length, param);
}

static ucs_status_t am_rows(void *arg, const void *header, size_t header_length, void *data,
			    size_t length, const ucp_am_recv_param_t *param)
{
	return on_am(arg, NELSSA_AM_KV_ROWS, header, header_length, data, length, param);
}

static ucs_status_t am_commit(void *arg, const void *header, size_t header_length, void *data,
			      size_t length, const ucp_am_recv_param_t *param)
{
	return on_am(arg, NELSSA_AM_KV_COMMIT, header, header_length, data, length, param);
}

static ucs_status_t am_step(void *arg, const void *header, size_t header_length, void *data,
			    size_t length, const ucp_am_recv_param_t *param)
{
	return on_am(arg, NELSSA_AM_STEP, header, header_length, data, length, param);
}

/*
 * Any other id: dropped.  A rendezvous message's data is never fetched;
 * the status returned completes the sender's send (ucp_def.h), so it
 * learns the message was refused, not delivered -- there is no header
 * format to answer in.  An eager message may only be given UCS_OK.
 */
static ucs_status_t am_refuse(void *arg, const void *header, size_t header_length, void *data,
			      size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssad *nd = arg;

	(void)header;
	(void)data;
	if (nd->cfg.verbose)
		nd_log(nd, "active message of an id this daemon does not take dropped "
		       "(header %zu, data %zu bytes)", header_length, length);
	return param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? UCS_ERR_UNSUPPORTED : UCS_OK;
}

/*
 * UCX's error callback of an endpoint (poller thread, inside
 * ucp_worker_progress()): no reply goes there any more, and
 * tend_peers() closes it.  The endpoint stays valid until then.
 */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct nd_ep *e = arg;

	(void)ep;
	e->failed = 1;
	e->why = status;
}

/*
 * A connection request to the listener: an endpoint of the daemon's own
 * when its UCX client id is the key of a connection still open that has
 * fewer than ND_EPS_PER_CONN; otherwise rejected, before any endpoint is
 * made.  Keys are compared in full against every peer, as tokens are.
 * Poller thread, inside ucp_worker_progress().
 */
static void on_conn(ucp_conn_request_h req, void *arg)
{
	struct nelssad *nd = arg;
	ucp_conn_request_attr_t attr = { .field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID };
	struct nd_peer *p = NULL;
	const char *why = NULL;
	struct nd_ep *e = NULL;
	ucs_status_t st;

	if (nd->draining)
		why = "stopping";
	else if (ucp_conn_request_query(req, &attr) != UCS_OK)
		why = "no client id";
	for (struct nd_peer *q = nd->peers; !why && q; q = q->next)
		p = (q->key ^ attr.client_id) || q->gone ? p : q;
	if (!why && !p)
		why = "no connection has its key";
	else if (!why && p->eps >= ND_EPS_PER_CONN)
		why = "its connection has its endpoints already";
	/* Room in the table first: once UCX has made the endpoint, it must go in. */
	if (!why && nd_ep_table_reserve(&nd->ep_table, nd->n_eps + 1))
		why = "out of memory";
	if (!why && !(e = calloc(1, sizeof(*e))))
		why = "out of memory";
	if (!why) {
		e->peer = p;
		p->eps++;	/* held while it is made, as a connection gone cannot free it */
	}
	if (why) {
		if (nd->cfg.verbose)
			nd_log(nd, "UCX connection request rejected: %s", why);
		ucp_listener_reject(nd->listener, req);
		return;
	}
	/* It fails when the client died meanwhile; UCX frees the request then. */
	st = nelssa_link_accept(nd->worker, req, p->shm, ep_failed, e, &e->ep);
	if (st != UCS_OK) {
		nd_log(nd, "connection %llu: no endpoint from its connection request: %s",
		       (unsigned long long)p->id, ucs_status_string(st));
		p->eps--;
		free(e);
		return;
	}
	e->next = nd->eps;
	nd->eps = e;
	nd->n_eps++;
	nd_ep_table_add(&nd->ep_table, e->ep, e);
	if (nd->cfg.verbose)
		nd_log(nd, "connection %llu: data endpoint open (%s)", (unsigned long long)p->id,
		       p->shm ? "shared memory, no error handling" : "peer error handling");
}

/*
 * Closes @e's endpoint, at once: forced where UCX allows it (error
 * handling on both sides; shared memory has none, so there it flushes
 * first).  UCX calls no error callback of a closed endpoint; a close
 * still in progress finishes on its own.
 */
static void ep_close(struct nelssad *nd, struct nd_ep *e)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t sp;

	/* A client's normal exit fails it too (UCX sees the sockets close). */
	if (nd->cfg.verbose)
		nd_log(nd, "connection %llu: closing a data endpoint (%s)",
		       (unsigned long long)e->peer->id,
		       e->failed ? ucs_status_string(e->why) : "connection closed");
	nd_ep_table_del(&nd->ep_table, e->ep);
	sp = ucp_ep_close_nbx(e->ep, &prm);
	if (UCS_PTR_IS_ERR(sp) && UCS_PTR_STATUS(sp) == UCS_ERR_INVALID_PARAM) {
		prm.flags = 0;
		sp = ucp_ep_close_nbx(e->ep, &prm);
	}
	e->ep = NULL;
	if (UCS_PTR_IS_PTR(sp))
		ucp_request_free(sp);
	else if (UCS_PTR_IS_ERR(sp))
		nd_log(nd, "connection %llu: closing a data endpoint: %s",
		       (unsigned long long)e->peer->id, ucs_status_string(UCS_PTR_STATUS(sp)));
}

/*
 * Closes the endpoints that failed or whose connection is gone (all of
 * them when @all), frees those closed that nothing holds, and the peers
 * nothing refers to any more.  Runs after the worker's progress, before
 * device completions are reaped.
 */
static void tend_peers(struct nelssad *nd, int all)
{
	for (struct nd_ep **pp = &nd->eps; *pp;) {
		struct nd_ep *e = *pp;

		if (e->ep && (all || e->failed || e->peer->gone))
			ep_close(nd, e);
		if (!e->ep && !e->refs) {
			*pp = e->next;
			e->peer->eps--;
			nd->n_eps--;
			free(e);
		} else {
			pp = &e->next;
		}
	}
	for (struct nd_peer **pp = &nd->peers; *pp;) {
		struct nd_peer *p = *pp;

		if (p->gone && !p->sessions && !p->eps) {
			*pp = p->next;
			free(p);
		} else {
			pp = &p->next;
		}
	}
}

/*
 * Closes the sessions marked closing, once no step or reply of theirs is
 * in flight and UCX writes none of their memory (KV_ROWS received into
 * place: an endpoint that fails or closes ends such a receive).
 */
static void reap_sessions(struct nelssad *nd)
{
	for (struct nd_session **pp = &nd->sessions; *pp;) {
		struct nd_session *s = *pp;

		if (s->held && (s->closing || !nd_ep_live(s->step->ep)))
			nd_step_release(nd, s);
		if (s->closing && !s->step && !s->replies && !s->rndv_direct) {
			*pp = s->next;
			nd->n_sessions--;
			if (s->peer)
				s->peer->sessions--;
			nd_log(nd, "session %llu closed", (unsigned long long)s->id);
			nd_session_free(nd, s);
		} else {
			pp = &s->next;
		}
	}
}

static unsigned int reap_devices(struct nelssad *nd)
{
	struct npnm_completion comps[64];
	unsigned int all = 0;

	for (uint32_t d = 0; d < nd->n_dev; d++) {
		int n;

		while ((n = nelssa_pnm_poll(nd->dev[d].pnm, comps, 64)) > 0) {
			for (int i = 0; i < n; i++)
				nd_step_complete(nd, &comps[i]);
			all += (unsigned int)n;
		}
	}
	return all;
}

/*
 * One turn of the poller: everything the worker has, then the endpoints
 * that steps started there asked for, the device completions (which finish
 * steps) and the sessions that may close now.
 */
unsigned int nd_dataplane_poll_once(struct nelssad *nd)
{
	unsigned int n = nd_jobs_run(nd), p;

	/*
	 * Device completions between progress calls: a stream of KV keeps
	 * the worker busy turn after turn, and a step whose devices are done
	 * is not to wait for it to dry up before its reply goes.
	 */
	while ((p = ucp_worker_progress(nd->worker)))
		n += p + reap_devices(nd);
	tend_peers(nd, 0);
	n += reap_devices(nd);
	reap_sessions(nd);
	nd_registry_tick(nd);
	return n;
}

static void *poller(void *arg)
{
	struct nelssad *nd = arg;
	struct epoll_event ev = { .events = EPOLLIN }, evs[16];
	int epfd = epoll_create1(EPOLL_CLOEXEC), efd = -1;

	if (epfd < 0 || ucp_worker_get_efd(nd->worker, &efd) != UCS_OK) {
		nd_log(nd, "poller: cannot set up epoll or the worker's event fd");
		nd->stop = 1;
		return NULL;
	}
	epoll_ctl(epfd, EPOLL_CTL_ADD, efd, &ev);
	epoll_ctl(epfd, EPOLL_CTL_ADD, nd->to_poller.fd, &ev);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		epoll_ctl(epfd, EPOLL_CTL_ADD, nelssa_pnm_event_fd(nd->dev[d].pnm), &ev);
	while (!nd->stop) {
		nd_dataplane_poll_once(nd);
		if (nd->cfg.busy_poll)
			continue;
		if (ucp_worker_arm(nd->worker) == UCS_ERR_BUSY)
			continue;
		/*
		 * Device completions do not wake the worker's fd: they have
		 * their own.  Each fd is drained by whoever takes what it
		 * announces (nd_jobs_take(), nelssa_pnm_poll()) and only then,
		 * so a turn with nothing to do makes no system call.
		 */
		epoll_wait(epfd, evs, 16, 100);
	}
	close(epfd);
	return NULL;
}


/*
 * UCX's listener, at the control address's host (--listen, resolved as
 * nd_control_listen() does: the first address that takes it) and the port
 * of --data-port (0: any); its port goes to clients in HELLO_OK.  Made
 * before the control listener, so that a daemon that listens is ready.
 */
static int listen_data(struct nelssad *nd)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	ucp_listener_attr_t la = { .field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR };
	struct addrinfo *res, *ai;
	ucs_status_t st = UCS_ERR_INVALID_ADDR;
	char port[8];
	int err;

	snprintf(port, sizeof(port), "%u", nd->cfg.data_port);
	err = getaddrinfo(nd->cfg.listen_host[0] ? nd->cfg.listen_host : NULL, port, &hints, &res);
	if (err) {
		nd_log(nd, "cannot resolve %s: %s", nd->cfg.listen_host, gai_strerror(err));
		return -EINVAL;
	}
	for (ai = res; ai && st != UCS_OK; ai = ai->ai_next) {
		ucp_listener_params_t lp = { 0 };

		lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
				UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
		lp.sockaddr.addr = ai->ai_addr;
		lp.sockaddr.addrlen = ai->ai_addrlen;
		lp.conn_handler.cb = on_conn;
		lp.conn_handler.arg = nd;
		st = ucp_listener_create(nd->worker, &lp, &nd->listener);
	}
	freeaddrinfo(res);
	if (st == UCS_OK)
		st = ucp_listener_query(nd->listener, &la);
	if (st != UCS_OK) {
		nd_log(nd, "UCX cannot listen on %s, port %u: %s", nd->cfg.listen_host,
		       nd->cfg.data_port, ucs_status_string(st));
		return -EADDRNOTAVAIL;
	}
	nd->data_port = ntohs(la.sockaddr.ss_family == AF_INET6
			      ? ((struct sockaddr_in6 *)&la.sockaddr)->sin6_port
			      : ((struct sockaddr_in *)&la.sockaddr)->sin_port);
	nd_log(nd, "data path: UCX listening on port %u", nd->data_port);
	return 0;
}

/*
 * Whether clients may write into this daemon's memory by RMA (zero-copy
 * ingest), and if so the context again with RMA.  Where no transport does
 * RMA in hardware, UCX 1.13 emulates it with active messages whose
 * handlers write and read any address the peer names (rma_sw.c: no key
 * is checked), so RMA there hands every client all of the daemon's
 * memory; and the handler aborts the process when the peer's endpoint
 * fails under it (ucp_request.inl:346).  Only with an RDMA transport, or
 * --emulated-rma for clients the operator trusts.
 */
static ucs_status_t rma_context(struct nelssad *nd)
{
	const char *why;
	ucs_status_t st;

	if (nd->cfg.zero_copy == ND_ZERO_COPY_OFF)
		return UCS_OK;
	if (nelssa_link_has_rdma_rma(nd->transports))
		why = "RDMA";
	else if (nd->cfg.emulated_rma)
		why = "emulated over messages, trusted clients only (--emulated-rma): any client "
		      "can read and write this daemon's memory";
	else {
		nd_log(nd, "zero-copy ingest off: no RDMA transport, and UCX's emulated RMA would "
		       "let any client read and write this daemon's memory (--emulated-rma allows "
		       "it for trusted clients)");
		return UCS_OK;
	}
	ucp_cleanup(nd->ucp);
	nd->ucp = NULL;
	st = nelssa_link_context(NELSSA_LINK_SERVER | NELSSA_LINK_RMA, &nd->ucp);
	if (st != UCS_OK)
		return st;
	nd_log(nd, "zero-copy ingest: UCX RMA on (%s)", why);
	nd->rma_ok = 1;
	return UCS_OK;
}

int nd_dataplane_init(struct nelssad *nd)
{
	ucp_am_handler_param_t ap = { 0 };
	ucs_status_t st;
	int ret;

	st = nelssa_link_context(NELSSA_LINK_SERVER, &nd->ucp);
	if (st == UCS_OK) {
		nelssa_link_transports(nd->ucp, nd->transports, sizeof(nd->transports));
		st = rma_context(nd);
	}
	if (st != UCS_OK) {
		nd->ucp = NULL;
		nd_log(nd, "UCX init failed: %s", ucs_status_string(st));
		return -EIO;
	}
	nd->shm_ok = nelssa_link_has_shm(nd->transports);
	nd_log(nd, "UCX transports available: %s", nd->transports[0] ? nd->transports : "none");
	if (!nelssa_link_can_connect(nd->transports)) {
		nd_log(nd, "UCX has no transport to set connections up over (only '%s'): "
		       "UCX_TLS must include tcp or an RDMA transport; clients on this host "
		       "then use shared memory where UCX has it", nd->transports);
		ucp_cleanup(nd->ucp);
		nd->ucp = NULL;
		return -ENODEV;
	}
	if (nd->cfg.require_rdma && !nelssa_link_has_rdma(nd->transports)) {
		nd_log(nd, "--require-rdma: UCX found no RDMA transport (only '%s'); refusing to run "
		       "on a TCP or shared-memory fallback", nd->transports);
		ucp_cleanup(nd->ucp);
		nd->ucp = NULL;
		return -ENODEV;
	}
	st = nelssa_link_worker(nd->ucp, 0, &nd->worker);
	if (st != UCS_OK) {
		nd->worker = NULL;
		nd_log(nd, "UCX worker setup failed: %s", ucs_status_string(st));
		return -EIO;
	}
	/*
	 * A handler for every id, in ascending order.  UCX 1.13 grows its
	 * table of handlers to twice the old size but initialises only the
	 * slot being set, so the slots it skips hold garbage, and a message
	 * of such an id (0 and 2, when only 1 and 3 are set) jumps through
	 * it; it also reads the entry of an id beyond the table before it
	 * checks the id.  Every id set, in order, leaves neither: the table
	 * (1.5 MiB) ends exactly at the last id.
	 */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = nd;
	for (ap.id = 0, st = UCS_OK; ap.id < ND_AM_IDS && st == UCS_OK; ap.id++) {
		ap.cb = ap.id == NELSSA_AM_KV ? am_kv : ap.id == NELSSA_AM_STEP ? am_step :
			ap.id == NELSSA_AM_KV_COMMIT ? am_commit :
			ap.id == NELSSA_AM_KV_ROWS ? am_rows : am_refuse;
		st = ucp_worker_set_am_recv_handler(nd->worker, &ap);
	}
	if (st != UCS_OK)
		return -EIO;
	ret = listen_data(nd);
	if (ret)
		return ret;
	{
		ucp_mem_map_params_t mp = { 0 };

		mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
				UCP_MEM_MAP_PARAM_FIELD_FLAGS;
		mp.length = (size_t)ND_STAGE_SLOTS * ND_STAGE_BYTES;
		mp.flags = UCP_MEM_MAP_ALLOCATE;
		/* Optional: without it, rendezvous buffers are plain allocations. */
		if (ucp_mem_map(nd->ucp, &mp, &nd->stage_memh) == UCS_OK) {
			ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS };

			if (ucp_mem_query(nd->stage_memh, &ma) == UCS_OK) {
				nd->stage = ma.address;
				nd->stage_free = (1u << ND_STAGE_SLOTS) - 1;
			}
		} else {
			nd->stage_memh = NULL;
			nd_log(nd, "no registered staging: rendezvous data goes to plain buffers");
		}
	}
	if (getenv("NELSSAD_TEST_HOLD_TENANT")) {
		nd->hold_tenant = (uint32_t)strtoul(getenv("NELSSAD_TEST_HOLD_TENANT"), NULL, 0);
		nd_log(nd, "test hook: the replies of tenant %u's steps wait until their client is gone",
		       nd->hold_tenant);
	}
	nd->to_poller.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return nd->to_poller.fd < 0 ? -errno : 0;
}

int nd_dataplane_start(struct nelssad *nd)
{
	int ret = nd_dataplane_init(nd);

	if (ret)
		return ret;
	ret = pthread_create(&nd->poller, NULL, poller, nd);
	if (ret)
		return -ret;
	nd->poller_running = 1;
	return 0;
}

void nd_dataplane_stop(struct nelssad *nd)
{
	if (!nd->worker)
		goto out;
	nd->stop = 1;
	if (nd->poller_running) {
		nd_jobs_wake(nd, &nd->to_poller);
		pthread_join(nd->poller, NULL);
		nd->poller_running = 0;
	}
	/* No new endpoint: the listener goes first. */
	if (nd->listener)
		ucp_listener_destroy(nd->listener);
	nd->listener = NULL;
	/*
	 * UCX 1.13 aborts in ucp_worker_destroy() (ucp_ep.c:437) while a
	 * rendezvous receive or a send is still in flight, which SIGTERM
	 * under load leaves: let them finish first, taking no new message,
	 * for at most 5 s.
	 */
	nd->draining = 1;
	for (uint64_t end = nd_now_ns() + 5000000000ull;
	     (nd->rndv || nd_sends_in_flight()) && nd_now_ns() < end;)
		ucp_worker_progress(nd->worker);
	if (nd->rndv || nd_sends_in_flight())
		nd_log(nd, "stopping with %u receive(s) and %u send(s) still in flight",
		       nd->rndv, nd_sends_in_flight());
	/* Steps still on devices: wait them out so their memory can go. */
	for (uint32_t d = 0; d < nd->n_dev; d++) {
		struct npnm_completion c[64];

		while (nelssa_pnm_inflight(nd->dev[d].pnm) &&
		       nelssa_pnm_wait(nd->dev[d].pnm, c, 1, 64, 5000000000ll) > 0)
			;
	}
	for (struct nd_session *s = nd->sessions, *n; s; s = n) {
		n = s->next;
		nd_step_free(s->step);
		/*
		 * A reply UCX never finished still names its staging, a
		 * receive never finished its arena: kept.
		 */
		if (!s->replies && !s->rndv_direct)
			nd_session_free(nd, s);
	}
	nd->sessions = NULL;
	nd->n_sessions = 0;
	nd_jobs_drop(nd);	/* while UCX may still hold a session's memory registered */
	/* The endpoints are ours to close: nothing is answered any more. */
	for (struct nd_ep *e = nd->eps, *n; e; e = n) {
		n = e->next;
		if (e->ep)
			ep_close(nd, e);
		free(e);
	}
	nd->eps = NULL;
	nd->n_eps = 0;
	nd_ep_table_free(&nd->ep_table);
	for (struct nd_peer *p = nd->peers, *n; p; p = n) {
		n = p->next;
		free(p);
	}
	nd->peers = NULL;
	if (nd->stage_memh)
		ucp_mem_unmap(nd->ucp, nd->stage_memh);
	ucp_worker_destroy(nd->worker);
	close(nd->to_poller.fd);
	/* As nd_dataplane_init() found it, for a test that starts it again. */
	nd->worker = NULL;
	nd->stage = NULL;
	nd->stage_memh = NULL;
	nd->stage_free = 0;
	nd->to_poller.fd = -1;
	nd->draining = 0;
out:
	if (nd->ucp)
		ucp_cleanup(nd->ucp);
	nd->ucp = NULL;
}
