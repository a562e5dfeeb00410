// SPDX-License-Identifier: MIT
/*
 * A stateful, out-of-process fuzzer of a live nelssad (tests/fuzz/README.md).
 *
 * Several "actors" -- each a control connection (TCP) and, once HELLO_OK
 * has given it the data path's port and its connection's key, a UCX worker
 * of its own whose client id is that key, with an endpoint to the daemon's
 * listener (nelssa/link.h) -- take random turns from one seeded generator:
 * HELLO (asking for shared memory or not, with flag bits no version
 * defines, with a mangled version range, an older version's longer HELLO,
 * twice, mutated bytes), SESSION_CREATE of random and edge shapes (KV layouts too),
 * REQ_ALLOC / REQ_FREE of random ids and sizes (beyond capacity too),
 * CLOSE and STATS of their own sessions, others' and made-up ones, KV and
 * STEP active messages (eager and rendezvous, up to megabytes) built
 * valid with the protocol's encoders and then mutated -- session, token,
 * request, ranges, lengths, header length, data length -- plus truncated
 * frames, garbage, abrupt disconnects (FIN and RST), endpoint closes at any
 * point, more endpoints than a connection may have, and hostile workers:
 * one whose client id is another actor's key, or a random key no
 * connection was given.  Everything runs on one thread, and a valid control
 * request waits for its reply, so a run is a reproducible sequence of
 * actions for a seed (the daemon's ids and timings aside).
 *
 * Every answer is checked: a control reply is a frame that decodes, of a
 * type that answers the request, in sequence, its error code a negative
 * errno; a request naming a session of another connection is refused with
 * -ENOENT; a HELLO the daemon must refuse (flags undefined, no common
 * version, an older version's) gets exactly its ERROR and the connection
 * closed, and a HELLO_OK grants no flag that was not asked for; the first
 * two endpoints made with a connection's key come up while the connection
 * is open; a KV ack and a step reply have exact headers, a status that is 0
 * or a negative errno, a cookie or step id that was sent, come to the
 * worker that sent the message, a step reply's data matching its items; a
 * KV or STEP message is refused with -ENOENT unless its session and token
 * both belong to one session of the connection whose key its endpoint
 * carries -- another actor's session with the right token included; an
 * endpoint of a random key never comes up, and nothing is answered to its
 * worker (nothing is sent on an endpoint before it is up).  A valid
 * control request unanswered for 30 s is a hang.  Every 2 s, and at the
 * end, a fresh connection must be answered (HELLO, STATS) and the daemon
 * (--pid) must be alive; at the end, with every actor gone, the daemon must
 * reclaim every session (STATS: 0).
 *
 * --sequence NAME runs one of the fixed sequences below instead: the
 * minimised regressions of what the fuzzer found (see the README).
 * --gentle lets no endpoint, worker or connection of an actor go while
 * one of its endpoints' wire-up runs (settle()): UCX 1.13.1's open
 * aborts there, to look past them.
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
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/link.h>
#include <nelssa/proto.h>
#include <nelssa/splitmix64.h>

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
	return nelssa_splitmix64(&rng_state);
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

/*
 * What happened last, printed with a finding: the last TRACE_RING notes,
 * each with the action it was part of (an action may note several steps).
 */
#define TRACE_RING 64
static char trace_ring[TRACE_RING][160];
static uint64_t trace_act[TRACE_RING];
static uint64_t n_actions, n_notes;
static int trace_all;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
	char *line = trace_ring[n_notes % TRACE_RING];
	va_list ap;

	trace_act[n_notes++ % TRACE_RING] = n_actions;
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
	const uint64_t from = n_notes >= TRACE_RING ? n_notes - TRACE_RING : 0;

	printf("# the last actions:\n");
	for (uint64_t i = from; i < n_notes; i++)
		printf("#   [%" PRIu64 "] %s\n", trace_act[i % TRACE_RING], trace_ring[i % TRACE_RING]);
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

/*
 * The last MAX_KEYS keys the daemon handed out in this run (HELLO_OK), and
 * how many endpoints anyone made with each: the daemon must take the first
 * EPS_PER_CONN of them while the key's connection is open, whatever order
 * they arrive in, and may refuse any beyond.  An older key is forgotten:
 * its endpoints are checked no more strictly than a refused one's.
 */
#define EPS_PER_CONN 2	/* the daemon's ND_EPS_PER_CONN */
#define MAX_KEYS 4096
static struct {
	uint64_t key;
	uint32_t eps;
} keys[MAX_KEYS];
static uint32_t n_keys;

/* @key's count, made when @add; NULL for a key never given out, or forgotten. */
static uint32_t *key_eps(uint64_t key, int add)
{
	uint32_t *n;

	for (uint32_t i = 0; i < n_keys && i < MAX_KEYS; i++)
		if (keys[i].key == key)
			return &keys[i].eps;
	if (!add)
		return NULL;
	keys[n_keys % MAX_KEYS].key = key;
	n = &keys[n_keys++ % MAX_KEYS].eps;
	*n = 0;
	return n;
}

/*
 * The last MAX_KNOWN sessions the daemon handed out in this run, each
 * with its token and its connection's key; the actors' own sessions are
 * looked up in their lists first (sess_find()), however old.
 */
#define MAX_KNOWN 4096
static struct {
	uint64_t id, token, key;
} known[MAX_KNOWN];
static uint32_t n_known;

struct sess {
	uint64_t id, token;
	uint64_t key;			/* its connection's */
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
	int32_t must_err;	/* the ERROR code it must get: -ENOENT for another's session */
	int done;
};

struct actor;

/*
 * A UCX worker of an actor's: its own, whose client id is its connection's
 * key, or a hostile one, whose client id is another actor's key or a
 * random one no connection was given.  @gen tells one worker from the one
 * made after it in the same place, for the check of where replies come.
 */
struct lworker {
	struct actor *a;
	ucp_worker_h w;
	uint64_t key;
	uint64_t gen;
	int random_key;		/* never given out: nothing on it may be answered */
	/*
	 * UCX 1.13 aborts destroying a worker while one of its endpoints has
	 * a send unfinished (ucp_ep.c:437): worker_drop() closes them first
	 * then, which completes the sends of one with error handling; on one
	 * without (shared memory) whose far end the daemon closed, a
	 * rendezvous send never finishes: worker_drop() waits a while, then
	 * keeps the worker (bury()).
	 */
	uint32_t pending;	/* sends unfinished on its endpoints */
	/*
	 * Flushes of endpoints closed before they completed: UCX 1.13 aborts
	 * destroying a worker with one still queued in a wire-up
	 * (ucp_ep.c:1185, "should have been flushed"), and over shared
	 * memory, on an endpoint the daemon refused, they never complete.
	 */
	ucs_status_ptr_t flushes[16];
	uint32_t n_flushes;
	int stuck;		/* a flush no longer looked at: never to be destroyed */
	/*
	 * Step replies that come by rendezvous are kept unfetched (the AM
	 * callback returns UCS_INPROGRESS): sequence reply-unfetched.
	 */
	int hold_rndv;
	uint32_t held;
	struct lworker *next;	/* buried */
};

/* An endpoint to the daemon's listener. */
struct lep {
	struct lworker *lw;
	ucp_ep_h ep;
	int failed;		/* its error callback came */
	int strict;		/* the daemon must take it and serve it: a hang is a finding */
	int shm;		/* no peer error handling */
	/*
	 * Up once a flush completed: the daemon took it.  Nothing is sent
	 * before: UCX 1.13 replays sends queued during a client/server
	 * wire-up on lanes they were not made for and aborts the sender
	 * (proto_am.inl:256, "max_iov > 1"), as no real client does.
	 */
	int up;
	ucs_status_ptr_t flush;	/* in progress */
	uint32_t inflight;	/* sends not completed */
	uint64_t gen;		/* tells it from the one opened after it in its place */
};

#define OWN_EPS (EPS_PER_CONN + 1)	/* one more than the daemon takes */

struct actor {
	int idx;
	int fd;
	int hello;		/* HELLO_OK seen */
	int tainted;		/* a frame that was not valid went out: no order checks */
	int closing;		/* the daemon must close it: a HELLO refused, or a second */
	uint32_t seq;
	struct expect exp[64];
	uint32_t n_exp;
	uint8_t rbuf[FRAME_MAX];
	size_t rhave;
	uint16_t devices;
	uint32_t shm_asked;	/* NELSSA_HELLO_SHM when the last HELLO asked for it */
	/* From HELLO_OK: where the data path listens, this connection's key, shm granted. */
	uint16_t data_port;
	uint64_t key;
	int shm;
	struct lworker own, hostile;
	struct lep ep[OWN_EPS];	/* on @own: [0] the one it uses, the others extra */
	struct lep hep;		/* on @hostile */
	struct sess s[MAX_SESS];
	uint32_t n_sess;
};

/* A send in flight: UCX reads @buf until its callback. */
struct send_op {
	struct lep *e;
	uint64_t gen;		/* @e's when sent */
	struct lworker *lw;	/* ... its worker, and that one's gen, for lw->pending */
	uint64_t lw_gen;
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
	int must_enoent;		/* ... of none the endpoint's key may use: refused -ENOENT */
	uint64_t gen;			/* the worker it went from: the reply comes there */
} steps_sent[STEP_RING];
static uint32_t n_steps_sent;

/* A KV message sent: whether its ack must say -ENOENT. */
static struct kv_rec {
	uint64_t cookie;
	int must_enoent;	/* its session and token are no session the endpoint's key may use */
	uint64_t gen;		/* the worker it went from: the ack comes there */
} kvs_sent[STEP_RING];
static uint32_t n_kvs_sent;

static struct actor actors[MAX_ACTORS];
static uint32_t n_actors = 4;

/* An actor's session of @id and @token, NULL if none. */
static const struct sess *sess_find(uint64_t id, uint64_t token)
{
	for (uint32_t i = 0; i < n_actors; i++)
		for (uint32_t k = 0; k < actors[i].n_sess; k++)
			if (actors[i].s[k].id == id && actors[i].s[k].token == token)
				return &actors[i].s[k];
	return NULL;
}

static int known_pair(uint64_t id, uint64_t token)
{
	if (sess_find(id, token))
		return 1;
	for (uint32_t i = 0; i < n_known && i < MAX_KNOWN; i++)
		if (known[i].id == id && known[i].token == token)
			return 1;
	return 0;
}

/*
 * Whether a KV or STEP message naming @id and @token may be served on an
 * endpoint whose client id is @key: the session's own connection's key.
 */
static int known_owned(uint64_t id, uint64_t token, uint64_t key)
{
	const struct sess *s = sess_find(id, token);

	if (s)
		return s->key == key;
	for (uint32_t i = 0; i < n_known && i < MAX_KNOWN; i++)
		if (known[i].id == id && known[i].token == token)
			return known[i].key == key;
	return 0;
}

static ucp_context_h ucp;
static int can_shm;	/* this side's UCX has shared memory */
static uint64_t worker_gen;
static struct lworker *buried;	/* workers UCX cannot destroy (struct lworker) */
static struct send_op *ops;
static uint64_t awaited_cookie;	/* a KV ack waited for (ep_round_trip()) */
static int awaited_seen;	/* ... came */
static int gentle;	/* --gentle: step around the daemon's open findings (settle(), quiesce()) */
static const char *host, *port;
static pid_t daemon_pid;

static struct {
	uint64_t frames, replies, errors, acks, ack_errors, step_replies, step_errors;
	uint64_t kv_sent, steps_sent, clean_steps, steps_ok, big_sent, sessions, connects, resets;
	uint64_t ep_closes, probes, eps, eps_up, shm_granted, hostile_eps, refused_hellos, buried;
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
	/*
	 * Its endpoints may stay, as a hostile client's would, but the daemon
	 * closes its end of them: nothing on them need be served any more.
	 */
	for (uint32_t i = 0; i < OWN_EPS; i++)
		a->ep[i].strict = 0;
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
	    m.type != NELSSA_MSG_REQ_OK && m.type != NELSSA_MSG_RKEY &&
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
		      (e->type == NELSSA_MSG_REQ_ALLOC && m.type == NELSSA_MSG_REQ_OK) ||
		      (e->type == NELSSA_MSG_RKEY_GET && m.type == NELSSA_MSG_RKEY) ||
		      ((e->type == NELSSA_MSG_REQ_FREE || e->type == NELSSA_MSG_CLOSE) &&
		       m.type == NELSSA_MSG_OK)))
			violation("a%d: %s answered with %s", a->idx, nelssa_msg_type_str(e->type),
				  nelssa_msg_type_str(m.type));
		if (e->must_err && (m.type != NELSSA_MSG_ERROR || m.u.error.code != e->must_err))
			violation("a%d: %s %s gave %s %d, not ERROR %d", a->idx,
				  nelssa_msg_type_str(e->type), e->must_err == -ENOENT ?
				  "naming a session of another connection" : "that must be refused",
				  nelssa_msg_type_str(m.type),
				  m.type == NELSSA_MSG_ERROR ? m.u.error.code : 0, e->must_err);
		if (a->closing && m.type != NELSSA_MSG_ERROR)
			violation("a%d: served after a HELLO that ends the connection", a->idx);
	}
	switch (m.type) {
	case NELSSA_MSG_HELLO_OK:
		/* The decoder saw to a port and a key that are not 0, and known flags. */
		if (m.u.hello_ok.version != NELSSA_PROTO_VERSION || !m.u.hello_ok.devices)
			violation("a%d: HELLO_OK of version %u, %u devices", a->idx,
				  m.u.hello_ok.version, m.u.hello_ok.devices);
		if (!a->tainted && (m.u.hello_ok.flags & ~a->shm_asked))
			violation("a%d: HELLO_OK grants flags %#x, asked for %#x", a->idx,
				  m.u.hello_ok.flags, a->shm_asked);
		if (key_eps(m.u.hello_ok.key, 0))
			violation("a%d: HELLO_OK gives key %#" PRIx64 ", another connection's",
				  a->idx, m.u.hello_ok.key);
		key_eps(m.u.hello_ok.key, 1);
		a->hello = 1;
		a->devices = m.u.hello_ok.devices;
		a->data_port = m.u.hello_ok.data_port;
		a->key = m.u.hello_ok.key;
		a->shm = !!(m.u.hello_ok.flags & NELSSA_HELLO_SHM);
		st.shm_granted += (uint64_t)a->shm;
		break;
	case NELSSA_MSG_SESSION_OK:
		if (!m.u.session_ok.session || !m.u.session_ok.token ||
		    m.u.session_ok.devices != a->devices)
			violation("a%d: SESSION_OK session %" PRIu64 ", %u devices", a->idx,
				  m.u.session_ok.session, m.u.session_ok.devices);
		if (known_pair(m.u.session_ok.session, m.u.session_ok.token))
			violation("a%d: session %" PRIu64 " handed out twice", a->idx,
				  m.u.session_ok.session);
		known[n_known % MAX_KNOWN].id = m.u.session_ok.session;
		known[n_known % MAX_KNOWN].token = m.u.session_ok.token;
		known[n_known++ % MAX_KNOWN].key = a->key;
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

		for (uint32_t i = 0; i < n_actors; i++) {
			if (actors[i].own.w)
				while (ucp_worker_progress(actors[i].own.w))
					;
			if (actors[i].hostile.w)
				while (ucp_worker_progress(actors[i].hostile.w))
					;
		}
		for (struct lworker *g = buried; g; g = g->next)
			while (ucp_worker_progress(g->w))
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

static void lep_close(struct lep *e);
static void lep_poll(struct lep *e);

/*
 * --gentle: no endpoint of @a's is closed, nor its worker or connection,
 * while the endpoint's wire-up to the listener may still run (its first
 * flush pending; 2 s at most): the daemon's UCX 1.13.1 aborts now and then
 * when a client goes then (findings wireup-vanish-early: tcp_ep.c:478;
 * tcp_sockcm_ep.c:416).
 */
static void settle(struct actor *a)
{
	struct lep *const all[] = { &a->ep[0], &a->ep[1], &a->ep[2], &a->hep };
	const uint64_t end = now_ms() + 2000;

	for (size_t i = 0; gentle && i < sizeof(all) / sizeof(all[0]); i++)
		while (all[i]->ep && all[i]->flush && !all[i]->failed && now_ms() < end) {
			ucp_worker_progress(all[i]->lw->w);
			lep_poll(all[i]);
		}
}

/*
 * --gentle: before anything that may end @a's connection, the wire-ups
 * of its endpoints are left to finish (settle()).  (It also closed the
 * endpoints without error handling first, while the daemon's UCX aborted
 * when it closed its end of one with the client's messages on their way,
 * findings send-after-close and wireup-close: fixed, the daemon sets
 * UCX_PROTO_INDIRECT_ID=on.)
 */
static void quiesce(struct actor *a)
{
	if (gentle)
		settle(a);
}

/* Sends frame @buf; with @await, waits for the reply to @seq (a hang otherwise). */
static int ctl_send(struct actor *a, const uint8_t *buf, size_t len, uint32_t seq, uint16_t type,
		    int32_t must_err, int valid)
{
	struct expect *e;
	uint64_t end;

	if (a->fd < 0)
		return -1;
	if (!valid)
		quiesce(a);	/* the daemon may end the connection for it */
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
	*e = (struct expect){ seq, type, must_err, 0 };
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

/*
 * Encodes @m (seq set here) and sends it, mutated now and then; @must_err:
 * the ERROR code its reply must be, unless mutated.
 */
static int ctl_msg(struct actor *a, struct nelssa_msg *m, int32_t must_err, int mutate)
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
			ok.u.create.shape = (struct nelssa_shape){ 1, 1, 1, 16, 1, 0, NELSSA_KV_PACKED };
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
	     m->seq, must_err == -ENOENT ? " (another's session)" : must_err ? " (to be refused)" : "");
	if (ctl_send(a, buf, len, m->seq, m->type, valid ? must_err : 0, valid))
		return -1;
	return valid ? 0 : 1;
}

/* Data path */

static uint64_t ep_gen;

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param, unsigned int id)
{
	struct lworker *lw = arg;
	struct actor *a = lw->a;

	(void)data;
	/* The daemon made no endpoint for such a key: nothing can have come through one. */
	if (lw->random_key)
		violation("a%d: an answer (id %u) to a worker of key %#" PRIx64 ", which no "
			  "connection was given", a->idx, id, lw->key);
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
		if (h.cookie && h.cookie == awaited_cookie)
			awaited_seen = 1;
		for (uint32_t i = 0; i < STEP_RING && i < n_kvs_sent; i++)
			if (h.cookie && kvs_sent[i].cookie == h.cookie) {
				if (kvs_sent[i].must_enoent && h.status != -ENOENT)
					violation("a%d: KV (cookie %" PRIu64 ") naming no session of its "
						  "endpoint's connection with its token acked %d, not "
						  "-ENOENT", a->idx, h.cookie, h.status);
				if (kvs_sent[i].gen != lw->gen)
					violation("a%d: the ack of KV cookie %" PRIu64 " came to another "
						  "worker than the one that sent it", a->idx, h.cookie);
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
		if (r && r->gen != lw->gen)
			violation("a%d: the reply to step %" PRIu64 " came to another worker than the "
				  "one that sent it", a->idx, h.step);
		if (h.status && (h.nr_items || length))
			violation("a%d: a refused step's reply carries %u items, %zu bytes", a->idx,
				  h.nr_items, length);
		if (r && r->must_enoent && h.status != -ENOENT)
			violation("a%d: step %" PRIu64 " naming no session of its endpoint's connection "
				  "with its token answered %d, not -ENOENT", a->idx, h.step, h.status);
		if (!h.status && r && !r->valid_pair)
			violation("a%d: step %" PRIu64 " served without its session's token, or on "
				  "another connection's endpoint", a->idx, h.step);
		if (!h.status && r && (h.nr_items != r->nr_items ||
				       (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) &&
					length != (uint64_t)r->nr_items * r->out_bytes)))
			violation("a%d: step %" PRIu64 " of %u items answered with %u, %zu bytes",
				  a->idx, h.step, r->nr_items, h.nr_items, length);
		if (lw->hold_rndv && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
			lw->held++;
			return UCS_INPROGRESS;	/* never fetched: the daemon's send waits */
		}
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

/* A worker whose UCX client id is @key (fixed for its life: one connection's key). */
static int worker_make(struct lworker *lw, struct actor *a, uint64_t key, int random_key)
{
	static ucp_am_recv_callback_t const cbs[] = { am_0, am_1, am_2, am_3, am_4 };
	ucp_am_handler_param_t ap = { 0 };

	if (nelssa_link_worker(ucp, key, &lw->w) != UCS_OK) {
		lw->w = NULL;
		return -1;
	}
	lw->a = a;
	lw->key = key;
	lw->gen = ++worker_gen;
	lw->random_key = random_key;
	lw->pending = lw->n_flushes = 0;
	lw->stuck = 0;
	/* Ascending, every slot set (UCX 1.13 leaves skipped ones uninitialised). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = lw;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++) {
		ap.cb = cbs[ap.id];
		ucp_worker_set_am_recv_handler(lw->w, &ap);
	}
	return 0;
}

static void ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct lep *e = arg;

	(void)status;
	/*
	 * An endpoint forgotten with its worker kept (lep_reset(), bury())
	 * may fail later, when its slot holds the next endpoint: not that one.
	 */
	if (e->ep == ep)
		e->failed = 1;
}

/* @e forgotten: its endpoint closed or gone with its worker. */
static void lep_reset(struct lep *e)
{
	struct lworker *lw = e->lw;

	if (e->flush && ucp_request_check_status(e->flush) != UCS_INPROGRESS)
		ucp_request_free(e->flush);
	else if (e->flush && lw->n_flushes < sizeof(lw->flushes) / sizeof(lw->flushes[0]))
		lw->flushes[lw->n_flushes++] = e->flush;	/* worker_drop() waits for it */
	else if (e->flush)
		lw->stuck = 1;
	*e = (struct lep){ 0 };
}

/*
 * Closes @e: forced where UCX allows it (error handling), else flushed,
 * for a bounded while -- an endpoint the daemon refused over shared
 * memory never completes a flush, so its close is left to UCX then.
 */
static void lep_close(struct lep *e)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t sp;
	uint64_t end = now_ms() + (e->strict ? 5000 : 200);

	if (!e->ep)
		return;
	sp = ucp_ep_close_nbx(e->ep, &prm);
	if (UCS_PTR_IS_ERR(sp) && UCS_PTR_STATUS(sp) == UCS_ERR_INVALID_PARAM) {
		prm.flags = 0;
		sp = ucp_ep_close_nbx(e->ep, &prm);
	}
	while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
	       now_ms() < end)
		ucp_worker_progress(e->lw->w);
	if (UCS_PTR_IS_PTR(sp))
		ucp_request_free(sp);	/* done, or released to finish inside UCX */
	lep_reset(e);
	st.ep_closes++;
}

/*
 * Keeps @lw's worker, which UCX cannot destroy, progressed with the
 * others till the end (its replies still checked); @lw is free for the next.
 */
static void bury(struct lworker *lw)
{
	static ucp_am_recv_callback_t const cbs[] = { am_0, am_1, am_2, am_3, am_4 };
	struct lworker *g = malloc(sizeof(*g));
	ucp_am_handler_param_t ap = { 0 };

	if (!g) {
		lw->w = NULL;	/* lost: it is never progressed again */
		return;
	}
	*g = *lw;
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.arg = g;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++) {
		ap.cb = cbs[ap.id];
		ucp_worker_set_am_recv_handler(g->w, &ap);
	}
	g->next = buried;
	buried = g;
	st.buried++;
	lw->w = NULL;
	lw->gen = ++worker_gen;	/* sends still on it count no more */
}

/*
 * Destroys @lw, its endpoints with it -- closed first when @close_eps, or
 * when a send on one is unfinished (UCX cannot destroy it then) -- once
 * their sends are done; buried when they are not done in a second.
 */
static void worker_drop(struct actor *a, struct lworker *lw, int close_eps)
{
	struct lep *const all[] = { &a->ep[0], &a->ep[1], &a->ep[2], &a->hep };
	const uint64_t end = now_ms() + 1000;

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (all[i]->lw != lw || !all[i]->ep)
			continue;
		if (close_eps || lw->pending) {
			lep_close(all[i]);
		} else {
			/* UCX takes them down with the worker, as a process exit does. */
			lep_reset(all[i]);
		}
	}
	if (!lw->w)
		return;
	for (;;) {
		uint32_t k = 0;

		for (uint32_t i = 0; i < lw->n_flushes; i++)
			if (ucp_request_check_status(lw->flushes[i]) == UCS_INPROGRESS)
				lw->flushes[k++] = lw->flushes[i];
			else
				ucp_request_free(lw->flushes[i]);
		lw->n_flushes = k;
		if ((!lw->pending && !lw->n_flushes) || lw->stuck || now_ms() > end)
			break;
		ucp_worker_progress(lw->w);
	}
	if (lw->pending || lw->n_flushes || lw->stuck) {
		note("a%d worker %" PRIu64 " kept: %u sends, %u flushes never finish", a->idx,
		     lw->gen, lw->pending, lw->n_flushes);
		bury(lw);
	} else {
		ucp_worker_destroy(lw->w);
		lw->w = NULL;
	}
	lw->pending = lw->n_flushes = 0;
	lw->stuck = 0;
}

/* Whether a round trip on @a's connection is answered: it was open all along. */
static int ctl_alive(struct actor *a);

static void seq_kv_nosession(struct lep *e);

/*
 * --gentle over shared memory: a KV message of no session on @e, and its
 * ack waited for (30 s at most), so that the daemon's side of the wire-up
 * is done too -- the flush completing says only that the client's is.
 */
static void ep_round_trip(struct lep *e)
{
	const uint64_t end = now_ms() + REPLY_WAIT_MS;

	awaited_seen = 0;
	seq_kv_nosession(e);
	while (!awaited_seen && e->ep && !e->failed && now_ms() < end)
		pump(1);
	awaited_cookie = 0;
}

/* @e's first flush completed with @status: up, or failed. */
static void lep_flushed(struct lep *e, ucs_status_t status)
{
	if (status != UCS_OK) {
		e->failed = 1;
		return;
	}
	e->up = 1;
	if (e->lw->random_key)
		violation("a%d: the daemon took an endpoint of key %#" PRIx64 ", which no "
			  "connection was given", e->lw->a->idx, e->lw->key);
}

/* Whether @e's first flush has completed since it was last looked at. */
static void lep_poll(struct lep *e)
{
	ucs_status_t status;

	if (!e->flush)
		return;
	status = ucp_request_check_status(e->flush);
	if (status == UCS_INPROGRESS)
		return;
	ucp_request_free(e->flush);
	e->flush = NULL;
	lep_flushed(e, status);
}

/*
 * How lep_open() sees to an endpoint coming up: LEP_BARE not at all (it
 * is never used: to be dropped during its wire-up), LEP_FLUSH by a flush
 * looked at later (lep_poll()), LEP_WAIT by a flush waited for when the
 * daemon must take it.
 */
enum lep_mode { LEP_BARE, LEP_FLUSH, LEP_WAIT };

/*
 * Opens @e on @lw to the daemon's listener (the address of @a's control
 * connection, HELLO_OK's port), with @shm: no peer error handling.  The
 * first EPS_PER_CONN endpoints of a key the daemon must take while its
 * connection is open; one of @a's own, of a connection untainted, is
 * "strict" (LEP_WAIT): it is waited for here, as a client does, and one
 * that does not come up while the connection still answers is a finding.
 */
static int lep_open(struct lep *e, struct lworker *lw, struct actor *a, int shm,
		    enum lep_mode mode)
{
	uint32_t *n = key_eps(lw->key, 0);
	const int must = mode == LEP_WAIT && n && *n < EPS_PER_CONN && lw == &a->own &&
			 lw->key == a->key && a->fd >= 0 && !a->tainted && !a->closing;
	const ucp_request_param_t prm = { 0 };
	ucs_status_ptr_t sp;
	uint64_t end;

	if (e->ep || a->fd < 0 || !a->data_port)
		return -1;
	if (n)
		(*n)++;
	*e = (struct lep){ .lw = lw, .gen = ++ep_gen, .shm = shm };
	st.eps++;
	if (nelssa_link_connect(lw->w, a->fd, a->data_port, shm, ep_error, e, &e->ep) != UCS_OK) {
		e->ep = NULL;
		if (must)
			violation("a%d: no endpoint to the daemon's listener (port %u)", a->idx,
				  a->data_port);
		return -1;
	}
	note("a%d endpoint %d opened (key %#" PRIx64 "%s%s)", a->idx, (int)(e - a->ep),
	     lw->key, shm ? ", shm" : "", must ? ", must come up" : "");
	if (mode == LEP_BARE)
		return 0;
	/* A flush completes once the wire-up has: the daemon took the endpoint. */
	sp = ucp_ep_flush_nbx(e->ep, &prm);
	if (UCS_PTR_IS_PTR(sp))
		e->flush = sp;
	else
		lep_flushed(e, UCS_PTR_STATUS(sp));
	if (!must)
		return 0;
	end = now_ms() + REPLY_WAIT_MS;
	while (e->flush && !e->failed && now_ms() < end && a->fd >= 0) {
		pump(1);
		lep_poll(e);
	}
	if (e->up && !e->failed) {
		e->strict = 1;
		st.eps_up++;
		if (gentle && shm)
			ep_round_trip(e);
		return 0;
	}
	/* It did not come up: a finding only if the connection was open all along. */
	if (a->fd >= 0 && !a->tainted && !a->closing && ctl_alive(a))
		violation("a%d: its connection's endpoint %u of key %#" PRIx64 " did not come up "
			  "(%s) while the connection is open", a->idx, n ? *n : 0, lw->key,
			  e->failed ? "failed" : "no flush completed in 30 s");
	lep_close(e);
	return -1;
}

static void op_done(void *request, ucs_status_t status, void *user_data)
{
	struct send_op *op = user_data;

	(void)status;
	op->done = 1;
	/* Not when its endpoint is gone, and the place another's. */
	if (op->e->gen == op->gen && op->e->inflight)
		op->e->inflight--;
	if (op->lw && op->lw->gen == op->lw_gen && op->lw->pending)
		op->lw->pending--;
	ucp_request_free(request);
}

/* Sends an active message on @e; @buf (header, then data) passes to the send. */
static void am_send(struct lep *e, unsigned int id, uint8_t *buf, size_t hdr_len, size_t len)
{
	ucp_request_param_t prm = { 0 };
	struct send_op *op = calloc(1, sizeof(*op));
	ucs_status_ptr_t sp;
	const uint64_t end = now_ms() + REPLY_WAIT_MS;

	/*
	 * Only an endpoint the daemon had to take and must serve is waited
	 * for; on any other (refused, of a connection gone) sends may never
	 * complete, and that is no finding: sends beyond the limit are skipped.
	 */
	while (e->ep && e->strict && e->inflight >= MAX_INFLIGHT && !e->failed && now_ms() < end)
		pump(1);
	if (e->ep && e->strict && e->inflight >= MAX_INFLIGHT && !e->failed)
		violation("a%d: %u sends stuck for %u s: the daemon's data path hangs", e->lw->a->idx,
			  e->inflight, REPLY_WAIT_MS / 1000);
	for (size_t off = 0; off + 8 <= hdr_len; off += 8)
		sent_add(get64(buf + off));
	lep_poll(e);
	if (!op || !e->ep || !e->up || e->inflight >= MAX_INFLIGHT) {
		free(op);
		free(buf);
		return;
	}
	op->e = e;
	op->gen = e->gen;
	op->buf = buf;
	op->lw = e->lw;
	op->lw_gen = e->lw->gen;
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY;
	prm.cb.send = op_done;
	prm.user_data = op;
	e->inflight++;
	sp = ucp_am_send_nbx(e->ep, id, buf, hdr_len, buf + hdr_len, len, &prm);
	if (!UCS_PTR_IS_PTR(sp)) {
		e->inflight--;
		op->done = 1;
	} else {
		e->lw->pending++;
	}
	op->next = ops;
	ops = op;
}

/* @a's own worker, for its connection's current key (one of an older key goes). */
static int own_worker(struct actor *a)
{
	if (a->own.w && a->own.key != a->key) {
		settle(a);
		worker_drop(a, &a->own, 1);
	}
	if (a->own.w)
		return 0;
	return a->hello && a->key ? worker_make(&a->own, a, a->key, 0) : -1;
}

/* @a's endpoint ep[@i], opened when it has none (0: open or opened). */
static int ep_open(struct actor *a, uint32_t i)
{
	struct lep *e = &a->ep[i];

	if (e->ep && e->failed)
		lep_close(e);
	if (e->ep && e->lw->key == a->key)
		return 0;
	if (e->ep && (a->fd < 0 || !a->hello))
		return 0;	/* of a connection gone: kept, as a hostile client may */
	if (own_worker(a))
		return -1;
	return lep_open(e, &a->own, a, a->shm, LEP_WAIT);
}

/*
 * The endpoint a KV or STEP message goes on: mostly @a's own first one;
 * sometimes an extra one or the hostile worker's, when open.
 */
static struct lep *pick_ep(struct actor *a)
{
	const uint32_t r = below(100);

	if (r < 10 && a->hep.ep)
		return &a->hep;
	if (r < 20) {
		struct lep *e = &a->ep[1 + below(OWN_EPS - 1)];

		if (e->ep)
			return e;
	}
	return ep_open(a, 0) ? NULL : &a->ep[0];
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
 * What a KV or STEP message of @a's is about, in this order: a session,
 * @s (pick_session(); @own: @a's), and the endpoint it goes on (pick_ep():
 * NULL, no message, and nothing more is drawn); whether it is "clean"
 * (about half of those that can be: @a's own session with requests, on an
 * endpoint of @a's connection now), and when not, whether its header is
 * mutated (@mutate_pct in 100).
 */
static struct lep *pick_msg(struct actor *a, struct sess **s, int *own, int *clean, int *mutate,
			    uint32_t mutate_pct)
{
	struct lep *e;

	*own = 1;
	*s = pick_session(a, own);
	e = pick_ep(a);
	if (!e)
		return NULL;
	*clean = *own && *s && (*s)->n_req && e->lw->key == a->key && chance(50);
	*mutate = !*clean && chance(mutate_pct);
	return e;
}

/*
 * The session and token a message names: @s's, or (none) an edge-case id
 * and a random token; then, not @clean, now and then another token, at
 * random or one bit off.
 */
static void name_session(const struct sess *s, int clean, uint64_t *session, uint64_t *token)
{
	if (s) {
		*session = s->id;
		*token = s->token;
	} else {
		*session = edge(64);
		*token = rnd();
	}
	if (!clean && chance(15))
		*token = chance(50) ? rnd() : *token ^ 1;
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
	int own, mutate, big = chance(4), clean, garbage_table = chance(10);
	struct sess *s;
	struct lep *e = pick_msg(a, &s, &own, &clean, &mutate, 50);
	uint32_t dim = s ? s->shape.head_dim : 64, tokens, clusters, r = 0;
	size_t hdr_len = NELSSA_KV_HDR_BYTES, len;
	uint8_t *buf;

	if (!e)
		return;
	tokens = 1 + below(big ? 8192 : 64);
	clusters = 1 + below(tokens < 16 ? tokens : 16);
	if (s) {
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
	}
	name_session(s, clean, &h.session, &h.token);
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
		uint8_t *ent = buf + NELSSA_KV_HDR_BYTES + 4ull * tokens * dim + 8ull * c;
		uint32_t first = c * (tokens / clusters);
		uint32_t count = c + 1 == clusters ? tokens - first : tokens / clusters;

		/* Table entries naming rows beyond the store: the device must refuse them. */
		if (garbage_table && chance(50)) {
			first = (uint32_t)edge(32);
			count = (uint32_t)edge(32);
		}
		memcpy(ent, &first, 4);
		memcpy(ent + 4, &count, 4);
	}
	if (hdr_len >= 32) {
		struct kv_rec *k = &kvs_sent[n_kvs_sent++ % STEP_RING];

		k->cookie = get64(buf + 24);
		k->must_enoent = !known_owned(get64(buf), get64(buf + 8), e->lw->key);
		k->gen = e->lw->gen;
	}
	if (clean && h.layer < 4 && h.head < 4)
		s->stored[r][h.layer][h.head] = (uint8_t)clusters;
	st.kv_sent++;
	st.big_sent += len >= (1u << 20);
	note("a%d KV%s%s%s%s session %" PRIu64 " req %" PRIu64 " l%u h%u tokens %u clusters %u "
	     "hdr %zu data %zu", a->idx, clean ? " clean" : "", mutate ? " mutated" : "",
	     own ? "" : " (another's)", e == &a->hep ? " on the hostile worker" : "", h.session,
	     h.request, h.layer, h.head, tokens, clusters,
	     hdr_len, len);
	am_send(e, NELSSA_AM_KV, buf, hdr_len, len);
}

/*
 * A STEP message: "clean" ones (about half) select, for the actor's own
 * requests, clusters that clean KV messages stored; the others are
 * mutated like KV messages, or select ids at random.
 */
static void act_step(struct actor *a)
{
	struct nelssa_step_hdr h = { 0 };
	int own, mutate, clean;
	struct sess *s;
	uint32_t g = 1, dim = 16, items, sel_total = 0, kvh = 1;
	size_t hdr_len = NELSSA_STEP_HDR_BYTES, len, off;
	struct step_rec *rec;
	struct lep *e = pick_msg(a, &s, &own, &clean, &mutate, 40);
	uint8_t *buf;
	uint32_t nsel[16], ireq[16], ihead[16];

	if (!e)
		return;
	if (s) {
		g = s->shape.q_heads / s->shape.kv_heads;
		dim = s->shape.head_dim;
		kvh = s->shape.kv_heads;
		h.layer = (uint16_t)below(s->shape.layers + (!clean && chance(5) ? 2 : 0));
	}
	name_session(s, clean, &h.session, &h.token);
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
	rec->valid_pair = hdr_len >= 16 && known_owned(get64(buf), get64(buf + 8), e->lw->key);
	rec->gen = e->lw->gen;
	rec->must_enoent = hdr_len >= 24 && !rec->valid_pair;
	st.steps_sent++;
	st.clean_steps += clean;
	note("a%d STEP%s%s%s%s session %" PRIu64 " layer %u items %u hdr %zu data %zu", a->idx,
	     clean ? " clean" : "", mutate ? " mutated" : "", own ? "" : " (another's)",
	     e == &a->hep ? " on the hostile worker" : "", h.session,
	     h.layer, items, hdr_len, len);
	am_send(e, NELSSA_AM_STEP, buf, hdr_len, len);
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

/*
 * The ERROR code the daemon must answer a well-formed HELLO with, or 0 for
 * HELLO_OK: what the decoder refuses (nelssa_msg_decode()), then a second
 * HELLO, then no common version (control.c).  @old: an older version's,
 * longer HELLO, which the decoder refuses by its versions.
 */
static int32_t hello_verdict(const struct actor *a, uint16_t min, uint16_t max, uint32_t flags,
			     int old)
{
	if (old && (max >= NELSSA_PROTO_VERSION || min > max))
		return -EBADMSG;
	if (min < 1 || min > max || (!old && (flags & ~NELSSA_HELLO_FLAGS)))
		return -EINVAL;
	if (old)
		return -EPROTONOSUPPORT;	/* refused by the decoder, HELLO or not */
	if (a->hello)
		return -EPROTO;
	if (min > NELSSA_PROTO_VERSION || max < NELSSA_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	return 0;
}

/*
 * HELLO: asking for shared memory or not; now and then with flag bits no
 * version defines, a version range from the edges, or as an older version
 * (up to 2) sent it -- longer, a worker address after the name -- built
 * by hand where the encoder refuses them.  Answered HELLO_OK, the actor
 * (mostly) sets up its data path at once, as a client does: its worker,
 * with the connection's key, and an endpoint to the listener.
 */
static void act_hello(struct actor *a)
{
	uint8_t buf[FRAME_MAX];
	uint16_t min = NELSSA_PROTO_VERSION, max = NELSSA_PROTO_VERSION, hv = NELSSA_PROTO_VERSION;
	/* Mostly where this side could use it; now and then where it could not. */
	uint32_t flags = chance(can_shm ? 50 : 10) ? NELSSA_HELLO_SHM : 0, extra = 0, seq;
	const uint32_t kind = below(100);
	const int data_path = chance(70), mutate = chance(5), was_hello = a->hello && !a->tainted;
	char name[NELSSA_PROTO_NAME_LEN] = "";
	int32_t verdict;
	size_t len;

	if (a->fd < 0)
		act_connect(a);
	if (a->fd < 0)
		return;
	snprintf(name, sizeof(name), "fuzz-%d", a->idx);
	if (kind < 6) {
		flags |= chance(50) ? 1u << (1 + below(31)) : (uint32_t)edge(32);
	} else if (kind < 14) {
		min = (uint16_t)(chance(50) ? edge(16) : below(6));
		max = (uint16_t)(chance(50) ? edge(16) : below(6));
	} else if (kind < 18) {
		/* An older client's: versions 1..2, its worker address's length, the address. */
		min = (uint16_t)(chance(80) ? 1 + below(2) : edge(16));
		max = (uint16_t)(chance(80) ? 2 : edge(16));
		hv = max;
		extra = 1 + below(chance(50) ? 64 : 2048);
	}
	verdict = hello_verdict(a, min, max, flags, extra != 0);
	/* Well-formed, every field where it goes, whatever the encoder thinks of it. */
	seq = ++a->seq;
	len = NELSSA_PROTO_HDR_BYTES + 40 + extra;
	memset(buf, 0, len);
	for (int i = 0; i < 4; i++) {
		buf[i] = (uint8_t)(NELSSA_PROTO_MAGIC >> (8 * i));
		buf[8 + i] = (uint8_t)((40 + extra) >> (8 * i));
		buf[12 + i] = (uint8_t)(seq >> (8 * i));
		buf[20 + i] = (uint8_t)((extra ? extra : flags) >> (8 * i));
	}
	buf[4] = (uint8_t)hv;
	buf[5] = (uint8_t)(hv >> 8);
	buf[6] = NELSSA_MSG_HELLO;
	buf[16] = (uint8_t)min;
	buf[17] = (uint8_t)(min >> 8);
	buf[18] = (uint8_t)max;
	buf[19] = (uint8_t)(max >> 8);
	memcpy(buf + 24, name, sizeof(name));
	for (uint32_t i = 0; i < extra; i++)
		buf[56 + i] = (uint8_t)rnd();
	if (mutate) {
		const uint32_t k = 1 + below(4);

		for (uint32_t i = 0; i < k; i++)
			buf[below((uint32_t)len)] ^= (uint8_t)(1u << below(8));
	}
	a->shm_asked = flags & NELSSA_HELLO_SHM;
	/* Refused, or a second HELLO: ERROR, then the daemon closes the connection. */
	a->closing = !mutate && !a->tainted && (verdict || was_hello);
	if (a->closing)
		quiesce(a);
	st.refused_hellos += (uint64_t)(!mutate && verdict);
	note("a%d %sHELLO seq %u: versions %u..%u, flags %#x%s%s", a->idx, mutate ? "mutated " : "",
	     seq, min, max, flags, extra ? ", an older version's" : "",
	     mutate ? "" : verdict ? " (to be refused)" : "");
	if (ctl_send(a, buf, len, seq, NELSSA_MSG_HELLO, mutate ? 0 : verdict, !mutate))
		a->closing = 0;		/* not sent */
	if (a->closing && a->fd >= 0) {
		const uint64_t end = now_ms() + REPLY_WAIT_MS;

		while (a->fd >= 0 && now_ms() < end)
			pump(1);
		if (a->fd >= 0) {
			violation("a%d: a refused HELLO did not close the connection", a->idx);
			actor_close_fd(a, 0);
		}
		return;
	}
	if (a->fd >= 0 && a->hello && !a->tainted && !was_hello && data_path)
		ep_open(a, 0);
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
						  (uint8_t)(1 + below(2)), 0, (uint8_t)below(2) };
	m.u.create.placement = (uint8_t)below(2);
	m.u.create.max_batch = 1 + below(4);
	m.u.create.max_sel = 1 + below(32);
	m.u.create.capacity_tokens = 64 + below(8192);
	if (chance(15)) {
		switch (below(9)) {
		case 0: m.u.create.capacity_tokens = edge(64); break;
		case 1: m.u.create.max_batch = (uint32_t)edge(32); break;
		case 2: m.u.create.max_sel = (uint32_t)edge(32); break;
		case 3: m.u.create.shape.layers = (uint16_t)edge(16); break;
		case 4: m.u.create.shape.head_dim = (uint16_t)edge(16); break;
		case 5: m.u.create.shape.kv_heads = (uint16_t)edge(16); break;
		case 6: m.u.create.shape.q_heads = (uint16_t)edge(16); break;
		case 7: m.u.create.shape.kv_layout = (uint8_t)edge(8); break;
		default: m.u.create.placement = (uint8_t)edge(8); break;
		}
	}
	if (ctl_msg(a, &m, 0, mutate) || a->fd < 0 || a->tainted)
		return;
	if (n_known == before + 1 && a->n_sess < MAX_SESS) {
		struct sess *s = &a->s[a->n_sess++];

		memset(s, 0, sizeof(*s));
		s->id = known[before % MAX_KNOWN].id;
		s->token = known[before % MAX_KNOWN].token;
		s->key = a->key;
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
	if (ctl_msg(a, &m, foreign ? -ENOENT : 0, mutate) || a->fd < 0 || a->tainted || !s)
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
	if (ctl_msg(a, &m, foreign ? -ENOENT : 0, chance(5)) || a->fd < 0 || a->tainted || !s)
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
	settle(a);
	quiesce(a);
	actor_close_fd(a, rst);
	if (ep_too)
		for (uint32_t i = 0; i < OWN_EPS; i++)
			lep_close(&a->ep[i]);
}

static void act_ep_close(struct actor *a)
{
	const uint32_t i = chance(70) ? 0 : below(OWN_EPS);

	note("a%d endpoint %u closed", a->idx, i);
	settle(a);
	lep_close(&a->ep[i]);
}

/*
 * Endpoints a client may not have: one more of its own (the daemon takes
 * EPS_PER_CONN of a connection), or a hostile worker -- its client id
 * another actor's key, or a random one -- with an endpoint that KV and
 * STEP messages then go on now and then.
 */
static void act_extra_ep(struct actor *a)
{
	if (a->fd < 0 || !a->hello || a->tainted)
		return;
	if (chance(50)) {
		const uint32_t i = 1 + below(OWN_EPS - 1);

		note("a%d extra endpoint %u", a->idx, i);
		if (a->ep[i].ep && a->ep[i].lw->key == a->key && chance(50)) {
			settle(a);
			lep_close(&a->ep[i]);
		}
		else if (!a->ep[i].ep && !own_worker(a))
			lep_open(&a->ep[i], &a->own, a, a->shm, LEP_WAIT);
	} else {
		struct actor *b = &actors[below(n_actors)];
		const int steal = b->key && chance(60);
		uint64_t key = steal ? b->key : rnd() | 1;

		while (!steal && key_eps(key, 0))
			key = rnd() | 1;
		note("a%d hostile worker, key %#" PRIx64 " (%s)", a->idx, key,
		     steal ? b == a ? "its own" : "another actor's" : "random");
		settle(a);
		worker_drop(a, &a->hostile, chance(50));
		if (worker_make(&a->hostile, a, key, !steal))
			return;
		st.hostile_eps++;
		/* Shared memory as the key's connection was granted it (a random one: a guess). */
		lep_open(&a->hep, &a->hostile, a, steal ? b->shm : a->shm, LEP_FLUSH);
	}
}

/* A fresh connection must be served: HELLO (no data path made) and STATS. */
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
		/* Two frames: HELLO_OK, STATS_REPLY. */
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

/* @a goes: its connection, and its workers, their endpoints closed first when @close_eps. */
static void actor_vanish(struct actor *a, int close_eps)
{
	settle(a);
	quiesce(a);
	actor_close_fd(a, 0);
	worker_drop(a, &a->own, close_eps);
	worker_drop(a, &a->hostile, close_eps);
}

static int ctl_alive(struct actor *a)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_STATS };

	return !ctl_msg(a, &m, 0, 0) && a->fd >= 0;
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
		const int close_eps = chance(50);

		note("a%d vanishes (workers destroyed%s)", a->idx,
		     close_eps ? ", endpoints closed first" : "");
		actor_vanish(a, close_eps);
	} else if (r < 95) {
		act_extra_ep(a);
	} else {
		note("a%d waits", a->idx);
		pump(below(20));
	}
	for (uint32_t i = 0; i < OWN_EPS; i++)
		lep_poll(&a->ep[i]);
	lep_poll(&a->hep);
	for (uint32_t i = 0; i < OWN_EPS; i++)
		if (a->ep[i].ep && a->ep[i].failed) {
			note("a%d endpoint %u failed: closed", a->idx, i);
			lep_close(&a->ep[i]);
		}
	if (a->hep.ep && a->hep.failed) {
		note("a%d hostile endpoint failed: closed", a->idx);
		lep_close(&a->hep);
	}
}

/* A valid HELLO (asking for shared memory when @shm); 0 when answered HELLO_OK. */
static int seq_hello(struct actor *a, int shm)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO };

	if (a->fd < 0)
		act_connect(a);
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	m.u.hello.flags = shm ? NELSSA_HELLO_SHM : 0;
	a->shm_asked = m.u.hello.flags;
	strcpy(m.u.hello.name, "fuzz-seq");
	return ctl_msg(a, &m, 0, 0) || !a->hello ? -1 : 0;
}

/* A KV message for a session that does not exist: the first message on an endpoint. */
static void seq_kv_nosession(struct lep *e)
{
	struct nelssa_kv_hdr h = { .session = 1ull << 62, .token = 1, .nr_tokens = 1 };
	uint8_t *buf = calloc(1, NELSSA_KV_HDR_BYTES + 4 * 16);

	if (!buf)
		return;
	h.cookie = rnd() | 1;
	awaited_cookie = h.cookie;
	st.kv_sent++;
	nelssa_kv_hdr_put(buf, &h);
	am_send(e, NELSSA_AM_KV, buf, NELSSA_KV_HDR_BYTES, 4 * 16);
}

/*
 * A client whose worker goes (a process exit does the same) during its
 * wire-up to the daemon's listener (@early) or just after, 48 times: HELLO
 * (every other one asking for shared memory), the worker with the key and
 * its endpoint, then at once (@early), or once the endpoint is up, or once
 * a KV message went on it, 0 to 9 ms of progress and the worker destroyed,
 * its endpoint open or closed first, the control connection closed before
 * or after.
 */
static int wireup_vanish(int early)
{
	struct actor *a = &actors[0];

	for (uint32_t i = 0; i < 48; i++) {
		const uint32_t stage = early ? 0 : 1 + i % 2;

		n_actions++;
		note("wire-up %u: HELLO%s, endpoint%s, %u ms, %s", i, i % 2 ? " (shm)" : "",
		     stage == 0 ? "" : stage == 1 ? " up" : " up, KV", i % 10,
		     i % 4 == 0 ? "endpoint closed, worker destroyed" : i % 4 == 1 ?
		     "worker destroyed" : "connection closed, worker destroyed");
		if (seq_hello(a, (int)(i % 2))) {
			printf("# wire-up %u: no HELLO_OK\n", i);
			return 1;
		}
		if (own_worker(a) || lep_open(&a->ep[0], &a->own, a, a->shm,
						  stage ? LEP_WAIT : LEP_BARE)) {
			printf("# wire-up %u: no endpoint to the listener\n", i);
			return 1;
		}
		if (stage == 2)
			seq_kv_nosession(&a->ep[0]);
		pump(i % 10);
		if (i % 4 >= 2)
			actor_close_fd(a, (int)(i % 2));
		actor_vanish(a, i % 4 == 0);
	}
	return 0;
}

/*
 * wireup-vanish: the client goes just after its wire-up.  With worker
 * addresses, UCX 1.13.1 aborted the daemon answering such a wire-up
 * (ucp_request.c:684, "got REP message"); the listener's flow has no such
 * message.
 */
static int seq_wireup_vanish(void)
{
	return wireup_vanish(0);
}

/*
 * wireup-vanish-early: the client goes during its wire-up.  The daemon's
 * UCX 1.13.1, connecting its TCP lanes to the client, then aborts now and
 * then: tcp_ep.c:478, "!(ep->flags & UCT_TCP_EP_FLAG_CTX_TYPE_TX)"
 * (README.md).
 */
static int seq_wireup_vanish_early(void)
{
	return wireup_vanish(1);
}

/*
 * What a child of wireup-kill does (fuzz_live HOST PORT --wireup-child
 * STAGE SHM FD): a client of its own -- HELLO, then up to STAGE of: 1 its
 * worker and endpoint, 2 the endpoint's flush completed, 3 a KV message
 * sent -- then one byte on FD, and progress until it is killed (or its
 * parent is gone, or a minute has passed: no child outlives a run).
 */
static int wireup_child(uint32_t stage, int shm, int fd)
{
	struct actor *a = &actors[0];
	const uint8_t one = 1;

	n_actors = 1;
	a->idx = 0;
	a->fd = -1;
	if (seq_hello(a, shm))
		return 1;
	if (stage >= 1 && (own_worker(a) ||
			   lep_open(&a->ep[0], &a->own, a, a->shm, stage >= 2 ? LEP_WAIT : LEP_BARE)))
		return 1;
	if (stage >= 3)
		seq_kv_nosession(&a->ep[0]);
	if (write(fd, &one, 1) != 1)
		return 1;
	for (const uint64_t end = now_ms() + 60000; now_ms() < end && getppid() != 1;)
		pump(100);
	return 0;
}

/*
 * wireup-kill: a client process SIGKILLed during its wire-up to the
 * listener, 48 times: after its HELLO_OK, with its endpoint just made,
 * once it is up, with a KV message sent (the stage cycles), 0 to 9 ms
 * after it said it got there (the delay cycles, and UCX's background
 * wire-up carries on in the child meanwhile).  The daemon must go on
 * serving, its connection request of a client gone rejected or its
 * endpoint failed and closed.
 */
static int seq_wireup_kill(void)
{
	for (uint32_t i = 0; i < 48; i++) {
		char stage[16], shm[16], wfd[16];
		int p[2];
		pid_t child;
		uint8_t b = 0;
		struct pollfd pfd;

		n_actions++;
		note("wire-up kill %u: stage %u%s, %u ms", i, i % 4, i / 4 % 2 ? ", shm" : "", i % 10);
		if (pipe(p))
			return 1;
		snprintf(stage, sizeof(stage), "%u", i % 4);
		snprintf(shm, sizeof(shm), "%u", i / 4 % 2);
		snprintf(wfd, sizeof(wfd), "%d", p[1]);
		child = fork();
		if (child < 0)
			return 1;
		if (!child) {
			/* A fresh process image: no UCX state of the parent's in the child. */
			close(p[0]);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			execl("/proc/self/exe", "fuzz_live", host, port, "--wireup-child", stage, shm,
			      wfd, (char *)NULL);
			_exit(127);
		}
		close(p[1]);
		pfd = (struct pollfd){ .fd = p[0], .events = POLLIN };
		/* Its own HELLO and wire-up answered in time, or the daemon hangs. */
		if (poll(&pfd, 1, REPLY_WAIT_MS) != 1 || read(p[0], &b, 1) != 1) {
			printf("# wire-up kill %u: the child did not get to stage %u\n", i, i % 4);
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
			close(p[0]);
			return 1;
		}
		close(p[0]);
		pump(i % 10);
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	return 0;
}

/*
 * wireup-close: a client that closes its control connection (FIN) and
 * then its endpoint while the endpoint's wire-up to the listener runs, 60
 * times: HELLO (asking for shared memory), its worker and endpoint, 0 to
 * 29 turns of the worker's progress, the control connection closed, the
 * endpoint closed (flushed: shared memory has no forced close), a few ms
 * of progress, the worker destroyed.  The daemon closes its end of the
 * endpoint as the connection goes, as the client's wire-up messages
 * still come.
 */
static int seq_wireup_close(void)
{
	struct actor *a = &actors[0];

	for (uint32_t i = 0; i < 60; i++) {
		n_actions++;
		note("wire-up close %u: HELLO (shm), endpoint, %u turns, FIN, endpoint closed", i,
		     i % 30);
		if (seq_hello(a, 1)) {
			printf("# wire-up close %u: no HELLO_OK\n", i);
			return 1;
		}
		if (own_worker(a) || lep_open(&a->ep[0], &a->own, a, a->shm, LEP_BARE)) {
			printf("# wire-up close %u: no endpoint to the listener\n", i);
			return 1;
		}
		for (uint32_t k = 0; k < i % 30; k++)
			ucp_worker_progress(a->own.w);
		actor_close_fd(a, 0);
		lep_close(&a->ep[0]);
		pump(5);
		actor_vanish(a, 1);
	}
	return 0;
}

/*
 * send-after-close: a client that closes its control connection (FIN) and
 * goes on sending on its endpoint, 30 times: HELLO (asking for shared
 * memory), its endpoint up, the control connection closed, then for 100
 * ms KV messages (of no session) as fast as they go -- the daemon closes
 * its end of the endpoint meanwhile, and the messages after that must be
 * dropped -- then the worker destroyed.  Over shared memory (no error
 * handling) the daemon's UCX 1.13.1 then takes a message's endpoint id
 * for an endpoint it has freed: ucp_worker.inl:92, "(*ep_p)->worker ==
 * worker" (README.md).
 */
static int seq_send_after_close(void)
{
	struct actor *a = &actors[0];

	for (uint32_t i = 0; i < 30; i++) {
		n_actions++;
		note("send-after-close %u: HELLO (shm), endpoint up, FIN, KV every ms for 100 ms", i);
		if (seq_hello(a, 1)) {
			printf("# send-after-close %u: no HELLO_OK\n", i);
			return 1;
		}
		if (own_worker(a) || lep_open(&a->ep[0], &a->own, a, a->shm, LEP_WAIT)) {
			printf("# send-after-close %u: no endpoint to the listener\n", i);
			return 1;
		}
		actor_close_fd(a, 0);
		for (const uint64_t end = now_ms() + 100; now_ms() < end;) {
			seq_kv_nosession(&a->ep[0]);
			ucp_worker_progress(a->own.w);
		}
		actor_vanish(a, 1);
	}
	return 0;
}

/*
 * reply-unfetched: a client that leaves a step's reply, sent by
 * rendezvous, unfetched and closes its control connection, 8 times:
 * HELLO (asking for shared memory, granted where the transports have it),
 * a session of 32 query heads of 256 over 4 KV heads and a request, its
 * endpoint up, a step of 16 items that select nothing (a reply of 16 x 8
 * x 256 outputs and their LSEs, 131,584 bytes: past UCX's rendezvous
 * threshold), the reply's announcement kept by its callback
 * (UCS_INPROGRESS), the control connection closed, the worker kept alive
 * and holding it.  The daemon must close its end of the endpoint with its
 * reply's send unfinished: forced over TCP, which ends the send.  Over
 * shared memory its UCX 1.13.1 aborted there (ucp_ep.c:437,
 * "ucs_hlist_is_empty(&ucp_ep_ext_gen(ep)->proto_reqs)": an endpoint
 * without error handling has no forced close, and the flushed close
 * destroyed it with the send still registered) until the daemon sent to
 * such clients eagerly (daemon/dispatch.c): the reply comes whole then.
 */
static int seq_reply_unfetched(void)
{
	struct actor *a = &actors[0];
	const uint32_t g = 8, d = 256, kvh = 4, items = 16;
	uint32_t rndv = 0;

	for (uint32_t i = 0; i < 8; i++) {
		struct nelssa_msg m = { .type = NELSSA_MSG_SESSION_CREATE };
		struct nelssa_step_hdr h = { 0 };
		const size_t len = (size_t)items * NELSSA_STEP_ITEM_BYTES + 4ull * items * g * d;
		struct step_rec *rec;
		uint64_t session, token, end, replies;
		uint8_t *buf;
		uint32_t held;

		n_actions++;
		note("reply-unfetched %u: HELLO (shm), session, request, endpoint up, step, reply "
		     "held, FIN", i);
		if (seq_hello(a, 1)) {
			printf("# reply-unfetched %u: no HELLO_OK\n", i);
			return 1;
		}
		/* A run over shared memory that got none would test TCP twice. */
		if (!a->shm && getenv("UCX_TLS") && strstr(getenv("UCX_TLS"), "shm")) {
			printf("# reply-unfetched %u: shared memory asked for, not granted\n", i);
			return 1;
		}
		m.u.create.shape = (struct nelssa_shape){ 1, (uint16_t)(g * kvh), (uint16_t)kvh,
							  (uint16_t)d, 1, 0, NELSSA_KV_PACKED };
		m.u.create.max_batch = items / kvh;
		m.u.create.max_sel = 4;
		m.u.create.capacity_tokens = 1024;
		if (ctl_msg(a, &m, 0, 0) || !n_known) {
			printf("# reply-unfetched %u: no session\n", i);
			return 1;
		}
		session = known[(n_known - 1) % MAX_KNOWN].id;
		token = known[(n_known - 1) % MAX_KNOWN].token;
		m = (struct nelssa_msg){ .type = NELSSA_MSG_REQ_ALLOC };
		m.u.req.session = session;
		m.u.req.request = 1;
		m.u.req.max_tokens = 64;
		m.u.req.max_clusters = 4;
		if (ctl_msg(a, &m, 0, 0) || own_worker(a) ||
		    lep_open(&a->ep[0], &a->own, a, a->shm, LEP_WAIT) || !a->ep[0].up) {
			printf("# reply-unfetched %u: no request or no endpoint\n", i);
			return 1;
		}
		a->own.hold_rndv = 1;
		held = a->own.held;
		replies = st.step_replies;
		buf = calloc(1, NELSSA_STEP_HDR_BYTES + len);
		if (!buf)
			return 1;
		h.session = session;
		h.token = token;
		h.step = rnd() | 1;
		h.nr_items = items;
		nelssa_step_hdr_put(buf, &h);
		for (uint32_t k = 0; k < items; k++) {
			struct nelssa_step_item it = { .request = 1, .head = (uint16_t)(k % kvh) };

			nelssa_step_item_put(buf + NELSSA_STEP_HDR_BYTES + k * NELSSA_STEP_ITEM_BYTES,
					     &it);
		}
		rec = &steps_sent[n_steps_sent++ % STEP_RING];
		*rec = (struct step_rec){ .id = h.step, .nr_items = items,
					  .out_bytes = 4 * g * d + 4 * g, .valid_pair = 1,
					  .gen = a->own.gen };
		st.steps_sent++;
		am_send(&a->ep[0], NELSSA_AM_STEP, buf, NELSSA_STEP_HDR_BYTES, len);
		for (end = now_ms() + REPLY_WAIT_MS; st.step_replies == replies && now_ms() < end;)
			pump(1);
		if (st.step_replies == replies) {
			printf("# reply-unfetched %u: no reply in %u s\n", i, REPLY_WAIT_MS / 1000);
			return 1;
		}
		note("reply-unfetched %u: the reply came %s", i,
		     a->own.held == held ? "eagerly" : "by rendezvous, held");
		/*
		 * Otherwise it tests nothing: over TCP the reply is past the
		 * rendezvous threshold, and with shared memory granted the
		 * daemon must send it eagerly (its fix).
		 */
		if (a->shm == (a->own.held != held)) {
			printf("# reply-unfetched %u: the reply came %s over %s\n", i,
			       a->shm ? "by rendezvous" : "eagerly",
			       a->shm ? "shared memory" : "TCP");
			return 1;
		}
		actor_close_fd(a, 0);
		pump(20);
		/* It holds the reply's announcement: kept, never destroyed. */
		lep_reset(&a->ep[0]);
		bury(&a->own);
		a->own.hold_rndv = 0;
		rndv += a->own.held != held;
	}
	printf("# reply-unfetched: %u of 8 replies by rendezvous, held\n", rndv);
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
		{ "wireup-vanish-early", seq_wireup_vanish_early },
		{ "wireup-kill", seq_wireup_kill },
		{ "wireup-close", seq_wireup_close },
		{ "send-after-close", seq_send_after_close },
		{ "reply-unfetched", seq_reply_unfetched },
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
			actor_vanish(&actors[k], 1);
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
	uint32_t sessions = 0;
	char tls[256];
	int ret = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: fuzz_live HOST PORT [--seed N] [--iterations N] [--seconds N] "
			"[--actors N] [--pid PID] [--trace] [--gentle] [--sequence NAME]\n");
		return 2;
	}
	host = argv[1];
	port = argv[2];
	/* A child of wireup-kill, made fresh by exec (seq_wireup_kill()). */
	if (argc == 7 && !strcmp(argv[3], "--wireup-child")) {
		if (nelssa_link_context(NELSSA_LINK_RMA, &ucp) != UCS_OK)
			return 1;
		return wireup_child((uint32_t)strtoul(argv[4], NULL, 0), atoi(argv[5]),
				    atoi(argv[6]));
	}
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
	if (nelssa_link_context(NELSSA_LINK_RMA, &ucp) != UCS_OK) {
		printf("# UCX init failed\n");
		return 1;
	}
	nelssa_link_transports(ucp, tls, sizeof(tls));
	if (!nelssa_link_can_connect(tls)) {
		printf("# UCX here has no transport to reach the listener over (only '%s'): "
		       "UCX_TLS must include tcp\n", tls);
		return 2;
	}
	can_shm = nelssa_link_has_shm(tls);
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
		pump(1000);	/* wire-ups to the listener done before the workers go */
	for (uint32_t i = 0; i < n_actors; i++)
		actor_vanish(&actors[i], 1);
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
	printf("%" PRIu64 " connects, %" PRIu64 " disconnects, %" PRIu64 " HELLOs refused as they "
	       "must be, %" PRIu64 " shm granted, %" PRIu64 " endpoints (%" PRIu64 " waited up, %"
	       PRIu64 " hostile workers), %" PRIu64 " endpoint closes, %" PRIu64 " workers kept "
	       "(UCX cannot destroy them), %" PRIu64 " probes\n",
	       st.connects, st.resets, st.refused_hellos, st.shm_granted, st.eps, st.eps_up,
	       st.hostile_eps, st.ep_closes, st.buried, st.probes);
	ret = violations ? 1 : 0;
	ucp_cleanup(ucp);
	return ret;
}
