// SPDX-License-Identifier: MIT
/*
 * The data path's UCX setup, shared by nelssad, the client library and
 * the tests that play hostile clients (nelssa/link.h says why it is UCX's
 * client/server flow).
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <nelssa/link.h>

ucs_status_t nelssa_link_context(unsigned int flags, ucp_context_h *out)
{
	const int server = !!(flags & NELSSA_LINK_SERVER);
	ucp_params_t up = { 0 };

	/*
	 * UCX 1.13's TCP transport aborts (tcp_ep.c:478) when a connect() to
	 * a peer that has just died completes at once and it sends on the
	 * endpoint it has just failed; a connect() that always returns
	 * EINPROGRESS takes the other path.  The daemon makes those connects.
	 * An environment variable, not ucp_config_modify(): UCX reads the TCP
	 * transport's settings when it opens the interface, from there.
	 */
	if (server && setenv("UCX_TCP_CONN_NB", "y", 0))
		return UCS_ERR_NO_MEMORY;
	/*
	 * UCX 1.13 names an endpoint without error handling on the wire by
	 * its address (a direct id), so a message that arrives after the
	 * daemon closed such an endpoint -- a client on shared memory that
	 * closed its control connection and goes on sending -- made UCX read
	 * the freed endpoint and abort (ucp_worker.inl:92).  Indirect ids
	 * for every endpoint make that a failed lookup.
	 */
	if (server && setenv("UCX_PROTO_INDIRECT_ID", "on", 0))
		return UCS_ERR_NO_MEMORY;
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	/* RMA: clients put KV rows straight into the daemon's registered memory. */
	up.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP |
		      (flags & NELSSA_LINK_RMA ? UCP_FEATURE_RMA : 0);
	/*
	 * The daemon registers a session's memory on its control thread
	 * while the poller thread drives the worker: the context (not the
	 * worker) must then be thread-safe.
	 */
	if (server) {
		up.field_mask |= UCP_PARAM_FIELD_MT_WORKERS_SHARED;
		up.mt_workers_shared = 1;
	}
	return ucp_init(&up, NULL, out);
}

void nelssa_link_transports(ucp_context_h ctx, char *buf, size_t len)
{
	static const char *const tls[] = { "rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5",
					   "tcp", "posix", "sysv", "cma", "xpmem", "knem" };
	char *text = NULL;
	size_t n = 0, used = 0;
	FILE *f = open_memstream(&text, &n);

	if (len)
		buf[0] = 0;
	if (!f || !len)
		return;
	ucp_context_print_info(ctx, f);
	fclose(f);
	for (size_t i = 0; i < sizeof(tls) / sizeof(tls[0]); i++) {
		char pat[32];
		int w;

		snprintf(pat, sizeof(pat), "%s/", tls[i]);
		if (!text || !strstr(text, pat))
			continue;
		w = snprintf(buf + used, len - used, "%s%s", used ? " " : "", tls[i]);
		if (w < 0 || (size_t)w >= len - used) {
			buf[used] = 0;
			break;
		}
		used += (size_t)w;
	}
	free(text);
}

int nelssa_link_tl_is_rdma(const char *tl)
{
	/* Verbs and mlx5 alike: rc_verbs, rc_mlx5, dc_mlx5, ud_verbs, ud_mlx5. */
	return !strncmp(tl, "rc_", 3) || !strncmp(tl, "dc_", 3) || !strncmp(tl, "ud_", 3);
}

/* Whether a word of @transports is one @is takes. */
static int has_any(const char *transports, int (*is)(const char *tl))
{
	char copy[256], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", transports);
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
		if (is(t))
			return 1;
	return 0;
}

static int is_shm(const char *tl)
{
	return !strncmp(tl, "posix", 5) || !strncmp(tl, "sysv", 4);
}

static int is_net(const char *tl)
{
	return !strncmp(tl, "tcp", 3) || nelssa_link_tl_is_rdma(tl);
}

int nelssa_link_has_shm(const char *transports)
{
	return has_any(transports, is_shm);
}

int nelssa_link_has_rdma(const char *transports)
{
	return has_any(transports, nelssa_link_tl_is_rdma);
}

static int is_rdma_rma(const char *tl)
{
	return !strncmp(tl, "rc_", 3) || !strncmp(tl, "dc_", 3);
}

int nelssa_link_has_rdma_rma(const char *transports)
{
	return has_any(transports, is_rdma_rma);
}

int nelssa_link_can_connect(const char *transports)
{
	return has_any(transports, is_net);
}

int nelssa_link_tls_rdma_only(const char *const *tls, unsigned int n, char *bad, size_t len)
{
	if (len)
		snprintf(bad, len, "unknown");
	for (unsigned int i = 0; i < n; i++) {
		if (!nelssa_link_tl_is_rdma(tls[i])) {
			if (len)
				snprintf(bad, len, "%s", tls[i]);
			return 0;
		}
	}
	return n > 0;
}

ucs_status_t nelssa_link_context_features(uint64_t features, ucp_context_h *out)
{
	ucp_params_t up = { 0 };

	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = features;
	return ucp_init(&up, NULL, out);
}

ucs_status_t nelssa_link_worker(ucp_context_h ctx, uint64_t client_id, ucp_worker_h *out)
{
	ucp_worker_params_t wp = { 0 };

	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	if (client_id) {
		wp.field_mask |= UCP_WORKER_PARAM_FIELD_CLIENT_ID;
		wp.client_id = client_id;
	}
	return ucp_worker_create(ctx, &wp, out);
}

size_t nelssa_link_addr(const struct sockaddr_storage *ss, const uint8_t **a)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (ss->ss_family == AF_INET) {
		*a = (const uint8_t *)&((const struct sockaddr_in *)ss)->sin_addr;
		return 4;
	}
	if (ss->ss_family == AF_INET6) {
		*a = ((const struct sockaddr_in6 *)ss)->sin6_addr.s6_addr;
		if (!memcmp(*a, v4mapped, 12)) {
			*a += 12;
			return 4;
		}
		return 16;
	}
	return 0;
}

/* Whether the @n address bytes at @a (nelssa_link_addr()'s) are a loopback address. */
static int is_loopback(const uint8_t *a, size_t n)
{
	return (n == 4 && a[0] == 127) || (n == 16 && !memcmp(a, &in6addr_loopback, 16));
}

int nelssa_link_is_local(int fd)
{
	struct sockaddr_storage me, peer;
	socklen_t me_len = sizeof(me), peer_len = sizeof(peer);
	const uint8_t *a = NULL, *b = NULL;
	size_t na, nb;

	if (getsockname(fd, (struct sockaddr *)&me, &me_len) ||
	    getpeername(fd, (struct sockaddr *)&peer, &peer_len))
		return 0;
	na = nelssa_link_addr(&me, &a);
	nb = nelssa_link_addr(&peer, &b);
	/* A connection within one host comes from the address it goes to. */
	return nb && (is_loopback(b, nb) || (na == nb && !memcmp(a, b, na)));
}

ucs_status_t nelssa_link_connect_sockaddr(ucp_worker_h w, const struct sockaddr *sa,
					  socklen_t len, unsigned int flags,
					  ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep)
{
	ucp_ep_params_t p = { 0 };

	p.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
		       UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
	if (flags & NELSSA_LINK_SEND_ID)
		p.flags |= UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID;
	p.sockaddr.addr = sa;
	p.sockaddr.addrlen = len;
	p.err_mode = flags & NELSSA_LINK_PEER_ERRORS ? UCP_ERR_HANDLING_MODE_PEER :
						       UCP_ERR_HANDLING_MODE_NONE;
	if (cb) {
		p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
		p.err_handler.cb = cb;
		p.err_handler.arg = arg;
	}
	return ucp_ep_create(w, &p, ep);
}

ucs_status_t nelssa_link_connect(ucp_worker_h w, int ctl_fd, uint16_t port, int shm,
				 ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getpeername(ctl_fd, (struct sockaddr *)&ss, &len))
		return UCS_ERR_UNREACHABLE;
	if (ss.ss_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_port = htons(port);
	else if (ss.ss_family == AF_INET6)
		((struct sockaddr_in6 *)&ss)->sin6_port = htons(port);
	else
		return UCS_ERR_UNREACHABLE;
	return nelssa_link_connect_sockaddr(w, (const struct sockaddr *)&ss, len,
					    NELSSA_LINK_SEND_ID | (shm ? 0 : NELSSA_LINK_PEER_ERRORS),
					    shm ? NULL : cb, arg, ep);
}

ucs_status_t nelssa_link_accept(ucp_worker_h w, ucp_conn_request_h req, int shm,
				ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep)
{
	ucp_ep_params_t p = { 0 };

	p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER;
	p.conn_request = req;
	p.err_handler.cb = cb;
	p.err_handler.arg = arg;
	if (!shm) {
		p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
	}
	return ucp_ep_create(w, &p, ep);
}

ucs_status_t nelssa_link_connect_worker(ucp_worker_h w, const ucp_address_t *addr, ucp_ep_h *ep)
{
	ucp_ep_params_t p = { 0 };

	p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
	p.address = addr;
	return ucp_ep_create(w, &p, ep);
}

/* Copies the @n bytes at @s to @dst (@len bytes), cut short where they do not fit. */
static void copy_word(char *dst, size_t len, const char *s, size_t n)
{
	if (n >= len)
		n = len - 1;
	memcpy(dst, s, n);
	dst[n] = 0;
}

/* Whether the word @w (@n bytes) is a use that moves data over its lane. */
static int data_use(const char *w, size_t n)
{
	/* am, am_bw#N, rma_bw#N, amo#N, tag; not wireup, ka, nor the peer's md/sysdev. */
	return (n >= 2 && !strncmp(w, "am", 2)) || (n >= 3 && !strncmp(w, "rma", 3)) ||
	       (n >= 3 && !strncmp(w, "tag", 3));
}

/* N (below 1000) of "@key[N]:" opening @p (before @end), or -1. */
static int bracket_index(const char *p, const char *end, const char *key)
{
	size_t k = strlen(key);
	char *stop;
	unsigned long v;

	if ((size_t)(end - p) <= k + 2 || strncmp(p, key, k) || p[k] != '[' ||
	    p[k + 1] < '0' || p[k + 1] > '9')
		return -1;
	v = strtoul(p + k + 1, &stop, 10);
	return stop + 1 < end && stop[0] == ']' && stop[1] == ':' && v < 1000 ? (int)v : -1;
}

unsigned int nelssa_link_lanes_parse(const char *text, struct nelssa_link_lanes *l)
{
	char lane_tl[NELSSA_LINK_MAX_LANES][24] = { { 0 } };
	unsigned int seen = 0, puts = 0;

	memset(l, 0, sizeof(*l));
	for (const char *line = text; line && *line;) {
		const char *eol = strchr(line, '\n'), *end = eol ? eol : line + strlen(line);
		const char *p = line, *use, *tl, *slash;
		int data = 0, idx;

		line = eol ? eol + 1 : NULL;
		while (p < end && (*p == '#' || *p == ' '))
			p++;
		/* "put[1]: 0..<short>..124..<bcopy>..(inf)": lane 1 serves the RMA API. */
		idx = bracket_index(p, end, "put");
		if (idx >= 0) {
			if (idx < NELSSA_LINK_MAX_LANES)
				puts |= 1u << idx;
			continue;
		}
		/* "lane[0]:  2:rc_verbs/rxe0:1.0 md[1]  -> md[1]/ib/sysdev[255] rma_bw#0 am am_bw#0" */
		idx = bracket_index(p, end, "lane");
		if (idx < 0)
			continue;
		p = memchr(p, ']', (size_t)(end - p));
		p = p && p + 1 < end && p[1] == ':' ? memchr(p + 2, ':', (size_t)(end - p - 2)) : NULL;
		use = p ? strstr(p, "->") : NULL;
		if (!p || !use || use >= end)
			continue;
		tl = p + 1;
		slash = memchr(tl, '/', (size_t)(use - tl));
		if (!slash || slash == tl)
			continue;
		seen++;
		if (idx < NELSSA_LINK_MAX_LANES)
			copy_word(lane_tl[idx], sizeof(lane_tl[0]), tl, (size_t)(slash - tl));
		/* The uses: the words after the peer's "md[N]/tl/sysdev[N]". */
		for (const char *w = use + 2; w < end;) {
			size_t n;

			while (w < end && *w == ' ')
				w++;
			n = strcspn(w, " \n");
			if (w + n > end)
				n = (size_t)(end - w);
			if (!n)
				break;
			data |= data_use(w, n);
			w += n;
		}
		if (data && l->n < NELSSA_LINK_MAX_LANES)
			copy_word(l->tl[l->n++], sizeof(l->tl[0]), tl, (size_t)(slash - tl));
	}
	/* A "put[N]" line may come before or after lane N's: judged at the end. */
	for (unsigned int i = 0; i < NELSSA_LINK_MAX_LANES; i++)
		if ((puts & (1u << i)) && nelssa_link_tl_is_rdma(lane_tl[i]))
			l->native_rma = 1;
	return seen;
}

/* Reads UCX's description of @ep into @l; 0 where it has no lane it knows. */
static unsigned int describe(ucp_ep_h ep, struct nelssa_link_lanes *l)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	unsigned int seen;

	memset(l, 0, sizeof(*l));
	if (!f)
		return 0;
	ucp_ep_print_info(ep, f);
	fclose(f);
	seen = nelssa_link_lanes_parse(text, l);
	free(text);
	return seen;
}

#ifdef NELSSA_HAVE_UCP_EP_TRANSPORTS
/*
 * nelssa_link_ep_rdma_only() by ucp_ep_query(): -1 where UCX cannot say.
 * UCX lists the transport of every lane but the connection manager's,
 * wire-up-only lanes among them: stricter than the description, never
 * looser, as a wire-up lane of an RDMA endpoint is an RDMA one too.
 */
static int query_rdma_only(ucp_ep_h ep, char *bad, size_t len)
{
	ucp_transport_entry_t e[NELSSA_LINK_MAX_LANES];
	const char *tls[NELSSA_LINK_MAX_LANES];
	ucp_ep_attr_t a = { 0 };
	unsigned int n;

	/* A UCX older than the headers leaves the entries as they were: NULL names. */
	memset(e, 0, sizeof(e));
	a.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
	a.transports.entries = e;
	a.transports.num_entries = NELSSA_LINK_MAX_LANES;
	a.transports.entry_size = sizeof(e[0]);
	if (ucp_ep_query(ep, &a) != UCS_OK || !a.transports.num_entries)
		return -1;
	n = a.transports.num_entries < NELSSA_LINK_MAX_LANES ? a.transports.num_entries :
							       NELSSA_LINK_MAX_LANES;
	for (unsigned int i = 0; i < n; i++) {
		if (!e[i].transport_name)
			return -1;
		tls[i] = e[i].transport_name;
	}
	return nelssa_link_tls_rdma_only(tls, n, bad, len);
}
#endif

int nelssa_link_ep_rdma_only(ucp_ep_h ep, char *bad, size_t len)
{
	struct nelssa_link_lanes l;
	const char *tls[NELSSA_LINK_MAX_LANES];

#ifdef NELSSA_HAVE_UCP_EP_TRANSPORTS
	int r = query_rdma_only(ep, bad, len);

	if (r >= 0)
		return r;
#endif
	describe(ep, &l);
	for (unsigned int i = 0; i < l.n; i++)
		tls[i] = l.tl[i];
	return nelssa_link_tls_rdma_only(tls, l.n, bad, len);
}

int nelssa_link_ep_native_rma(ucp_ep_h ep)
{
	struct nelssa_link_lanes l;

	if (describe(ep, &l))
		return l.native_rma;
#ifdef NELSSA_HAVE_UCP_EP_TRANSPORTS
	/*
	 * A description this parser cannot read (a later UCX's format):
	 * an endpoint on RDMA alone has the RMA lanes its transports offer.
	 * Wrong at worst for RDMA without RMA (ud alone), where a put is
	 * then emulated: slower, still correct.
	 */
	return nelssa_link_ep_rdma_only(ep, NULL, 0);
#else
	return 0;
#endif
}
