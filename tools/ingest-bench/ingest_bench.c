// SPDX-License-Identifier: MIT
/*
 * nelssa-ingest-bench: KV ingest through nelssad -- zero-copy (the client
 * puts rows into the daemon's registered device memory and commits; rows
 * in cluster order, put from where they lie, and rows shuffled, which the
 * client gathers first) and by messages (AUTO's choice where UCX has no
 * native RMA: KV_ROWS messages, a part each, that the daemon's UCX
 * receives straight into device memory; rows in order and shuffled) --
 * beside a bare ucp_put_nbx()
 * of the same sizes into registered memory of a forked process, measured
 * in the same run (DESIGN §5: a same-run baseline and a ratio).  Per mode:
 * GB/s, the ratio to the bare puts, and the daemon's CPU seconds per GB
 * (/proc/PID/stat of --daemon-pid).  Then the decode-step latency of one
 * client alone and while a second client (a forked process, its own
 * connection, its session set up beforehand) ingests --ingest-gb, once per
 * mode, starting when the stepping client is about to step: P50/P99 and
 * the ratio of the P99s.
 *
 * usage: nelssa-ingest-bench --port PORT --daemon-pid PID [--host H]
 *        [--context N] [--layers N] [--kv-heads N] [--head-dim N]
 *        [--gb G] [--ingest-gb G] [--json]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/client.h>
#include <nelssa/link.h>

#include "tool_util.h"

#define PROG "nelssa-ingest-bench"
#define CLUSTER 16u
#define CHUNK (128u << 10)	/* bytes of K (and of V) per put: the client's chunking */
#define WINDOW 16

struct opts {
	const char *host;
	uint16_t port;
	uint32_t pid, context, layers, kv_heads, head_dim, steps;
	double gb, ingest_gb;
	int json, kv_layout;
};

static double daemon_cpu_s(uint32_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
	fclose(f);
	/* After "pid (comm)": state is field 3, utime 14, stime 15. */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* ---- the bare baseline: puts into a forked process's registered memory ---- */

static int fd_read(int fd, void *p, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, (char *)p + got, n - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* The target: registers @bytes of anonymous memory, hands out its key, waits for the end. */
static void target_main(int wfd, int qfd, size_t bytes)
{
	ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
						  UCP_MEM_MAP_PARAM_FIELD_LENGTH };
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_mem_h memh;
	ucp_address_t *addr;
	void *rkey;
	size_t alen, rlen;
	uint64_t base = (uint64_t)(uintptr_t)mem;
	int efd;

	if (mem == MAP_FAILED)
		_exit(1);
	/* Resident and zeroed, as the daemon's arenas are (zeroed when a session is made). */
	memset(mem, 0, bytes);
	mp.address = mem;
	mp.length = bytes;
	if (nelssa_link_context_features(UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP, &ctx) != UCS_OK ||
	    nelssa_link_worker(ctx, 0, &w) != UCS_OK || ucp_mem_map(ctx, &mp, &memh) != UCS_OK ||
	    ucp_rkey_pack(ctx, memh, &rkey, &rlen) != UCS_OK ||
	    ucp_worker_get_address(w, &addr, &alen) != UCS_OK ||
	    ucp_worker_get_efd(w, &efd) != UCS_OK)
		_exit(1);
	if (write(wfd, &alen, sizeof(alen)) != sizeof(alen) || write(wfd, addr, alen) != (ssize_t)alen ||
	    write(wfd, &rlen, sizeof(rlen)) != sizeof(rlen) || write(wfd, rkey, rlen) != (ssize_t)rlen ||
	    write(wfd, &base, sizeof(base)) != sizeof(base))
		_exit(1);
	for (;;) {
		struct pollfd p[2] = { { .fd = efd, .events = POLLIN }, { .fd = qfd, .events = POLLIN } };

		if (ucp_worker_progress(w) || ucp_worker_arm(w) == UCS_ERR_BUSY)
			continue;
		if (poll(p, 2, 1000) > 0 && p[1].revents)
			break;
	}
	_exit(0);
}

struct req_state {
	int done;
	ucs_status_t st;
};

static void put_done(void *request, ucs_status_t status, void *user_data)
{
	struct req_state *s = user_data;

	(void)request;
	s->st = status;
	s->done = 1;
}

static int wait_req(ucp_worker_h w, ucs_status_ptr_t sp, struct req_state *s)
{
	if (!UCS_PTR_IS_PTR(sp))
		return UCS_PTR_IS_ERR(sp) ? -1 : 0;
	while (!s->done)
		ucp_worker_progress(w);
	ucp_request_free(sp);
	return s->st == UCS_OK ? 0 : -1;
}

/*
 * GB/s of @total bytes put as one client's offload would: per (layer,
 * head) store, K and V in CHUNK puts (WINDOW in flight), then a flush.
 * The target holds @stores stores, as the session's arenas hold one per
 * (layer, head), and the puts walk them in turn: the same footprint as
 * the ingest's, not one store rewritten while it stays in cache (which
 * measured 4-11 GB/s on shared memory, against the 2-3 GB/s of memory
 * the ingest really writes).
 */
static double bare_put(size_t store, uint32_t stores, double total)
{
	int pfd[2], qfd[2];
	pid_t child;
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_ep_h e;
	ucp_rkey_h rk;
	size_t alen, rlen;
	void *addr, *rkey;
	uint64_t base;
	uint8_t *src;
	double t0, done = 0, secs;

	if (pipe(pfd) || pipe(qfd))
		return -1;
	child = fork();
	if (child == 0) {
		close(pfd[0]);
		close(qfd[1]);
		target_main(pfd[1], qfd[0], store * stores);
	}
	close(pfd[1]);
	close(qfd[0]);
	if (child < 0 || fd_read(pfd[0], &alen, sizeof(alen)) || alen > 65536 ||
	    !(addr = malloc(alen)) || fd_read(pfd[0], addr, alen) ||
	    fd_read(pfd[0], &rlen, sizeof(rlen)) || rlen > 65536 || !(rkey = malloc(rlen)) ||
	    fd_read(pfd[0], rkey, rlen) || fd_read(pfd[0], &base, sizeof(base)) ||
	    nelssa_link_context_features(UCP_FEATURE_RMA, &ctx) != UCS_OK ||
	    nelssa_link_worker(ctx, 0, &w) != UCS_OK)
		return -1;
	if (nelssa_link_connect_worker(w, addr, &e) != UCS_OK || ucp_ep_rkey_unpack(e, rkey, &rk) != UCS_OK)
		return -1;
	src = tl_calloc(PROG, 1, CHUNK);
	t0 = tl_now();
	for (uint32_t n = 0; done < total; n = (n + 1) % stores) {
		const uint64_t at = base + (uint64_t)n * store;
		struct req_state win[WINDOW] = { { 0 } };
		ucs_status_ptr_t req[WINDOW] = { 0 };
		ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
							    UCP_OP_ATTR_FIELD_USER_DATA };
		struct req_state fs = { 0 };
		uint32_t slot = 0;

		/* One store: K then V, CHUNK at a time. */
		for (size_t off = 0; off < store; off += CHUNK, slot = (slot + 1) % WINDOW) {
			const size_t len = store - off < CHUNK ? store - off : CHUNK;

			if (req[slot] && wait_req(w, req[slot], &win[slot]))
				return -1;
			win[slot] = (struct req_state){ 0 };
			prm.cb.send = put_done;
			prm.user_data = &win[slot];
			req[slot] = ucp_put_nbx(e, src, len, at + off, rk, &prm);
			if (UCS_PTR_IS_ERR(req[slot]))
				return -1;
			if (!UCS_PTR_IS_PTR(req[slot]))
				req[slot] = NULL;
		}
		for (uint32_t i = 0; i < WINDOW; i++)
			if (req[i] && wait_req(w, req[i], &win[i]))
				return -1;
		prm.cb.send = put_done;
		prm.user_data = &fs;
		if (wait_req(w, ucp_ep_flush_nbx(e, &prm), &fs))
			return -1;
		done += (double)store;
	}
	secs = tl_now() - t0;
	if (write(qfd[1], "q", 1) != 1)
		kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	ucp_rkey_destroy(rk);
	{
		ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					   .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp = ucp_ep_close_nbx(e, &cp);

		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS)
			ucp_worker_progress(w);
		if (UCS_PTR_IS_PTR(sp))
			ucp_request_free(sp);
	}
	ucp_worker_destroy(w);
	ucp_cleanup(ctx);
	free(addr);
	free(rkey);
	free(src);
	return done / secs / 1e9;
}

/* ---- through nelssad ---- */

struct kv {
	struct nelssa_cluster_index ix;
	uint16_t *k, *v;
};

static void kv_make(const struct opts *o, struct kv *kv)
{
	const uint32_t nclu = (o->context + CLUSTER - 1) / CLUSTER;
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	kv->ix.head_dim = o->head_dim;
	kv->ix.n_tokens = o->context;
	kv->ix.n_clusters = nclu;
	kv->ix.perm = tl_calloc(PROG, o->context, sizeof(uint32_t));
	kv->ix.table = tl_calloc(PROG, nclu, sizeof(*kv->ix.table));
	for (uint32_t t = 0; t < o->context; t++)
		kv->ix.perm[t] = t;
	for (uint32_t c = 0; c < nclu; c++)
		kv->ix.table[c] = (struct nelssa_cluster){ c * CLUSTER,
			c * CLUSTER + CLUSTER <= o->context ? CLUSTER : o->context - c * CLUSTER };
	kv->k = tl_calloc(PROG, (size_t)o->context * o->head_dim, 2);
	kv->v = tl_calloc(PROG, (size_t)o->context * o->head_dim, 2);
	for (size_t i = 0; i < (size_t)o->context * o->head_dim; i++) {
		kv->k[i] = (uint16_t)(0x3c00 | (tl_next(&rng) & 0xff));
		kv->v[i] = (uint16_t)(0x3c00 | (tl_next(&rng) & 0xff));
	}
}

static int connect_to(const struct opts *o, struct nelssa_client **c, const char *name)
{
	struct nelssa_client_opts co = { .host = o->host, .port = o->port, .timeout_ms = 120000,
					 .name = name };
	int ret = nelssa_client_connect(&co, c);

	if (ret)
		fprintf(stderr, PROG ": connect: %s\n", nelssa_client_error(*c));
	return ret;
}

/* A session of @layers x kv_heads holding one request of the whole context. */
static int open_session(const struct opts *o, struct nelssa_client *c, uint32_t layers,
			uint64_t *s)
{
	const struct nelssa_session_cfg cfg = {
		.shape = { (uint16_t)layers, (uint16_t)(o->kv_heads * 4), (uint16_t)o->kv_heads,
			   (uint16_t)o->head_dim, NELSSA_KV_BF16, 0, (uint8_t)o->kv_layout },
		.placement = NELSSA_PLACE_HEADS, .max_batch = 1, .max_sel = 4096,
		.capacity_tokens = o->context,
	};
	int ret = nelssa_client_session(c, &cfg, s);

	if (!ret)
		ret = nelssa_client_request(c, *s, 1, o->context, (o->context + CLUSTER - 1) / CLUSTER);
	if (ret)
		fprintf(stderr, PROG ": session: %s\n", nelssa_client_error(c));
	return ret;
}

/* Offloads every (layer, head) of the request, again and again, until @gb; bytes sent. */
static double ingest(const struct opts *o, struct nelssa_client *c, uint64_t s,
		     const struct kv *kv, double gb)
{
	const double pass = (double)o->layers * o->kv_heads *
			    (4.0 * o->context * o->head_dim + 8.0 * kv->ix.n_clusters);
	double sent = 0;

	while (sent < gb * 1e9) {
		for (uint32_t l = 0; l < o->layers; l++)
			for (uint32_t h = 0; h < o->kv_heads; h++)
				if (nelssa_client_offload(c, s, 1, (uint16_t)l, (uint16_t)h, &kv->ix, 0,
							  kv->k, kv->v)) {
					fprintf(stderr, PROG ": offload: %s\n",
						nelssa_client_error(c));
					return -1;
				}
		sent += pass;
	}
	return sent;
}

struct mode_result {
	double gbs, cpu_per_gb, rma_frac, copied_frac;
};

/*
 * Toggles @kv between rows in cluster order (the identity permutation:
 * the client puts them from where they lie) and rows shuffled (each token
 * a random one: the client gathers every chunk first), by a fixed
 * permutation and its inverse.  The clusters stay as they are.  Always 0.
 */
static int kv_shuffle(struct kv *kv)
{
	static int shuffled;
	uint64_t rng = 0x2545f4914f6cdd1dull;

	if (shuffled) {
		for (uint32_t t = 0; t < kv->ix.n_tokens; t++)
			kv->ix.perm[t] = t;
	} else {
		for (uint32_t i = kv->ix.n_tokens; i > 1; i--) {
			uint32_t j = (uint32_t)(tl_next(&rng) % i), x = kv->ix.perm[i - 1];

			kv->ix.perm[i - 1] = kv->ix.perm[j];
			kv->ix.perm[j] = x;
		}
	}
	shuffled = !shuffled;
	return 0;
}

static int ingest_mode(const struct opts *o, const struct kv *kv, int zero_copy,
		       struct mode_result *r)
{
	struct nelssa_client *c = NULL;
	struct nelssa_ingest_stats st0, st1;
	uint64_t s;
	double cpu0, cpu1, t0, sent;

	if (connect_to(o, &c, "ingest-bench"))
		return -1;
	nelssa_client_set_zero_copy(c, zero_copy ? NELSSA_ZERO_COPY_FORCE : NELSSA_ZERO_COPY_OFF);
	if (open_session(o, c, o->layers, &s)) {
		nelssa_client_close(c);
		return -1;
	}
	if (zero_copy && nelssa_client_zero_copy(c, s) != 1)
		fprintf(stderr, PROG ": the daemon gave no zero-copy session (see its log)\n");
	/*
	 * One pass untimed.  A sim device hands out zeroed memory by dropping
	 * its pages (MADV_DONTNEED), so a new session's first write faults
	 * each page back in -- a cost of emulating a card in host memory that
	 * a card, whose memory is always there, does not have, and that the
	 * bare baseline's resident target does not pay.  Timed, it made some
	 * runs of zero-copy over shared memory 0.35-0.53 of the bare put
	 * against 0.87-1.05 without.
	 */
	if (ingest(o, c, s, kv, 1e-9) < 0 || nelssa_client_ingest_stats(c, s, &st0)) {
		nelssa_client_close(c);
		return -1;
	}
	cpu0 = daemon_cpu_s(o->pid);
	t0 = tl_now();
	sent = ingest(o, c, s, kv, o->gb);
	r->gbs = sent / (tl_now() - t0) / 1e9;
	cpu1 = daemon_cpu_s(o->pid);
	r->cpu_per_gb = cpu0 >= 0 && cpu1 >= 0 ? (cpu1 - cpu0) / (sent / 1e9) : -1;
	if (sent < 0 || nelssa_client_ingest_stats(c, s, &st1)) {
		nelssa_client_close(c);
		return -1;
	}
	r->rma_frac = (double)(st1.rma_bytes - st0.rma_bytes) /
		      (double)(st1.kv_bytes - st0.kv_bytes);
	r->copied_frac = (double)(st1.copied_bytes - st0.copied_bytes) /
			 (double)(st1.kv_bytes - st0.kv_bytes);
	nelssa_client_session_close(c, s);
	nelssa_client_close(c);
	return 0;
}

/*
 * Step latencies (us) of a small session until @stop's pipe closes, or @n
 * of them; a byte on @go_fd (unless -1) once the session is set up and
 * the first step is next.
 */
static double *steps(const struct opts *o, const struct kv *kv, int stop_fd, int go_fd,
		     uint32_t *n)
{
	struct nelssa_client *c = NULL;
	const uint32_t items = o->kv_heads, g = 4;
	const uint32_t nsel = kv->ix.n_clusters / 25 ? kv->ix.n_clusters / 25 : 1;
	struct nelssa_step_in *in = tl_calloc(PROG, items, sizeof(*in));
	float *q = tl_calloc(PROG, (size_t)items * g * o->head_dim, sizeof(float));
	float *out = tl_calloc(PROG, (size_t)items * g * o->head_dim, sizeof(float));
	float *lse = tl_calloc(PROG, (size_t)items * g, sizeof(float));
	uint32_t *sel = tl_calloc(PROG, nsel, sizeof(uint32_t)), cap = *n, got = 0;
	double *lat = tl_calloc(PROG, cap, sizeof(double));
	uint64_t s;

	if (connect_to(o, &c, "ingest-bench-steps") || open_session(o, c, 1, &s))
		return NULL;
	for (uint32_t h = 0; h < o->kv_heads; h++)
		if (nelssa_client_offload(c, s, 1, 0, (uint16_t)h, &kv->ix, 0, kv->k, kv->v))
			return NULL;
	for (uint32_t i = 0; i < nsel; i++)
		sel[i] = i * 25;
	if (go_fd >= 0 && write(go_fd, "g", 1) != 1)
		return NULL;
	for (uint32_t i = 0; i < items; i++)
		in[i] = (struct nelssa_step_in){ 1, (uint16_t)i, q + (size_t)i * g * o->head_dim,
						 sel, nsel };
	while (got < cap) {
		struct pollfd p = { .fd = stop_fd, .events = POLLIN };
		struct nelssa_step_times t;

		if (stop_fd >= 0 && poll(&p, 1, 0) > 0)
			break;
		if (nelssa_client_step(c, s, 0, in, items, out, lse, &t)) {
			fprintf(stderr, PROG ": step: %s\n", nelssa_client_error(c));
			return NULL;
		}
		lat[got++] = t.rtt / 1e3;
	}
	nelssa_client_close(c);
	free(in);
	free(q);
	free(out);
	free(lse);
	free(sel);
	*n = got;
	return lat;
}

struct lat {
	double p50, p99;
	uint32_t n;
};

static struct lat summarise(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), tl_cmp_double);
	return (struct lat){ tl_percentile(v, n, 0.5), tl_percentile(v, n, 0.99), n };
}

/* Step latencies while a forked client ingests --ingest-gb (or alone, @mode -1). */
static int interference(const struct opts *o, const struct kv *kv, int mode, struct lat *l)
{
	uint32_t n = mode < 0 ? o->steps : 1000000;
	int pfd[2] = { -1, -1 }, gfd[2] = { -1, -1 };
	pid_t child = -1;
	double *v;

	if (mode >= 0) {
		if (pipe(pfd) || pipe(gfd))
			return -1;
		child = fork();
		if (child == 0) {
			struct nelssa_client *c = NULL;
			struct opts big = *o;
			uint64_t s;
			char b;

			close(pfd[0]);
			close(gfd[1]);
			big.gb = o->ingest_gb;
			if (connect_to(o, &c, "ingest-bench-b"))
				_exit(1);
			nelssa_client_set_zero_copy(c, mode ? NELSSA_ZERO_COPY_FORCE
							    : NELSSA_ZERO_COPY_OFF);
			if (open_session(o, c, o->layers, &s))
				_exit(1);
			/* The ingest starts once the stepping client is about to step. */
			if (read(gfd[0], &b, 1) != 1)
				_exit(1);
			_exit(ingest(&big, c, s, kv, big.gb) < 0);
		}
		close(pfd[1]);
		close(gfd[0]);
	}
	v = steps(o, kv, pfd[0], gfd[1], &n);
	if (gfd[1] >= 0)
		close(gfd[1]);
	if (child > 0) {
		int st = 0;

		waitpid(child, &st, 0);
		close(pfd[0]);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			return -1;
	}
	if (v && !n) {
		fprintf(stderr, PROG ": no step ended while the other client ingested %g GB: "
			"give a larger --ingest-gb\n", o->ingest_gb);
		free(v);
		v = NULL;
	}
	if (!v)
		return -1;
	*l = summarise(v, n);
	free(v);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: " PROG " --port PORT --daemon-pid PID [--host HOST] [--context N]\n"
		"       [--layers N] [--kv-heads N] [--head-dim N] [--gb G] [--ingest-gb G]\n"
		"       [--steps N] [--kv-layout packed|adjacent] [--json]\n"
		"KV ingest through nelssad, zero-copy and staged, beside bare UCX puts of the same\n"
		"sizes; daemon CPU seconds per GB; decode-step latency alone and while another\n"
		"client ingests --ingest-gb (default 10).  UCX_TLS chooses the transport.\n"
		"--kv-layout adjacent: sessions keep each 16-token block's K and V side by side.\n");
}

static void json_mode(const char *name, const struct mode_result *r, double put)
{
	printf("\"%s\":{\"gbs\":%.3f,\"ratio_to_put\":%.3f,\"daemon_cpu_s_per_gb\":%.4f,"
	       "\"rma_fraction\":%.3f,\"copied_fraction\":%.3f},", name, r->gbs, r->gbs / put,
	       r->cpu_per_gb, r->rma_frac, r->copied_frac);
}

static void text_mode(const char *name, const struct mode_result *r, double put)
{
	printf("%s %7.3f GB/s  = %.3f x bare; daemon %.4f CPU-s/GB; %.0f%% by RMA, %.0f%% "
	       "copied by the daemon\n", name, r->gbs, r->gbs / put, r->cpu_per_gb,
	       100 * r->rma_frac, 100 * r->copied_frac);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "host", required_argument, NULL, 'H' }, { "port", required_argument, NULL, 'p' },
		{ "daemon-pid", required_argument, NULL, 'P' },
		{ "context", required_argument, NULL, 'c' }, { "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "head-dim", required_argument, NULL, 'd' }, { "gb", required_argument, NULL, 'g' },
		{ "ingest-gb", required_argument, NULL, 'i' },
		{ "steps", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "kv-layout", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' }, { 0 } };
	struct opts o = { .host = "127.0.0.1", .context = 32768, .layers = 2, .kv_heads = 8,
			  .head_dim = 128, .steps = 500, .gb = 2, .ingest_gb = 10 };
	struct mode_result zc, zg, mo, mg;
	struct lat alone, with_zc, with_msg;
	struct kv kv;
	char cpu[128];
	const char *tls = getenv("UCX_TLS");
	uint32_t port = 0;
	double put, store;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'H': o.host = optarg; break;
		case 'p': bad = tl_parse_u32(PROG, optarg, 1, 65535, &port, "--port"); break;
		case 'P': bad = tl_parse_u32(PROG, optarg, 1, UINT32_MAX, &o.pid, "--daemon-pid"); break;
		case 'c': bad = tl_parse_u32(PROG, optarg, 16, 1u << 22, &o.context, "--context"); break;
		case 'l': bad = tl_parse_u32(PROG, optarg, 1, 128, &o.layers, "--layers"); break;
		case 'k': bad = tl_parse_u32(PROG, optarg, 1, 128, &o.kv_heads, "--kv-heads"); break;
		case 'd': bad = tl_parse_u32(PROG, optarg, 16, 256, &o.head_dim, "--head-dim"); break;
		case 's': bad = tl_parse_u32(PROG, optarg, 10, 1000000, &o.steps, "--steps"); break;
		case 'g':
		case 'i': {
			char *end;
			double v = strtod(optarg, &end);

			if (*end || !(v > 0) || v > 1000) {
				fprintf(stderr, PROG ": %s %s: need GB in (0, 1000]\n",
					c == 'g' ? "--gb" : "--ingest-gb", optarg);
				bad = 1;
			} else {
				*(c == 'g' ? &o.gb : &o.ingest_gb) = v;
			}
			break;
		}
		case 'j': o.json = 1; break;
		case 'L':
			o.kv_layout = !strcmp(optarg, "adjacent");
			if (!o.kv_layout && strcmp(optarg, "packed")) {
				fprintf(stderr, PROG ": --kv-layout %s: need packed or adjacent\n",
					optarg);
				bad = 1;
			}
			break;
		case 'h': usage(); return 0;
		default: bad = 1;
		}
		if (bad) {
			usage();
			return 2;
		}
	}
	if (!port || !o.pid || optind != argc) {
		usage();
		return 2;
	}
	o.port = (uint16_t)port;
	kv_make(&o, &kv);
	store = 2.0 * o.context * o.head_dim * 2;	/* K and V of one (layer, head), bf16 */
	put = bare_put((size_t)store, o.layers * o.kv_heads, o.gb * 1e9);
	/* Rows in order, then shuffled, then in order again (kv_shuffle() toggles). */
	if (put < 0 || ingest_mode(&o, &kv, 1, &zc) || ingest_mode(&o, &kv, 0, &mo) ||
	    kv_shuffle(&kv) || ingest_mode(&o, &kv, 1, &zg) || ingest_mode(&o, &kv, 0, &mg) ||
	    kv_shuffle(&kv) || interference(&o, &kv, -1, &alone) ||
	    interference(&o, &kv, 1, &with_zc) || interference(&o, &kv, 0, &with_msg)) {
		fprintf(stderr, PROG ": a measurement failed\n");
		return 1;
	}
	free(kv.ix.perm);
	free(kv.ix.table);
	free(kv.k);
	free(kv.v);
	tl_cpu_model(cpu, sizeof(cpu));
	if (o.json) {
		printf("{\"cpu\":\"%s\",\"isa\":\"%s\",\"transport\":\"%s\",\"context\":%u,"
		       "\"layers\":%u,\"kv_heads\":%u,\"head_dim\":%u,\"gb\":%g,"
		       "\"kv_layout\":\"%s\",\"bare_put_gbs\":%.3f,", cpu, tl_cpu_isa(),
		       tls ? tls : "", o.context, o.layers, o.kv_heads, o.head_dim, o.gb,
		       o.kv_layout ? "adjacent" : "packed", put);
		json_mode("zero_copy", &zc, put);
		json_mode("zero_copy_gathered", &zg, put);
		json_mode("messages", &mo, put);
		json_mode("messages_gathered", &mg, put);
		printf("\"ingest_gb\":%g,\"step_us\":{\"alone\":{\"p50\":%.1f,\"p99\":%.1f,\"n\":%u},"
		       "\"zero_copy_ingest\":{\"p50\":%.1f,\"p99\":%.1f,\"n\":%u},"
		       "\"messages_ingest\":{\"p50\":%.1f,\"p99\":%.1f,\"n\":%u}},"
		       "\"p99_ratio_zero_copy\":%.3f,\"p99_ratio_messages\":%.3f}\n", o.ingest_gb,
		       alone.p50, alone.p99, alone.n, with_zc.p50, with_zc.p99, with_zc.n,
		       with_msg.p50, with_msg.p99, with_msg.n, with_zc.p99 / alone.p99,
		       with_msg.p99 / alone.p99);
		return 0;
	}
	printf("CPU: %s (%s); UCX_TLS=%s; %u layers x %u KV heads x %u tokens x dim %u, %g GB a "
	       "mode, KV %s\n", cpu, tl_cpu_isa(), tls ? tls : "(UCX's choice)", o.layers,
	       o.kv_heads, o.context, o.head_dim, o.gb,
	       o.kv_layout ? "blocks adjacent" : "arrays packed");
	printf("bare ucp_put_nbx, same sizes:  %7.3f GB/s\n", put);
	text_mode("zero-copy puts, rows in order:", &zc, put);
	text_mode("... rows shuffled, gathered:  ", &zg, put);
	text_mode("messages, rows in order:      ", &mo, put);
	text_mode("... rows shuffled, gathered:  ", &mg, put);
	printf("step latency alone:                     P50 %8.1f us  P99 %8.1f us (%u steps)\n",
	       alone.p50, alone.p99, alone.n);
	printf("... while another client ingests %g GB, zero-copy: P50 %8.1f  P99 %8.1f (%u) "
	       "P99 ratio %.3f\n", o.ingest_gb, with_zc.p50, with_zc.p99, with_zc.n,
	       with_zc.p99 / alone.p99);
	printf("... while another client ingests %g GB, messages:  P50 %8.1f  P99 %8.1f (%u) "
	       "P99 ratio %.3f\n", o.ingest_gb, with_msg.p50, with_msg.p99, with_msg.n,
	       with_msg.p99 / alone.p99);
	return 0;
}
