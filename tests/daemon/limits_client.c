// SPDX-License-Identifier: MIT
/*
 * Control-path clients for the daemon-limits test (check-limits.sh): raw
 * TCP connections speaking the control protocol through the proto
 * library, many at once from one poll() loop, from source addresses of
 * the test's choosing (127.0.0.N: loopback takes any of them), so that
 * --max-conns-per-addr and --admin-addr can be exercised on one machine.
 * Every mode prints "# ..." comments; most end with one line
 *
 *	result KEY=VALUE ...
 *
 * that the driver makes its assertions from, and exit 0 when they ran
 * (1: the test itself could not run).  Waits are for events (a reply, a
 * connection closed by the daemon), each bounded by a generous deadline;
 * nothing is timed against a margin.
 *
 *   load GOOD SILENT VANISH SLOW ROUNDS UNREAD_KIB  at once: GOOD
 *	connections that say HELLO and make ROUNDS STATS round trips, then
 *	wait for the others and make one more; SILENT ones that never send a
 *	byte (the HELLO timeout must close them); VANISH ones that create a
 *	session, allocate two requests and close at once (every second one
 *	with a reset); SLOW ones that never read a reply and send, whole
 *	frames at once, STATS requests whose replies are more than the
 *	daemon's --max-unread-kib UNREAD_KIB and their own small receive
 *	buffer hold, then wait (the daemon must reset them); and a probe, a
 *	thread of its own on a connection from the first source address,
 *	making STATS round trips all along, whose replies must keep coming.
 *	result: good, served, refused, silent_closed, silent_etimedout,
 *	vanished, slow_closed, slow_reset, probes, probe_alive, probe_max_ms
 *   stats                 one STATS (session 0). result: sessions, steps,
 *	items, kv_bytes, t_device
 *   maxcap                the largest capacity in tokens (to 1 %) of a session
 *	the daemon takes now: a measure of the device memory free. result: maxcap
 *   sessions N            one connection creates N sessions, then one more,
 *	which must be refused with -EDQUOT naming max-sessions-per-conn;
 *	another connection still creates one.  result: ok
 *   requests N            a session allocates N requests, then one more:
 *	-EDQUOT naming max-requests-per-session; one freed, one fits; the
 *	session closes.  result: ok
 *   memory                with max-memory-per-conn in force: a session of
 *	about 60 % of the largest this connection may hold fits, a second
 *	is refused with -EDQUOT naming the limit, another connection's fits,
 *	and the first connection's session still answers.  result: ok
 *   per-addr N            N connections from the second source address are
 *	served, one more is refused -EBUSY naming max-conns-per-addr, and a
 *	connection from the third address is served.  result: ok
 *   conns N               N connections (over the source addresses) are
 *	served and one more is refused -EBUSY naming max-conns.  result: ok
 *   frame-size            a header announcing 1 MiB of payload is refused
 *	with -EMSGSIZE before any payload is sent.  result: ok
 *   slowloris             a HELLO sent a byte every 100 ms is cut off with
 *	-ETIMEDOUT naming frame-timeout-ms.  result: ok
 *   idle                  of two connections after HELLO, the one without a
 *	session is closed with -ETIMEDOUT naming idle-timeout-ms; the one
 *	holding a session is still served after that.  result: ok
 *   untaken               a connection that never reads (a small receive
 *	buffer) holds a session (never idle) and has more STATS replies
 *	waiting than its socket takes in, under --max-unread-kib, then sends
 *	a second HELLO: the daemon ends it for that, and must reset it -- a
 *	FIN would queue behind the replies and never arrive.  result: ok
 *   fd-flood N            N connections at once to a daemon with fewer
 *	descriptors: each is served or refused (-EMFILE from the reserve,
 *	or -EBUSY), none left hanging.  result: served, emfile, busy, hung
 *
 * usage: limits_client HOST PORT SOURCES MODE [ARGS...]
 * SOURCES: a comma list of local addresses to connect from, in turn.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>

#include <linux/sockios.h>
#include <unistd.h>

#include <nelssa/proto.h>

#define FRAME_MAX (NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD)
#define DEADLINE_MS 120000	/* for any one wait: generous, never a margin */

static struct sockaddr_in daemon_addr;
static struct in_addr sources[64];
static unsigned int n_sources;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A connection from source @src (an index into sources, in turn), or -1. */
/* A connection from source @src; @rcvbuf: its receive buffer (0: the default). */
static int dial_rcvbuf(unsigned int src, int rcvbuf)
{
	struct sockaddr_in me = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		return -1;
	me.sin_addr = sources[src % n_sources];
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Before connect(), so that the window it offers is never larger. */
	if (rcvbuf)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (bind(fd, (struct sockaddr *)&me, sizeof(me)) ||
	    connect(fd, (struct sockaddr *)&daemon_addr, sizeof(daemon_addr))) {
		printf("# connect from %s: %s\n", inet_ntoa(me.sin_addr), strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

static int dial(unsigned int src)
{
	return dial_rcvbuf(src, 0);
}

static size_t encode(const struct nelssa_msg *m, uint8_t *buf)
{
	size_t len = 0;

	if (nelssa_msg_encode(m, buf, FRAME_MAX, &len)) {
		printf("# cannot encode a %s\n", nelssa_msg_type_str(m->type));
		exit(1);
	}
	return len;
}

/* Bytes of a frame of @type (the fixed-size types: any such frame). */
static size_t frame_bytes(uint16_t type)
{
	const struct nelssa_msg m = { .type = type };
	uint8_t buf[FRAME_MAX];

	return encode(&m, buf);
}

static int send_msg(int fd, const struct nelssa_msg *m)
{
	uint8_t buf[FRAME_MAX];
	size_t len = encode(m, buf);

	return send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -errno;
}

/*
 * The next frame on @fd into @r, within @ms: 0; -ECONNRESET when the
 * daemon closed the connection; -ETIMEDOUT.
 */
static int recv_msg(int fd, struct nelssa_msg *r, int ms)
{
	uint8_t buf[FRAME_MAX];
	struct nelssa_msg_hdr h;
	size_t have = 0, want = NELSSA_PROTO_HDR_BYTES;
	const uint64_t end = now_ms() + (uint64_t)ms;

	while (have < want) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t t = now_ms();
		ssize_t n;

		if (t >= end || poll(&p, 1, (int)(end - t)) != 1)
			return -ETIMEDOUT;
		n = recv(fd, buf + have, want - have, 0);
		if (n <= 0)
			return -ECONNRESET;
		have += (size_t)n;
		if (have == NELSSA_PROTO_HDR_BYTES && want == NELSSA_PROTO_HDR_BYTES) {
			if (nelssa_msg_decode_hdr(buf, &h))
				return -EBADMSG;
			want += h.length;
		}
	}
	return nelssa_msg_decode(buf, have, r) ? -EBADMSG : 0;
}

/* One request, one reply. */
static int call(int fd, const struct nelssa_msg *m, struct nelssa_msg *r)
{
	int ret = send_msg(fd, m);

	return ret ? ret : recv_msg(fd, r, DEADLINE_MS);
}

static int hello(int fd)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO }, r;

	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "limits");
	return call(fd, &m, &r) || r.type != NELSSA_MSG_HELLO_OK ? -1 : 0;
}

static struct nelssa_msg create_msg(uint64_t capacity)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_SESSION_CREATE, .seq = 3 };

	m.u.create.tenant = 5;
	m.u.create.shape = (struct nelssa_shape){ .layers = 1, .q_heads = 4, .kv_heads = 4,
						  .head_dim = 64, .kv_dtype = 1 };
	m.u.create.placement = NELSSA_PLACE_HEADS;
	m.u.create.max_batch = 4;
	m.u.create.max_sel = 16;
	m.u.create.capacity_tokens = capacity;
	return m;
}

/* SESSION_CREATE: the session id, or 0 with the reply (an ERROR) in @r. */
static uint64_t create(int fd, uint64_t capacity, struct nelssa_msg *r)
{
	const struct nelssa_msg m = create_msg(capacity);

	if (call(fd, &m, r)) {
		r->type = 0;
		return 0;
	}
	return r->type == NELSSA_MSG_SESSION_OK ? r->u.session_ok.session : 0;
}

static int simple(int fd, uint16_t type, uint64_t session, uint64_t request, uint32_t tokens)
{
	struct nelssa_msg m = { .type = type, .seq = 9 }, r;

	if (type == NELSSA_MSG_CLOSE || type == NELSSA_MSG_STATS) {
		m.u.session.session = session;
	} else {
		m.u.req.session = session;
		m.u.req.request = request;
		m.u.req.max_tokens = tokens;
		m.u.req.max_clusters = tokens ? tokens / 16 + 1 : 0;
	}
	if (call(fd, &m, &r))
		return -ECONNRESET;
	if (r.type == NELSSA_MSG_ERROR) {
		printf("# %s: %d %s\n", nelssa_msg_type_str(type), r.u.error.code, r.u.error.msg);
		return r.u.error.code;
	}
	return 0;
}

/* Whether @r is an ERROR of @code whose message names @limit. */
static int refused(const struct nelssa_msg *r, int code, const char *limit)
{
	int ok = r->type == NELSSA_MSG_ERROR && r->u.error.code == code &&
		 strstr(r->u.error.msg, limit);

	if (r->type == NELSSA_MSG_ERROR)
		printf("# refused: %d '%s'\n", r->u.error.code, r->u.error.msg);
	else
		printf("# not refused: %s\n", nelssa_msg_type_str(r->type));
	return ok;
}

/* Waits until the daemon closes @fd (EOF), keeping the last ERROR frame in @r. */
static int wait_closed(int fd, struct nelssa_msg *r)
{
	int ret;

	r->type = 0;
	while ((ret = recv_msg(fd, r, DEADLINE_MS)) == 0)
		;
	return ret == -ECONNRESET ? 0 : -1;
}

/* ---- load ---- */

enum role { GOOD, SILENT, VANISH, SLOW, PROBE };
enum state { S_HELLO, S_CREATE, S_ALLOC1, S_ALLOC2, S_STATS, S_WAIT, S_FINAL, S_DONE, S_CLOSED };

struct cl {
	int fd;
	enum role role;
	enum state state;
	int rounds;
	uint64_t session, t_sent;
	uint8_t in[FRAME_MAX];
	size_t have;
	size_t burst_off;	/* a slow reader's next byte of stats_burst */
	size_t sent;		/* ... and the bytes it sent */
	int32_t err;		/* the last ERROR's code */
	int refused;
};

/* The slow readers' burst: STATS requests, a socket buffer's worth at a time. */
static uint8_t stats_burst[8192];
static size_t burst_len;
/* What each slow reader sends in all: whole frames, more replies than are held. */
static size_t slow_total;

/*
 * The most a slow reader's socket takes in, not read: its receive buffer
 * is 4 KiB (the kernel doubles it) from before connect(), so the window it
 * offers stays below this.
 */
#define SLOW_RCVBUF 4096
#define SLOW_TAKES (64u << 10)

/* The probe: round trips on its own connection until told to stop. */
static struct {
	volatile int stop;
	int alive;
	unsigned int n;
	uint64_t max_ms;
} probe;

static int open_hello(unsigned int src);

static void *prober(void *arg)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS, .seq = 2 }, r;
	int fd = open_hello(0);

	(void)arg;
	probe.alive = fd >= 0;
	while (probe.alive && !probe.stop) {
		const uint64_t t = now_ms();

		probe.alive = !call(fd, &m, &r) && r.type == NELSSA_MSG_STATS_REPLY;
		if (probe.alive && now_ms() - t > probe.max_ms)
			probe.max_ms = now_ms() - t;
		probe.n += probe.alive;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void start(struct cl *c, uint16_t type)
{
	struct nelssa_msg m = { .type = type, .seq = 1 };
	uint8_t buf[FRAME_MAX];
	size_t len;

	if (type == NELSSA_MSG_HELLO) {
		m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
		snprintf(m.u.hello.name, sizeof(m.u.hello.name), "load");
	} else if (type == NELSSA_MSG_SESSION_CREATE) {
		m = create_msg(1024);
	} else if (type == NELSSA_MSG_REQ_ALLOC) {
		m.u.req.session = c->session;
		m.u.req.request = c->state == S_ALLOC1 ? 1 : 2;
		m.u.req.max_tokens = 256;
		m.u.req.max_clusters = 16;
	}
	len = encode(&m, buf);
	c->t_sent = now_ms();
	if (send(c->fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		c->state = S_CLOSED;
}

/* A reply came for @c: the next step of its role. */
static void advance(struct cl *c, const struct nelssa_msg *r)
{
	if (r->type == NELSSA_MSG_ERROR) {
		c->err = r->u.error.code;
		if (c->role == SILENT)
			return;		/* the end follows */
		c->refused = 1;
		printf("# connection %d (role %d): ERROR %d '%s'\n", c->fd, c->role,
		       r->u.error.code, r->u.error.msg);
		c->state = S_DONE;
		if (c->role == VANISH) {
			close(c->fd);
			c->fd = -1;
			c->state = S_CLOSED;
		}
		return;
	}
	switch (c->state) {
	case S_HELLO:
		if (c->role == VANISH) {
			c->state = S_CREATE;
			start(c, NELSSA_MSG_SESSION_CREATE);
		} else if (c->role == SLOW) {
			c->state = S_STATS;	/* from here on it only sends */
		} else {
			c->state = S_STATS;
			start(c, NELSSA_MSG_STATS);
		}
		break;
	case S_CREATE:
		c->session = r->u.session_ok.session;
		c->state = S_ALLOC1;
		start(c, NELSSA_MSG_REQ_ALLOC);
		break;
	case S_ALLOC1:
		c->state = S_ALLOC2;
		start(c, NELSSA_MSG_REQ_ALLOC);
		break;
	case S_ALLOC2: {
		/* Vanish: half of them with a reset, the rest with a plain close. */
		struct linger l = { .l_onoff = 1, .l_linger = 0 };

		if (c->fd & 1)
			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		close(c->fd);
		c->fd = -1;
		c->state = S_CLOSED;
		break;
	}
	case S_STATS:
		if (--c->rounds > 0) {
			start(c, NELSSA_MSG_STATS);
		} else {
			c->state = S_WAIT;
		}
		break;
	case S_FINAL:
		c->state = S_DONE;
		break;
	default:
		break;
	}
}

/* Reads what is there; 0, or -1 when the daemon closed the connection. */
static int on_input(struct cl *c)
{
	ssize_t n = recv(c->fd, c->in + c->have, sizeof(c->in) - c->have, MSG_DONTWAIT);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	if (n < 0)
		return 0;
	c->have += (size_t)n;
	while (c->have >= NELSSA_PROTO_HDR_BYTES) {
		struct nelssa_msg_hdr h;
		struct nelssa_msg r;
		size_t len;

		if (nelssa_msg_decode_hdr(c->in, &h))
			return -1;
		len = NELSSA_PROTO_HDR_BYTES + h.length;
		if (c->have < len)
			break;
		if (nelssa_msg_decode(c->in, len, &r))
			return -1;
		memmove(c->in, c->in + len, c->have - len);
		c->have -= len;
		advance(c, &r);
		if (c->fd < 0)
			return 0;
	}
	return 0;
}

static int load(int argc, char **argv)
{
	const unsigned int good = (unsigned int)atoi(argv[0]), silent = (unsigned int)atoi(argv[1]);
	const unsigned int vanish = (unsigned int)atoi(argv[2]), slow = (unsigned int)atoi(argv[3]);
	const int rounds = atoi(argv[4]);
	const size_t unread = (size_t)atoi(argv[5]) << 10;
	const unsigned int n = good + silent + vanish + slow + 1;
	struct cl *cl = calloc(n, sizeof(*cl));
	struct pollfd *pfd = calloc(n, sizeof(*pfd));
	unsigned int served = 0, refused_n = 0, silent_closed = 0, silent_to = 0;
	unsigned int vanished = 0, slow_closed = 0, slow_reset = 0, final_sent = 0;
	struct nelssa_msg st = { .type = NELSSA_MSG_STATS, .seq = 1 };
	const size_t reply_len = frame_bytes(NELSSA_MSG_STATS_REPLY);
	uint8_t one[FRAME_MAX];
	size_t one_len;
	pthread_t thread;
	uint64_t end;

	(void)argc;
	if (!cl || !pfd)
		return 1;
	one_len = encode(&st, one);
	for (burst_len = 0; burst_len + one_len <= sizeof(stats_burst); burst_len += one_len)
		memcpy(stats_burst + burst_len, one, one_len);
	/* Replies beyond what the daemon may hold and the socket takes in. */
	slow_total = ((unread + SLOW_TAKES) / reply_len + 1) * one_len;
	printf("# each slow reader sends %zu STATS requests (%zu bytes), for %zu bytes of "
	       "replies\n", slow_total / one_len, slow_total, slow_total / one_len * reply_len);
	if (pthread_create(&thread, NULL, prober, NULL))
		return 1;
	/* The probe from the first source (its own thread), the others over the rest in turn. */
	for (unsigned int i = 0; i < n; i++) {
		struct cl *c = &cl[i];

		c->role = i == 0 ? PROBE : i <= good ? GOOD : i <= good + silent ? SILENT :
			  i <= good + silent + vanish ? VANISH : SLOW;
		c->rounds = rounds;
		if (c->role == PROBE) {
			c->fd = -1;
			c->state = S_CLOSED;
			continue;
		}
		c->fd = dial_rcvbuf(1 + (i - 1) % (n_sources > 1 ? n_sources - 1 : 1),
				    c->role == SLOW ? SLOW_RCVBUF : 0);
		if (c->fd < 0)
			return 1;
		if (c->role != SILENT)
			start(c, NELSSA_MSG_HELLO);
	}
	printf("# %u connections open: %u good, %u silent, %u vanishing, %u slow readers, "
	       "1 probe\n", n, good, silent, vanish, slow);
	end = now_ms() + DEADLINE_MS;
	for (;;) {
		unsigned int busy = 0;

		for (unsigned int i = 0; i < n; i++) {
			struct cl *c = &cl[i];
			const int finished = c->state == S_CLOSED || c->state == S_DONE ||
					     (c->role == GOOD && c->state == S_WAIT);

			pfd[i] = (struct pollfd){ .fd = -1 };
			if (c->role != PROBE && !finished)
				busy++;
			if (c->fd < 0 || c->state == S_CLOSED)
				continue;
			pfd[i].fd = c->fd;
			/*
			 * A slow reader never reads: it sends while it may and
			 * has more, then only hears of the end (POLLERR, POLLHUP).
			 */
			pfd[i].events = c->role != SLOW || c->state != S_STATS ? POLLIN :
					c->sent < slow_total ? POLLOUT : 0;
		}
		if (!busy) {
			if (final_sent)
				break;
			/* Everyone else is done: the good ones' last round trip. */
			for (unsigned int i = 0; i < n; i++)
				if (cl[i].role == GOOD && cl[i].state == S_WAIT) {
					cl[i].state = S_FINAL;
					start(&cl[i], NELSSA_MSG_STATS);
				}
			final_sent = 1;
			continue;
		}
		if (now_ms() > end) {
			printf("# deadline passed with %u connections still busy\n", busy);
			break;
		}
		if (poll(pfd, n, 1000) < 0)
			return 1;
		for (unsigned int i = 0; i < n; i++) {
			struct cl *c = &cl[i];
			int gone = 0;

			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			if (c->role == SLOW && c->state == S_STATS) {
				ssize_t k = -1;

				if (pfd[i].revents & (POLLERR | POLLHUP))
					gone = 1;
				/*
				 * A send may take part of the burst: go on from
				 * there, or the next frame would start mid-frame
				 * and be closed as malformed, not for its replies.
				 */
				size_t len = burst_len - c->burst_off;
				socklen_t sl = sizeof(c->err);

				if (len > slow_total - c->sent)
					len = slow_total - c->sent;
				if (!gone && len)
					k = send(c->fd, stats_burst + c->burst_off, len,
						 MSG_NOSIGNAL | MSG_DONTWAIT);
				if (k >= 0) {
					c->burst_off = (c->burst_off + (size_t)k) % burst_len;
					c->sent += (size_t)k;
				} else if (!gone && len && errno != EAGAIN && errno != EWOULDBLOCK) {
					gone = 1;
					c->err = -errno;
				}
				/* How it ended: the reset the daemon owes it, or else. */
				if (gone && !c->err && !getsockopt(c->fd, SOL_SOCKET, SO_ERROR,
								   &c->err, &sl))
					c->err = -c->err;
			} else {
				gone = on_input(c) < 0;
			}
			if (!gone)
				continue;
			if (c->role == SILENT) {
				silent_closed++;
				silent_to += c->err == -ETIMEDOUT;
			} else if (c->role == SLOW) {
				slow_closed++;
				slow_reset += c->err == -ECONNRESET;
				if (c->err != -ECONNRESET)
					printf("# a slow reader ended with %d, not a reset\n", c->err);
			} else {
				printf("# connection %d (role %d) closed by the daemon in "
				       "state %d\n", c->fd, c->role, c->state);
			}
			close(c->fd);
			c->fd = -1;
			c->state = S_CLOSED;
		}
	}
	probe.stop = 1;
	pthread_join(thread, NULL);
	for (unsigned int i = 0; i < n; i++) {
		const struct cl *c = &cl[i];

		if (c->role == GOOD && c->state == S_DONE && !c->refused)
			served++;
		if (c->refused)
			refused_n++;
		if (c->role == VANISH && c->state == S_CLOSED && c->session)
			vanished++;
	}
	printf("result good=%u served=%u refused=%u silent_closed=%u silent_etimedout=%u "
	       "vanished=%u slow_closed=%u slow_reset=%u probes=%u probe_alive=%d "
	       "probe_max_ms=%llu\n", good, served, refused_n, silent_closed, silent_to, vanished,
	       slow_closed, slow_reset, probe.n, probe.alive, (unsigned long long)probe.max_ms);
	for (unsigned int i = 0; i < n; i++)
		if (cl[i].fd >= 0)
			close(cl[i].fd);
	free(cl);
	free(pfd);
	return 0;
}

/* ---- the small modes ---- */

static int open_hello(unsigned int src)
{
	int fd = dial(src);

	if (fd >= 0 && hello(fd)) {
		printf("# HELLO from source %u failed\n", src);
		close(fd);
		return -1;
	}
	return fd;
}

static int mode_stats(void)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS }, r;
	int fd = open_hello(0);

	if (fd < 0 || call(fd, &m, &r) || r.type != NELSSA_MSG_STATS_REPLY)
		return 1;
	printf("result sessions=%u steps=%llu items=%llu kv_bytes=%llu t_device=%llu\n",
	       r.u.stats.sessions, (unsigned long long)r.u.stats.steps,
	       (unsigned long long)r.u.stats.items, (unsigned long long)r.u.stats.kv_bytes,
	       (unsigned long long)r.u.stats.t_device);
	close(fd);
	return 0;
}

/* Sessions of the daemon (an admin's STATS), or -1. */
static long daemon_sessions(int fd)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS }, r;

	return call(fd, &m, &r) || r.type != NELSSA_MSG_STATS_REPLY ? -1 : (long)r.u.stats.sessions;
}

/*
 * Whether @fd may create a session of @cap tokens now; it is closed again
 * and waited for until the daemon has freed it: @admin's STATS (an admin
 * connection's: the daemon's) back to @base sessions.
 */
static int fits(int fd, uint64_t cap, int admin, long base)
{
	struct nelssa_msg r;
	uint64_t s = create(fd, cap, &r);
	const uint64_t end = now_ms() + DEADLINE_MS;

	if (!s)
		return 0;
	simple(fd, NELSSA_MSG_CLOSE, s, 0, 0);
	while (daemon_sessions(admin) > base && now_ms() < end)
		usleep(10000);	/* polling for the reclaim, bounded */
	return 1;
}

/* The largest capacity @fd may create a session of now, to 1 %; 0: not even 1024. */
static uint64_t largest(int fd, int admin)
{
	const long base = daemon_sessions(admin);
	uint64_t lo = 1024, hi;

	if (!fits(fd, lo, admin, base))
		return 0;
	for (hi = lo * 2; fits(fd, hi, admin, base); hi *= 2)
		lo = hi;
	while (hi - lo > lo / 100) {
		const uint64_t mid = lo + (hi - lo) / 2;

		if (fits(fd, mid, admin, base))
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

static int mode_maxcap(void)
{
	int fd = open_hello(0);

	if (fd < 0)
		return 1;
	printf("result maxcap=%llu\n", (unsigned long long)largest(fd, fd));
	close(fd);
	return 0;
}

static int mode_sessions(unsigned int max)
{
	struct nelssa_msg r;
	int a = open_hello(1), b = open_hello(2), ok = a >= 0 && b >= 0;

	for (unsigned int i = 0; ok && i < max; i++)
		ok = create(a, 1024, &r) != 0;
	if (ok)
		ok = !create(a, 1024, &r) && refused(&r, -EDQUOT, "max-sessions-per-conn");
	if (ok)
		ok = create(b, 1024, &r) != 0;
	if (ok)
		ok = simple(a, NELSSA_MSG_STATS, 0, 0, 0) == 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_requests(unsigned int max)
{
	struct nelssa_msg r;
	int a = open_hello(1), ok = a >= 0;
	uint64_t s = ok ? create(a, 1u << 16, &r) : 0;

	ok = s != 0;
	for (unsigned int i = 0; ok && i < max; i++)
		ok = simple(a, NELSSA_MSG_REQ_ALLOC, s, 100 + i, 16) == 0;
	if (ok) {
		struct nelssa_msg m = { .type = NELSSA_MSG_REQ_ALLOC, .seq = 4 };

		m.u.req.session = s;
		m.u.req.request = 99;
		m.u.req.max_tokens = 16;
		m.u.req.max_clusters = 2;
		ok = !call(a, &m, &r) && refused(&r, -EDQUOT, "max-requests-per-session");
	}
	if (ok)
		ok = simple(a, NELSSA_MSG_REQ_FREE, s, 100, 0) == 0 &&
		     simple(a, NELSSA_MSG_REQ_ALLOC, s, 99, 16) == 0 &&
		     simple(a, NELSSA_MSG_CLOSE, s, 0, 0) == 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_memory(void)
{
	struct nelssa_msg r;
	int a = open_hello(1), b = open_hello(2), admin = open_hello(0);
	int ok = a >= 0 && b >= 0 && admin >= 0;
	uint64_t lo = ok ? largest(a, admin) : 0, cap, s1 = 0;

	/* Just above the largest, the limit is what refuses. */
	ok = ok && lo;
	if (ok)
		ok = !create(a, lo + lo / 50 + 1, &r) &&
		     refused(&r, -EDQUOT, "max-memory-per-conn");
	cap = lo / 10 * 6;
	printf("# the largest session a connection may hold: %llu tokens; trying two of %llu\n",
	       (unsigned long long)lo, (unsigned long long)cap);
	if (ok)
		ok = (s1 = create(a, cap, &r)) != 0;
	if (ok)
		ok = !create(a, cap, &r) && refused(&r, -EDQUOT, "max-memory-per-conn");
	if (ok)
		ok = create(b, cap, &r) != 0;
	if (ok)
		ok = simple(a, NELSSA_MSG_REQ_ALLOC, s1, 1, 64) == 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_per_addr(unsigned int max)
{
	struct nelssa_msg r;
	int ok = 1, fd, other;

	for (unsigned int i = 0; ok && i < max; i++)
		ok = open_hello(1) >= 0;
	fd = ok ? dial(1) : -1;
	if (fd < 0 || wait_closed(fd, &r) || !refused(&r, -EBUSY, "max-conns-per-addr"))
		ok = 0;
	other = ok ? open_hello(2) : -1;
	ok = ok && other >= 0 && simple(other, NELSSA_MSG_STATS, 0, 0, 0) == 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_conns(unsigned int max)
{
	struct nelssa_msg r;
	int ok = 1, fd;

	for (unsigned int i = 0; ok && i < max; i++)
		ok = open_hello(i) >= 0;
	fd = ok ? dial(max) : -1;
	if (fd < 0 || wait_closed(fd, &r) || !refused(&r, -EBUSY, "max-conns"))
		ok = 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_frame_size(void)
{
	uint8_t hdr[FRAME_MAX];
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS }, r;
	int fd = open_hello(1), ok;

	if (fd < 0)
		return 1;
	encode(&m, hdr);	/* the header of a STATS, its length made 1 MiB */
	hdr[8] = 0;
	hdr[9] = 0;
	hdr[10] = 0x10;
	hdr[11] = 0;
	ok = send(fd, hdr, NELSSA_PROTO_HDR_BYTES, MSG_NOSIGNAL) == NELSSA_PROTO_HDR_BYTES &&
	     !wait_closed(fd, &r) && refused(&r, -EMSGSIZE, "");
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_slowloris(void)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO }, r;
	uint8_t buf[FRAME_MAX];
	size_t len, i;
	int fd = dial(1), ok = 0;

	if (fd < 0)
		return 1;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	len = encode(&m, buf);
	for (i = 0; i < len - 1; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (send(fd, buf + i, 1, MSG_NOSIGNAL) != 1 || poll(&p, 1, 100) != 0)
			break;	/* the daemon spoke (or closed): the ERROR is there */
	}
	printf("# sent %zu of the HELLO's %zu bytes\n", i + 1, len);
	if (i < len - 1)
		ok = !wait_closed(fd, &r) && refused(&r, -ETIMEDOUT, "frame-timeout-ms");
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_idle(void)
{
	struct nelssa_msg r;
	int a = open_hello(1), b = open_hello(2), ok = a >= 0 && b >= 0;

	if (ok)
		ok = create(b, 1024, &r) != 0;
	if (ok)
		ok = !wait_closed(a, &r) && refused(&r, -ETIMEDOUT, "idle-timeout-ms");
	if (ok)
		ok = simple(b, NELSSA_MSG_STATS, 0, 0, 0) == 0;
	printf("result ok=%d\n", ok);
	return 0;
}

static int mode_untaken(void)
{
	const struct nelssa_msg st = { .type = NELSSA_MSG_STATS, .seq = 3 };
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO, .seq = 4 }, r;
	uint8_t one[FRAME_MAX], *all = NULL;
	int a = dial_rcvbuf(1, SLOW_RCVBUF), b = open_hello(2), ok, err = 0, q = 1;
	const size_t one_len = encode(&st, one);
	const size_t reply_len = frame_bytes(NELSSA_MSG_STATS_REPLY);
	/* Twice what its socket may take in: about 130 KiB, under the default 256. */
	const size_t k = 2 * SLOW_TAKES / reply_len;
	size_t len;
	unsigned int rounds;
	struct pollfd p = { .fd = a };
	socklen_t sl = sizeof(err);

	ok = a >= 0 && b >= 0 && !hello(a) && create(a, 1024, &r) != 0 &&
	     (all = malloc(k * one_len)) != NULL;
	for (size_t i = 0; ok && i < k; i++)
		memcpy(all + i * one_len, one, one_len);
	ok = ok && send(a, all, k * one_len, MSG_NOSIGNAL) == (ssize_t)(k * one_len);
	/* All of them in the daemon's socket (acknowledged), 2 minutes at most. */
	for (int i = 0; ok && q && i < 120000; i++)
		if (ioctl(a, SIOCOUTQ, &q) || (q && usleep(1000)))
			ok = 0;
	ok = ok && !q;
	/*
	 * The daemon reads at most a frame's worth from a connection a turn of
	 * its loop, and a round trip on another connection takes a turn at
	 * least: after these, every STATS of a's was read and handed to the
	 * poller, whose FIFO answered them before b's last -- so all of a's
	 * replies are queued before its second HELLO comes.
	 */
	rounds = (unsigned int)(k * one_len / (FRAME_MAX - one_len)) + 2;
	for (unsigned int i = 0; ok && i < rounds; i++)
		ok = simple(b, NELSSA_MSG_STATS, 0, 0, 0) == 0;
	printf("# %zu STATS (%zu bytes of replies) left unread, %u round trips on another "
	       "connection after them\n", k, k * reply_len, rounds);
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	len = encode(&m, one);
	ok = ok && send(a, one, len, MSG_NOSIGNAL) == (ssize_t)len;
	/* Nothing is read: only an error or a hang-up ends this wait. */
	ok = ok && poll(&p, 1, DEADLINE_MS) == 1 &&
	     !getsockopt(a, SOL_SOCKET, SO_ERROR, &err, &sl);
	printf("# the connection ended with %s\n", ok ? strerror(err) : "nothing in time");
	ok = ok && err == ECONNRESET;
	printf("result ok=%d\n", ok);
	free(all);
	if (a >= 0)
		close(a);
	if (b >= 0)
		close(b);
	return 0;
}

static int mode_fd_flood(unsigned int n)
{
	int *fds = calloc(n, sizeof(*fds));
	uint8_t buf[FRAME_MAX];
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO };
	unsigned int served = 0, emfile = 0, busy = 0, hung = 0, other = 0;
	size_t len;

	if (!fds)
		return 1;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	len = encode(&m, buf);
	for (unsigned int i = 0; i < n; i++) {
		fds[i] = dial(i);
		if (fds[i] < 0)
			return 1;
		send(fds[i], buf, len, MSG_NOSIGNAL);
	}
	/* Everyone hears something: HELLO_OK, or an ERROR and the end. */
	for (unsigned int i = 0; i < n; i++) {
		struct nelssa_msg r;
		int ret = recv_msg(fds[i], &r, DEADLINE_MS);

		if (!ret && r.type == NELSSA_MSG_HELLO_OK)
			served++;
		else if (!ret && r.type == NELSSA_MSG_ERROR && r.u.error.code == -EMFILE)
			emfile++;
		else if (!ret && r.type == NELSSA_MSG_ERROR && r.u.error.code == -EBUSY)
			busy++;
		else if (ret == -ETIMEDOUT)
			hung++;
		else
			other++;	/* closed without a word (a reset beat the ERROR) */
	}
	printf("result served=%u emfile=%u busy=%u hung=%u other=%u\n", served, emfile, busy, hung,
	       other);
	for (unsigned int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	return 0;
}

int main(int argc, char **argv)
{
	char *list, *tok, *save = NULL;
	const char *mode;
	unsigned int arg;

	if (argc < 5) {
		fprintf(stderr, "usage: limits_client HOST PORT SOURCES MODE [ARGS...]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	daemon_addr.sin_family = AF_INET;
	daemon_addr.sin_port = htons((uint16_t)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &daemon_addr.sin_addr) != 1)
		return 2;
	list = strdup(argv[3]);
	for (tok = strtok_r(list, ",", &save); tok && n_sources < 64;
	     tok = strtok_r(NULL, ",", &save))
		if (inet_pton(AF_INET, tok, &sources[n_sources++]) != 1)
			return 2;
	free(list);
	if (!n_sources)
		return 2;
	mode = argv[4];
	arg = argc > 5 ? (unsigned int)atoi(argv[5]) : 0;
	if (!strcmp(mode, "load") && argc == 11)
		return load(argc - 5, argv + 5);
	if (!strcmp(mode, "stats"))
		return mode_stats();
	if (!strcmp(mode, "maxcap"))
		return mode_maxcap();
	if (!strcmp(mode, "sessions"))
		return mode_sessions(arg);
	if (!strcmp(mode, "requests"))
		return mode_requests(arg);
	if (!strcmp(mode, "memory"))
		return mode_memory();
	if (!strcmp(mode, "per-addr"))
		return mode_per_addr(arg);
	if (!strcmp(mode, "conns"))
		return mode_conns(arg);
	if (!strcmp(mode, "frame-size"))
		return mode_frame_size();
	if (!strcmp(mode, "slowloris"))
		return mode_slowloris();
	if (!strcmp(mode, "untaken"))
		return mode_untaken();
	if (!strcmp(mode, "idle"))
		return mode_idle();
	if (!strcmp(mode, "fd-flood"))
		return mode_fd_flood(arg);
	fprintf(stderr, "limits_client: unknown mode '%s'\n", mode);
	return 2;
}
