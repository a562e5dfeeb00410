// SPDX-License-Identifier: MIT
/*
 * A stateful, out-of-process fuzzer of a live nelssad (tests/fuzz/README.md).
 *
 * Several "actors" -- each a control connection (TCP) and, when it wants
 * one, a UCX worker of its own with an endpoint to the daemon's worker
 * address from HELLO_OK -- take random turns from one seeded generator:
 * HELLO (with the actor's worker address, without, twice, with a mangled
 * version range or mutated bytes), SESSION_CREATE of random and edge shapes,
 * REQ_ALLOC / REQ_FREE of random ids and sizes (beyond capacity too),
 * CLOSE and STATS of their own sessions, others' and made-up ones, KV and
 * STEP active messages (eager and rendezvous, up to megabytes) built
 * valid with the protocol's encoders and then mutated -- session, token,
 * request, ranges, lengths, header length, data length -- plus truncated
 * frames, garbage, abrupt disconnects (FIN and RST) and endpoint closes at
 * any point.  Everything runs on one thread, and a valid control request
 * waits for its reply, so a run is a reproducible sequence of actions for
 * a seed (the daemon's ids and timings aside).
 *
 * Every answer is checked: a control reply is a frame that decodes, of a
 * type that answers the request, in sequence, its error code a negative
 * errno; a request naming a session of another connection is refused with
 * -ENOENT; a KV ack and a step reply have exact headers, a status that is
 * 0 or a negative errno, a cookie or step id that was sent, a step reply's
 * data matching its items; a KV or STEP message whose session and token do
 * not both belong to one session is refused with -ENOENT.  A valid control
 * request unanswered for 30 s is a hang.  Every 2 s, and at the end, a
 * fresh connection must be answered (HELLO, STATS) and the daemon (--pid)
 * must be alive; at the end, with every actor gone, the daemon must
 * reclaim every session (STATS: 0).
 *
 * --sequence NAME runs one of the fixed sequences below instead: the
 * minimised regressions of what the fuzzer found (see the README).
 *
 * usage: fuzz_live HOST PORT [--seed N] [--iterations N] [--seconds N]
 *		    [--actors N] [--pid PID] [--trace] [--gentle] [--sequence NAME]
 *
 * Exit 0: no finding; 1: a protocol violation (the last actions are
 * printed); 3: the daemon died or hung; 2: usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/proto.h>

#define MAX_ACTORS 16
#define MAX_SESS 8
#define MAX_REQ 8
#define FRAME_MAX (NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD)
#define REPLY_WAIT_MS 30000
#define MAX_INFLIGHT 32

/* The generator: splitmix64, so a seed names a run. */
static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

static int chance(uint32_t percent)
{
	return below(100) < percent;
}

/* An edge value of a field of @bits bits, or a random one. */
static uint64_t edge(unsigned int bits)
{
	static const uint64_t e[] = { 0, 1, 2, 3, 7, 8, 63, 64, 255, 256, 1023, 1024, 4095, 4096,
				      65535, 65536, 0x7fffffffull, 0x80000000ull, 0xffffffffull,
				      0x100000000ull, 0x7fffffffffffffffull, UINT64_MAX };
	const uint64_t mask = bits >= 64 ? UINT64_MAX : (1ull << bits) - 1;

	return (chance(70) ? e[below(sizeof(e) / sizeof(e[0]))] : rnd()) & mask;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* What happened last, printed with a finding. */
#define TRACE_RING 64
static char trace_ring[TRACE_RING][160];
static uint64_t n_actions;
static int trace_all;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
	char *line = trace_ring[n_actions % TRACE_RING];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(trace_ring[0]), fmt, ap);
	va_end(ap);
	if (trace_all) {
		struct timespec ts;

		/* Wall-clock time as in nelssad's log, to line the two up. */
		clock_gettime(CLOCK_REALTIME, &ts);
		printf("# [%" PRIu64 " %lld.%03ld] %s\n", n_actions, (long long)ts.tv_sec,
		       ts.tv_nsec / 1000000, line);
	}
}

static void dump_trace(void)
{
	uint64_t from = n_actions >= TRACE_RING ? n_actions - TRACE_RING + 1 : 0;

	printf("# the last actions:\n");
	for (uint64_t i = from; i <= n_actions; i++)
		if (trace_ring[i % TRACE_RING][0])
			printf("#   [%" PRIu64 "] %s\n", i, trace_ring[i % TRACE_RING]);
}

static int violations;
static uint64_t seed;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void violation(const char *fmt, ...)
{
	va_list ap;

	printf("# VIOLATION: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (seed %" PRIu64 ", action %" PRIu64 ")\n", seed, n_actions);
	if (!violations++)
		dump_trace();
}

static int errno_ok(int32_t code)
{
	return code < 0 && code >= -4095;
}

/*
 * Values sent in KV and STEP headers (any 8-byte field): an ack's cookie
 * or a reply's step id must be one of them (or 0).  An open-addressing set.
 */
#define SENT_SLOTS (1u << 16)
static uint64_t sent_vals[SENT_SLOTS];
static uint32_t n_sent_vals;

static void sent_add(uint64_t v)
{
	uint32_t i = (uint32_t)(v * 0x9e3779b97f4a7c15ull >> 48);

	if (!v || n_sent_vals > SENT_SLOTS / 2)
		return;
	while (sent_vals[i] && sent_vals[i] != v)
		i = (i + 1) & (SENT_SLOTS - 1);
	if (!sent_vals[i])
		n_sent_vals++;
	sent_vals[i] = v;
}

static int sent_has(uint64_t v)
{
	uint32_t i = (uint32_t)(v * 0x9e3779b97f4a7c15ull >> 48);

	if (!v || n_sent_vals > SENT_SLOTS / 2)
		return 1;
	while (sent_vals[i]) {
		if (sent_vals[i] == v)
			return 1;
		i = (i + 1) & (SENT_SLOTS - 1);
	}
	return 0;
}

/* Every session the daemon handed out in this run, with its token. */
#define MAX_KNOWN 4096
static struct {
	uint64_t id, token;
} known[MAX_KNOWN];
static uint32_t n_known;

static int known_pair(uint64_t id, uint64_t token)
{
	for (uint32_t i = 0; i < n_known; i++)
		if (known[i].id == id && known[i].token == token)
			return 1;
	return 0;
}

struct sess {
	uint64_t id, token;
	struct nelssa_shape shape;
	uint8_t placement;
	uint32_t max_batch, max_sel;
	uint64_t capacity;
	uint64_t req[MAX_REQ];
	uint32_t req_tokens[MAX_REQ], req_clusters[MAX_REQ];
	uint8_t stored[MAX_REQ][4][4];	/* clusters sent cleanly per (layer, head) < 4 */
	uint32_t n_req;
};

struct expect {
	uint32_t seq;
	uint16_t type;
	int must_enoent;	/* names a session that is not this connection's */
	int done;
};

struct actor {
	int idx;
	int fd;
	int hello;		/* HELLO_OK seen */
	int tainted;		/* a frame that was not valid went out: no order checks */
	int closing;		/* the daemon must close it (a second HELLO) */
	uint32_t seq;
	struct expect exp[64];
	uint32_t n_exp;
	uint8_t rbuf[FRAME_MAX];
	size_t rhave;
	uint16_t devices;
	uint8_t daddr[NELSSA_PROTO_MAX_ADDR];
	size_t daddr_len;
	ucp_worker_h worker;
	ucp_ep_h ep;
	int ep_failed;
	uint32_t inflight;	/* sends not completed */
	struct sess s[MAX_SESS];
	uint32_t n_sess;
};

/* A send in flight: UCX reads @buf until its callback. */
struct send_op {
	struct actor *a;
	struct send_op *next;
	int done;
	uint8_t *buf;
};

/* A step sent: what its reply must look like. */
#define STEP_RING 4096
static struct step_rec {
	uint64_t id;
	uint32_t nr_items, out_bytes;	/* per item */
	int valid_pair;			/* session and token of one session */
	int must_enoent;		/* ... of none: refused -ENOENT */
} steps_sent[STEP_RING];
static uint32_t n_steps_sent;

/* A KV message sent: whether its ack must say -ENOENT. */
static struct kv_rec {
	uint64_t cookie;
	int must_enoent;	/* its session and token are no session's */
} kvs_sent[STEP_RING];
static uint32_t n_kvs_sent;

static struct actor actors[MAX_ACTORS];
static uint32_t n_actors = 4;
static ucp_context_h ucp;
static struct send_op *ops;
static int gentle;	/* --gentle: no worker goes while its wire-up may run (finding F2) */
static const char *host, *port;
static pid_t daemon_pid;

static struct {
	uint64_t frames, replies, errors, acks, ack_errors, step_replies, step_errors;
	uint64_t kv_sent, steps_sent, clean_steps, steps_ok, big_sent, sessions, connects, resets;
	uint64_t ep_closes, probes;
} st;

/* Control path */

static int tcp_open(void)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int fd, one = 1;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd >= 0) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	}
	return fd;
}

static int send_bytes(int fd, const uint8_t *p, size_t len)
{
	const uint64_t end = now_ms() + 10000;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (now_ms() > end)
			return -1;
		poll(&pfd, 1, 100);
	}
	return 0;
}

static void drop_sessions(struct actor *a)
{
	a->n_sess = 0;
}

static void actor_close_fd(struct actor *a, int rst)
{
	if (a->fd < 0)
		return;
	if (rst) {
		struct linger l = { 1, 0 };

		setsockopt(a->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	}
	close(a->fd);
	a->fd = -1;
	a->hello = a->tainted = a->closing = 0;
	a->n_exp = 0;
	a->rhave = 0;
	drop_sessions(a);
}

static void check_frame(struct actor *a, const uint8_t *buf, size_t len)
{
	struct nelssa_msg m;
	struct expect *e = NULL;
	int ret = nelssa_msg_decode(buf, len, &m);

	st.replies++;
	if (ret) {
		violation("a%d: the daemon sent a frame that does not decode: %d (%s)", a->idx, ret,
			  strerror(-ret));
		return;
	}
	if (m.type != NELSSA_MSG_HELLO_OK && m.type != NELSSA_MSG_SESSION_OK &&
	    m.type != NELSSA_MSG_OK && m.type != NELSSA_MSG_STATS_REPLY &&
	    m.type != NELSSA_MSG_ERROR) {
		violation("a%d: the daemon sent %s, which answers nothing", a->idx,
			  nelssa_msg_type_str(m.type));
		return;
	}
	if (m.type == NELSSA_MSG_ERROR) {
		st.errors++;
		if (!errno_ok(m.u.error.code))
			violation("a%d: ERROR code %d is not a negative errno", a->idx,
				  m.u.error.code);
	}
	for (uint32_t i = 0; i < a->n_exp; i++)
		if (!a->exp[i].done) {
			e = &a->exp[i];
			break;
		}
	if (a->tainted) {
		if (e)
			e->done = 1;
	} else if (!e) {
		violation("a%d: a %s reply (seq %u) to no request", a->idx,
			  nelssa_msg_type_str(m.type), m.seq);
		return;
	} else {
		e->done = 1;
		if (m.seq != e->seq)
			violation("a%d: reply seq %u, expected %u", a->idx, m.seq, e->seq);
		if (m.type != NELSSA_MSG_ERROR &&
		    !((e->type == NELSSA_MSG_HELLO && m.type == NELSSA_MSG_HELLO_OK) ||
		      (e->type == NELSSA_MSG_SESSION_CREATE && m.type == NELSSA_MSG_SESSION_OK) ||
		      (e->type == NELSSA_MSG_STATS && m.type == NELSSA_MSG_STATS_REPLY) ||
		      ((e->type == NELSSA_MSG_REQ_ALLOC || e->type == NELSSA_MSG_REQ_FREE ||
			e->type == NELSSA_MSG_CLOSE) && m.type == NELSSA_MSG_OK)))
			violation("a%d: %s answered with %s", a->idx, nelssa_msg_type_str(e->type),
				  nelssa_msg_type_str(m.type));
		if (e->must_enoent && (m.type != NELSSA_MSG_ERROR || m.u.error.code != -ENOENT))
			violation("a%d: %s naming a session of another connection gave %s %d, not "
				  "-ENOENT", a->idx, nelssa_msg_type_str(e->type),
				  nelssa_msg_type_str(m.type),
				  m.type == NELSSA_MSG_ERROR ? m.u.error.code : 0);
		if (a->closing && m.type != NELSSA_MSG_ERROR)
			violation("a%d: served after a second HELLO", a->idx);
	}
	switch (m.type) {
	case NELSSA_MSG_HELLO_OK:
		if (m.u.hello_ok.version != NELSSA_PROTO_VERSION || !m.u.hello_ok.devices ||
		    !m.u.hello_ok.addr_len)
			violation("a%d: HELLO_OK of version %u, %u devices, address of %u bytes",
				  a->idx, m.u.hello_ok.version, m.u.hello_ok.devices,
				  m.u.hello_ok.addr_len);
		a->hello = 1;
		a->devices = m.u.hello_ok.devices;
		a->daddr_len = m.u.hello_ok.addr_len;
		memcpy(a->daddr, m.u.hello_ok.addr, a->daddr_len);
		break;
	case NELSSA_MSG_SESSION_OK:
		if (!m.u.session_ok.session || !m.u.session_ok.token ||
		    m.u.session_ok.devices != a->devices)
			violation("a%d: SESSION_OK session %" PRIu64 ", %u devices", a->idx,
				  m.u.session_ok.session, m.u.session_ok.devices);
		if (known_pair(m.u.session_ok.session, m.u.session_ok.token))
			violation("a%d: session %" PRIu64 " handed out twice", a->idx,
				  m.u.session_ok.session);
		if (n_known < MAX_KNOWN) {
			known[n_known].id = m.u.session_ok.session;
			known[n_known++].token = m.u.session_ok.token;
		}
		st.sessions++;
		break;
	case NELSSA_MSG_STATS_REPLY:
		if (m.u.stats.sessions > 4096 || !m.u.stats.devices)
			violation("a%d: STATS_REPLY of %u sessions, %u devices", a->idx,
				  m.u.stats.sessions, m.u.stats.devices);
		break;
	default:
		break;
	}
}

/* Reads what @a's connection has; checks every whole frame. */
static void read_ctl(struct actor *a)
{
	for (;;) {
		ssize_t n = recv(a->fd, a->rbuf + a->rhave, sizeof(a->rbuf) - a->rhave, MSG_DONTWAIT);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			if (a->rhave)
				violation("a%d: the connection closed inside a frame (%zu bytes)",
					  a->idx, a->rhave);
			actor_close_fd(a, 0);
			return;
		}
		if (n < 0)
			return;
		a->rhave += (size_t)n;
		while (a->rhave >= NELSSA_PROTO_HDR_BYTES) {
			struct nelssa_msg_hdr h;
			int ret = nelssa_msg_decode_hdr(a->rbuf, &h);
			size_t len;

			if (ret) {
				violation("a%d: a reply header that does not decode: %d", a->idx, ret);
				actor_close_fd(a, 0);
				return;
			}
			len = NELSSA_PROTO_HDR_BYTES + h.length;
			if (a->rhave < len)
				break;
			check_frame(a, a->rbuf, len);
			if (a->fd < 0)
				return;
			memmove(a->rbuf, a->rbuf + len, a->rhave - len);
			a->rhave -= len;
		}
	}
}

static void ops_reap(void)
{
	for (struct send_op **pp = &ops; *pp;) {
		struct send_op *op = *pp;

		if (op->done) {
			*pp = op->next;
			free(op->buf);
			free(op);
		} else {
			pp = &op->next;
		}
	}
}

/* Progresses every worker and reads every connection for about @ms. */
static void pump(uint32_t ms)
{
	const uint64_t end = now_ms() + ms;

	do {
		struct pollfd pfd[MAX_ACTORS];
		uint32_t np = 0, map[MAX_ACTORS];

		for (uint32_t i = 0; i < n_actors; i++)
			if (actors[i].worker)
				while (ucp_worker_progress(actors[i].worker))
					;
		for (uint32_t i = 0; i < n_actors; i++)
			if (actors[i].fd >= 0) {
				pfd[np] = (struct pollfd){ .fd = actors[i].fd, .events = POLLIN };
				map[np++] = i;
			}
		if (poll(pfd, np, np ? 1 : 0) > 0)
			for (uint32_t i = 0; i < np; i++)
				if (pfd[i].revents)
					read_ctl(&actors[map[i]]);
		if (!np && ms)
			usleep(500);
	} while (now_ms() < end);
	ops_reap();
}

/* Sends frame @buf; with @await, waits for the reply to @seq (a hang otherwise). */
static int ctl_send(struct actor *a, const uint8_t *buf, size_t len, uint32_t seq, uint16_t type,
		    int must_enoent, int valid)
{
	struct expect *e;
	uint64_t end;

	if (a->fd < 0)
		return -1;
	if (!valid)
		a->tainted = 1;
	if (a->n_exp == sizeof(a->exp) / sizeof(a->exp[0])) {
		uint32_t k = 0;

		for (uint32_t i = 0; i < a->n_exp; i++)
			if (!a->exp[i].done)
				a->exp[k++] = a->exp[i];
		a->n_exp = k;
		if (k == sizeof(a->exp) / sizeof(a->exp[0]))
			a->n_exp = 0;
	}
	e = &a->exp[a->n_exp++];
	*e = (struct expect){ seq, type, must_enoent, 0 };
	st.frames++;
	if (send_bytes(a->fd, buf, len)) {
		actor_close_fd(a, 0);
		return -1;
	}
	if (!valid || a->tainted) {
		/*
		 * The daemon answers ERROR and closes, waits for more bytes, or
		 * serves what still decodes: give it a moment, then leave, so
		 * that the other connections stay ones whose order is checked.
		 */
		const uint64_t until = now_ms() + 20 + below(200);

		while (a->fd >= 0 && now_ms() < until)
			pump(1);
		if (a->fd >= 0 && chance(80)) {
			note("a%d leaves its tainted connection", a->idx);
			actor_close_fd(a, chance(30));
		}
		return 0;
	}
	end = now_ms() + REPLY_WAIT_MS;
	while (a->fd >= 0 && !e->done && now_ms() < end)
		pump(1);
	if (a->fd >= 0 && !e->done) {
		violation("a%d: no reply to %s (seq %u) in %u s: the daemon hangs", a->idx,
			  nelssa_msg_type_str(type), seq, REPLY_WAIT_MS / 1000);
		return -1;
	}
	return 0;
}

/* Encodes @m (seq set here) and sends it, mutated now and then. */
static int ctl_msg(struct actor *a, struct nelssa_msg *m, int must_enoent, int mutate)
{
	uint8_t buf[FRAME_MAX];
	size_t len;
	int valid = 1;

	m->seq = ++a->seq;
	if (nelssa_msg_encode(m, buf, sizeof(buf), &len)) {
		/* The encoder refuses what the decoder would: send it by hand, it must be refused. */
		struct nelssa_msg ok = *m;

		memset(&ok.u, 0, sizeof(ok.u));
		ok.u.session.session = 1;
		if (m->type == NELSSA_MSG_HELLO)
			ok.u.hello.min_version = ok.u.hello.max_version = NELSSA_PROTO_VERSION;
		if (m->type == NELSSA_MSG_SESSION_CREATE) {
			ok.u.create.shape = (struct nelssa_shape){ 1, 1, 1, 16, 1 };
			ok.u.create.max_batch = ok.u.create.max_sel = 1;
			ok.u.create.capacity_tokens = 16;
		}
		if (nelssa_msg_encode(&ok, buf, sizeof(buf), &len))
			return -1;
		mutate = 1;
	}
	if (mutate) {
		const uint32_t k = 1 + below(4);

		valid = 0;
		for (uint32_t i = 0; i < k; i++) {
			const size_t at = chance(80) && len > NELSSA_PROTO_HDR_BYTES ?
				NELSSA_PROTO_HDR_BYTES + below((uint32_t)(len - NELSSA_PROTO_HDR_BYTES)) :
				below((uint32_t)len);

			buf[at] = chance(50) ? (uint8_t)rnd() : buf[at] ^ (uint8_t)(1u << below(8));
		}
		if (chance(20)) {
			/* A length that does not match the payload. */
			uint32_t l = (uint32_t)(len - NELSSA_PROTO_HDR_BYTES) + below(9) - 4;

			if (chance(30))
				l = (uint32_t)edge(32);
			memcpy(buf + 8, &l, 4);
		}
	}
	note("a%d %s%s seq %u%s", a->idx, mutate ? "mutated " : "", nelssa_msg_type_str(m->type),
	     m->seq, must_enoent ? " (another's session)" : "");
	if (ctl_send(a, buf, len, m->seq, m->type, must_enoent && valid, valid))
		return -1;
	return valid ? 0 : 1;
}

/* Data path */

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param, unsigned int id)
{
	struct actor *a = arg;

	(void)data;
	if (id == NELSSA_AM_KV_ACK) {
		struct nelssa_ack_hdr h;

		st.acks++;
		if (nelssa_ack_hdr_get(header, header_length, &h) || length) {
			violation("a%d: a KV ack of %zu+%zu bytes", a->idx, header_length, length);
			return UCS_OK;
		}
		if (h.status && !errno_ok(h.status))
			violation("a%d: KV ack status %d", a->idx, h.status);
		if (h.status)
			st.ack_errors++;
		if (!sent_has(h.cookie))
			violation("a%d: KV ack of cookie %" PRIu64 ", never sent", a->idx, h.cookie);
		for (uint32_t i = 0; i < STEP_RING && i < n_kvs_sent; i++)
			if (h.cookie && kvs_sent[i].cookie == h.cookie) {
				if (kvs_sent[i].must_enoent && h.status != -ENOENT)
					violation("a%d: KV (cookie %" PRIu64 ") naming no session with "
						  "its token acked %d, not -ENOENT", a->idx, h.cookie,
						  h.status);
				break;
			}
		return UCS_OK;
	}
	if (id == NELSSA_AM_STEP_REPLY) {
		struct nelssa_reply_hdr h;
		const struct step_rec *r = NULL;

		st.step_replies++;
		if (nelssa_reply_hdr_get(header, header_length, &h)) {
			violation("a%d: a step reply header of %zu bytes", a->idx, header_length);
			return UCS_OK;
		}
		if (h.status && !errno_ok(h.status))
			violation("a%d: step reply status %d", a->idx, h.status);
		if (h.status)
			st.step_errors++;
		else
			st.steps_ok++;
		for (uint32_t i = 0; h.step && i < STEP_RING && i < n_steps_sent && !r; i++)
			if (steps_sent[i].id == h.step)
				r = &steps_sent[i];
		if (!r && !sent_has(h.step)) {
			violation("a%d: a reply to step %" PRIu64 ", never sent", a->idx, h.step);
			return UCS_OK;
		}
		if (h.status && (h.nr_items || length))
			violation("a%d: a refused step's reply carries %u items, %zu bytes", a->idx,
				  h.nr_items, length);
		if (r && r->must_enoent && h.status != -ENOENT)
			violation("a%d: step %" PRIu64 " naming no session with its token answered %d, "
				  "not -ENOENT", a->idx, h.step, h.status);
		if (!h.status && r && !r->valid_pair)
			violation("a%d: step %" PRIu64 " served without its session's token", a->idx,
				  h.step);
		if (!h.status && r && (h.nr_items != r->nr_items ||
				       (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
					length != (uint64_t)r->nr_items * r->out_bytes)))
			violation("a%d: step %" PRIu64 " of %u items answered with %u, %zu bytes",
				  a->idx, h.step, r->nr_items, h.nr_items, length);
		/* Rendezvous data is not fetched: UCX drops it. */
		return UCS_OK;
	}
	violation("a%d: the daemon sent an active message of id %u", a->idx, id);
	return UCS_OK;
}

#define AM_CB(n)                                                                            \
	static ucs_status_t am_##n(void *arg, const void *h, size_t hl, void *d, size_t l,   \
				   const ucp_am_recv_param_t *p)                             \
	{                                                                                    \
		return on_am(arg, h, hl, d, l, p, n);                                        \
	}
AM_CB(0)
AM_CB(1)
AM_CB(2)
AM_CB(3)
AM_CB(4)

static int worker_open(struct actor *a)
{
	static ucp_am_recv_callback_t const cbs[] = { am_0, am_1, am_2, am_3, am_4 };
	ucp_worker_params_t wp = { 0 };
	ucp_am_handler_param_t ap = { 0 };

	if (a->worker)
		return 0;
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (ucp_worker_create(ucp, &wp, &a->worker) != UCS_OK) {
		a->worker = NULL;
		return -1;
	}
	/* Ascending, every slot set (UCX 1.13 leaves skipped ones uninitialised). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = a;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++) {
		ap.cb = cbs[ap.id];
		ucp_worker_set_am_recv_handler(a->worker, &ap);
	}
	return 0;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct actor *a = arg;

	(void)ep;
	(void)status;
	a->ep_failed = 1;
}

static void ep_close(struct actor *a)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t sp;
	uint64_t end = now_ms() + 5000;

	if (!a->ep)
		return;
	sp = ucp_ep_close_nbx(a->ep, &prm);
	if (UCS_PTR_IS_ERR(sp) && UCS_PTR_STATUS(sp) == UCS_ERR_INVALID_PARAM) {
		prm.flags = 0;
		sp = ucp_ep_close_nbx(a->ep, &prm);
	}
	while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
	       now_ms() < end)
		ucp_worker_progress(a->worker);
	if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
		ucp_request_free(sp);
	a->ep = NULL;
	a->ep_failed = 0;
	st.ep_closes++;
}

static int ep_open(struct actor *a)
{
	ucp_ep_params_t p = { 0 };

	if (a->ep && a->ep_failed)
		ep_close(a);
	if (a->ep)
		return 0;
	if (!a->daddr_len || worker_open(a))
		return -1;
	p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
		       UCP_EP_PARAM_FIELD_ERR_HANDLER;
	p.address = (const ucp_address_t *)a->daddr;
	p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	p.err_handler.cb = ep_error;
	p.err_handler.arg = a;
	if (ucp_ep_create(a->worker, &p, &a->ep) == UCS_OK)
		return 0;
	p.field_mask &= ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
				    UCP_EP_PARAM_FIELD_ERR_HANDLER);
	if (ucp_ep_create(a->worker, &p, &a->ep) == UCS_OK)
		return 0;
	a->ep = NULL;
	return -1;
}

static void op_done(void *request, ucs_status_t status, void *user_data)
{
	struct send_op *op = user_data;

	(void)status;
	op->done = 1;
	op->a->inflight--;
	ucp_request_free(request);
}

/* Sends an active message; @buf (header, then data) passes to the send. */
static void am_send(struct actor *a, unsigned int id, uint8_t *buf, size_t hdr_len, size_t len)
{
	ucp_request_param_t prm = { 0 };
	struct send_op *op = calloc(1, sizeof(*op));
	ucs_status_ptr_t sp;
	const uint64_t end = now_ms() + REPLY_WAIT_MS;

	while (a->ep && a->inflight >= MAX_INFLIGHT && now_ms() < end)
		pump(1);
	if (a->ep && a->inflight >= MAX_INFLIGHT && !a->ep_failed)
		violation("a%d: %u sends stuck for %u s: the daemon's data path hangs", a->idx,
			  a->inflight, REPLY_WAIT_MS / 1000);
	for (size_t off = 0; off + 8 <= hdr_len; off += 8)
		sent_add(get64(buf + off));
	if (!op || !a->ep) {
		free(op);
		free(buf);
		return;
	}
	op->a = a;
	op->buf = buf;
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY;
	prm.cb.send = op_done;
	prm.user_data = op;
	a->inflight++;
	sp = ucp_am_send_nbx(a->ep, id, buf, hdr_len, buf + hdr_len, len, &prm);
	if (!UCS_PTR_IS_PTR(sp)) {
		a->inflight--;
		op->done = 1;
	}
	op->next = ops;
	ops = op;
}

/* A session to use: mostly the actor's own, sometimes another's. */
static struct sess *pick_session(struct actor *a, int *own)
{
	struct actor *b = chance(75) ? a : &actors[below(n_actors)];

	*own = b == a;
	if (!b->n_sess) {
		b = a;
		*own = 1;
	}
	return b->n_sess ? &b->s[below(b->n_sess)] : NULL;
}

/* A random byte-level mutation of an active message's header. */
static void mutate_hdr(uint8_t *h, size_t len)
{
	const uint32_t k = 1 + below(3);

	for (uint32_t i = 0; i < k; i++) {
		const size_t at = below((uint32_t)len);

		if (chance(50) && at + 4 <= len) {
			const uint32_t v = (uint32_t)edge(32);

			memcpy(h + (at & ~3ul), &v, 4);
		} else {
			h[at] ^= (uint8_t)(1u << below(8));
		}
	}
}

/*
 * A KV message: "clean" ones (about half) are valid for one of the actor's
 * own requests and record what they store, so that steps can select it;
 * the others have their session, token, request, ranges, header or data
 * length mutated, or are megabytes long (rendezvous).
 */
static void act_kv(struct actor *a)
{
	struct nelssa_kv_hdr h = { 0 };
	int own = 1, mutate, big = chance(4), clean, garbage_table = chance(10);
	struct sess *s = pick_session(a, &own);
	uint32_t dim = s ? s->shape.head_dim : 64, tokens, clusters, r = 0;
	size_t hdr_len = NELSSA_KV_HDR_BYTES, len;
	uint8_t *buf;

	if (ep_open(a))
		return;
	clean = own && s && s->n_req && chance(50);
	mutate = !clean && chance(50);
	tokens = 1 + below(big ? 8192 : 64);
	clusters = 1 + below(tokens < 16 ? tokens : 16);
	if (s) {
		h.session = s->id;
		h.token = s->token;
		if (s->n_req) {
			r = below(s->n_req);
			h.request = s->req[r];
			if (clean || (tokens > s->req_tokens[r] && !big))
				tokens = 1 + below(s->req_tokens[r] < 4096 ? s->req_tokens[r] : 4096);
			if (clusters > tokens)
				clusters = tokens;
			if (clean && clusters > s->req_clusters[r])
				clusters = s->req_clusters[r];
		}
		h.layer = (uint16_t)below(s->shape.layers);
		h.head = (uint16_t)below(s->shape.kv_heads);
	} else {
		h.session = edge(64);
		h.token = rnd();
	}
	if (!clean && chance(15))
		h.token = chance(50) ? rnd() : h.token ^ 1;
	if (!clean && chance(10))
		h.request = edge(64);
	h.cookie = rnd() | 1;	/* random: no bit flip makes another message's */
	h.nr_tokens = tokens;
	h.nr_clusters = clusters;
	if (!clean && chance(10))
		h.first_cluster = (uint32_t)edge(32);
	len = 4ull * tokens * dim + 8ull * clusters;
	if (!clean && big && chance(50))
		len = (1u << 20) + below(3u << 20);	/* rendezvous, beyond a staging slot */
	if (!clean && chance(10))
		len = chance(50) ? len + 1 + below(8) : below((uint32_t)len);
	buf = malloc(80 + len);	/* room for any header length chosen below */
	if (!buf)
		return;
	nelssa_kv_hdr_put(buf, &h);
	if (mutate)
		mutate_hdr(buf, hdr_len);
	if (!clean && chance(5))
		hdr_len = below(80);	/* extra bytes come from the data: any */
	for (size_t i = 0; i < 4ull * tokens * dim && i < len; i += 2) {
		buf[NELSSA_KV_HDR_BYTES + i] = (uint8_t)rnd();
		buf[NELSSA_KV_HDR_BYTES + i + 1] = (uint8_t)(0x3c + below(8));	/* a modest bf16 */
	}
	for (uint32_t c = 0; c < clusters && 4ull * tokens * dim + 8ull * c + 8 <= len; c++) {
		uint8_t *e = buf + NELSSA_KV_HDR_BYTES + 4ull * tokens * dim + 8ull * c;
		uint32_t first = c * (tokens / clusters);
		uint32_t count = c + 1 == clusters ? tokens - first : tokens / clusters;

		/* Table entries naming rows beyond the store: the device must refuse them. */
		if (garbage_table && chance(50)) {
			first = (uint32_t)edge(32);
			count = (uint32_t)edge(32);
		}
		memcpy(e, &first, 4);
		memcpy(e + 4, &count, 4);
	}
	if (hdr_len >= 32) {
		struct kv_rec *k = &kvs_sent[n_kvs_sent++ % STEP_RING];

		k->cookie = get64(buf + 24);
		k->must_enoent = !known_pair(get64(buf), get64(buf + 8));
	}
	if (clean && h.layer < 4 && h.head < 4)
		s->stored[r][h.layer][h.head] = (uint8_t)clusters;
	st.kv_sent++;
	st.big_sent += len >= (1u << 20);
	note("a%d KV%s%s%s session %" PRIu64 " req %" PRIu64 " l%u h%u tokens %u clusters %u "
	     "hdr %zu data %zu", a->idx, clean ? " clean" : "", mutate ? " mutated" : "",
	     own ? "" : " (another's)", h.session, h.request, h.layer, h.head, tokens, clusters,
	     hdr_len, len);
	am_send(a, NELSSA_AM_KV, buf, hdr_len, len);
}

/*
 * A STEP message: "clean" ones (about half) select, for the actor's own
 * requests, clusters that clean KV messages stored; the others are
 * mutated like KV messages, or select ids at random.
 */
static void act_step(struct actor *a)
{
	struct nelssa_step_hdr h = { 0 };
	int own = 1, mutate, clean;
	struct sess *s = pick_session(a, &own);
	uint32_t g = 1, dim = 16, items, sel_total = 0, kvh = 1;
	size_t hdr_len = NELSSA_STEP_HDR_BYTES, len, off;
	struct step_rec *rec;
	uint8_t *buf;
	uint32_t nsel[16], ireq[16], ihead[16];

	if (ep_open(a))
		return;
	clean = own && s && s->n_req && chance(50);
	mutate = !clean && chance(40);
	if (s) {
		g = s->shape.q_heads / s->shape.kv_heads;
		dim = s->shape.head_dim;
		kvh = s->shape.kv_heads;
		h.session = s->id;
		h.token = s->token;
		h.layer = (uint16_t)below(s->shape.layers + (!clean && chance(5) ? 2 : 0));
	} else {
		h.session = edge(64);
		h.token = rnd();
	}
	if (!clean && chance(15))
		h.token = chance(50) ? rnd() : h.token ^ 1;
	items = 1 + below(s ? (s->max_batch * kvh < 16 ? s->max_batch * kvh : 16) : 4);
	if (!clean && chance(5))
		items = below(17);
	h.step = rnd() | 1;	/* random: no bit flip makes another message's */
	h.nr_items = items;
	for (uint32_t i = 0; i < items; i++) {
		ireq[i] = s && s->n_req ? below(s->n_req) : 0;
		ihead[i] = below(kvh + (!clean && chance(5) ? 3 : 0));
		if (clean) {
			const uint32_t have = h.layer < 4 && ihead[i] < 4 ?
				s->stored[ireq[i]][h.layer][ihead[i]] : 0;

			nsel[i] = below((have < s->max_sel ? have : s->max_sel) + 1);
		} else {
			nsel[i] = below(s ? (s->max_sel < 16 ? s->max_sel + 1 : 17) : 4);
		}
		sel_total += nsel[i];
	}
	len = (size_t)items * NELSSA_STEP_ITEM_BYTES + 4ull * items * g * dim + 4ull * sel_total;
	if (!clean && chance(8))
		len = chance(50) ? len + 1 + below(16) : below((uint32_t)len + 1);
	if (!clean && chance(2))
		len = (1u << 20) + below(2u << 20);
	buf = calloc(1, 80 + len);	/* room for any header length chosen below */
	if (!buf)
		return;
	nelssa_step_hdr_put(buf, &h);
	off = hdr_len;
	for (uint32_t i = 0; i < items && off + NELSSA_STEP_ITEM_BYTES <= hdr_len + len; i++) {
		struct nelssa_step_item it = { 0 };

		if (s && s->n_req)
			it.request = s->req[ireq[i]];
		if (!clean && chance(10))
			it.request = edge(64);
		it.head = (uint16_t)ihead[i];
		it.nr_sel = nsel[i];
		nelssa_step_item_put(buf + off, &it);
		off += NELSSA_STEP_ITEM_BYTES;
	}
	/* Queries: modest floats; ids: below what was stored, or at random. */
	for (size_t p = off; p + 4 <= hdr_len + len && p < off + 4ull * items * g * dim; p += 4) {
		const float f = (float)((int)below(2001) - 1000) / 1000.0f;

		memcpy(buf + p, &f, 4);
	}
	off += 4ull * items * g * dim;
	for (uint32_t i = 0; i < items; i++)
		for (uint32_t j = 0; j < nsel[i] && off + 4 <= hdr_len + len; j++, off += 4) {
			const uint32_t id = clean ? j : chance(95) ? below(8) : (uint32_t)edge(32);

			memcpy(buf + off, &id, 4);
		}
	if (mutate)
		mutate_hdr(buf, hdr_len);
	if (!clean && chance(5))
		hdr_len = below(64);
	rec = &steps_sent[n_steps_sent++ % STEP_RING];
	rec->id = hdr_len >= NELSSA_STEP_HDR_BYTES ? get64(buf + 16) : 0;
	rec->nr_items = items;
	rec->out_bytes = 4 * g * dim + 4 * g;
	rec->valid_pair = hdr_len >= 16 && known_pair(get64(buf), get64(buf + 8));
	rec->must_enoent = hdr_len >= 24 && !rec->valid_pair;
	st.steps_sent++;
	st.clean_steps += clean;
	note("a%d STEP%s%s%s session %" PRIu64 " layer %u items %u hdr %zu data %zu", a->idx,
	     clean ? " clean" : "", mutate ? " mutated" : "", own ? "" : " (another's)", h.session,
	     h.layer, items, hdr_len, len);
	am_send(a, NELSSA_AM_STEP, buf, hdr_len, len);
}

static void act_connect(struct actor *a)
{
	if (a->fd >= 0)
		return;
	a->fd = tcp_open();
	a->seq = (uint32_t)rnd();
	st.connects++;
	note("a%d connect: %s", a->idx, a->fd >= 0 ? "ok" : strerror(errno));
	if (a->fd < 0) {
		violation("a%d: cannot connect to the daemon", a->idx);
		return;
	}
}

static void act_hello(struct actor *a)
{
	static struct nelssa_msg m;
	int with_addr = chance(70), mutate = chance(10);

	if (a->fd < 0)
		act_connect(a);
	if (a->fd < 0)
		return;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_HELLO;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	if (chance(10)) {
		m.u.hello.min_version = (uint16_t)edge(16);
		m.u.hello.max_version = (uint16_t)edge(16);
	}
	snprintf(m.u.hello.name, sizeof(m.u.hello.name), "fuzz-%d", a->idx);
	if (with_addr && !worker_open(a)) {
		ucp_address_t *addr;
		size_t len;

		if (ucp_worker_get_address(a->worker, &addr, &len) == UCS_OK) {
			if (len <= NELSSA_PROTO_MAX_ADDR) {
				m.u.hello.addr_len = (uint32_t)len;
				memcpy(m.u.hello.addr, addr, len);
			}
			ucp_worker_release_address(a->worker, addr);
		}
	}
	if (a->hello && !a->tainted)
		a->closing = 1;		/* a second HELLO: ERROR, then closed */
	if (ctl_msg(a, &m, 0, mutate))
		a->closing = 0;		/* not sent, or sent mangled */
	if (a->closing && a->fd >= 0) {
		const uint64_t end = now_ms() + REPLY_WAIT_MS;

		while (a->fd >= 0 && now_ms() < end)
			pump(1);
		if (a->fd >= 0) {
			violation("a%d: a second HELLO did not close the connection", a->idx);
			actor_close_fd(a, 0);
		}
	}
}

static void act_session(struct actor *a)
{
	static struct nelssa_msg m;
	static const uint16_t dims[] = { 16, 32, 64, 128 };
	const uint32_t before = n_known;
	int mutate = chance(8);
	uint32_t kvh = 1 + below(4), g = 1u << below(3);

	if (!a->hello)
		return;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_SESSION_CREATE;
	m.u.create.tenant = chance(90) ? below(4) : (uint32_t)edge(32);
	m.u.create.shape = (struct nelssa_shape){ (uint16_t)(1 + below(3)), (uint16_t)(kvh * g),
						  (uint16_t)kvh, dims[below(4)],
						  (uint8_t)(1 + below(2)) };
	m.u.create.placement = (uint8_t)below(2);
	m.u.create.max_batch = 1 + below(4);
	m.u.create.max_sel = 1 + below(32);
	m.u.create.capacity_tokens = 64 + below(8192);
	if (chance(15)) {
		switch (below(8)) {
		case 0: m.u.create.capacity_tokens = edge(64); break;
		case 1: m.u.create.max_batch = (uint32_t)edge(32); break;
		case 2: m.u.create.max_sel = (uint32_t)edge(32); break;
		case 3: m.u.create.shape.layers = (uint16_t)edge(16); break;
		case 4: m.u.create.shape.head_dim = (uint16_t)edge(16); break;
		case 5: m.u.create.shape.kv_heads = (uint16_t)edge(16); break;
		case 6: m.u.create.shape.q_heads = (uint16_t)edge(16); break;
		default: m.u.create.placement = (uint8_t)edge(8); break;
		}
	}
	if (ctl_msg(a, &m, 0, mutate) || a->fd < 0 || a->tainted)
		return;
	if (n_known == before + 1 && a->n_sess < MAX_SESS) {
		struct sess *s = &a->s[a->n_sess++];

		memset(s, 0, sizeof(*s));
		s->id = known[before].id;
		s->token = known[before].token;
		s->shape = m.u.create.shape;
		s->placement = m.u.create.placement;
		s->max_batch = m.u.create.max_batch;
		s->max_sel = m.u.create.max_sel;
		s->capacity = m.u.create.capacity_tokens;
	}
}

/* A session id for a control request: own, another connection's, or made up. */
static uint64_t pick_ctl_session(struct actor *a, int *foreign, struct sess **mine)
{
	int own;
	struct sess *s = pick_session(a, &own);

	*mine = own ? s : NULL;
	*foreign = 0;
	if (s && chance(90)) {
		*foreign = !own;
		return s->id;
	}
	/* Made up: not one of this connection's (unless by chance). */
	{
		const uint64_t id = chance(50) ? edge(64) : 1 + below(64);

		for (uint32_t i = 0; i < a->n_sess; i++)
			if (a->s[i].id == id)
				return id;
		*foreign = 1;
		return id;
	}
}

static void act_req(struct actor *a, int alloc)
{
	static struct nelssa_msg m;
	struct sess *s;
	int foreign, mutate = chance(5);
	const uint32_t before_err = (uint32_t)st.errors;

	if (!a->hello)
		return;
	memset(&m, 0, sizeof(m));
	m.type = alloc ? NELSSA_MSG_REQ_ALLOC : NELSSA_MSG_REQ_FREE;
	m.u.req.session = pick_ctl_session(a, &foreign, &s);
	if (!alloc && s && s->n_req && chance(80))
		m.u.req.request = s->req[below(s->n_req)];
	else
		m.u.req.request = chance(70) ? 1 + below(16) : edge(64);
	if (alloc) {
		m.u.req.max_tokens = chance(80) ? 1 + below(4096) : (uint32_t)edge(32);
		m.u.req.max_clusters = chance(80) ? 1 + below(m.u.req.max_tokens | 1) :
						    (uint32_t)edge(32);
		if (s && chance(10))
			m.u.req.max_tokens = (uint32_t)(s->capacity + 1);	/* beyond capacity */
	}
	if (ctl_msg(a, &m, foreign, mutate) || a->fd < 0 || a->tainted || !s)
		return;
	if ((uint32_t)st.errors != before_err)
		return;		/* refused */
	if (alloc && s->n_req < MAX_REQ) {
		s->req_tokens[s->n_req] = m.u.req.max_tokens;
		s->req_clusters[s->n_req] = m.u.req.max_clusters;
		memset(s->stored[s->n_req], 0, sizeof(s->stored[0]));
		s->req[s->n_req++] = m.u.req.request;
	} else if (!alloc) {
		for (uint32_t i = 0; i < s->n_req; i++)
			if (s->req[i] == m.u.req.request) {
				s->req[i] = s->req[--s->n_req];
				s->req_tokens[i] = s->req_tokens[s->n_req];
				s->req_clusters[i] = s->req_clusters[s->n_req];
				memcpy(s->stored[i], s->stored[s->n_req], sizeof(s->stored[0]));
				break;
			}
	}
}

static void act_close(struct actor *a)
{
	static struct nelssa_msg m;
	struct sess *s;
	int foreign;
	const uint32_t before_err = (uint32_t)st.errors;

	if (!a->hello)
		return;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_CLOSE;
	m.u.session.session = pick_ctl_session(a, &foreign, &s);
	if (ctl_msg(a, &m, foreign, chance(5)) || a->fd < 0 || a->tainted || !s)
		return;
	if ((uint32_t)st.errors == before_err)
		for (uint32_t i = 0; i < a->n_sess; i++)
			if (&a->s[i] == s) {
				a->s[i] = a->s[--a->n_sess];
				break;
			}
}

static void act_stats(struct actor *a)
{
	static struct nelssa_msg m;
	int foreign;
	struct sess *s;

	if (!a->hello)
		return;
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_STATS;
	m.u.session.session = chance(50) ? 0 : pick_ctl_session(a, &foreign, &s);
	ctl_msg(a, &m, 0, chance(5));
}

/* Bytes that are not a frame, or part of one. */
static void act_garbage(struct actor *a)
{
	uint8_t buf[FRAME_MAX];
	size_t len = 1 + below(64);
	const int kind = (int)below(4);

	if (a->fd < 0)
		act_connect(a);
	if (a->fd < 0)
		return;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rnd();
	if (kind >= 1) {
		/* A header that decodes, then a payload that stops short or runs on. */
		struct nelssa_msg_hdr h = { NELSSA_PROTO_MAGIC, NELSSA_PROTO_VERSION,
					    (uint16_t)(1 + below(NELSSA_MSG_MAX)), below(200),
					    ++a->seq };

		if (kind == 2)
			h.length = (uint32_t)edge(32);
		if (kind == 3)
			h.version = (uint16_t)edge(16);
		memcpy(buf, &h.magic, 4);
		memcpy(buf + 4, &h.version, 2);
		memcpy(buf + 6, &h.type, 2);
		memcpy(buf + 8, &h.length, 4);
		memcpy(buf + 12, &h.seq, 4);
		len = NELSSA_PROTO_HDR_BYTES + below(h.length < 300 ? h.length + 2 : 300);
	}
	note("a%d garbage: kind %d, %zu bytes", a->idx, kind, len);
	ctl_send(a, buf, len, 0, 0, 0, 0);
}

static void act_reset(struct actor *a)
{
	const int rst = chance(50), ep_too = chance(50);

	note("a%d disconnect (%s%s)", a->idx, rst ? "RST" : "FIN", ep_too ? ", endpoint too" : "");
	st.resets++;
	actor_close_fd(a, rst);
	if (ep_too)
		ep_close(a);
}

static void act_ep_close(struct actor *a)
{
	note("a%d endpoint closed", a->idx);
	ep_close(a);
}

/* A fresh connection must be served: HELLO (no address) and STATS. */
static int probe(uint32_t *sessions)
{
	struct actor p = { .idx = 99, .fd = -1 };
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO };
	uint8_t buf[FRAME_MAX];
	uint64_t end = now_ms() + REPLY_WAIT_MS;
	size_t len;
	int ret = -1;

	st.probes++;
	if (daemon_pid && kill(daemon_pid, 0)) {
		printf("# the daemon (pid %d) is gone\n", (int)daemon_pid);
		return -1;
	}
	p.fd = tcp_open();
	if (p.fd < 0) {
		printf("# the daemon takes no connection: %s\n", strerror(errno));
		return -1;
	}
	{
		/* HELLO's frame, then STATS'. */
		size_t l1, l2;

		m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
		strcpy(m.u.hello.name, "fuzz-probe");
		m.seq = 1;
		nelssa_msg_encode(&m, buf, sizeof(buf), &l1);
		memset(&m, 0, sizeof(m));
		m.type = NELSSA_MSG_STATS;
		m.seq = 2;
		nelssa_msg_encode(&m, buf + l1, sizeof(buf) - l1, &l2);
		len = l1 + l2;
	}
	if (send_bytes(p.fd, buf, len))
		goto out;
	while (now_ms() < end) {
		struct pollfd pfd = { .fd = p.fd, .events = POLLIN };
		ssize_t n;

		poll(&pfd, 1, 100);
		n = recv(p.fd, p.rbuf + p.rhave, sizeof(p.rbuf) - p.rhave, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (n > 0)
			p.rhave += (size_t)n;
		/* Two frames: HELLO_OK (with an address), STATS_REPLY. */
		while (p.rhave >= NELSSA_PROTO_HDR_BYTES) {
			struct nelssa_msg_hdr h;
			struct nelssa_msg r;
			size_t fl;

			if (nelssa_msg_decode_hdr(p.rbuf, &h))
				goto out;
			fl = NELSSA_PROTO_HDR_BYTES + h.length;
			if (p.rhave < fl)
				break;
			if (nelssa_msg_decode(p.rbuf, fl, &r))
				goto out;
			if (r.type == NELSSA_MSG_STATS_REPLY) {
				if (sessions)
					*sessions = r.u.stats.sessions;
				ret = 0;
				goto out;
			}
			if (r.type != NELSSA_MSG_HELLO_OK)
				goto out;
			memmove(p.rbuf, p.rbuf + fl, p.rhave - fl);
			p.rhave -= fl;
		}
	}
	printf("# a fresh connection got no STATS_REPLY in %u s\n", REPLY_WAIT_MS / 1000);
out:
	close(p.fd);
	return ret;
}

static void actor_vanish(struct actor *a)
{
	actor_close_fd(a, 0);
	ep_close(a);
	if (a->worker) {
		ucp_worker_destroy(a->worker);
		a->worker = NULL;
	}
	a->inflight = 0;
}

/* One random action of a random actor. */
static void fuzz_step(void)
{
	struct actor *a = &actors[below(n_actors)];
	const uint32_t r = below(100);

	n_actions++;
	if (a->fd < 0 && r < 60) {
		act_hello(a);
		return;
	}
	/* Build up state to work on: a session, requests in it. */
	if (a->hello && !a->n_sess && r < 50) {
		act_session(a);
		return;
	}
	if (a->n_sess && !a->s[0].n_req && r < 50) {
		act_req(a, 1);
		return;
	}
	if (r < 4)
		act_hello(a);
	else if (r < 14)
		act_session(a);
	else if (r < 26)
		act_req(a, 1);
	else if (r < 31)
		act_req(a, 0);
	else if (r < 34)
		act_close(a);
	else if (r < 38)
		act_stats(a);
	else if (r < 61)
		act_kv(a);
	else if (r < 85)
		act_step(a);
	else if (r < 87)
		act_garbage(a);
	else if (r < 89)
		act_reset(a);
	else if (r < 91)
		act_ep_close(a);
	else if (r < 92 && !gentle) {
		note("a%d vanishes (worker destroyed)", a->idx);
		actor_vanish(a);
	} else {
		note("a%d waits", a->idx);
		pump(below(20));
	}
	if (a->ep && a->ep_failed) {
		note("a%d endpoint failed: closed", a->idx);
		ep_close(a);
	}
}

/* A valid HELLO, with the actor's worker address or none; 0 when answered HELLO_OK. */
static int seq_hello(struct actor *a, int with_addr)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO };

	if (a->fd < 0)
		act_connect(a);
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	strcpy(m.u.hello.name, "fuzz-seq");
	if (with_addr && !worker_open(a)) {
		ucp_address_t *addr;
		size_t len;

		if (ucp_worker_get_address(a->worker, &addr, &len) != UCS_OK)
			return -1;
		m.u.hello.addr_len = (uint32_t)len;
		memcpy(m.u.hello.addr, addr, len);
		ucp_worker_release_address(a->worker, addr);
	}
	return ctl_msg(a, &m, 0, 0) || !a->hello ? -1 : 0;
}

/* A KV message for a session that does not exist: the first message of a wire-up. */
static void seq_kv_nosession(struct actor *a)
{
	struct nelssa_kv_hdr h = { .session = 1ull << 62, .token = 1, .nr_tokens = 1 };
	uint8_t *buf = calloc(1, NELSSA_KV_HDR_BYTES + 4 * 16);

	if (!buf || ep_open(a)) {
		free(buf);
		return;
	}
	h.cookie = rnd() | 1;
	nelssa_kv_hdr_put(buf, &h);
	am_send(a, NELSSA_AM_KV, buf, NELSSA_KV_HDR_BYTES, 4 * 16);
}

/*
 * wireup-vanish: a client whose worker goes (a process exit does the same)
 * within milliseconds of its first active message, 50 times, from 0 to 9 ms
 * of progress each.  The daemon, answering the wire-up, finds the client's
 * port closed; UCX 1.13.1 then purges its pending wire-up reply and asserts
 * (ucp_request.c:684, "got REP message"), killing the daemon.
 */
static int seq_wireup_vanish(void)
{
	struct actor *a = &actors[0];

	for (uint32_t i = 0; i < 50; i++) {
		n_actions++;
		note("wire-up %u: HELLO, KV, %u ms, worker destroyed", i, i % 10);
		if (seq_hello(a, 1)) {
			printf("# wire-up %u: no HELLO_OK\n", i);
			return 1;
		}
		seq_kv_nosession(a);
		pump(i % 10);
		actor_vanish(a);
	}
	return 0;
}

/* Fixed sequences: the fuzzer's findings, minimised (README.md). */
static int run_sequence(const char *name)
{
	static const struct {
		const char *name;
		int (*run)(void);
	} seqs[] = {
		{ "wireup-vanish", seq_wireup_vanish },
	};

	for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
		int ret;

		if (strcmp(name, seqs[i].name))
			continue;
		printf("# sequence %s\n", name);
		ret = seqs[i].run();
		/* The daemon must still serve -- also once what the sequence left is handled. */
		pump(1000);
		for (uint32_t k = 0; k < n_actors; k++)
			actor_vanish(&actors[k]);
		if (probe(NULL)) {
			dump_trace();
			printf("# the daemon died or hangs after sequence %s\n", name);
			return 3;
		}
		if (ret || violations)
			return 1;
		printf("# sequence %s: the daemon lives and serves\n", name);
		return 0;
	}
	printf("# no sequence named %s\n", name);
	return 2;
}

int main(int argc, char **argv)
{
	uint64_t iterations = UINT64_MAX, seconds = 30, t0, last_probe;
	const char *sequence = NULL;
	ucp_params_t up = { 0 };
	uint32_t sessions = 0;
	int ret = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: fuzz_live HOST PORT [--seed N] [--iterations N] [--seconds N] "
			"[--actors N] [--pid PID] [--trace] [--gentle] [--sequence NAME]\n");
		return 2;
	}
	host = argv[1];
	port = argv[2];
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
	}
	for (int i = 3; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--trace")) {
			trace_all = 1;
			continue;
		}
		if (!strcmp(argv[i], "--gentle")) {
			gentle = 1;
			continue;
		}
		if (!v) {
			fprintf(stderr, "fuzz_live: %s needs a value\n", argv[i]);
			return 2;
		}
		if (!strcmp(argv[i], "--seed"))
			seed = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--iterations"))
			iterations = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--actors"))
			n_actors = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(argv[i], "--pid"))
			daemon_pid = (pid_t)strtol(v, NULL, 0);
		else if (!strcmp(argv[i], "--sequence"))
			sequence = v;
		else {
			fprintf(stderr, "fuzz_live: unknown option %s\n", argv[i]);
			return 2;
		}
		i++;
	}
	if (n_actors < 1 || n_actors > MAX_ACTORS) {
		fprintf(stderr, "fuzz_live: --actors takes 1..%d\n", MAX_ACTORS);
		return 2;
	}
	rng_state = seed;
	for (uint32_t i = 0; i < n_actors; i++) {
		actors[i].idx = (int)i;
		actors[i].fd = -1;
	}
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM;
	if (ucp_init(&up, NULL, &ucp) != UCS_OK) {
		printf("# UCX init failed\n");
		return 1;
	}
	if (sequence)
		return run_sequence(sequence);
	printf("# fuzz_live: seed %" PRIu64 " (replay: --seed %" PRIu64 "), %u actors, "
	       "%" PRIu64 " s\n", seed, seed, n_actors, seconds);
	t0 = last_probe = now_ms();
	while (n_actions < iterations && now_ms() - t0 < seconds * 1000 && !violations) {
		fuzz_step();
		if (now_ms() - last_probe > 2000) {
			if (probe(NULL)) {
				dump_trace();
				printf("# the daemon died or hangs (seed %" PRIu64 ", action %" PRIu64
				       ")\n", seed, n_actions);
				return 3;
			}
			last_probe = now_ms();
		}
	}
	/* Everyone leaves; the daemon must reclaim every session. */
	if (gentle)
		pump(1000);	/* wire-ups done before the workers go */
	for (uint32_t i = 0; i < n_actors; i++)
		actor_vanish(&actors[i]);
	for (uint64_t end = now_ms() + REPLY_WAIT_MS;;) {
		if (probe(&sessions)) {
			dump_trace();
			printf("# the daemon died or hangs at the end (seed %" PRIu64 ")\n", seed);
			return 3;
		}
		if (!sessions || now_ms() > end)
			break;
		usleep(50000);
	}
	if (sessions)
		violation("%u sessions left after every client went", sessions);
	ops_reap();
	printf("# %" PRIu64 " actions in %.1f s: %" PRIu64 " control frames (%" PRIu64
	       " replies, %" PRIu64 " errors), %" PRIu64 " sessions made, %" PRIu64 " KV messages "
	       "(%" PRIu64 " acks, %" PRIu64 " refused), ", n_actions, (double)(now_ms() - t0) / 1e3,
	       st.frames, st.replies, st.errors, st.sessions, st.kv_sent, st.acks, st.ack_errors);
	printf("%" PRIu64 " steps (%" PRIu64 " clean; %" PRIu64 " replies, %" PRIu64 " served, %"
	       PRIu64 " refused), %" PRIu64 " of a megabyte or more, ", st.steps_sent,
	       st.clean_steps, st.step_replies, st.steps_ok, st.step_errors, st.big_sent);
	printf("%" PRIu64 " connects, %" PRIu64 " disconnects, %" PRIu64 " endpoint closes, %"
	       PRIu64 " probes\n", st.connects, st.resets, st.ep_closes, st.probes);
	ret = violations ? 1 : 0;
	ucp_cleanup(ucp);
	return ret;
}
