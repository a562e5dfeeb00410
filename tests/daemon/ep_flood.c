// SPDX-License-Identifier: MIT
/*
 * A UCX endpoint flood against nelssad for the daemon-limits test: says
 * HELLO on the control path, then opens N endpoints to the daemon's
 * worker address from one worker -- each a connection of its own to the
 * daemon (a socket there, over TCP) -- and sends a KV message naming no
 * session on each, which a daemon that took the endpoint answers with
 * -ENOENT.  Run against a daemon under `ulimit -n 1024` with N above
 * that, the daemon runs out of file descriptors part way; what must hold
 * is that it lives and, once the flood is gone, serves a new client (the
 * test checks that with other programs).  Prints how many endpoints were
 * answered, failed or never heard from; exit 0 when the flood ran (the
 * control connection and UCX came up), 1 otherwise.
 *
 * usage: ep_flood HOST PORT N [HOLD_MS]
 *
 * HOLD_MS (default 0): how long to keep the endpoints open after the
 * last answer before closing them all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/proto.h>

static ucp_worker_h worker;
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

int main(int argc, char **argv)
{
	static struct nelssa_msg m, r;
	uint8_t hdr[NELSSA_KV_HDR_BYTES];
	struct nelssa_kv_hdr kv = { .session = 999999, .cookie = 1, .nr_tokens = 0 };
	ucp_params_t up = { 0 };
	ucp_worker_params_t wp = { 0 };
	ucp_am_handler_param_t ap = { 0 };
	ucp_context_h ucp;
	ucp_ep_h *eps;
	void **sends;
	int *dead;
	unsigned int n, created = 0, hold;
	uint64_t end, last;
	int fd;

	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: ep_flood HOST PORT N [HOLD_MS]\n");
		return 2;
	}
	n = (unsigned int)strtoul(argv[3], NULL, 10);
	hold = argc == 5 ? (unsigned int)strtoul(argv[4], NULL, 10) : 0;
	eps = calloc(n, sizeof(*eps));
	sends = calloc(n, sizeof(*sends));
	dead = calloc(n, sizeof(*dead));
	fd = ctl_connect(argv[1], argv[2]);
	if (!eps || !sends || !dead || fd < 0) {
		printf("# cannot connect to %s:%s\n", argv[1], argv[2]);
		return 1;
	}
	m.type = NELSSA_MSG_HELLO;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	strcpy(m.u.hello.name, "ep-flood");
	if (ctl_call(fd, &m, &r) || r.type != NELSSA_MSG_HELLO_OK) {
		printf("# HELLO failed\n");
		return 1;
	}
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM;
	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (ucp_init(&up, NULL, &ucp) != UCS_OK || ucp_worker_create(ucp, &wp, &worker) != UCS_OK) {
		printf("# UCX setup failed\n");
		return 1;
	}
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_ack;
	for (ap.id = 0; ap.id <= NELSSA_AM_KV_ACK; ap.id++)
		ucp_worker_set_am_recv_handler(worker, &ap);
	nelssa_kv_hdr_put(hdr, &kv);
	for (unsigned int i = 0; i < n; i++) {
		ucp_ep_params_t ep = { 0 };
		ucp_request_param_t prm = { 0 };
		ucs_status_ptr_t sp;

		ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
				UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		ep.address = (const ucp_address_t *)r.u.hello_ok.addr;
		ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
		ep.err_handler.cb = ep_failed;
		ep.err_handler.arg = &dead[i];
		if (ucp_ep_create(worker, &ep, &eps[i]) != UCS_OK) {
			eps[i] = NULL;
			failed++;
			continue;
		}
		created++;
		prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_AM_SEND_FLAG_REPLY;
		prm.cb.send = sent;
		sp = ucp_am_send_nbx(eps[i], NELSSA_AM_KV, hdr, sizeof(hdr), NULL, 0, &prm);
		sends[i] = UCS_PTR_IS_PTR(sp) ? sp : NULL;
		if (UCS_PTR_IS_ERR(sp) && !dead[i]) {
			dead[i] = 1;
			failed++;
		}
		ucp_worker_progress(worker);
	}
	/* Answers, failures, or 30 s without news. */
	end = last = now_ms();
	for (unsigned int seen = 0; answered + failed < n && now_ms() < last + 30000;) {
		ucp_worker_progress(worker);
		if (answered + failed != seen) {
			seen = answered + failed;
			last = now_ms();
		}
	}
	printf("# %u endpoints (%u created): %u answered, %u failed, %u never heard from, "
	       "%llu ms\n", n, created, answered, failed, n - answered - failed,
	       (unsigned long long)(now_ms() - end));
	for (end = now_ms() + hold; now_ms() < end;)
		ucp_worker_progress(worker);
	for (unsigned int i = 0; i < n; i++) {
		if (sends[i]) {
			if (ucp_request_check_status(sends[i]) == UCS_INPROGRESS)
				ucp_request_cancel(worker, sends[i]);
			ucp_request_free(sends[i]);
		}
	}
	for (unsigned int i = 0; i < n; i++) {
		ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					    .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp;

		if (!eps[i])
			continue;
		sp = ucp_ep_close_nbx(eps[i], &prm);
		end = now_ms() + 2000;
		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
		       now_ms() < end)
			ucp_worker_progress(worker);
		if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
			ucp_request_free(sp);
	}
	ucp_worker_destroy(worker);
	ucp_cleanup(ucp);
	close(fd);
	free(eps);
	free(sends);
	free(dead);
	return 0;
}
