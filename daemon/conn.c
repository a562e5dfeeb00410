// SPDX-License-Identifier: MIT
/*
 * Control connections (DESIGN §3.6): the TCP listener and every
 * connection in one poll() loop on the main thread, which never blocks on
 * any of them.
 *
 * A connection's bytes are read into its input buffer and each whole
 * frame goes to nd_control_handle() (control.c); a frame's header is
 * checked as soon as its 16 bytes are in, so a length beyond the
 * protocol's NELSSA_PROTO_MAX_PAYLOAD is refused before any of its
 * payload is buffered.  Replies are queued in the connection's output
 * buffer and written once the frames of a read are handled, as much as
 * the socket takes; the loop asks for POLLOUT only while some wait.  A
 * client that does not read its replies stalls nothing but itself: once
 * max-unread-kib wait for it, here and in its socket, or replies have
 * waited with none taken for the frame timeout, its connection is reset.
 *
 * Timers close a connection that gives no HELLO within the HELLO
 * timeout, that holds a partial frame for longer than the frame timeout
 * (slowloris), or that sits idle, with no session and no frame, for the
 * idle timeout; a connection with a session is never idle -- a long pause
 * between decode steps is normal.  A connection closed for an error --
 * these, a bad frame, a refused HELLO -- gets an ERROR frame first: its
 * input is then ignored, its output flushed, its socket shut down for
 * writing (so the client reads the ERROR, then the end), and closed when
 * the client closes its end or after the frame timeout.  Its sessions
 * close at once (control.c), whichever way it goes.
 *
 * Connections are limited in all (--max-conns) and per client address
 * (--max-conns-per-addr); one beyond is accepted, told why in an ERROR
 * frame and closed.  Out of file descriptors, the listener refuses
 * connections the same way through fdlimit.c's reserve descriptor, and
 * pauses briefly if even that is gone, so it never spins on a listener
 * it cannot serve and picks up again once descriptors are back.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/sockios.h>
#include <nelssa/link.h>

#include "nelssad.h"

#define MS 1000000ull			/* ns */
#define ACCEPTS_PER_ROUND 64		/* then the connections' turn */
#define ACCEPT_PAUSE (100 * MS)		/* out of descriptors, no reserve left */
#define POLL_MAX_MS 200			/* the stop flag is looked at this often */

static uint64_t next_conn;

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
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
			    ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 512))
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

/*
 * Bytes @fd's socket holds: @sent_too, those sent and not yet
 * acknowledged as well (SIOCOUTQ), else only those not sent yet
 * (SIOCOUTQNSD: the client's window is shut).
 */
static size_t queued(int fd, int sent_too)
{
	int n = 0;

	return ioctl(fd, sent_too ? SIOCOUTQ : SIOCOUTQNSD, &n) || n < 0 ? 0 : (size_t)n;
}

/*
 * Appends @m to @c's output; -ENOBUFS when more than max-unread-kib would
 * wait for the client, the bytes its socket cannot send yet included:
 * without them, a client that never reads would first fill a send buffer
 * the kernel grows to megabytes.  Bytes in flight do not count (they are
 * bounded by the client's window, and a client that reads promptly over a
 * long link has some).  The socket's count is the one at the last flush
 * (it only falls as the client reads), looked at again before refusing.
 */
int nd_conn_send(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m)
{
	const size_t max = (size_t)nd->cfg.max_unread_kib << 10;
	uint8_t frame[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t len;

	if (nelssa_msg_encode(m, frame, sizeof(frame), &len))
		return -EINVAL;
	if (c->out_len - c->out_off + c->unsent + len > max)
		c->unsent = queued(c->fd, 0);
	if (c->out_len - c->out_off + c->unsent + len > max) {
		c->overflow = 1;
		return -ENOBUFS;
	}
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
		c->t_wrote = nd_now_ns();	/* waiting from now */
	}
	if (c->out_len + len > c->out_cap) {
		size_t cap = c->out_cap ? c->out_cap : 4096;
		uint8_t *p;

		if (c->out_off) {		/* what went out makes room first */
			memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
			c->out_len -= c->out_off;
			c->out_off = 0;
		}
		while (cap < c->out_len + len)
			cap *= 2;
		if (cap > c->out_cap) {
			p = realloc(c->out, cap);
			if (!p)
				return -ENOMEM;
			c->out = p;
			c->out_cap = cap;
		}
	}
	memcpy(c->out + c->out_len, frame, len);
	c->out_len += len;
	return 0;
}

int nd_conn_error(struct nelssad *nd, struct nd_conn *c, uint32_t seq, int code,
		  const char *fmt, ...)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_ERROR, .seq = seq };
	va_list ap;

	m.u.error.code = code < 0 ? code : -EPROTO;
	va_start(ap, fmt);
	vsnprintf(m.u.error.msg, sizeof(m.u.error.msg), fmt, ap);
	va_end(ap);
	return nd_conn_send(nd, c, &m);
}

/* Writes what the socket takes; 0, or -errno when the connection broke. */
static int flush(struct nd_conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		c->out_off += (size_t)n;
		c->t_wrote = nd_now_ns();
		c->unsent = queued(c->fd, 0);
	}
	/* All out: the buffer goes too (500 quiet connections hold none). */
	free(c->out);
	c->out = NULL;
	c->out_off = c->out_len = c->out_cap = 0;
	return 0;
}

static int pending(const struct nd_conn *c)
{
	return c->out_off < c->out_len;
}

/*
 * Closes @c now, its sessions with it; @why for the log, NULL: quietly.
 * A reply its client has not taken -- queued here, or in the socket and
 * not acknowledged -- makes the close a reset: a FIN would queue behind
 * bytes no one reads, the client would never learn of the close, and the
 * kernel would keep the orphaned socket's buffer for minutes.  (A client
 * that ended its stream ended the connection: what it did not read is
 * dropped either way.)
 */
static void drop(struct nelssad *nd, struct nd_conn *c, const char *why)
{
	if (why)
		nd_log(nd, "connection %llu (%s): %s: closed", (unsigned long long)c->id, c->name,
		       why);
	if (!c->gone)
		nd_control_gone(nd, c);
	if (pending(c) || queued(c->fd, 1)) {
		const struct linger reset = { .l_onoff = 1, .l_linger = 0 };

		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
	}
	close(c->fd);
	free(c->out);
	free(c);
}

/*
 * Ends @c after the ERROR it queued: its sessions close now, its input is
 * ignored from here, and the socket closes once the ERROR is out and the
 * client has closed its end, or after the frame timeout.
 */
static void end(struct nelssad *nd, struct nd_conn *c, const char *why)
{
	if (why)
		nd_log(nd, "connection %llu (%s): %s: closing", (unsigned long long)c->id, c->name,
		       why);
	nd_control_gone(nd, c);
	c->gone = 1;
	c->closing = 1;
	c->have = 0;
	c->t_close = nd_now_ns() + nd->cfg.frame_timeout_ms * MS;
	if (!flush(c) && !pending(c))
		shutdown(c->fd, SHUT_WR);
}

/*
 * Handles @c's whole frames, in order, up to a barrier (HELLO or
 * SESSION_CREATE: the rest wait for its answer, nd_control_answer()).
 * 0, or as on_readable().
 */
static int handle_frames(struct nelssad *nd, struct nd_conn *c)
{
	const uint64_t now = nd_now_ns();
	int ret = 0;

	while (c->have >= NELSSA_PROTO_HDR_BYTES && !ret && !c->barrier && !c->closing) {
		struct nelssa_msg_hdr h;
		struct nelssa_msg m;
		size_t len;

		ret = nelssa_msg_decode_hdr(c->in, &h);
		if (ret) {
			nd_conn_error(nd, c, h.seq, ret, "bad frame header: %s", strerror(-ret));
			break;
		}
		len = NELSSA_PROTO_HDR_BYTES + h.length;
		if (c->have < len)
			break;
		ret = nelssa_msg_decode(c->in, len, &m);
		if (ret == -EPROTONOSUPPORT && h.type == NELSSA_MSG_HELLO) {
			nd_conn_error(nd, c, h.seq, ret, "an older protocol's HELLO: this daemon "
				      "speaks protocol version %u only", NELSSA_PROTO_VERSION);
			break;
		}
		if (ret) {
			nd_conn_error(nd, c, h.seq, ret, "malformed %s: %s",
				      nelssa_msg_type_str(h.type), strerror(-ret));
			break;
		}
		ret = nd_control_handle(nd, c, &m);
		memmove(c->in, c->in + len, c->have - len);
		c->have -= len;
		c->t_frame = c->t_partial = now;
	}
	if (c->overflow)
		return -ENOBUFS;
	if (!ret && flush(c))
		return -ECONNRESET;
	return ret;
}

/*
 * Reads what is there and handles every whole frame.  0: @c goes on;
 * otherwise @c is gone or going: -ECONNRESET for a client that closed or
 * broke its end, -ENOBUFS for one whose replies found no room, any other
 * for an ERROR queued (ended).  While a barrier of @c's is with the
 * poller, nothing is read: its frames wait in the socket.
 */
static int on_readable(struct nelssad *nd, struct nd_conn *c)
{
	ssize_t n;

	if (c->closing) {		/* waiting for the client's end: discard */
		uint8_t junk[4096];

		n = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
		return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN) ? -ECONNRESET : 0;
	}
	if (c->barrier || c->have == sizeof(c->in))
		return 0;
	n = recv(c->fd, c->in + c->have, sizeof(c->in) - c->have, MSG_DONTWAIT);
	if (n == 0)
		return -ECONNRESET;
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -ECONNRESET;
	if (!c->have)
		c->t_partial = nd_now_ns();
	c->have += (size_t)n;
	return handle_frames(nd, c);
}

/* Numeric address of @ss (nelssa_link_addr()); "ADDR:PORT" in @name. */
static void peer_addr(const struct sockaddr_storage *ss, struct nd_addr *a, char *name,
		      size_t len)
{
	char text[INET6_ADDRSTRLEN] = "?";
	const uint8_t *bytes = NULL;
	const size_t n = nelssa_link_addr(ss, &bytes);
	unsigned int port = 0;

	memset(a, 0, sizeof(*a));
	if (n) {
		a->family = n == 4 ? AF_INET : AF_INET6;
		memcpy(a->a, bytes, n);
		inet_ntop(a->family, a->a, text, sizeof(text));
	}
	if (ss->ss_family == AF_INET)
		port = ntohs(((const struct sockaddr_in *)ss)->sin_port);
	else if (ss->ss_family == AF_INET6)
		port = ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	snprintf(name, len, a->family == AF_INET6 ? "[%s]:%u" : "%s:%u", text, port);
}

static int same_addr(const struct nd_addr *x, const struct nd_addr *y)
{
	return x->family == y->family && !memcmp(x->a, y->a, sizeof(x->a));
}

/*
 * Tells a connection the daemon does not take why, as far as a fresh
 * socket's buffer takes it without waiting, and closes it.
 */
void nd_conn_refuse(int fd, int code, const char *fmt, ...)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_ERROR };
	uint8_t frame[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t len;
	va_list ap;

	m.u.error.code = code;
	va_start(ap, fmt);
	vsnprintf(m.u.error.msg, sizeof(m.u.error.msg), fmt, ap);
	va_end(ap);
	if (!nelssa_msg_encode(&m, frame, sizeof(frame), &len) &&
	    send(fd, frame, len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len)
		shutdown(fd, SHUT_WR);
	close(fd);
}

/*
 * Takes the connections waiting on the listener, or refuses them.  Returns
 * when none waits, after ACCEPTS_PER_ROUND, or, out of descriptors with no
 * reserve left, with @pause_until set.
 */
static void accept_some(struct nelssad *nd, int lfd, struct nd_conn **conns, uint32_t *n,
			uint64_t *pause_until)
{
	for (int round = 0; round < ACCEPTS_PER_ROUND; round++) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		struct nd_conn *c;
		struct nd_addr a;
		char name[sizeof(c->name)];
		uint32_t same = 0;
		int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		int one = 1;

		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			int ret = nd_fd_refuse(nd, lfd, "the daemon is out of file descriptors");

			if (ret == -EAGAIN)
				return;
			if (ret) {
				nd_log(nd, "out of file descriptors and no reserve: not accepting "
				       "for %llu ms", ACCEPT_PAUSE / MS);
				*pause_until = nd_now_ns() + ACCEPT_PAUSE;
				return;
			}
			continue;
		}
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;		/* EAGAIN: none waits; an error: next round */
		}
		peer_addr(&ss, &a, name, sizeof(name));
		if (*n >= nd->cfg.max_conns) {
			nd_conn_refuse(fd, -EBUSY,
				       "the daemon serves its limit of %u connections (max-conns)",
				       nd->cfg.max_conns);
			continue;
		}
		for (uint32_t i = 0; i < *n; i++)
			same += same_addr(&conns[i]->addr, &a);
		if (same >= nd->cfg.max_conns_per_addr) {
			nd_conn_refuse(fd, -EBUSY, "this address holds its limit of %u connections "
				       "(max-conns-per-addr)", nd->cfg.max_conns_per_addr);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			nd_conn_refuse(fd, -ENOMEM, "out of memory");
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->id = ++next_conn;
		c->addr = a;
		memcpy(c->name, name, sizeof(c->name));
		for (uint32_t i = 0; i < nd->cfg.n_admin && !c->admin; i++)
			c->admin = same_addr(&nd->cfg.admin[i], &a);
		c->t_open = c->t_frame = nd_now_ns();
		conns[(*n)++] = c;
		if (nd->cfg.verbose)
			nd_log(nd, "connection %llu from %s%s", (unsigned long long)c->id, c->name,
			       c->admin ? " (admin)" : "");
	}
}

/* Whether @when has come; if not, *@next is lowered to it. */
static int due(uint64_t when, uint64_t now, uint64_t *next)
{
	if (when <= now)
		return 1;
	if (when < *next)
		*next = when;
	return 0;
}

/* Whether @fd has bytes its peer sent that were not read yet. */
static int unread(int fd)
{
	int n = 0;

	return !ioctl(fd, FIONREAD, &n) && n > 0;
}

/*
 * The timers of @c at @now: 1 when @c was closed (and freed), 0 while it
 * goes on, ended perhaps.  *@next is lowered to when they are due next.
 */
static int check_timers(struct nelssad *nd, struct nd_conn *c, uint64_t now, uint64_t *next)
{
	const struct nd_config *cfg = &nd->cfg;
	int hello_late, frame_late;

	if (c->closing) {
		if (!due(c->t_close, now, next))
			return 0;
		drop(nd, c, NULL);	/* not even its ERROR taken, perhaps */
		return 1;
	}
	if (pending(c) && due(c->t_wrote + cfg->frame_timeout_ms * MS, now, next)) {
		drop(nd, c, "its replies not read for the frame timeout (frame-timeout-ms)");
		return 1;
	}
	/*
	 * Neither clock runs while a barrier holds input: a HELLO with the
	 * poller has come (the client is not late), and a partial frame's
	 * rest is not read until the poller answers (its time restarts then).
	 */
	hello_late = !c->hello && !c->barrier &&
		     due(c->t_open + cfg->hello_timeout_ms * MS, now, next);
	frame_late = !hello_late && c->have && !c->barrier &&
		     due(c->t_partial + cfg->frame_timeout_ms * MS, now, next);
	/*
	 * Bytes the client sent that wait unread in the socket -- behind a
	 * barrier just lifted, or come while the clock moved on -- are read
	 * first, this turn (poll() finds them), and the client judged after:
	 * a frame they complete restarts its clock, and a dribble completing
	 * none finds its timeout still due the next turn.
	 */
	if ((hello_late || frame_late) && unread(c->fd))
		return 0;
	if (hello_late) {
		nd_conn_error(nd, c, 0, -ETIMEDOUT, "no HELLO within %u ms (hello-timeout-ms)",
			      cfg->hello_timeout_ms);
		end(nd, c, "no HELLO within the HELLO timeout");
	} else if (frame_late) {
		nd_conn_error(nd, c, 0, -ETIMEDOUT,
			      "a frame took longer than %u ms to arrive (frame-timeout-ms)",
			      cfg->frame_timeout_ms);
		end(nd, c, "a partial frame held past the frame timeout");
	} else if (c->hello && cfg->idle_timeout_ms &&
		   due(c->t_frame + cfg->idle_timeout_ms * MS, now, next)) {
		/*
		 * Not idle: a session, a request with the poller, or bytes
		 * the client sent that wait unread in the socket -- behind a
		 * barrier just lifted, read on the next turn, which a clock
		 * that moved on meanwhile must not beat.  Look again a
		 * timeout later.
		 */
		if (c->n_sessions || c->waiting || unread(c->fd)) {
			c->t_frame = now;
			return 0;
		}
		nd_conn_error(nd, c, 0, -ETIMEDOUT,
			      "idle for %u ms without a session (idle-timeout-ms)",
			      cfg->idle_timeout_ms);
		end(nd, c, "idle without a session for the idle timeout");
	}
	return 0;
}

/*
 * The control loop's state: the listener and the connections, and the
 * pollfd array poll() gets.  nd_control_run() is nd_control_init(), then
 * nd_control_poll_once() until the stop flag, then nd_control_fini();
 * the daemon's fuzz target (tests/fuzz/fuzz_daemon.c) drives the same
 * calls itself, one iteration at a time.
 */
int nd_control_init(struct nelssad *nd, struct nd_ctl *ctl, int listen_fd)
{
	const uint32_t max = nd->cfg.max_conns;

	memset(ctl, 0, sizeof(*ctl));
	ctl->listen_fd = listen_fd;
	ctl->pfd = calloc(max + 2, sizeof(*ctl->pfd));	/* + listener, answers */
	ctl->conns = calloc(max + 1, sizeof(*ctl->conns));
	if (!ctl->pfd || !ctl->conns) {
		free(ctl->pfd);
		free(ctl->conns);
		return -ENOMEM;
	}
	return 0;
}

/*
 * After @c's events: 1 when @c was closed and freed (take it out of the
 * loop), 0 while it goes on -- ended perhaps, its ERROR queued.
 */
static int conn_result(struct nelssad *nd, struct nd_conn *c, int ret)
{
	char why[80];

	if (!ret)
		return 0;
	if (ret != -ECONNRESET && ret != -ENOBUFS && !c->closing) {
		end(nd, c, NULL);	/* its ERROR is queued */
		return 0;
	}
	if (ret == -ENOBUFS)
		snprintf(why, sizeof(why), "more than %u KiB of its replies not read "
			 "(max-unread-kib)", nd->cfg.max_unread_kib);
	drop(nd, c, ret == -ENOBUFS ? why : NULL);
	return 1;
}

/*
 * One turn of the loop: the timers at nd_now_ns(), one poll() of the
 * listener and every connection, then each connection's events and the
 * listener's.  poll() waits for the next timer (at most POLL_MAX_MS) when
 * @wait is set, and not at all otherwise.  0, or -errno when poll() failed.
 */
int nd_control_poll_once(struct nelssad *nd, struct nd_ctl *ctl, int wait)
{
	struct pollfd *pfd = ctl->pfd;
	struct nd_conn **conns = ctl->conns;
	uint64_t now = nd_now_ns(), next = now + POLL_MAX_MS * MS;
	const int listening = now >= ctl->pause_until;
	uint32_t n = ctl->n;
	int r;

	for (uint32_t i = n; i-- > 0;)
		if (check_timers(nd, conns[i], now, &next))
			conns[i] = conns[--n];
	if (!listening && ctl->pause_until < next)
		next = ctl->pause_until;
	pfd[0] = (struct pollfd){ .fd = listening ? ctl->listen_fd : -1, .events = POLLIN };
	for (uint32_t i = 0; i < n; i++) {
		const struct nd_conn *c = conns[i];
		short ev = (c->closing && pending(c)) || c->barrier ? 0 : POLLIN;

		pfd[i + 1] = (struct pollfd){ .fd = c->fd,
					      .events = ev | (pending(c) ? POLLOUT : 0) };
	}
	pfd[n + 1] = (struct pollfd){ .fd = nd->to_control.fd, .events = POLLIN };
	r = poll(pfd, n + 2, wait ? (int)((next - now + MS - 1) / MS) : 0);
	if (r < 0) {
		ctl->n = n;
		return errno != EINTR ? -errno : 0;
	}
	for (uint32_t i = n; r > 0 && i-- > 0;) {
		struct nd_conn *c = conns[i];
		const short ev = pfd[i + 1].revents;
		int ret = 0;

		if (!ev)
			continue;
		if (ev & POLLOUT) {
			ret = flush(c) ? -ECONNRESET : 0;
			if (!ret && c->closing && !pending(c))
				shutdown(c->fd, SHUT_WR);
		}
		if (!ret && (ev & (POLLIN | POLLHUP | POLLERR)))
			ret = on_readable(nd, c);
		if (conn_result(nd, c, ret))
			conns[i] = conns[--n];
	}
	/* The poller's answers, every turn: a wake-up may have been taken by a look. */
	for (struct nd_job *j = nd_jobs_take(nd, &nd->to_control), *nj; j; j = nj) {
		struct nd_conn *c = NULL;
		uint32_t i;
		int ret;

		nj = j->next;
		for (i = 0; i < n && conns[i]->id != j->conn; i++)
			;
		c = i < n ? conns[i] : NULL;
		ret = nd_control_answer(nd, c, j);
		if (c && !ret && !c->barrier) {
			/*
			 * Reading resumes: a partial frame's time, and the idle
			 * time, run from here, not from when the barrier
			 * stopped it -- a client is not to blame for the
			 * daemon's own wait (its next frames may be in the
			 * socket still, unread).
			 */
			c->t_partial = c->t_frame = nd_now_ns();
			ret = handle_frames(nd, c);	/* the frames that waited */
		}
		else if (c && !ret && flush(c))
			ret = -ECONNRESET;
		if (c && conn_result(nd, c, ret))
			conns[i] = conns[--n];
	}
	if (r > 0 && (pfd[0].revents & POLLIN))
		accept_some(nd, ctl->listen_fd, conns, &n, &ctl->pause_until);
	ctl->n = n;
	return 0;
}

/* Closes every connection, their sessions with them, and frees the loop's state. */
void nd_control_fini(struct nelssad *nd, struct nd_ctl *ctl)
{
	for (uint32_t i = 0; i < ctl->n; i++)
		drop(nd, ctl->conns[i], NULL);
	free(ctl->pfd);
	free(ctl->conns);
	memset(ctl, 0, sizeof(*ctl));
}

int nd_control_run(struct nelssad *nd, int listen_fd)
{
	struct nd_ctl ctl;
	int ret = nd_control_init(nd, &ctl, listen_fd);

	while (!ret && !nd->stop)
		ret = nd_control_poll_once(nd, &ctl, 1);
	if (ctl.pfd)
		nd_control_fini(nd, &ctl);
	return ret == -ENOMEM ? ret : 0;
}
