// SPDX-License-Identifier: MIT
/*
 * The control path (DESIGN §3.6): a TCP listener and its connections in
 * one poll() loop on the main thread.  Frames are read into a per-
 * connection buffer and decoded only when whole; anything malformed,
 * oversized, out of order (no HELLO first) or of another version gets an
 * ERROR frame and the connection is closed -- the daemon and every other
 * connection carry on.  A session belongs to the connection that created
 * it: when that connection goes (client exit, crash, kill), its sessions
 * are marked closing and the poller thread frees them once no step of
 * theirs is in flight.
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
#include <unistd.h>

#include "nelssad.h"

struct conn {
	int fd;
	int hello;
	struct nd_peer *peer;	/* from HELLO's address; NULL: none */
	size_t have;
	uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
};

int nd_control_listen(struct nelssad *nd)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res, *ai;
	char port[8];
	int fd = -1, one = 1, err;

	snprintf(port, sizeof(port), "%u", nd->cfg.port);
	err = getaddrinfo(nd->cfg.listen_host[0] ? nd->cfg.listen_host : NULL, port, &hints, &res);
	if (err) {
		nd_log(nd, "cannot resolve %s: %s", nd->cfg.listen_host, gai_strerror(err));
		return -EINVAL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 64))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		nd_log(nd, "cannot listen on %s:%u: %s", nd->cfg.listen_host, nd->cfg.port,
		       strerror(errno));
		return -errno;
	}
	return fd;
}

static int send_frame(int fd, const struct nelssa_msg *m)
{
	uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t len, off = 0;

	if (nelssa_msg_encode(m, buf, sizeof(buf), &len))
		return -EINVAL;
	while (off < len) {
		ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -EIO;
		off += (size_t)n;
	}
	return 0;
}

static int send_error(int fd, uint32_t seq, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int send_error(int fd, uint32_t seq, int code, const char *fmt, ...)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_ERROR, .seq = seq };
	va_list ap;

	m.u.error.code = code < 0 ? code : -EPROTO;
	va_start(ap, fmt);
	vsnprintf(m.u.error.msg, sizeof(m.u.error.msg), fmt, ap);
	va_end(ap);
	return send_frame(fd, &m);
}

static struct nd_session *owned(struct nelssad *nd, struct conn *c, uint64_t id)
{
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->id == id && s->ctl_fd == c->fd && !s->closing)
			return s;
	return NULL;
}

static int do_create(struct nelssad *nd, struct conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_SESSION_OK, .seq = m->seq };
	struct nd_session *s;
	char why[NELSSA_PROTO_ERR_LEN] = "";
	int ret;

	pthread_mutex_lock(&nd->lock);
	if (nd->n_sessions >= nd->cfg.max_sessions) {
		pthread_mutex_unlock(&nd->lock);
		return send_error(c->fd, m->seq, -EBUSY, "the daemon serves its limit of %u sessions",
				  nd->cfg.max_sessions);
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		pthread_mutex_unlock(&nd->lock);
		return send_error(c->fd, m->seq, -ENOMEM, "out of memory");
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
		ret = nd_session_open(nd, s, why, sizeof(why));
	if (ret) {
		pthread_mutex_unlock(&nd->lock);
		free(s);
		nd_log(nd, "session refused: %s", why);
		return send_error(c->fd, m->seq, ret, "%s", why);
	}
	s->id = ++nd->next_session;
	s->next = nd->sessions;
	nd->sessions = s;
	nd->n_sessions++;
	if (s->peer)
		s->peer->sessions++;
	pthread_mutex_unlock(&nd->lock);
	nd_log(nd, "session %llu: %u layers, %u/%u heads, dim %u, %llu tokens of capacity",
	       (unsigned long long)s->id, s->shape.layers, s->shape.q_heads, s->shape.kv_heads,
	       s->shape.head_dim, (unsigned long long)s->capacity_tokens);
	r.u.session_ok.session = s->id;
	r.u.session_ok.token = s->token;
	r.u.session_ok.devices = nd->n_dev;
	return send_frame(c->fd, &r);
}

/* The data-path end of @c, for the poller to open when a step needs it. */
static int add_peer(struct nelssad *nd, struct conn *c, const struct nelssa_msg *m)
{
	struct nd_peer *p = calloc(1, sizeof(*p));

	if (p)
		p->addr = malloc(m->u.hello.addr_len);
	if (!p || !p->addr) {
		free(p);
		return -ENOMEM;
	}
	memcpy(p->addr, m->u.hello.addr, m->u.hello.addr_len);
	p->addr_len = m->u.hello.addr_len;
	pthread_mutex_lock(&nd->lock);
	p->id = ++nd->next_peer;
	p->next = nd->peers;
	nd->peers = p;
	pthread_mutex_unlock(&nd->lock);
	c->peer = p;
	return 0;
}

static int handle(struct nelssad *nd, struct conn *c, const struct nelssa_msg *m)
{
	struct nelssa_msg r = { .type = NELSSA_MSG_OK, .seq = m->seq };
	char why[NELSSA_PROTO_ERR_LEN] = "";
	struct nd_session *s;
	int ret = 0;

	if (!c->hello && m->type != NELSSA_MSG_HELLO) {
		send_error(c->fd, m->seq, -EPROTO, "HELLO must come first");
		return -EPROTO;
	}
	switch (m->type) {
	case NELSSA_MSG_HELLO:
		if (c->hello) {
			send_error(c->fd, m->seq, -EPROTO, "HELLO was already exchanged");
			return -EPROTO;
		}
		if (m->u.hello.min_version > NELSSA_PROTO_VERSION ||
		    m->u.hello.max_version < NELSSA_PROTO_VERSION) {
			send_error(c->fd, m->seq, -EPROTONOSUPPORT,
				   "this daemon speaks protocol version %u only", NELSSA_PROTO_VERSION);
			return -EPROTONOSUPPORT;
		}
		if (m->u.hello.addr_len) {
			ret = add_peer(nd, c, m);
			if (ret) {
				send_error(c->fd, m->seq, ret, "out of memory");
				return ret;
			}
		}
		c->hello = 1;
		r.type = NELSSA_MSG_HELLO_OK;
		r.u.hello_ok.version = NELSSA_PROTO_VERSION;
		r.u.hello_ok.devices = (uint16_t)nd->n_dev;
		for (uint32_t d = 0; d < nd->n_dev; d++)
			r.u.hello_ok.device_bytes += nd->dev[d].info.mem_size;
		snprintf(r.u.hello_ok.name, sizeof(r.u.hello_ok.name), "%s", ND_NAME);
		r.u.hello_ok.addr_len = (uint32_t)nd->addr_len;
		memcpy(r.u.hello_ok.addr, nd->addr, nd->addr_len);
		return send_frame(c->fd, &r);
	case NELSSA_MSG_SESSION_CREATE:
		return do_create(nd, c, m);
	case NELSSA_MSG_REQ_ALLOC:
	case NELSSA_MSG_REQ_FREE:
	case NELSSA_MSG_CLOSE:
		pthread_mutex_lock(&nd->lock);
		s = owned(nd, c, m->type == NELSSA_MSG_CLOSE ? m->u.session.session : m->u.req.session);
		if (!s) {
			ret = -ENOENT;
			snprintf(why, sizeof(why), "no such session on this connection");
		} else if (m->type == NELSSA_MSG_REQ_ALLOC) {
			ret = nd_request_alloc(nd, s, m->u.req.request, m->u.req.max_tokens,
					       m->u.req.max_clusters, why, sizeof(why));
		} else if (m->type == NELSSA_MSG_REQ_FREE) {
			ret = nd_request_free(nd, s, m->u.req.request);
			if (ret)
				snprintf(why, sizeof(why), "no such request");
		} else {
			s->closing = 1;
		}
		pthread_mutex_unlock(&nd->lock);
		if (m->type == NELSSA_MSG_CLOSE && !ret)
			nd_dataplane_wake(nd);
		if (ret)
			return send_error(c->fd, m->seq, ret, "%s", why);
		return send_frame(c->fd, &r);
	case NELSSA_MSG_STATS:
		r.type = NELSSA_MSG_STATS_REPLY;
		pthread_mutex_lock(&nd->lock);
		r.u.stats.steps = nd->stats.steps;
		r.u.stats.items = nd->stats.items;
		r.u.stats.kv_bytes = nd->stats.kv_bytes;
		r.u.stats.t_recv = nd->stats.t_recv;
		r.u.stats.t_dispatch = nd->stats.t_dispatch;
		r.u.stats.t_device = nd->stats.t_device;
		r.u.stats.t_aggregate = nd->stats.t_aggregate;
		r.u.stats.t_send = nd->stats.t_send;
		r.u.stats.sessions = nd->n_sessions;
		r.u.stats.devices = nd->n_dev;
		pthread_mutex_unlock(&nd->lock);
		return send_frame(c->fd, &r);
	default:
		send_error(c->fd, m->seq, -EPROTO, "%s is not a request",
			   nelssa_msg_type_str(m->type));
		return -EPROTO;
	}
}

/* Reads what is there; handles every whole frame.  Non-zero: close it. */
static int on_readable(struct nelssad *nd, struct conn *c)
{
	ssize_t n = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, 0);

	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -errno;
	c->have += (size_t)n;
	while (c->have >= NELSSA_PROTO_HDR_BYTES) {
		struct nelssa_msg_hdr h;
		struct nelssa_msg m;
		size_t len;
		int ret = nelssa_msg_decode_hdr(c->buf, &h);

		if (ret) {
			send_error(c->fd, h.seq, ret, "bad frame header: %s", strerror(-ret));
			return ret;
		}
		len = NELSSA_PROTO_HDR_BYTES + h.length;
		if (c->have < len)
			return 0;
		ret = nelssa_msg_decode(c->buf, len, &m);
		if (ret) {
			send_error(c->fd, h.seq, ret, "malformed %s: %s", nelssa_msg_type_str(h.type),
				   strerror(-ret));
			return ret;
		}
		ret = handle(nd, c, &m);
		if (ret)
			return ret;
		memmove(c->buf, c->buf + len, c->have - len);
		c->have -= len;
	}
	return 0;
}

/*
 * The connection is gone: its sessions close and no reply goes to its
 * client any more (the poller closes the peer's endpoint).
 */
static void drop(struct nelssad *nd, struct conn *c)
{
	int marked = 0;

	pthread_mutex_lock(&nd->lock);
	for (struct nd_session *s = nd->sessions; s; s = s->next)
		if (s->ctl_fd == c->fd && !s->closing) {
			s->closing = 1;
			marked++;
		}
	if (c->peer)
		c->peer->gone = 1;
	pthread_mutex_unlock(&nd->lock);
	if (marked)
		nd_log(nd, "connection closed: reclaiming %d session(s)", marked);
	if (marked || c->peer)
		nd_dataplane_wake(nd);
	close(c->fd);
	free(c);
}

int nd_control_run(struct nelssad *nd, int listen_fd)
{
	const uint32_t max = nd->cfg.max_conns;
	struct pollfd *pfd = calloc(max + 1, sizeof(*pfd));
	struct conn **conns = calloc(max + 1, sizeof(*conns));
	uint32_t n = 0;

	if (!pfd || !conns) {
		free(pfd);
		free(conns);
		return -ENOMEM;
	}
	while (!nd->stop) {
		int r;

		pfd[0] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
		for (uint32_t i = 0; i < n; i++)
			pfd[i + 1] = (struct pollfd){ .fd = conns[i]->fd, .events = POLLIN };
		r = poll(pfd, n + 1, 200);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		for (uint32_t i = n; i-- > 0;) {
			if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (on_readable(nd, conns[i])) {
				drop(nd, conns[i]);
				conns[i] = conns[--n];
			}
		}
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC), one = 1;
			struct timeval tv = { .tv_sec = 5 };

			if (fd < 0)
				continue;
			if (n >= max) {
				send_error(fd, 0, -EBUSY, "the daemon serves its limit of %u connections",
					   max);
				close(fd);
				continue;
			}
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			/* A client that stops reading cannot stall the daemon. */
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
			conns[n] = calloc(1, sizeof(**conns));
			if (!conns[n]) {
				close(fd);
				continue;
			}
			conns[n++]->fd = fd;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		drop(nd, conns[i]);
	free(pfd);
	free(conns);
	return 0;
}
