// SPDX-License-Identifier: MIT
/*
 * Tenant isolation on nelssad's data and control paths (tier T1), as raw
 * UCX peers, in TAP.  A victim opens a session, allocates a request,
 * writes its KV and runs a step, checked against float64 attention.  An
 * attacker -- its own control connection, HELLO'd, with a session of its
 * own -- then guesses: the victim's session id with token 0, with random
 * tokens, with its own token; the victim's token with other ids; each on
 * KV writes, steps and, on the control path, REQ_ALLOC, REQ_FREE and
 * CLOSE.  Every guess must get exactly what a session that never existed
 * gets (-ENOENT; the same ERROR message on the control path), whatever
 * else in the message is wrong (request, layer, head, lengths), and the
 * victim's steps must still succeed and give bit for bit the outputs they
 * gave before.  Then rendezvous messages of 64 MiB naming no session of
 * the sender's: each send completes within a bounded wait, is answered
 * -ENOENT, and the daemon's resident memory does not grow by them; a step
 * beyond what the attacker's own session could send is refused with
 * -EMSGSIZE; a rendezvous message of an id the daemon does not take
 * completes its send with an error.  A session of adjacent K and V
 * blocks takes KV messages (copied block by block) and whole-block KV_ROWS
 * parts, its steps equal float64, and refuses rows that are not whole
 * blocks of its own request.  The data path is bound to the
 * connection as well: the victim's session and its true token, as if
 * leaked, sent on the attacker's own endpoint get -ENOENT; and endpoints
 * whose UCX client id is not the key of a connection (a random one, the
 * victim's token, none) are rejected before the daemon makes them.
 *
 * usage: isolation --count               the number of subtests
 *        isolation HOST PORT PID FIRST   runs them, numbered from FIRST,
 *                                        against the daemon of pid PID
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/link.h>
#include <nelssa/proto.h>

#include "testutil.h"

#define NR_CHECKS 25

#define LAYERS 2
#define KV_HEADS 2
#define GROUP 2
#define DIM 64
#define TOKENS 64
#define CLUSTER 16
#define CLUSTERS (TOKENS / CLUSTER)
#define REQUEST 100
#define NEVER 987654321ull	/* a session id no daemon of this test reaches */
#define WAIT_MS 10000
#define BIG (64u << 20)		/* rendezvous messages to refuse */

#define NO_ANSWER 1		/* a status no daemon sends: nothing came */

struct tenant {
	const char *name;
	int fd;
	uint32_t seq;
	ucp_worker_h w;
	ucp_ep_h ep;
	uint16_t data_port;		/* from HELLO_OK */
	uint64_t session, token;
	/* the last KV ack */
	int acked;
	uint64_t ack_cookie;
	int32_t ack_status;
	/* the last step reply */
	int replied, receiving;
	struct nelssa_reply_hdr reply;
	uint8_t rbuf[4096];
	size_t rlen;
};

static ucp_context_h ucp;
static struct tenant victim = { .name = "victim" }, attacker = { .name = "attacker" };
static struct tenant adjacent = { .name = "adjacent", .fd = -1 };	/* K and V blocks adjacent */
static int test_no;
static uint64_t next_cookie = 1, next_step = 1;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - %s: ", ok ? "ok" : "not ok", ++test_no, getenv("UCX_TLS") ?
	       getenv("UCX_TLS") : "?");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* Both workers: the daemon may wait on either while a test waits on one. */
static void progress(void)
{
	if (victim.w)
		while (ucp_worker_progress(victim.w))
			;
	if (attacker.w)
		while (ucp_worker_progress(attacker.w))
			;
	if (adjacent.w)
		while (ucp_worker_progress(adjacent.w))
			;
}

/* Control path */

static int ctl_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int fd;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

static int read_all(int fd, uint8_t *p, size_t n)
{
	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, WAIT_MS) != 1)
			return -ETIMEDOUT;
		r = recv(fd, p, n, 0);
		if (r <= 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One request, one reply frame in @r (an ERROR too): 0 or a transport error. */
static int ctl_call(struct tenant *t, struct nelssa_msg *m, struct nelssa_msg *r)
{
	static uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	struct nelssa_msg_hdr h;
	size_t len;
	int ret;

	m->seq = ++t->seq;
	ret = nelssa_msg_encode(m, buf, sizeof(buf), &len);
	if (ret)
		return ret;
	if (send(t->fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -EIO;
	ret = read_all(t->fd, buf, NELSSA_PROTO_HDR_BYTES);
	if (!ret)
		ret = nelssa_msg_decode_hdr(buf, &h);
	if (!ret)
		ret = read_all(t->fd, buf + NELSSA_PROTO_HDR_BYTES, h.length);
	if (!ret)
		ret = nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + h.length, r);
	return ret;
}

/* Data path */

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
			   size_t length, const ucp_am_recv_param_t *param)
{
	struct tenant *t = arg;
	struct nelssa_ack_hdr a;

	(void)data;
	(void)length;
	(void)param;
	if (!nelssa_ack_hdr_get(header, header_length, &a)) {
		t->ack_cookie = a.cookie;
		t->ack_status = a.status;
		t->acked = 1;
	}
	return UCS_OK;
}

static void reply_recvd(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct tenant *t = user_data;

	(void)length;
	if (status != UCS_OK)
		t->reply.status = -EIO;
	t->receiving = 0;
	t->replied = 1;
	if (request)
		ucp_request_free(request);
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
			     size_t length, const ucp_am_recv_param_t *param)
{
	struct tenant *t = arg;
	ucp_request_param_t prm = { 0 };
	ucs_status_ptr_t sp;

	if (nelssa_reply_hdr_get(header, header_length, &t->reply) || length > sizeof(t->rbuf)) {
		t->reply.status = -EPROTO;
		t->replied = 1;
		return UCS_OK;
	}
	t->rlen = length;
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
		memcpy(t->rbuf, data, length);
		t->replied = 1;
		return UCS_OK;
	}
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	prm.cb.recv_am = reply_recvd;
	prm.user_data = t;
	t->receiving = 1;
	sp = ucp_am_recv_data_nbx(t->w, data, t->rbuf, length, &prm);
	if (sp == NULL)
		reply_recvd(NULL, UCS_OK, length, t);
	else if (UCS_PTR_IS_ERR(sp))
		reply_recvd(NULL, UCS_PTR_STATUS(sp), 0, t);
	return UCS_OK;
}

static ucs_status_t on_other(void *arg, const void *header, size_t header_length, void *data,
			     size_t length, const ucp_am_recv_param_t *param)
{
	(void)arg;
	(void)header;
	(void)header_length;
	(void)data;
	(void)length;
	(void)param;
	return UCS_OK;
}

struct sent {
	int done;
	ucs_status_t status;
};

static void send_cb(void *request, ucs_status_t status, void *user_data)
{
	struct sent *s = user_data;

	(void)request;
	s->status = status;
	s->done = 1;
}

/*
 * Sends one active message and waits (WAIT_MS at most) for UCX to be done
 * with it.  Return: the send's status, UCS_ERR_TIMED_OUT when it never
 * completed (then cancelled).  *@ms receives how long it took.
 */
static ucs_status_t am_send(struct tenant *t, unsigned int id, const void *hdr, size_t hdr_len,
			    const void *data, size_t len, uint32_t flags, uint64_t *ms)
{
	ucp_request_param_t prm = { 0 };
	const uint64_t start = now_ms();
	struct sent s = { 0 };
	ucs_status_ptr_t sp;

	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY | flags;
	prm.cb.send = send_cb;
	prm.user_data = &s;
	sp = ucp_am_send_nbx(t->ep, id, hdr, hdr_len, data, len, &prm);
	if (!UCS_PTR_IS_PTR(sp)) {
		if (ms)
			*ms = now_ms() - start;
		return UCS_PTR_STATUS(sp);
	}
	while (!s.done && now_ms() < start + WAIT_MS)
		progress();
	if (ms)
		*ms = now_ms() - start;
	if (!s.done) {
		ucp_request_cancel(t->w, sp);
		while (!s.done)
			progress();
		s.status = UCS_ERR_TIMED_OUT;
	}
	ucp_request_free(sp);
	return s.status;
}

/*
 * Opens @t's control connection, says HELLO, makes its worker with the
 * connection's key and an endpoint to the daemon's data path.
 */
static int tenant_open(struct tenant *t, const char *host, const char *port)
{
	static struct nelssa_msg m, r;
	ucp_am_handler_param_t ap = { 0 };

	t->fd = ctl_connect(host, port);
	if (t->fd < 0)
		return -ECONNREFUSED;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_HELLO;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	m.u.hello.flags = NELSSA_HELLO_SHM;	/* granted where it can be */
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "isolation-%s", t->name);
	if (ctl_call(t, &m, &r) || r.type != NELSSA_MSG_HELLO_OK)
		return -EPROTO;
	t->data_port = r.u.hello_ok.data_port;
	if (nelssa_link_worker(ucp, r.u.hello_ok.key, &t->w) != UCS_OK)
		return -EIO;
	/* In ascending order, as the daemon does (see nd_dataplane_start()). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = t;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++) {
		ap.cb = ap.id == NELSSA_AM_KV_ACK ? on_ack :
			ap.id == NELSSA_AM_STEP_REPLY ? on_reply : on_other;
		if (ucp_worker_set_am_recv_handler(t->w, &ap) != UCS_OK)
			return -EIO;
	}
	if (nelssa_link_connect(t->w, t->fd, t->data_port, r.u.hello_ok.flags & NELSSA_HELLO_SHM,
				NULL, NULL, &t->ep) != UCS_OK)
		return -EIO;
	return 0;
}

static void tenant_close(struct tenant *t);

static void stranger_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)ep;
	*(ucs_status_t *)arg = status;
}

/*
 * An endpoint from a worker whose UCX client id is @key (0: none), over
 * the attacker's control connection's address, with a KV message naming
 * no session on it: 0 when the daemon rejected it (its failure reported,
 * no answer), else what came: the ack's status, or NO_ANSWER.
 */
static int stranger(uint64_t key, ucs_status_t *why)
{
	static uint8_t hdr[NELSSA_KV_HDR_BYTES];
	struct tenant s = { .name = "stranger", .fd = -1 };
	const struct nelssa_kv_hdr kv = { .session = NEVER, .token = 1, .cookie = 5 };
	ucp_am_handler_param_t ap = { 0 };
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_AM_SEND_FLAG_REPLY };
	ucs_status_ptr_t sp;
	int ret;

	*why = UCS_OK;
	if (nelssa_link_worker(ucp, key, &s.w) != UCS_OK)
		return -EIO;
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = &s;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++) {
		ap.cb = ap.id == NELSSA_AM_KV_ACK ? on_ack : on_other;
		ucp_worker_set_am_recv_handler(s.w, &ap);
	}
	/* Peer error handling whatever the transport: its rejection is then reported. */
	if (nelssa_link_connect(s.w, attacker.fd, attacker.data_port, 0, stranger_failed, why,
				&s.ep) != UCS_OK) {
		ucp_worker_destroy(s.w);
		return -EIO;
	}
	nelssa_kv_hdr_put(hdr, &kv);
	sp = ucp_am_send_nbx(s.ep, NELSSA_AM_KV, hdr, sizeof(hdr), NULL, 0, &prm);
	for (const uint64_t end = now_ms() + WAIT_MS; *why == UCS_OK && !s.acked && now_ms() < end;)
		ucp_worker_progress(s.w);
	ret = s.acked ? s.ack_status : *why != UCS_OK ? 0 : NO_ANSWER;
	if (UCS_PTR_IS_PTR(sp)) {
		if (ucp_request_check_status(sp) == UCS_INPROGRESS)
			ucp_request_cancel(s.w, sp);
		ucp_request_free(sp);
	}
	s.fd = -1;
	tenant_close(&s);
	ucp_worker_destroy(s.w);
	return ret;
}

static void tenant_close(struct tenant *t)
{
	if (t->ep) {
		ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					    .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp = ucp_ep_close_nbx(t->ep, &prm);
		const uint64_t end = now_ms() + WAIT_MS;

		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
		       now_ms() < end)
			progress();
		if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
			ucp_request_free(sp);
		t->ep = NULL;
	}
	if (t->fd >= 0)
		close(t->fd);
}

/* SESSION_CREATE (KV layout @layout) and REQ_ALLOC of request REQUEST on @t's connection. */
static int tenant_session(struct tenant *t, uint32_t label, uint8_t layout)
{
	static struct nelssa_msg m, r;

	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_SESSION_CREATE;
	m.u.create.tenant = label;
	m.u.create.shape = (struct nelssa_shape){ LAYERS, KV_HEADS * GROUP, KV_HEADS, DIM,
						  NELSSA_KV_BF16, 0, layout };
	m.u.create.placement = NELSSA_PLACE_HEADS;
	m.u.create.max_batch = 4;
	m.u.create.max_sel = 64;
	m.u.create.capacity_tokens = 4096;
	if (ctl_call(t, &m, &r) || r.type != NELSSA_MSG_SESSION_OK)
		return -EPROTO;
	t->session = r.u.session_ok.session;
	t->token = r.u.session_ok.token;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_REQ_ALLOC;
	m.u.req.session = t->session;
	m.u.req.request = REQUEST;
	m.u.req.max_tokens = TOKENS;
	m.u.req.max_clusters = CLUSTERS;
	if (ctl_call(t, &m, &r) || r.type != NELSSA_MSG_REQ_OK)
		return -EPROTO;
	return 0;
}

/*
 * A control request naming @session (and request REQUEST) on @t's
 * connection; the ERROR's code and message into @code and @msg (0 and ""
 * for an OK).  Return: 0, or a transport error.
 */
static int ctl_naming(struct tenant *t, uint16_t type, uint64_t session, int32_t *code,
		      char *msg, size_t msg_len)
{
	static struct nelssa_msg m, r;
	int ret;

	memset(&m, 0, sizeof(m));
	m.type = type;
	if (type == NELSSA_MSG_CLOSE) {
		m.u.session.session = session;
	} else {
		m.u.req.session = session;
		m.u.req.request = REQUEST;
		m.u.req.max_tokens = TOKENS;
		m.u.req.max_clusters = CLUSTERS;
	}
	ret = ctl_call(t, &m, &r);
	if (ret)
		return ret;
	*code = r.type == NELSSA_MSG_ERROR ? r.u.error.code : 0;
	snprintf(msg, msg_len, "%s", r.type == NELSSA_MSG_ERROR ? r.u.error.msg : "");
	return 0;
}

/* The KV data: K rows, V rows (token order = store order), the table. */
static uint16_t kv_k[LAYERS][KV_HEADS][TOKENS * DIM], kv_v[LAYERS][KV_HEADS][TOKENS * DIM];
static uint8_t kv_msg[4 * TOKENS * DIM + 8 * CLUSTERS];

static size_t kv_data(uint32_t l, uint32_t h)
{
	memcpy(kv_msg, kv_k[l][h], sizeof(kv_k[l][h]));
	memcpy(kv_msg + sizeof(kv_k[l][h]), kv_v[l][h], sizeof(kv_v[l][h]));
	for (uint32_t c = 0; c < CLUSTERS; c++) {
		const uint32_t e[2] = { c * CLUSTER, CLUSTER };

		memcpy(kv_msg + 4 * TOKENS * DIM + 8 * c, e, sizeof(e));
	}
	return sizeof(kv_msg);
}

/*
 * A KV message from @t naming @session/@token with @h's other fields (the
 * cookie is set here) and @len bytes of @data; returns the ack's status,
 * NO_ANSWER when none came, -ETIMEDOUT / -EIO when the send itself did
 * not complete or failed.
 */
static int kv_am(struct tenant *t, unsigned int id, uint64_t session, uint64_t token,
		 struct nelssa_kv_hdr h, const void *data, size_t len, uint32_t flags)
{
	uint8_t hdr[NELSSA_KV_HDR_BYTES];
	uint64_t end;
	ucs_status_t st;

	h.session = session;
	h.token = token;
	h.cookie = next_cookie++;
	nelssa_kv_hdr_put(hdr, &h);
	t->acked = 0;
	st = am_send(t, id, hdr, sizeof(hdr), data, len, flags, NULL);
	if (st == UCS_ERR_TIMED_OUT)
		return -ETIMEDOUT;
	if (st != UCS_OK)
		return -EIO;
	end = now_ms() + WAIT_MS;
	while (!(t->acked && t->ack_cookie == h.cookie) && now_ms() < end)
		progress();
	return t->acked && t->ack_cookie == h.cookie ? t->ack_status : NO_ANSWER;
}

static int kv_send(struct tenant *t, uint64_t session, uint64_t token, struct nelssa_kv_hdr h,
		   const void *data, size_t len, uint32_t flags)
{
	return kv_am(t, NELSSA_AM_KV, session, token, h, data, len, flags);
}

/* A KV commit (zero-copy ingest) naming @session/@token: its ack's status, as kv_send(). */
static int commit_send(struct tenant *t, uint64_t session, uint64_t token, struct nelssa_kv_hdr h,
		       const void *data, size_t len)
{
	return kv_am(t, NELSSA_AM_KV_COMMIT, session, token, h, data, len, 0);
}

/* A KV_ROWS part of @t's own session: its ack's status, as kv_send(). */
static int own_part(struct tenant *t, struct nelssa_kv_hdr h, const void *data, size_t len,
		    uint32_t flags)
{
	return kv_am(t, NELSSA_AM_KV_ROWS, t->session, t->token, h, data, len, flags);
}

/* A KV_ROWS part of the attacker's own session. */
static int own_rows(struct nelssa_kv_hdr h, const void *data, size_t len, uint32_t flags)
{
	return own_part(&attacker, h, data, len, flags);
}

/* RKEY_GET of @session's device 0 on @t's connection: as ctl_naming(). */
static int ctl_rkey(struct tenant *t, uint64_t session, int32_t *code, char *msg, size_t msg_len)
{
	static struct nelssa_msg m, r;
	int ret;

	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_RKEY_GET;
	m.u.rkey_get.session = session;
	ret = ctl_call(t, &m, &r);
	if (ret)
		return ret;
	*code = r.type == NELSSA_MSG_ERROR ? r.u.error.code : 0;
	snprintf(msg, msg_len, "%s", r.type == NELSSA_MSG_ERROR ? r.u.error.msg : "");
	return 0;
}

/* A whole, valid KV message of (@l, @h) of request REQUEST. */
static struct nelssa_kv_hdr kv_whole(uint16_t l, uint16_t h)
{
	return (struct nelssa_kv_hdr){ .request = REQUEST, .layer = l, .head = h,
				       .nr_tokens = TOKENS, .nr_clusters = CLUSTERS };
}

/* The step: every head of request REQUEST at @layer, clusters 0 and 2 selected. */
static float step_q[KV_HEADS][GROUP * DIM];
static const uint32_t step_sel[2] = { 0, 2 };
static uint8_t step_msg[KV_HEADS * (NELSSA_STEP_ITEM_BYTES + 4 * GROUP * DIM + 4 * 2)];

static size_t step_data(uint64_t request, uint16_t head_offset)
{
	uint8_t *p = step_msg + KV_HEADS * NELSSA_STEP_ITEM_BYTES;

	for (uint32_t i = 0; i < KV_HEADS; i++) {
		const struct nelssa_step_item it = { request, (uint16_t)(i + head_offset), 2 };

		nelssa_step_item_put(step_msg + i * NELSSA_STEP_ITEM_BYTES, &it);
		memcpy(p, step_q[i], sizeof(step_q[i]));
		memcpy(p + sizeof(step_q[i]), step_sel, sizeof(step_sel));
		p += sizeof(step_q[i]) + sizeof(step_sel);
	}
	return sizeof(step_msg);
}

/* Sends a step from @t naming @session/@token; returns the reply's status or NO_ANSWER. */
static int step_send(struct tenant *t, uint64_t session, uint64_t token, uint16_t layer,
		     const void *data, size_t len, uint32_t flags)
{
	const struct nelssa_step_hdr h = { .session = session, .token = token,
					   .step = next_step++, .layer = layer,
					   .nr_items = KV_HEADS };
	uint8_t hdr[NELSSA_STEP_HDR_BYTES];
	uint64_t end;
	ucs_status_t st;

	nelssa_step_hdr_put(hdr, &h);
	t->replied = 0;
	st = am_send(t, NELSSA_AM_STEP, hdr, sizeof(hdr), data, len, flags, NULL);
	if (st != UCS_OK)
		return st == UCS_ERR_TIMED_OUT ? -ETIMEDOUT : -EIO;
	end = now_ms() + WAIT_MS;
	while (!(t->replied && t->reply.step == h.step) && now_ms() < end)
		progress();
	return t->replied && t->reply.step == h.step ? t->reply.status : NO_ANSWER;
}

/* The victim's step at layer 0; its outputs and LSEs into @out (rlen bytes). */
static int victim_step(uint8_t *out)
{
	int ret = step_send(&victim, victim.session, victim.token, 0, step_msg, step_data(REQUEST, 0),
			    0);

	if (!ret && victim.rlen == KV_HEADS * (4 * GROUP * DIM + 4 * GROUP))
		memcpy(out, victim.rbuf, victim.rlen);
	else if (!ret)
		ret = -EPROTO;
	return ret;
}

/* Checks @out, a step at @layer, against float64 attention over clusters 0 and 2. */
static int layer_reference(const uint8_t *out, uint32_t layer)
{
	const struct nelssa_attn_geom g = { DIM, GROUP, NELSSA_KV_BF16, 1.0f / sqrtf(DIM), 0 };
	uint32_t tok[2 * CLUSTER], bad = 0;

	for (uint32_t c = 0; c < 2; c++)
		for (uint32_t j = 0; j < CLUSTER; j++)
			tok[c * CLUSTER + j] = step_sel[c] * CLUSTER + j;
	for (uint32_t h = 0; h < KV_HEADS; h++) {
		const uint8_t *p = out + h * (4 * GROUP * DIM + 4 * GROUP);
		float o[GROUP * DIM], lse[GROUP];
		char what[32];

		memcpy(o, p, sizeof(o));
		memcpy(lse, p + sizeof(o), sizeof(lse));
		snprintf(what, sizeof(what), "victim head %u", h);
		bad |= (uint32_t)tu_check_attn(&g, step_q[h], kv_k[layer][h], kv_v[layer][h], tok,
					      2 * CLUSTER, o, lse, what);
	}
	return bad ? -EDOM : 0;
}

static int victim_reference(const uint8_t *out)
{
	return layer_reference(out, 0);
}

/* @t's step of its own session at @layer, checked as layer_reference() does. */
static int own_step_exact(struct tenant *t, uint16_t layer)
{
	int ret = step_send(t, t->session, t->token, layer, step_msg, step_data(REQUEST, 0), 0);

	if (!ret && t->rlen != KV_HEADS * (4 * GROUP * DIM + 4 * GROUP))
		ret = -EPROTO;
	return ret ? ret : layer_reference(t->rbuf, layer);
}

/*
 * The blocks of (@l, @h)'s tokens [@first, +@n) as an adjacent store lays
 * them out (<nelssa/kv_store.h>): each 16-row K block, then its V block.
 */
static size_t kv_blocks(uint32_t l, uint32_t h, uint32_t first, uint32_t n, uint8_t *out)
{
	const size_t block = 2ull * CLUSTER * DIM;

	for (uint32_t b = 0; b < n / CLUSTER; b++) {
		memcpy(out + 2 * b * block, kv_k[l][h] + (first + b * CLUSTER) * DIM, block);
		memcpy(out + (2 * b + 1) * block, kv_v[l][h] + (first + b * CLUSTER) * DIM, block);
	}
	return 2 * block * (n / CLUSTER);
}

static long vm_rss_kib(const char *pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

/* The guesses at the victim's session a tenant without its token can make. */
struct guess {
	uint64_t session, token;
};

static uint32_t guesses(struct tu_rng *rng, struct guess *g)
{
	uint32_t n = 0;

	g[n++] = (struct guess){ victim.session, 0 };
	g[n++] = (struct guess){ victim.session, attacker.token };
	g[n++] = (struct guess){ victim.session, victim.token ^ 1 };
	g[n++] = (struct guess){ victim.session, ~victim.token };
	for (int i = 0; i < 8; i++)
		g[n++] = (struct guess){ victim.session, tu_next(rng) | 1 };
	/* The victim's token with the wrong id. */
	g[n++] = (struct guess){ attacker.session, victim.token };
	g[n++] = (struct guess){ victim.session + 1, victim.token };
	g[n++] = (struct guess){ victim.session - 1, victim.token };
	g[n++] = (struct guess){ 0, victim.token };
	g[n++] = (struct guess){ NEVER, victim.token };
	return n;
}

int main(int argc, char **argv)
{
	static uint8_t before[4096], after[4096];
	static struct guess g[32];
	struct tu_rng rng;
	const char *pid;
	uint32_t ng;
	int ret, all;

	if (argc == 2 && !strcmp(argv[1], "--count")) {
		printf("%d\n", NR_CHECKS);
		return 0;
	}
	if (argc != 5) {
		fprintf(stderr, "usage: isolation --count | isolation HOST PORT PID FIRST\n");
		return 2;
	}
	pid = argv[3];
	test_no = atoi(argv[4]) - 1;
	tu_init("isolation");
	tu_rng_for(&rng, "isolation", 0);
	if (nelssa_link_context(NELSSA_LINK_RMA, &ucp) != UCS_OK) {
		printf("# UCX init failed\n");
		return 1;
	}

	/* 1: the victim's session, request, KV and a step, exact. */
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KV_HEADS; h++) {
			tu_fill_kv(&rng, kv_k[l][h], TOKENS * DIM, 1.0, NELSSA_KV_BF16);
			tu_fill_kv(&rng, kv_v[l][h], TOKENS * DIM, 1.0, NELSSA_KV_BF16);
		}
	for (uint32_t h = 0; h < KV_HEADS; h++)
		tu_fill_f32(&rng, step_q[h], GROUP * DIM, 1.0);
	ret = tenant_open(&victim, argv[1], argv[2]);
	if (!ret)
		ret = tenant_session(&victim, 1, NELSSA_KV_PACKED);
	for (uint16_t l = 0; l < LAYERS && !ret; l++)
		for (uint16_t h = 0; h < KV_HEADS && !ret; h++) {
			size_t len = kv_data(l, h);

			ret = kv_send(&victim, victim.session, victim.token, kv_whole(l, h), kv_msg,
				      len, 0);
		}
	if (!ret)
		ret = victim_step(before);
	if (!ret)
		ret = victim_reference(before);
	report(!ret, "the victim's session %llu: KV written, a step equal to float64 attention "
	       "(%d)", (unsigned long long)victim.session, ret);
	ret = tenant_open(&attacker, argv[1], argv[2]);
	if (!ret)
		ret = tenant_session(&attacker, 2, NELSSA_KV_PACKED);
	if (ret) {
		printf("# the attacker could not connect: %d\n", ret);
		return 1;
	}
	printf("# victim session %llu, attacker session %llu\n", (unsigned long long)victim.session,
	       (unsigned long long)attacker.session);
	ng = guesses(&rng, g);

	/* 2: the baseline, a session that never existed. */
	ret = kv_send(&attacker, NEVER, 0, kv_whole(0, 0), kv_msg, kv_data(0, 0), 0);
	report(ret == -ENOENT, "a KV message naming a session that never existed: -ENOENT (%d)",
	       ret);

	/* 3: KV writes into the victim's request under every guess. */
	all = 1;
	for (uint32_t i = 0; i < ng; i++) {
		ret = kv_send(&attacker, g[i].session, g[i].token, kv_whole(0, 0), kv_msg,
			      kv_data(1, 1), 0);
		if (ret != -ENOENT) {
			printf("# guess %u (session %llu, token %#llx): %d\n", i,
			       (unsigned long long)g[i].session, (unsigned long long)g[i].token, ret);
			all = 0;
		}
	}
	report(all, "%u guessed (session, token) pairs writing KV into the victim's request: "
	       "each -ENOENT", ng);

	/* 4: a wrong request, layer, head or length on a guessed session: still -ENOENT. */
	all = 1;
	for (uint32_t i = 0; i < ng; i++) {
		struct nelssa_kv_hdr bad[4] = { kv_whole(0, 0), kv_whole(LAYERS, 0),
						kv_whole(0, KV_HEADS), kv_whole(0, 0) };

		bad[0].request = REQUEST + 1;
		for (int b = 0; b < 4; b++) {
			ret = kv_send(&attacker, g[i].session, g[i].token, bad[b], kv_msg,
				      kv_data(0, 0) - (b == 3 ? 8 : 0), 0);
			if (ret != -ENOENT) {
				printf("# guess %u, fault %d: %d\n", i, b, ret);
				all = 0;
			}
		}
	}
	report(all, "... with a wrong request, layer, head or length: -ENOENT all the same");

	/* 5: the attacker's own session does check all that (after its token). */
	{
		struct nelssa_kv_hdr l = kv_whole(LAYERS, 0);
		int own = kv_send(&attacker, attacker.session, attacker.token, kv_whole(0, 0), kv_msg,
				  kv_data(1, 0), 0);
		int lay = kv_send(&attacker, attacker.session, attacker.token, l, kv_msg,
				  kv_data(0, 0), 0);
		int len = kv_send(&attacker, attacker.session, attacker.token, kv_whole(0, 0), kv_msg,
				  kv_data(0, 0) - 8, 0);
		int req;

		l = kv_whole(0, 0);
		l.request = REQUEST + 1;
		req = kv_send(&attacker, attacker.session, attacker.token, l, kv_msg, kv_data(0, 0),
			      0);
		report(!own && lay == -ERANGE && len == -EBADMSG && req == -ENOENT,
		       "the attacker's own session: its KV taken, a bad layer -ERANGE, a bad length "
		       "-EBADMSG, an unknown request -ENOENT (%d %d %d %d)", own, lay, len, req);
	}

	/* 6: steps under every guess, the baseline first. */
	{
		int base = step_send(&attacker, NEVER, 0, 0, step_msg, step_data(REQUEST, 0), 0);

		all = base == -ENOENT;
		for (uint32_t i = 0; i < ng; i++) {
			ret = step_send(&attacker, g[i].session, g[i].token, 0, step_msg,
					step_data(REQUEST, 0), 0);
			if (ret != base) {
				printf("# step guess %u: %d\n", i, ret);
				all = 0;
			}
		}
		report(all, "a step naming no session: %d; %u guessed steps of the victim's "
		       "session: each the same", base, ng);
	}

	/* 7: ... with an unknown request, a head or layer beyond the shape. */
	all = 1;
	for (uint32_t i = 0; i < ng; i++) {
		int a = step_send(&attacker, g[i].session, g[i].token, 0, step_msg,
				  step_data(REQUEST + 1, 0), 0);
		int b = step_send(&attacker, g[i].session, g[i].token, 0, step_msg,
				  step_data(REQUEST, KV_HEADS), 0);
		int c = step_send(&attacker, g[i].session, g[i].token, LAYERS, step_msg,
				  step_data(REQUEST, 0), 0);
		int d = step_send(&attacker, g[i].session, g[i].token, 0, step_msg,
				  step_data(REQUEST, 0) - 4, 0);

		if (a != -ENOENT || b != -ENOENT || c != -ENOENT || d != -ENOENT) {
			printf("# step guess %u: %d %d %d %d\n", i, a, b, c, d);
			all = 0;
		}
	}
	report(all, "... with an unknown request, a head or layer beyond the shape, a bad length: "
	       "-ENOENT all the same");

	/* 8: the victim's true session and token, as if leaked, on the attacker's endpoint. */
	{
		const int kv = kv_send(&attacker, victim.session, victim.token, kv_whole(0, 0),
				       kv_msg, kv_data(0, 0), 0);
		const int st = step_send(&attacker, victim.session, victim.token, 0, step_msg,
					 step_data(REQUEST, 0), 0);

		report(kv == -ENOENT && st == -ENOENT, "the victim's own session and token on the "
		       "attacker's endpoint (another connection's): KV %d, step %d, both -ENOENT",
		       kv, st);
	}

	/* 9: endpoints whose client id is no connection's key: rejected, never served. */
	{
		const uint64_t keys[3] = { tu_next(&rng) | 1, victim.token, 0 };
		ucs_status_t why[3];
		int got[3];

		all = 1;
		for (int i = 0; i < 3; i++) {
			got[i] = stranger(keys[i], &why[i]);
			all &= got[i] == 0;
		}
		report(all, "endpoints with a random client id, the victim's token as one, and "
		       "none: each rejected by the daemon, none answered (%d %s, %d %s, %d %s)",
		       got[0], ucs_status_string(why[0]), got[1], ucs_status_string(why[1]),
		       got[2], ucs_status_string(why[2]));
	}

	/* 10: the victim's steps, each right after a guessed one, are never -EBUSY. */
	all = 1;
	for (uint32_t i = 0; i < ng; i++) {
		const struct nelssa_step_hdr h = { .session = g[i].session, .token = g[i].token,
						   .step = next_step++, .nr_items = KV_HEADS };
		uint8_t hdr[NELSSA_STEP_HDR_BYTES];

		nelssa_step_hdr_put(hdr, &h);
		am_send(&attacker, NELSSA_AM_STEP, hdr, sizeof(hdr), step_msg, step_data(REQUEST, 0),
			0, NULL);
		ret = victim_step(after);
		if (ret || memcmp(before, after, sizeof(before))) {
			printf("# the victim's step after guess %u: %d\n", i, ret);
			all = 0;
		}
	}
	report(all, "%u victim steps, each sent right behind a guessed step of its session: all "
	       "served, outputs unchanged", ng);

	/* 11..13: the control path: REQ_ALLOC, REQ_FREE, CLOSE of the victim's session. */
	{
		static const uint16_t types[] = { NELSSA_MSG_REQ_ALLOC, NELSSA_MSG_REQ_FREE,
						  NELSSA_MSG_CLOSE };

		for (int k = 0; k < 3; k++) {
			char want[NELSSA_PROTO_ERR_LEN], got[NELSSA_PROTO_ERR_LEN];
			int32_t wc = 0, gc = 0;
			/* Not + 1: ids are sequential, that is the attacker's own. */
			const uint64_t ids[] = { victim.session, victim.session + 1000 };

			ret = ctl_naming(&attacker, types[k], NEVER, &wc, want, sizeof(want));
			all = !ret && wc == -ENOENT;
			for (int j = 0; j < 2 && all; j++) {
				ret = ctl_naming(&attacker, types[k], ids[j], &gc, got, sizeof(got));
				if (ret || gc != wc || strcmp(got, want)) {
					printf("# %s of session %llu: %d '%s'\n",
					       nelssa_msg_type_str(types[k]),
					       (unsigned long long)ids[j], gc, got);
					all = 0;
				}
			}
			report(all, "%s of the victim's session from another connection: %d '%s', as "
			       "for a session that never existed", nelssa_msg_type_str(types[k]), gc,
			       got);
		}
	}

	/* 14..16: 64 MiB rendezvous KV messages naming no session of the sender's. */
	{
		uint8_t *big = calloc(1, BIG);
		const long rss0 = vm_rss_kib(pid);
		const struct guess rg[4] = { { NEVER, 0 }, { victim.session, 0 },
					     { victim.session, tu_next(&rng) | 1 },
					     { attacker.session, victim.token } };
		uint64_t worst = 0;
		int completed = 1, answered = 1;
		long rss1;

		if (!big) {
			printf("# out of memory\n");
			return 1;
		}
		for (int i = 0; i < 4; i++) {
			struct nelssa_kv_hdr h = kv_whole(0, 0);
			uint8_t hdr[NELSSA_KV_HDR_BYTES];
			uint64_t ms, end;
			ucs_status_t st;

			h.session = rg[i].session;
			h.token = rg[i].token;
			h.cookie = next_cookie++;
			nelssa_kv_hdr_put(hdr, &h);
			attacker.acked = 0;
			st = am_send(&attacker, NELSSA_AM_KV, hdr, sizeof(hdr), big, BIG,
				     UCP_AM_SEND_FLAG_RNDV, &ms);
			worst = ms > worst ? ms : worst;
			if (st != UCS_OK) {
				printf("# rendezvous %d: send %s after %llu ms\n", i,
				       ucs_status_string(st), (unsigned long long)ms);
				completed = 0;
			}
			end = now_ms() + WAIT_MS;
			while (!(attacker.acked && attacker.ack_cookie == h.cookie) && now_ms() < end)
				progress();
			if (!attacker.acked || attacker.ack_cookie != h.cookie ||
			    attacker.ack_status != -ENOENT) {
				printf("# rendezvous %d: ack %s, status %d\n", i,
				       attacker.acked ? "came" : "missing", attacker.ack_status);
				answered = 0;
			}
		}
		rss1 = vm_rss_kib(pid);
		report(completed, "4 rendezvous KV messages of 64 MiB naming no session of the "
		       "sender's: every send completes (slowest %llu ms)", (unsigned long long)worst);
		report(answered, "... each answered -ENOENT");
		report(rss0 > 0 && rss1 > 0 && rss1 - rss0 < 16 * 1024,
		       "... the daemon's resident memory grew %ld KiB by them (from %ld KiB), not "
		       "by their 256 MiB", rss1 - rss0, rss0);

		/* 17: a step larger than the attacker's own session could send. */
		{
			const struct nelssa_step_hdr h = { .session = attacker.session,
							   .token = attacker.token,
							   .step = next_step++, .nr_items = 1 };
			uint8_t hdr[NELSSA_STEP_HDR_BYTES];
			uint64_t ms, end;
			ucs_status_t st;
			long rss2;

			nelssa_step_hdr_put(hdr, &h);
			attacker.replied = 0;
			st = am_send(&attacker, NELSSA_AM_STEP, hdr, sizeof(hdr), big, BIG,
				     UCP_AM_SEND_FLAG_RNDV, &ms);
			end = now_ms() + WAIT_MS;
			while (!(attacker.replied && attacker.reply.step == h.step) && now_ms() < end)
				progress();
			rss2 = vm_rss_kib(pid);
			ret = attacker.replied && attacker.reply.step == h.step ?
				attacker.reply.status : NO_ANSWER;
			report(st == UCS_OK && ret == -EMSGSIZE && rss2 - rss1 < 16 * 1024,
			       "a 64 MiB step on the sender's own session, beyond what it could send: "
			       "-EMSGSIZE (%d), send %s in %llu ms, RSS +%ld KiB", ret,
			       ucs_status_string(st), (unsigned long long)ms, rss2 - rss1);
		}

		/* 18: a rendezvous message of an id the daemon does not take. */
		{
			uint8_t hdr[NELSSA_KV_HDR_BYTES] = { 0 };
			uint64_t ms;
			ucs_status_t st = am_send(&attacker, 9, hdr, sizeof(hdr), big, 4u << 20,
						  UCP_AM_SEND_FLAG_RNDV, &ms);

			report(st != UCS_OK && st != UCS_ERR_TIMED_OUT && ms < WAIT_MS,
			       "a 4 MiB rendezvous message of id 9: its send completes, refused (%s, "
			       "%llu ms)", ucs_status_string(st), (unsigned long long)ms);
		}
		free(big);
	}

	/* 19: the key to the victim's memory, asked for on another connection. */
	{
		char want[NELSSA_PROTO_ERR_LEN], got[NELSSA_PROTO_ERR_LEN];
		int32_t wc = 0, gc = 0;
		int own;

		ret = ctl_rkey(&attacker, NEVER, &wc, want, sizeof(want));
		if (!ret)
			ret = ctl_rkey(&attacker, victim.session, &gc, got, sizeof(got));
		own = ctl_rkey(&attacker, attacker.session, &wc, want, sizeof(want)) || wc;
		ret = ctl_rkey(&attacker, NEVER, &wc, want, sizeof(want)) || ret;
		report(!ret && !own && wc == -ENOENT && gc == wc && !strcmp(got, want),
		       "RKEY_GET of the victim's session from another connection: %d '%s', as for "
		       "a session that never existed (its own: %s)", gc, got,
		       own ? "refused" : "given");
	}

	/* 20: KV commits (zero-copy ingest) under every guess, and with the leaked token. */
	all = commit_send(&attacker, NEVER, 0, kv_whole(0, 0), NULL, 0) == -ENOENT;
	for (uint32_t i = 0; i < ng; i++) {
		ret = commit_send(&attacker, g[i].session, g[i].token, kv_whole(0, 0), NULL, 0);
		if (ret != -ENOENT) {
			printf("# commit guess %u: %d\n", i, ret);
			all = 0;
		}
	}
	ret = commit_send(&attacker, victim.session, victim.token, kv_whole(0, 0), NULL, 0);
	report(all && ret == -ENOENT, "KV commits naming no session, %u guessed ones of the "
	       "victim's, and its own token on another's endpoint: each -ENOENT (%d)", ng, ret);

	/* 21: the attacker's own commits are checked as its KV messages are. */
	{
		struct nelssa_kv_hdr lay = kv_whole(LAYERS, 0), room = kv_whole(0, 0),
				     req = kv_whole(0, 0);
		int ok, l, r, q, d, rv;

		room.first_token = 1;		/* TOKENS rows from 1: one beyond the request */
		req.request = REQUEST + 1;
		ok = commit_send(&attacker, attacker.session, attacker.token, kv_whole(0, 1),
				 NULL, 0);
		l = commit_send(&attacker, attacker.session, attacker.token, lay, NULL, 0);
		r = commit_send(&attacker, attacker.session, attacker.token, room, NULL, 0);
		q = commit_send(&attacker, attacker.session, attacker.token, req, NULL, 0);
		d = commit_send(&attacker, attacker.session, attacker.token, kv_whole(0, 1), "x",
				1);
		rv = kv_am(&attacker, NELSSA_AM_KV_COMMIT, attacker.session, attacker.token,
			   kv_whole(0, 1), kv_msg, sizeof(kv_msg), UCP_AM_SEND_FLAG_RNDV);
		report(!ok && l == -ERANGE && r == -ERANGE && q == -ENOENT && d == -EBADMSG &&
		       rv == -EBADMSG, "the attacker's own commits: a whole one taken, a bad layer "
		       "-ERANGE, rows beyond the request -ERANGE, an unknown request -ENOENT, one "
		       "carrying data -EBADMSG eager and rendezvous (%d %d %d %d %d %d)", ok, l, r,
		       q, d, rv);
	}

	/*
	 * 22: KV_ROWS under every guess, and the victim's leaked token on the
	 * attacker's endpoint, eager and rendezvous: -ENOENT, nothing fetched
	 * into anyone's memory (the victim's step at the end says so).
	 */
	{
		struct nelssa_kv_hdr kp = { .request = REQUEST, .nr_tokens = TOKENS,
					    .part = NELSSA_KV_PART_K };
		const size_t rows = 2ull * TOKENS * DIM;
		int e, rv;

		all = kv_am(&attacker, NELSSA_AM_KV_ROWS, NEVER, 0, kp, kv_k[0][0], rows, 0) ==
		      -ENOENT;
		for (uint32_t i = 0; i < ng; i++) {
			ret = kv_am(&attacker, NELSSA_AM_KV_ROWS, g[i].session, g[i].token, kp,
				    kv_k[0][0], rows, i & 1 ? UCP_AM_SEND_FLAG_RNDV : 0);
			if (ret != -ENOENT) {
				printf("# rows guess %u: %d\n", i, ret);
				all = 0;
			}
		}
		e = kv_am(&attacker, NELSSA_AM_KV_ROWS, victim.session, victim.token, kp,
			  kv_k[0][0], rows, UCP_AM_SEND_FLAG_EAGER);
		rv = kv_am(&attacker, NELSSA_AM_KV_ROWS, victim.session, victim.token, kp,
			   kv_k[0][0], rows, UCP_AM_SEND_FLAG_RNDV);
		report(all && e == -ENOENT && rv == -ENOENT, "KV rows naming no session, %u "
		       "guessed ones of the victim's, and its own token on another's endpoint, "
		       "eager and rendezvous: each -ENOENT (%d %d)", ng, e, rv);
	}

	/*
	 * 23: the attacker's own KV_ROWS: checked against its session before a
	 * byte is fetched -- part, length, request, layer, head, ranges -- and a
	 * commit of rows sent that way counts them.
	 */
	{
		struct nelssa_kv_hdr k = { .request = REQUEST, .layer = 0, .head = 1,
					   .nr_tokens = TOKENS, .part = NELSSA_KV_PART_K };
		struct nelssa_kv_hdr v = k, t = k, bad = k, lay = k, room = k, req = k, cl = k;
		struct nelssa_kv_hdr tr = k, commit = kv_whole(0, 1);
		const size_t rows = 2ull * TOKENS * DIM;
		uint8_t entries[8 * CLUSTERS];
		int ok_k, ok_v, ok_t, ok_c, b, len, l, r, q, c, trr, put;

		for (uint32_t c2 = 0; c2 < CLUSTERS; c2++) {
			nelssa_put_le32(entries + 8 * c2, c2 * CLUSTER);
			nelssa_put_le32(entries + 8 * c2 + 4, CLUSTER);
		}
		v.part = NELSSA_KV_PART_V;
		t.part = NELSSA_KV_PART_TABLE;
		t.nr_tokens = 0;
		t.nr_clusters = CLUSTERS;
		bad.part = 5;
		lay.layer = LAYERS;
		room.first_token = 1;		/* TOKENS rows from 1: one beyond the request */
		req.request = REQUEST + 1;
		cl.first_cluster = 1;		/* rows naming clusters */
		tr = t;
		tr.first_cluster = 1;		/* entries beyond the request's clusters */
		commit.part = NELSSA_KV_COMMIT_SENT;
		ok_k = own_rows(k, kv_k[0][1], rows, UCP_AM_SEND_FLAG_RNDV);
		ok_v = own_rows(v, kv_v[0][1], rows, UCP_AM_SEND_FLAG_EAGER);
		ok_t = own_rows(t, entries, sizeof(entries), 0);
		ok_c = commit_send(&attacker, attacker.session, attacker.token, commit, NULL, 0);
		b = own_rows(bad, kv_k[0][1], rows, UCP_AM_SEND_FLAG_RNDV);
		len = own_rows(k, kv_k[0][1], rows - 2, UCP_AM_SEND_FLAG_RNDV);
		l = own_rows(lay, kv_k[0][1], rows, UCP_AM_SEND_FLAG_RNDV);
		r = own_rows(room, kv_k[0][1], rows, UCP_AM_SEND_FLAG_RNDV);
		q = own_rows(req, kv_k[0][1], rows, UCP_AM_SEND_FLAG_EAGER);
		c = own_rows(cl, kv_k[0][1], rows, UCP_AM_SEND_FLAG_RNDV);
		trr = own_rows(tr, entries, sizeof(entries), 0);
		/* A commit that says puts, of rows that came as KV_ROWS: still its own rows. */
		put = commit_send(&attacker, attacker.session, attacker.token, kv_whole(0, 1),
				  NULL, 0);
		report(!ok_k && !ok_v && !ok_t && !ok_c && b == -EBADMSG && len == -EBADMSG &&
		       l == -ERANGE && r == -ERANGE && q == -ENOENT && c == -EBADMSG &&
		       trr == -ERANGE && !put, "the attacker's own KV rows: K by rendezvous, V "
		       "eager, the table and their commit taken; an unknown part and a short "
		       "length -EBADMSG, a bad layer and rows beyond the request -ERANGE, an "
		       "unknown request -ENOENT, rows naming clusters -EBADMSG, entries beyond "
		       "-ERANGE (%d %d %d %d, %d %d %d %d %d %d %d %d)", ok_k, ok_v, ok_t, ok_c, b,
		       len, l, r, q, c, trr, put);
	}

	/*
	 * 24: a session of adjacent K and V blocks.  Layer 0 in KV messages,
	 * which the daemon copies in block by block; layer 1 in KV_ROWS parts
	 * of whole K-then-V blocks, received into place, and its table: both
	 * layers' steps equal float64.  K rows across a block boundary, blocks
	 * off a boundary or outside the request are refused before a byte
	 * lands; so is a whole-block part at a packed session.
	 */
	{
		static uint8_t img[4 * TOKENS * DIM];
		struct nelssa_kv_hdr kv = { .request = REQUEST, .layer = 1, .nr_tokens = TOKENS,
					    .part = NELSSA_KV_PART_KV };
		struct nelssa_kv_hdr t = kv, commit = kv_whole(1, 0), k = kv, mid = kv, room = kv;
		uint8_t entries[8 * CLUSTERS];
		int msgs = 0, parts = 0, s0, s1, rk, rm, rr, rl, rp;

		for (uint32_t c2 = 0; c2 < CLUSTERS; c2++) {
			nelssa_put_le32(entries + 8 * c2, c2 * CLUSTER);
			nelssa_put_le32(entries + 8 * c2 + 4, CLUSTER);
		}
		t.part = NELSSA_KV_PART_TABLE;
		t.nr_tokens = 0;
		t.nr_clusters = CLUSTERS;
		commit.part = NELSSA_KV_COMMIT_SENT;
		k.part = NELSSA_KV_PART_K;
		mid.first_token = 8;		/* not a block boundary */
		mid.nr_tokens = TOKENS - 16;
		room.first_token = 16;		/* whole blocks, one beyond the request */
		ret = tenant_open(&adjacent, argv[1], argv[2]);
		if (!ret)
			ret = tenant_session(&adjacent, 3, NELSSA_KV_ADJACENT);
		for (uint16_t h = 0; h < KV_HEADS && !ret; h++) {
			msgs |= kv_send(&adjacent, adjacent.session, adjacent.token, kv_whole(0, h),
					kv_msg, kv_data(0, h), UCP_AM_SEND_FLAG_RNDV);
			kv.head = t.head = commit.head = k.head = mid.head = room.head = h;
			parts |= own_part(&adjacent, kv, img, kv_blocks(1, h, 0, TOKENS, img),
					  UCP_AM_SEND_FLAG_RNDV);
			parts |= own_part(&adjacent, t, entries, sizeof(entries), 0);
			parts |= commit_send(&adjacent, adjacent.session, adjacent.token, commit,
					     NULL, 0);
		}
		s0 = ret ? ret : own_step_exact(&adjacent, 0);
		s1 = ret ? ret : own_step_exact(&adjacent, 1);
		rk = own_part(&adjacent, k, kv_k[1][0], 2ull * TOKENS * DIM, UCP_AM_SEND_FLAG_RNDV);
		rm = own_part(&adjacent, mid, img, kv_blocks(1, 0, 0, TOKENS - 16, img),
			      UCP_AM_SEND_FLAG_RNDV);
		rr = own_part(&adjacent, room, img, kv_blocks(1, 0, 0, TOKENS, img),
			      UCP_AM_SEND_FLAG_RNDV);
		rl = own_part(&adjacent, kv, img, kv_blocks(1, 0, 0, TOKENS, img) - 64,
			      UCP_AM_SEND_FLAG_RNDV);
		kv.head = 0;
		rp = own_part(&attacker, kv, img, kv_blocks(1, 0, 0, TOKENS, img),
			      UCP_AM_SEND_FLAG_RNDV);
		/* The rows refused above landed nowhere: the steps are as they were. */
		if (!s1)
			s1 = own_step_exact(&adjacent, 1);
		report(!ret && !msgs && !parts && !s0 && !s1 && rk == -EINVAL && rm == -EINVAL &&
		       rr == -ERANGE && rl == -EBADMSG && rp == -EINVAL,
		       "K and V blocks adjacent: KV messages copied in and whole-block parts "
		       "received, steps of both layers equal float64; K rows across blocks, blocks off a "
		       "boundary -EINVAL, beyond the request -ERANGE, a short one -EBADMSG, "
		       "whole blocks at a packed session -EINVAL (%d %d %d %d %d, %d %d %d %d %d)",
		       ret, msgs, parts, s0, s1, rk, rm, rr, rl, rp);
	}

	/* 25: after all that, the victim's data as it was. */
	ret = victim_step(after);
	if (!ret)
		ret = memcmp(before, after, sizeof(before)) ? -EDOM : victim_reference(after);
	report(!ret, "the victim's step after every attack: outputs bit for bit as before, equal "
	       "to float64 attention (%d)", ret);

	tenant_close(&adjacent);
	tenant_close(&attacker);
	tenant_close(&victim);
	if (adjacent.w)
		ucp_worker_destroy(adjacent.w);
	ucp_worker_destroy(attacker.w);
	ucp_worker_destroy(victim.w);
	ucp_cleanup(ucp);
	return 0;
}
