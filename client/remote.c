// SPDX-License-Identifier: MIT
/*
 * The client of nelssad (<nelssa/client.h>).  Control requests are
 * synchronous frames on a TCP socket with a receive timeout.  The data
 * path is one UCX worker and one endpoint to the daemon's worker; the
 * client thread progresses the worker itself while it waits, sleeping on
 * the worker's event fd between events, so no hidden thread runs.  Every
 * wait is bounded by the connection's timeout and ends early when the
 * endpoint reports the daemon gone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/client.h>
#include <nelssa/link.h>
#include <nelssa/log.h>
#include <nelssa/proto.h>
#include <nelssa/util.h>

#include "remote_internal.h"

int nc_fail(struct nelssa_client *c, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	nelssa_log(NELSSA_LOG_ERR, "client", c->err);
	return err;
}

const char *nelssa_client_error(const struct nelssa_client *c)
{
	return c ? c->err : "out of memory";
}

void nelssa_client_set_timeout(struct nelssa_client *c, uint32_t timeout_ms)
{
	c->timeout_ms = timeout_ms ? timeout_ms : 30000;
}

uint32_t nelssa_client_devices(const struct nelssa_client *c)
{
	return c->devices;
}

/* Control path */

static int ctl_send(struct nelssa_client *c, struct nelssa_msg *m, uint64_t deadline)
{
	uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t len, off = 0;
	int ret;

	m->seq = ++c->seq;
	ret = nelssa_msg_encode(m, buf, sizeof(buf), &len);
	if (ret)
		return nc_fail(c, ret, "cannot encode %s", nelssa_msg_type_str(m->type));
	while (off < len) {
		struct pollfd pfd = { .fd = c->fd, .events = POLLOUT };
		uint64_t now = nelssa_now_ms();
		ssize_t n;

		if (now >= deadline)
			return nc_fail(c, -ETIMEDOUT, "the daemon took no request in %u ms",
				    c->timeout_ms);
		if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
			continue;
		n = send(c->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return nc_fail(c, -ECONNRESET, "control connection lost: %s", strerror(errno));
		off += (size_t)n;
	}
	return 0;
}

/*
 * Reads the control connection into c->rbuf until it holds @want bytes.
 * What arrived stays there across a timeout, so a late reply is read
 * whole by the next call, never half.
 */
static int read_more(struct nelssa_client *c, size_t want, uint64_t deadline)
{
	while (c->rhave < want) {
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		uint64_t now = nelssa_now_ms();
		ssize_t n;

		if (now >= deadline)
			return nc_fail(c, -ETIMEDOUT, "no reply from the daemon in %u ms", c->timeout_ms);
		if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
			continue;
		n = recv(c->fd, c->rbuf + c->rhave, want - c->rhave, MSG_DONTWAIT);
		if (n == 0)
			return nc_fail(c, -ECONNRESET, "the daemon closed the control connection");
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return nc_fail(c, -ECONNRESET, "control connection: %s", strerror(errno));
		if (n > 0)
			c->rhave += (size_t)n;
	}
	return 0;
}

/* The next reply frame, decoded into @r. */
static int read_reply(struct nelssa_client *c, struct nelssa_msg *r, uint64_t deadline)
{
	struct nelssa_msg_hdr h;
	int ret = read_more(c, NELSSA_PROTO_HDR_BYTES, deadline);

	if (ret)
		return ret;
	ret = nelssa_msg_decode_hdr(c->rbuf, &h);
	if (ret)
		return nc_fail(c, ret, "bad reply from the daemon: %s", strerror(-ret));
	ret = read_more(c, NELSSA_PROTO_HDR_BYTES + h.length, deadline);
	if (ret)
		return ret;
	ret = nelssa_msg_decode(c->rbuf, c->rhave, r);
	c->rhave = 0;
	if (ret)
		return nc_fail(c, ret, "bad reply from the daemon: %s", strerror(-ret));
	return 0;
}

/*
 * Sends @m and reads the reply into @r; an ERROR reply becomes its code.
 * The late reply of an earlier call that timed out is skipped (an ERROR
 * of sequence 0 is about the connection, so it is this call's).
 */
int nc_ctl_call(struct nelssa_client *c, struct nelssa_msg *m, struct nelssa_msg *r)
{
	const uint64_t deadline = nelssa_now_ms() + c->timeout_ms;
	int ret = ctl_send(c, m, deadline);

	while (!ret) {
		ret = read_reply(c, r, deadline);
		if (ret || !r->seq || (int32_t)(m->seq - r->seq) <= 0)
			break;
	}
	if (ret)
		return ret;
	if (r->type == NELSSA_MSG_ERROR)
		return nc_fail(c, r->u.error.code, "%s", r->u.error.msg);
	if (r->seq != m->seq)
		return nc_fail(c, -EPROTO, "reply out of sequence");
	return 0;
}

/* Data path */

/* What a daemon's status means, in words. */
const char *nc_refusal(int status)
{
	if (status == -EPROTONOSUPPORT)
		return "the daemon requires RDMA (--require-rdma) and this client reaches it "
		       "over another transport (check UCX_TLS and UCX_NET_DEVICES here)";
	return strerror(-status);
}

int nc_ucs_errno(ucs_status_t st)
{
	switch (st) {
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_ENDPOINT_TIMEOUT:
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_REJECTED:
		return -ECONNRESET;
	case UCS_ERR_TIMED_OUT:
		return -ETIMEDOUT;
	default:
		return -EIO;
	}
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct nelssa_client *c = arg;

	(void)ep;
	c->ep_failed = 1;
	nc_fail(c, -ECONNRESET, "data path to the daemon failed: %s", ucs_status_string(status));
}

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
			   size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssa_client *c = arg;
	struct nelssa_ack_hdr a;

	(void)data;
	(void)length;
	(void)param;
	if (nelssa_ack_hdr_get(header, header_length, &a))
		a.status = -EPROTO;
	else if (a.cookie < c->ack_base)
		return UCS_OK;	/* of an offload that timed out */
	if (c->acks_pending)
		c->acks_pending--;
	c->ack_seen = 1;
	if (a.status && !c->ack_status)
		c->ack_status = a.status;
	return UCS_OK;
}

static void reply_recvd(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct nelssa_step_pending *p = user_data;

	(void)length;
	p->done = 1;
	p->receiving = 0;
	if (status != UCS_OK)
		p->status = nc_ucs_errno(status);
	if (request)
		ucp_request_free(request);
}

static ucs_status_t on_reply(void *arg, const void *header, size_t header_length, void *data,
			     size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssa_client *c = arg;
	struct nelssa_step_pending *p = NULL;
	struct nelssa_reply_hdr r;

	if (nelssa_reply_hdr_get(header, header_length, &r) || !r.step)
		return UCS_OK;
	for (int i = 0; i < MAX_PENDING && !p; i++)
		if (c->pend[i].id == r.step && !c->pend[i].done)
			p = &c->pend[i];
	if (!p)
		return UCS_OK;	/* stale (a timed-out step) or garbage */
	p->reply = r;
	p->status = r.status;
	if (length > p->cap) {
		p->status = -EPROTO;
		p->done = 1;
		return UCS_OK;
	}
	p->len = length;
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		ucp_request_param_t prm = { 0 };
		ucs_status_ptr_t sp;

		prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
		prm.cb.recv_am = reply_recvd;
		prm.user_data = p;
		sp = ucp_am_recv_data_nbx(c->worker, data, p->buf, length, &prm);
		if (UCS_PTR_IS_PTR(sp))
			p->receiving = 1;
		else if (sp == NULL)
			reply_recvd(NULL, UCS_OK, length, p);
		else if (UCS_PTR_IS_ERR(sp))
			reply_recvd(NULL, UCS_PTR_STATUS(sp), 0, p);
		return UCS_OK;
	}
	if (length)
		memcpy(p->buf, data, length);
	p->done = 1;
	return UCS_OK;
}

/*
 * Progresses the worker until *@done, the deadline, or the daemon's end:
 * a failed endpoint, or -- for transports without peer-failure detection,
 * such as shared memory -- the control connection closing.
 */
int nc_wait(struct nelssa_client *c, const int *done, uint64_t deadline)
{
	while (!*done) {
		struct pollfd pfd[2] = { { .fd = c->efd, .events = POLLIN },
					 { .fd = c->fd, .events = POLLIN } };
		uint64_t now;
		char b;
		int busy = ucp_worker_progress(c->worker) != 0;

		if (*done)
			break;
		if (c->ep_failed)
			return -ECONNRESET;
		now = nelssa_now_ms();
		if (now >= deadline)
			return nc_fail(c, -ETIMEDOUT, "the daemon did not answer in %u ms", c->timeout_ms);
		if (busy || ucp_worker_arm(c->worker) == UCS_ERR_BUSY)
			continue;
		poll(pfd, 2, (int)(deadline - now < 100 ? deadline - now : 100));
		if ((pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
			return nc_fail(c, -ECONNRESET, "the daemon closed the connection");
	}
	return 0;
}

void nc_sent(void *request, ucs_status_t status, void *user_data)
{
	struct send_op *op = user_data;

	(void)request;
	op->status = status;
	op->done = 1;
}

void nc_op_free(struct send_op *op)
{
	if (op->cache)
		nc_buf_put(op->cache, op->data);
	else
		free(op->data);
	free(op);
}

void *nc_buf_get(struct nelssa_client *c)
{
	return c->n_bufs ? c->bufs[--c->n_bufs] : malloc(NC_BUF_BYTES);
}

void nc_buf_put(struct nelssa_client *c, void *buf)
{
	if (buf && c->n_bufs < NC_BUF_CACHE)
		c->bufs[c->n_bufs++] = buf;
	else
		free(buf);
}

/* Frees the orphans UCX has finished with. */
void nc_reap_orphans(struct nelssa_client *c)
{
	for (struct send_op **pp = &c->orphans; *pp;) {
		struct send_op *op = *pp;

		if (op->done) {
			*pp = op->next;
			ucp_request_free(op->req);
			nc_op_free(op);
		} else {
			pp = &op->next;
		}
	}
}

/*
 * Sends one message and waits, until the deadline, for UCX to be done
 * with its buffers.  *@data (malloc'd, may be NULL) passes to the send:
 * on return it is the caller's again, or NULL when the send outlived the
 * deadline and keeps it.
 */
int nc_am_send(struct nelssa_client *c, unsigned int id, const void *hdr, size_t hdr_len,
		   void **data, size_t len, uint64_t deadline)
{
	ucp_request_param_t prm = { 0 };
	struct send_op *op;
	ucs_status_ptr_t sp;
	int ret;

	nc_reap_orphans(c);
	if (hdr_len > sizeof(op->hdr))
		return nc_fail(c, -EINVAL, "header of %zu bytes", hdr_len);
	if (nc_ep_gone(c))
		return -ECONNRESET;
	op = calloc(1, sizeof(*op));
	if (!op)
		return nc_fail(c, -ENOMEM, "out of memory");
	memcpy(op->hdr, hdr, hdr_len);
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY;
	prm.cb.send = nc_sent;
	prm.user_data = op;
	sp = ucp_am_send_nbx(c->ep, id, op->hdr, hdr_len, *data, len, &prm);
	if (!UCS_PTR_IS_PTR(sp)) {
		free(op);
		if (UCS_PTR_IS_ERR(sp))
			return nc_fail(c, nc_ucs_errno(UCS_PTR_STATUS(sp)), "send failed: %s",
				    ucs_status_string(UCS_PTR_STATUS(sp)));
		return 0;
	}
	op->req = sp;
	ret = nc_wait(c, &op->done, deadline);
	if (ret) {
		/* Bounded: a send UCX cannot cancel is left to it (see struct send_op). */
		const uint64_t end = nelssa_now_ms() + CANCEL_GRACE_MS;

		ucp_request_cancel(c->worker, sp);
		while (!op->done && nelssa_now_ms() < end)
			ucp_worker_progress(c->worker);
		if (!op->done) {
			op->data = *data;
			*data = NULL;
			op->next = c->orphans;
			c->orphans = op;
			return ret;
		}
	}
	if (!ret && op->status != UCS_OK)
		ret = nc_fail(c, nc_ucs_errno(op->status), "send failed: %s",
			      ucs_status_string(op->status));
	ucp_request_free(sp);
	free(op);
	return ret;
}

/* connect() within the connection's timeout; 0 or an errno.  @fd stays non-blocking. */
static int connect_bounded(struct nelssa_client *c, int fd, const struct sockaddr *sa,
			   socklen_t len)
{
	const uint64_t deadline = nelssa_now_ms() + c->timeout_ms;
	int fl = fcntl(fd, F_GETFL), err = 0;
	socklen_t el = sizeof(err);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
		return errno;
	if (!connect(fd, sa, len))
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		uint64_t now = nelssa_now_ms();
		int r;

		if (now >= deadline)
			return ETIMEDOUT;
		r = poll(&pfd, 1, (int)(deadline - now));
		if (r > 0)
			break;
		if (r < 0 && errno != EINTR)
			return errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
		return errno;
	return err;
}

static int tcp_connect(struct nelssa_client *c, const char *host, uint16_t port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res, *ai;
	char ps[8];
	int err = 0, one = 1;

	snprintf(ps, sizeof(ps), "%u", port);
	err = getaddrinfo(host, ps, &hints, &res);
	if (err)
		return nc_fail(c, -EHOSTUNREACH, "cannot resolve %s: %s", host, gai_strerror(err));
	c->fd = -1;
	for (ai = res; ai && c->fd < 0; ai = ai->ai_next) {
		c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (c->fd < 0) {
			err = errno;
			continue;
		}
		err = connect_bounded(c, c->fd, ai->ai_addr, ai->ai_addrlen);
		if (err) {
			close(c->fd);
			c->fd = -1;
		}
	}
	freeaddrinfo(res);
	if (c->fd < 0)
		return nc_fail(c, -err, "cannot connect to %s:%u: %s", host, port, strerror(err));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

/*
 * Flushes the data endpoint and waits for it until @deadline: 0 with UCX's
 * answer in *@status (UCS_OK: everything sent or put on it before has
 * landed at the daemon), or nc_wait()'s error.  A flush still pending then
 * is cancelled and given a bounded while; *@status says UCS_INPROGRESS if
 * UCX keeps it even so (left to UCX on the orphans), else how it ended.
 */
int nc_ep_flush(struct nelssa_client *c, uint64_t deadline, ucs_status_t *status)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						    UCP_OP_ATTR_FIELD_USER_DATA };
	struct send_op *op = calloc(1, sizeof(*op));
	ucs_status_ptr_t sp;
	int ret;

	if (!op || nc_ep_gone(c)) {
		free(op);
		return op ? -ECONNRESET : nc_fail(c, -ENOMEM, "out of memory");
	}
	prm.cb.send = nc_sent;
	prm.user_data = op;
	sp = ucp_ep_flush_nbx(c->ep, &prm);
	if (!UCS_PTR_IS_PTR(sp)) {
		free(op);
		*status = UCS_PTR_STATUS(sp);
		return 0;
	}
	op->req = sp;
	ret = nc_wait(c, &op->done, deadline);
	if (!op->done) {
		/* Failed or the deadline: cancel, and give UCX a bounded while. */
		const uint64_t end = nelssa_now_ms() + CANCEL_GRACE_MS;

		ucp_request_cancel(c->worker, sp);
		while (!op->done && nelssa_now_ms() < end)
			ucp_worker_progress(c->worker);
	}
	if (!op->done) {
		*status = UCS_INPROGRESS;
		op->next = c->orphans;	/* UCX still has it */
		c->orphans = op;
		return ret;
	}
	*status = op->status;
	ucp_request_free(sp);
	free(op);
	return ret;
}

/*
 * Waits, within the connection's timeout, for the data endpoint to come
 * up: a flush completes once UCX's wire-up has.  A daemon that rejected
 * the connection fails it (peer error handling) or never answers (shared
 * memory: none); either way connect() says so instead of the first step.
 */
static int data_path_up(struct nelssa_client *c, uint16_t port)
{
	char why[sizeof(c->err)];
	ucs_status_t status;
	int ret;

	ret = nc_ep_flush(c, nelssa_now_ms() + c->timeout_ms, &status);
	if (ret == -ENOMEM)
		return ret;
	if (!ret && status != UCS_OK)
		ret = -ECONNREFUSED;
	snprintf(why, sizeof(why), "%s", status != UCS_OK && status != UCS_INPROGRESS
		 ? ucs_status_string(status) : c->err);
	if (ret)
		return nc_fail(c, ret == -ETIMEDOUT ? ret : -ECONNREFUSED,
			    "the daemon's UCX data path (port %u) did not come up: %s", port, why);
	return 0;
}

int nelssa_client_connect(const struct nelssa_client_opts *o, struct nelssa_client **out)
{
	struct nelssa_client *c = calloc(1, sizeof(*c));
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO }, r;
	ucp_am_handler_param_t ap = { 0 };
	char tls[256];
	ucs_status_t st;
	int ret, shm;

	*out = c;
	if (!c)
		return -ENOMEM;
	c->fd = -1;
	c->efd = -1;
	c->zero_copy = NELSSA_ZERO_COPY_AUTO;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : 30000;
	ret = tcp_connect(c, o->host, o->port);
	if (ret)
		return ret;
	st = nelssa_link_context(NELSSA_LINK_RMA, &c->ucp);
	if (st != UCS_OK) {
		c->ucp = NULL;
		return nc_fail(c, -EIO, "UCX setup failed: %s", ucs_status_string(st));
	}
	/* Shared memory where the daemon is on this host and UCX here has it. */
	nelssa_link_transports(c->ucp, tls, sizeof(tls));
	if (!nelssa_link_can_connect(tls))
		return nc_fail(c, -EPROTONOSUPPORT, "UCX here has no transport to reach the daemon "
			    "over (only '%s'): UCX_TLS must include tcp or an RDMA transport; "
			    "on the daemon's host, shared memory is then used", tls);
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	m.u.hello.flags = nelssa_link_has_shm(tls) && nelssa_link_is_local(c->fd)
			  ? NELSSA_HELLO_SHM : 0;
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "%s", o->name ? o->name : "client");
	ret = nc_ctl_call(c, &m, &r);
	if (ret)
		return ret;
	if (r.type != NELSSA_MSG_HELLO_OK)
		return nc_fail(c, -EPROTO, "expected HELLO_OK, got %s", nelssa_msg_type_str(r.type));
	c->devices = r.u.hello_ok.devices;
	shm = !!(r.u.hello_ok.flags & NELSSA_HELLO_SHM);
	/* The worker carries the connection's key: the daemon takes endpoints by it. */
	st = nelssa_link_worker(c->ucp, r.u.hello_ok.key, &c->worker);
	if (st != UCS_OK)
		c->worker = NULL;
	if (st == UCS_OK)
		st = ucp_worker_get_efd(c->worker, &c->efd);
	if (st == UCS_OK) {
		ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
		ap.flags = UCP_AM_FLAG_WHOLE_MSG;
		ap.arg = c;
		ap.id = NELSSA_AM_KV_ACK;
		ap.cb = on_ack;
		st = ucp_worker_set_am_recv_handler(c->worker, &ap);
	}
	if (st == UCS_OK) {
		ap.id = NELSSA_AM_STEP_REPLY;
		ap.cb = on_reply;
		st = ucp_worker_set_am_recv_handler(c->worker, &ap);
	}
	if (st != UCS_OK)
		return nc_fail(c, -EIO, "UCX setup failed: %s", ucs_status_string(st));
	st = nelssa_link_connect(c->worker, c->fd, r.u.hello_ok.data_port, shm, ep_error, c, &c->ep);
	if (st != UCS_OK) {
		c->ep = NULL;
		return nc_fail(c, -EIO, "UCX setup towards the daemon (port %u) failed: %s",
			    r.u.hello_ok.data_port, ucs_status_string(st));
	}
	return data_path_up(c, r.u.hello_ok.data_port);
}

/*
 * Closes the data endpoint, forced: UCX completes every request still on
 * it (UCS_ERR_CANCELED), which is what lets go of buffers it was reading.
 * Keys go before their endpoint; the sessions lose theirs.  Bounded.
 */
void nc_ep_kill(struct nelssa_client *c)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t sp;

	for (uint32_t i = 0; i < c->n_sess; i++)
		nc_rma_session_close(&c->sess[i]);
	if (!c->ep)
		return;
	sp = ucp_ep_close_nbx(c->ep, &prm);
	if (UCS_PTR_IS_PTR(sp)) {
		uint64_t end = nelssa_now_ns() + CLOSE_WAIT_NS;

		/* Forced, it completes locally; bounded all the same. */
		while (ucp_request_check_status(sp) == UCS_INPROGRESS && nelssa_now_ns() < end)
			ucp_worker_progress(c->worker);
		if (ucp_request_check_status(sp) != UCS_INPROGRESS)
			ucp_request_free(sp);
	}
	ucp_worker_progress(c->worker);
	c->ep = NULL;
	c->ep_failed = 1;
}

int nc_ep_gone(struct nelssa_client *c)
{
	return c->ep ? 0 : nc_fail(c, -ECONNRESET, "the data path to the daemon was closed after "
				   "an offload failed with its writes in flight; connect again");
}

void nelssa_client_close(struct nelssa_client *c)
{
	if (!c)
		return;
	/*
	 * A forced close purges what is still pending, and UCX 1.13
	 * asserts when that includes the wire-up of a UD endpoint (seen
	 * over Soft-RoCE when a session fails right after connect).  Flush
	 * a live endpoint first, for a bounded time.
	 */
	if (c->ep && !c->ep_failed) {
		uint64_t end = nelssa_now_ns() + CLOSE_WAIT_NS;
		ucp_request_param_t prm = { 0 };
		ucs_status_ptr_t sp = ucp_ep_flush_nbx(c->ep, &prm);

		if (UCS_PTR_IS_PTR(sp)) {
			while (ucp_request_check_status(sp) == UCS_INPROGRESS &&
			       nelssa_now_ns() < end)
				ucp_worker_progress(c->worker);
			ucp_request_free(sp);
		}
	}
	nc_ep_kill(c);
	/* The close completed (or purged) what sends were left; free their buffers. */
	nc_reap_orphans(c);
	if (c->worker)
		ucp_worker_destroy(c->worker);
	while (c->orphans) {
		struct send_op *op = c->orphans;	/* the worker, and UCX's hold, are gone */

		c->orphans = op->next;
		nc_op_free(op);
	}
	if (c->ucp)
		ucp_cleanup(c->ucp);
	if (c->fd >= 0)
		close(c->fd);
	for (int i = 0; i < MAX_PENDING; i++)
		free(c->pend[i].buf);
	while (c->n_bufs)
		free(c->bufs[--c->n_bufs]);
	free(c);
}

struct csession *nc_find(struct nelssa_client *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->n_sess; i++)
		if (c->sess[i].id == id)
			return &c->sess[i];
	return NULL;
}

int nelssa_client_session(struct nelssa_client *c, const struct nelssa_session_cfg *cfg,
			  uint64_t *session)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_SESSION_CREATE }, r;
	int ret;

	if (c->n_sess == MAX_SESSIONS)
		return nc_fail(c, -EBUSY, "at most %d sessions per connection", MAX_SESSIONS);
	m.u.create.tenant = cfg->tenant;
	m.u.create.shape = cfg->shape;
	m.u.create.placement = cfg->placement;
	m.u.create.max_batch = cfg->max_batch;
	m.u.create.max_sel = cfg->max_sel;
	m.u.create.capacity_tokens = cfg->capacity_tokens;
	if (nelssa_shape_check(&cfg->shape))
		return nc_fail(c, -EINVAL, "bad model shape");
	ret = nc_ctl_call(c, &m, &r);
	if (ret)
		return ret;
	memset(&c->sess[c->n_sess], 0, sizeof(c->sess[c->n_sess]));
	c->sess[c->n_sess].id = r.u.session_ok.session;
	c->sess[c->n_sess].token = r.u.session_ok.token;
	c->sess[c->n_sess].cfg = *cfg;
	c->sess[c->n_sess].n_dev = r.u.session_ok.devices;
	c->sess[c->n_sess].rows = !!(r.u.session_ok.flags & NELSSA_SESSION_ROWS);
	if ((r.u.session_ok.flags & NELSSA_SESSION_RMA) && c->zero_copy != NELSSA_ZERO_COPY_OFF)
		nc_rma_session_open(c, &c->sess[c->n_sess]);
	*session = c->sess[c->n_sess++].id;
	return 0;
}

int nelssa_client_session_close(struct nelssa_client *c, uint64_t session)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_CLOSE }, r;
	struct csession *s = nc_find(c, session);

	if (!s)
		return nc_fail(c, -ENOENT, "no session %llu", (unsigned long long)session);
	m.u.session.session = session;
	nc_rma_session_close(s);
	*s = c->sess[--c->n_sess];
	return nc_ctl_call(c, &m, &r);
}

int nelssa_client_request(struct nelssa_client *c, uint64_t session, uint64_t request,
			  uint32_t max_tokens, uint32_t max_clusters)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_REQ_ALLOC }, r;

	m.u.req.session = session;
	m.u.req.request = request;
	struct csession *s = nc_find(c, session);
	int ret;

	m.u.req.max_tokens = max_tokens;
	m.u.req.max_clusters = max_clusters;
	ret = nc_ctl_call(c, &m, &r);
	if (ret)
		return ret;
	if (r.type != NELSSA_MSG_REQ_OK || r.u.req_ok.request != request)
		return nc_fail(c, -EPROTO, "expected REQ_OK for request %llu, got %s",
			       (unsigned long long)request, nelssa_msg_type_str(r.type));
	return s && s->rma ? nc_rma_request_add(c, s, &r) : 0;
}

int nelssa_client_request_free(struct nelssa_client *c, uint64_t session, uint64_t request)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_REQ_FREE }, r;
	struct csession *s = nc_find(c, session);
	int ret;

	m.u.req.session = session;
	m.u.req.request = request;
	ret = nc_ctl_call(c, &m, &r);
	if (!ret && s)
		nc_rma_request_del(s, request);
	return ret;
}

int nelssa_client_stats(struct nelssa_client *c, struct nelssa_daemon_stats *st)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS }, r;
	int ret = nc_ctl_call(c, &m, &r);

	if (ret)
		return ret;
	*st = (struct nelssa_daemon_stats){
		.sessions = r.u.stats.sessions, .devices = r.u.stats.devices,
		.steps = r.u.stats.steps, .items = r.u.stats.items,
		.kv_bytes = r.u.stats.kv_bytes, .recv_ns = r.u.stats.t_recv,
		.dispatch_ns = r.u.stats.t_dispatch, .device_ns = r.u.stats.t_device,
		.aggregate_ns = r.u.stats.t_aggregate, .send_ns = r.u.stats.t_send,
	};
	return 0;
}

int nc_wait_acks(struct nelssa_client *c, uint32_t below, uint64_t deadline)
{
	while (c->acks_pending >= below) {
		int ret;

		c->ack_seen = 0;
		ret = nc_wait(c, &c->ack_seen, deadline);
		if (ret == -ETIMEDOUT)
			return nc_fail(c, -ETIMEDOUT, "KV offload not acknowledged in %u ms",
				       c->timeout_ms);
		if (ret)
			return ret;
	}
	return 0;
}

void nc_acks_begin(struct nelssa_client *c)
{
	c->acks_pending = 0;
	c->ack_status = 0;
	c->ack_base = c->next_cookie + 1;
}

int nc_acks_end(struct nelssa_client *c, uint64_t deadline)
{
	int ret = nc_wait_acks(c, 1, deadline);

	if (!ret && c->ack_status)
		ret = nc_fail(c, c->ack_status, "the daemon refused KV rows: %s",
			      nc_refusal(c->ack_status));
	return ret;
}

void nelssa_client_set_zero_copy(struct nelssa_client *c, int mode)
{
	c->zero_copy = mode == NELSSA_ZERO_COPY_FORCE ? mode : mode ? NELSSA_ZERO_COPY_AUTO
								   : NELSSA_ZERO_COPY_OFF;
}

int nelssa_client_zero_copy(struct nelssa_client *c, uint64_t session)
{
	const struct csession *s = nc_find(c, session);

	if (!s)
		return nc_fail(c, -ENOENT, "no session %llu", (unsigned long long)session);
	return s->rma;
}

int nelssa_client_ingest_stats(struct nelssa_client *c, uint64_t session,
			       struct nelssa_ingest_stats *st)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS }, r;
	int ret;

	m.u.session.session = session;
	ret = nc_ctl_call(c, &m, &r);
	if (ret)
		return ret;
	if (r.type != NELSSA_MSG_STATS_REPLY)
		return nc_fail(c, -EPROTO, "expected STATS_REPLY, got %s",
			       nelssa_msg_type_str(r.type));
	memset(st, 0, sizeof(*st));
	st->kv_bytes = r.u.stats.kv_bytes;
	st->rma_bytes = r.u.stats.kv_rma_bytes;
	st->recv_bytes = r.u.stats.kv_recv_bytes;
	st->copied_bytes = r.u.stats.kv_bytes - r.u.stats.kv_rma_bytes - r.u.stats.kv_recv_bytes;
	return 0;
}

int nelssa_client_offload(struct nelssa_client *c, uint64_t session, uint64_t request,
			  uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
			  uint32_t from, const void *k, const void *v)
{
	return nelssa_client_offload_rows(c, session, request, layer, head, ix, from, k, v, 0);
}

int nelssa_client_offload_rows(struct nelssa_client *c, uint64_t session, uint64_t request,
			       uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
			       uint32_t from, const void *k, const void *v, uint32_t base)
{
	struct csession *s = nc_find(c, session);
	const uint64_t deadline = nelssa_now_ms() + c->timeout_ms;
	size_t row;
	uint8_t *buf;
	int ret = 0;

	if (!s)
		return nc_fail(c, -ENOENT, "no session %llu", (unsigned long long)session);
	if (ix->head_dim != s->cfg.shape.head_dim || from > ix->n_clusters)
		return nc_fail(c, -EINVAL, "index does not match the session (head_dim %u vs %u)",
			    ix->head_dim, s->cfg.shape.head_dim);
	/* Every row the call reads is checked here, before anything is written. */
	for (uint32_t p = nc_write_start(ix, from, (enum nelssa_kv_dtype)s->cfg.shape.kv_dtype);
	     p < ix->n_tokens; p++)
		if (ix->perm[p] < base || ix->perm[p] >= ix->n_tokens)
			return nc_fail(c, -EINVAL, "token %u's row is read (store position %u) "
				       "but the rows given are of tokens %u..%u", ix->perm[p], p,
				       base, ix->n_tokens - 1);
	if (nc_ep_gone(c))
		return -ECONNRESET;
	if (s->rma || s->rows)
		return nc_place_offload(c, s, request, layer, head, ix, from, k, v, base);
	if (nelssa_kv_is_tiled((enum nelssa_kv_dtype)s->cfg.shape.kv_dtype))
		return nc_fail(c, -EOPNOTSUPP, "8-bit KV goes as KV_ROWS parts or by RMA, and the "
			       "daemon offered neither for session %llu",
			       (unsigned long long)session);
	row = ix->head_dim * nelssa_kv_elem_bytes((enum nelssa_kv_dtype)s->cfg.shape.kv_dtype);
	buf = nc_buf_get(c);	/* NC_BUF_BYTES >= CHUNK_BYTES + 2 * row + 8 */
	if (!buf)
		return nc_fail(c, -ENOMEM, "out of memory");
	nc_acks_begin(c);
	/* Chunks of whole clusters, each about CHUNK_BYTES (one big cluster alone). */
	for (uint32_t cl = from; cl < ix->n_clusters && !ret;) {
		struct nelssa_kv_hdr h = { .session = session, .token = s->token,
					   .request = request, .layer = layer,
					   .head = head, .first_cluster = cl,
					   .first_token = ix->table[cl].first };
		uint8_t hdr[NELSSA_KV_HDR_BYTES];
		uint32_t end = cl, tokens = 0;
		uint8_t *data;

		while (end < ix->n_clusters &&
		       (end == cl || (tokens + ix->table[end].count) * 2 * row + 8 * (end - cl + 1) <=
				     CHUNK_BYTES))
			tokens += ix->table[end++].count;
		h.nr_tokens = tokens;
		h.nr_clusters = end - cl;
		data = tokens * 2 * row + 8 * h.nr_clusters > CHUNK_BYTES + 2 * row + 8 ?
			       malloc(tokens * 2 * row + 8 * h.nr_clusters) : buf;
		if (!data) {
			ret = nc_fail(c, -ENOMEM, "out of memory");
			break;
		}
		for (uint32_t i = 0; i < tokens; i++) {
			uint32_t t = ix->perm[h.first_token + i] - base;

			memcpy(data + i * row, (const uint8_t *)k + (size_t)t * row, row);
			memcpy(data + (tokens + i) * row, (const uint8_t *)v + (size_t)t * row, row);
		}
		memcpy(data + 2 * tokens * row, ix->table + cl, 8u * h.nr_clusters);
		h.cookie = ++c->next_cookie;
		nelssa_kv_hdr_put(hdr, &h);
		c->acks_pending++;
		{
			void *d = data;

			ret = nc_am_send(c, NELSSA_AM_KV, hdr, sizeof(hdr), &d,
				      tokens * 2 * row + 8 * h.nr_clusters, deadline);
			if (data == buf)
				buf = d;	/* NULL: the send kept it */
			else
				free(d);
		}
		/* Bound what is unacknowledged, so errors surface near their cause. */
		if (!ret)
			ret = nc_wait_acks(c, ACK_WINDOW, deadline);
		cl = end;
	}
	if (!ret)
		ret = nc_acks_end(c, deadline);
	nc_buf_put(c, buf);
	return ret;
}

int nelssa_client_step_send(struct nelssa_client *c, uint64_t session, uint16_t layer,
			    const struct nelssa_step_in *in, uint32_t n, float *o, float *lse,
			    struct nelssa_step_pending **out)
{
	const struct csession *s = nc_find(c, session);
	const uint64_t deadline = nelssa_now_ms() + c->timeout_ms;
	struct nelssa_step_pending *p = NULL;
	size_t len, q_bytes, out_slot;
	struct nelssa_step_hdr h;
	uint8_t hdr[NELSSA_STEP_HDR_BYTES], *data, *q;
	int ret;

	*out = NULL;
	if (!n || !in || !o || !lse)
		return nc_fail(c, -EINVAL, n ? "no items, outputs or LSEs given" :
			    "a step needs at least one item");
	if (!s)
		return nc_fail(c, -ENOENT, "no session %llu", (unsigned long long)session);
	if (nc_ep_gone(c))
		return -ECONNRESET;
	for (int i = 0; i < MAX_PENDING && !p; i++)
		if (!c->pend[i].id && !c->pend[i].receiving)
			p = &c->pend[i];
	if (!p)
		return nc_fail(c, -EBUSY, "%d steps already in flight", MAX_PENDING);
	p->c = c;
	p->n = n;
	p->g = s->cfg.shape.q_heads / s->cfg.shape.kv_heads;
	p->d = s->cfg.shape.head_dim;
	p->o = o;
	p->lse = lse;
	q_bytes = 4ull * p->g * p->d;
	out_slot = q_bytes + 4ull * p->g;
	len = (size_t)n * NELSSA_STEP_ITEM_BYTES;
	for (uint32_t i = 0; i < n; i++)
		len += q_bytes + 4ull * in[i].nr_sel;
	if (p->cap < n * out_slot) {
		free(p->buf);
		p->cap = n * out_slot;
		p->buf = malloc(p->cap + 1);
		if (!p->buf) {
			p->cap = 0;
			return nc_fail(c, -ENOMEM, "out of memory");
		}
	}
	data = malloc(len + 1);
	if (!data)
		return nc_fail(c, -ENOMEM, "out of memory");
	q = data + (size_t)n * NELSSA_STEP_ITEM_BYTES;
	for (uint32_t i = 0; i < n; i++) {
		struct nelssa_step_item it = { in[i].request, in[i].head, in[i].nr_sel };

		nelssa_step_item_put(data + (size_t)i * NELSSA_STEP_ITEM_BYTES, &it);
		memcpy(q, in[i].q, q_bytes);
		memcpy(q + q_bytes, in[i].sel, 4ull * in[i].nr_sel);
		q += q_bytes + 4ull * in[i].nr_sel;
	}
	h = (struct nelssa_step_hdr){ .session = session, .token = s->token,
				      .step = ++c->next_step, .layer = layer, .nr_items = n };
	nelssa_step_hdr_put(hdr, &h);
	p->id = h.step;
	p->done = 0;
	p->status = 0;
	p->len = 0;
	p->t0 = nelssa_now_ns();
	{
		void *d = data;

		ret = nc_am_send(c, NELSSA_AM_STEP, hdr, sizeof(hdr), &d, len, deadline);
		free(d);
	}
	if (ret) {
		p->id = 0;
		return ret;
	}
	*out = p;
	return 0;
}

int nelssa_client_step_poll(struct nelssa_client *c, struct nelssa_step_pending *p,
			    uint32_t timeout_ms, struct nelssa_step_times *t)
{
	size_t q_bytes, out_slot;
	int ret;

	if (!p || p->c != c || !p->id)
		return nc_fail(c, -EINVAL, "not a step in flight");
	q_bytes = 4ull * p->g * p->d;
	out_slot = q_bytes + 4ull * p->g;
	if (!p->done) {
		/* What has arrived, without waiting (bounded: UCX may stay busy). */
		for (int i = 0; i < 64 && !p->done && ucp_worker_progress(c->worker); i++)
			;
		if (!p->done && !timeout_ms)
			return -EAGAIN;
		ret = p->done ? 0 : nc_wait(c, &p->done, nelssa_now_ms() + timeout_ms);
		if (ret) {
			if (ret == -ETIMEDOUT)
				return -EAGAIN;	/* still in flight: poll again */
			p->id = 0;	/* the connection is gone: a late reply is dropped */
			return ret;
		}
	}
	p->id = 0;
	if (p->status)
		return nc_fail(c, p->status, "the daemon failed the step: %s", nc_refusal(p->status));
	if (p->reply.nr_items != p->n || p->len != p->n * out_slot)
		return nc_fail(c, -EPROTO, "step reply of %zu bytes for %u items", p->len, p->n);
	for (uint32_t i = 0; i < p->n; i++) {
		memcpy(p->o + (size_t)i * p->g * p->d, p->buf + i * out_slot, q_bytes);
		memcpy(p->lse + (size_t)i * p->g, p->buf + i * out_slot + q_bytes, 4ull * p->g);
	}
	if (t)
		*t = (struct nelssa_step_times){ .rtt = nelssa_now_ns() - p->t0, .recv = p->reply.t_recv,
						 .dispatch = p->reply.t_dispatch,
						 .device = p->reply.t_device,
						 .aggregate = p->reply.t_aggregate };
	return 0;
}

void nelssa_client_step_cancel(struct nelssa_client *c, struct nelssa_step_pending *p)
{
	if (p && p->c == c)
		p->id = 0;	/* its reply, if it comes, is dropped */
}

int nelssa_client_step(struct nelssa_client *c, uint64_t session, uint16_t layer,
		       const struct nelssa_step_in *in, uint32_t n, float *o, float *lse,
		       struct nelssa_step_times *t)
{
	struct nelssa_step_pending *p;
	int ret = nelssa_client_step_send(c, session, layer, in, n, o, lse, &p);

	if (ret)
		return ret;
	ret = nelssa_client_step_poll(c, p, c->timeout_ms, t);
	if (ret == -EAGAIN) {
		nelssa_client_step_cancel(c, p);
		return nc_fail(c, -ETIMEDOUT, "the daemon did not answer in %u ms", c->timeout_ms);
	}
	return ret;
}
