// SPDX-License-Identifier: MIT
/*
 * UCX endpoint floods against nelssad for the daemon-limits test.  Says
 * HELLO on the control path, makes a worker with the connection's key
 * and opens endpoints to the daemon's data path (nelssa/link.h), sending
 * a KV message naming no session on each -- which a daemon that took the
 * endpoint answers with -ENOENT -- and waits until each is answered or
 * failed (30 s without news at most).
 *
 *   ep_flood HOST PORT N
 *	N endpoints on one connection: the daemon takes the ND_EPS_PER_CONN
 *	(2) a connection may have and rejects the other connection requests
 *	before it makes an endpoint.  Exit 0 when 2 (N if fewer) were
 *	answered and every other one failed.
 *   ep_flood HOST PORT N starve
 *	First fills the daemon's file descriptors: control connections, each
 *	held open once it has its HELLO_OK, until one is refused -EMFILE
 *	(the daemon's reserve descriptor says so).  Then N endpoints on the
 *	first connection, while the daemon has no descriptor to accept them
 *	with: each must fail (refused through the reserve; UCX's listener
 *	must stay).  Then it closes the fillers and opens one endpoint on a
 *	new connection: answered.  Exit 0 when all of that held.
 *
 * Prints "# ..." lines with the counts; exit 1 when something did not
 * hold, 2 for usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/link.h>
#include <nelssa/proto.h>

#define EPS_PER_CONN 2u		/* the daemon's ND_EPS_PER_CONN */

static unsigned int answered, failed;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

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

		if (poll(&pfd, 1, 10000) != 1)
			return -ETIMEDOUT;
		r = recv(fd, p, n, 0);
		if (r <= 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int ctl_call(int fd, const struct nelssa_msg *m, struct nelssa_msg *r)
{
	static uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	struct nelssa_msg_hdr h;
	size_t len;
	int ret = nelssa_msg_encode(m, buf, sizeof(buf), &len);

	if (ret)
		return ret;
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -EIO;
	ret = read_all(fd, buf, NELSSA_PROTO_HDR_BYTES);
	if (!ret)
		ret = nelssa_msg_decode_hdr(buf, &h);
	if (!ret)
		ret = read_all(fd, buf + NELSSA_PROTO_HDR_BYTES, h.length);
	if (!ret)
		ret = nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + h.length, r);
	return ret;
}

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
			   size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssa_ack_hdr a;

	(void)arg;
	(void)data;
	(void)length;
	(void)param;
	if (!nelssa_ack_hdr_get(header, header_length, &a) && a.status == -ENOENT)
		answered++;
	return UCS_OK;
}

static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	int *dead = arg;

	(void)ep;
	(void)status;
	if (!*dead) {
		*dead = 1;
		failed++;
	}
}

static void sent(void *request, ucs_status_t status, void *user_data)
{
	(void)request;
	(void)status;
	(void)user_data;
}

/* HELLO on a new connection: its fd, or -1; *@code the ERROR's code, if one came. */
static int hello(const char *host, const char *port, struct nelssa_msg *r, int *code)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_HELLO };
	int fd = ctl_connect(host, port);

	*code = 0;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	m.u.hello.flags = NELSSA_HELLO_SHM;	/* granted where it can be */
	strcpy(m.u.hello.name, "ep-flood");
	if (fd < 0)
		return -1;
	if (ctl_call(fd, &m, r) || r->type != NELSSA_MSG_HELLO_OK) {
		*code = r->type == NELSSA_MSG_ERROR ? r->u.error.code : 0;
		close(fd);
		return -1;
	}
	return fd;
}

struct flood {
	ucp_context_h ucp;
	ucp_worker_h worker;
	ucp_ep_h *eps;
	void **sends;
	int *dead;
	unsigned int n;
};

/* A worker with @r's key; N endpoints on it, each with a KV message sent. */
static int flood_open(struct flood *f, int fd, const struct nelssa_msg *r, unsigned int n)
{
	static uint8_t hdr[NELSSA_KV_HDR_BYTES];
	const struct nelssa_kv_hdr kv = { .session = 999999, .cookie = 1, .nr_tokens = 0 };
	ucp_am_handler_param_t ap = { 0 };

	f->n = n;
	f->eps = calloc(n + 1, sizeof(*f->eps));
	f->sends = calloc(n + 1, sizeof(*f->sends));
	f->dead = calloc(n + 1, sizeof(*f->dead));
	if (!f->eps || !f->sends || !f->dead || nelssa_link_context(NELSSA_LINK_RMA, &f->ucp) != UCS_OK ||
	    nelssa_link_worker(f->ucp, r->u.hello_ok.key, &f->worker) != UCS_OK) {
		printf("# UCX setup failed\n");
		return -1;
	}
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_ack;
	for (ap.id = 0; ap.id <= NELSSA_AM_KV_ACK; ap.id++)
		ucp_worker_set_am_recv_handler(f->worker, &ap);
	nelssa_kv_hdr_put(hdr, &kv);
	for (unsigned int i = 0; i < n; i++) {
		ucp_request_param_t prm = { 0 };
		ucs_status_ptr_t sp;

		if (nelssa_link_connect(f->worker, fd, r->u.hello_ok.data_port,
					r->u.hello_ok.flags & NELSSA_HELLO_SHM, ep_failed,
					&f->dead[i], &f->eps[i]) != UCS_OK) {
			f->eps[i] = NULL;
			f->dead[i] = 1;
			failed++;
			continue;
		}
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_AM_SEND_FLAG_REPLY;
		prm.cb.send = sent;
		sp = ucp_am_send_nbx(f->eps[i], NELSSA_AM_KV, hdr, sizeof(hdr), NULL, 0, &prm);
		f->sends[i] = UCS_PTR_IS_PTR(sp) ? sp : NULL;
		if (UCS_PTR_IS_ERR(sp) && !f->dead[i]) {
			f->dead[i] = 1;
			failed++;
		}
		ucp_worker_progress(f->worker);
	}
	return 0;
}

/* Answers and failures until every endpoint had one, or 30 s without news. */
static void flood_wait(struct flood *f, unsigned int want)
{
	uint64_t last = now_ms();

	for (unsigned int seen = 0; answered + failed < want && now_ms() < last + 30000;) {
		ucp_worker_progress(f->worker);
		if (answered + failed != seen) {
			seen = answered + failed;
			last = now_ms();
		}
	}
}

static void flood_close(struct flood *f)
{
	for (unsigned int i = 0; i < f->n; i++) {
		if (!f->sends[i])
			continue;
		if (ucp_request_check_status(f->sends[i]) == UCS_INPROGRESS)
			ucp_request_cancel(f->worker, f->sends[i]);
		ucp_request_free(f->sends[i]);
	}
	for (unsigned int i = 0; i < f->n; i++) {
		ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					    .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp;
		uint64_t end;

		if (!f->eps[i])
			continue;
		sp = ucp_ep_close_nbx(f->eps[i], &prm);
		end = now_ms() + 2000;
		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
		       now_ms() < end)
			ucp_worker_progress(f->worker);
		if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
			ucp_request_free(sp);
	}
	ucp_worker_destroy(f->worker);
	ucp_cleanup(f->ucp);
	free(f->eps);
	free(f->sends);
	free(f->dead);
}

/*
 * Holds control connections until the daemon refuses one -EMFILE: its
 * descriptors are all in use.  The number held, or -1.
 */
static int starve(const char *host, const char *port, int *held, unsigned int cap)
{
	struct nelssa_msg r;
	unsigned int n = 0;
	int code;

	while (n < cap) {
		int fd = hello(host, port, &r, &code);

		if (fd >= 0) {
			held[n++] = fd;
			continue;
		}
		if (code == -EMFILE)
			return (int)n;
		printf("# filling the daemon's descriptors: connection %u refused (%d)\n", n, code);
		return -1;
	}
	printf("# %u connections and the daemon still has descriptors\n", cap);
	return -1;
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	struct flood f = { 0 }, g = { 0 };
	struct nelssa_msg r;
	unsigned int n, want;
	int fd, code, *held = NULL, nheld = 0, ok;

	if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "starve"))) {
		fprintf(stderr, "usage: ep_flood HOST PORT N [starve]\n");
		return 2;
	}
	n = (unsigned int)strtoul(argv[3], NULL, 10);
	/* This process holds what the daemon cannot: its own limit up to the hard one. */
	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	fd = hello(argv[1], argv[2], &r, &code);
	if (fd < 0) {
		printf("# HELLO failed (%d)\n", code);
		return 1;
	}
	if (argc == 4) {
		if (flood_open(&f, fd, &r, n))
			return 1;
		flood_wait(&f, n);
		want = n < EPS_PER_CONN ? n : EPS_PER_CONN;
		printf("# %u endpoints on one connection: %u answered, %u failed, %u never heard "
		       "from (want %u answered)\n", n, answered, failed, n - answered - failed, want);
		ok = answered == want && answered + failed == n;
		flood_close(&f);
		close(fd);
		return ok ? 0 : 1;
	}
	held = calloc(4096, sizeof(*held));
	nheld = held ? starve(argv[1], argv[2], held, 4096) : -1;
	if (nheld < 0)
		return 1;
	printf("# the daemon's descriptors filled: %d connections held\n", nheld);
	if (flood_open(&f, fd, &r, n))
		return 1;
	flood_wait(&f, n);
	printf("# %u endpoints while it has no descriptor: %u answered, %u failed, %u never "
	       "heard from\n", n, answered, failed, n - answered - failed);
	ok = answered == 0 && failed == n;
	flood_close(&f);
	close(fd);
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	free(held);
	/* The daemon closes the fillers as it reads their ends: ask until one is served. */
	answered = failed = 0;
	for (uint64_t end = now_ms() + 30000; (fd = hello(argv[1], argv[2], &r, &code)) < 0 &&
	     code == -EMFILE && now_ms() < end;)
		usleep(10000);
	if (fd < 0 || flood_open(&g, fd, &r, 1))
		return 1;
	flood_wait(&g, 1);
	printf("# afterwards, a new connection's endpoint: %s\n",
	       answered ? "answered" : failed ? "failed" : "never heard from");
	ok = ok && answered == 1;
	flood_close(&g);
	close(fd);
	return ok ? 0 : 1;
}
