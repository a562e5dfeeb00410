// SPDX-License-Identifier: MIT
/*
 * nelssactl bench DEV attn: SPARSE_ATTN at a Llama-3-8B-like shape and
 * the effective bandwidth of KV it reads, against a streaming read of the
 * same number of bytes by the same number of threads, measured in the
 * same run.  The KV stores are large and every iteration selects fresh
 * random clusters, so the working set is not served from the CPU caches.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/fw.h>
#include <nelssa/half.h>

#include "attn_store.h"
#include "nelssactl.h"
#include "tool_util.h"

static const char help[] =
	"usage: nelssactl bench DEV attn [OPTIONS] [--json]\n"
	"  --threads N     executor cores of a sim device, and baseline threads (default 1)\n"
	"  --context N     tokens per KV store (default 131072)\n"
	"  --items N       work items per command = KV heads x sequences (default 32)\n"
	"  --head-dim N    (default 128)     --group N   query rows per item (default 4)\n"
	"  --cluster N     tokens per cluster (default 16)\n"
	"  --select F      fraction of clusters selected (default 0.04)\n"
	"  --iters N       timed commands, each with a fresh selection (default 10)\n"
	"  --cpus FIRST    pin the executors and the baseline readers to CPUs FIRST..\n"
	"                  FIRST+N-1 (default: the first N CPUs this process may use)\n"
	"  --no-pin        leave thread placement to the scheduler\n"
	"  --isa NAME      kernel of the sim device: auto, scalar, avx2, avx512,\n"
	"                  avx512-bf16, neon\n"
	"                  (default auto: the best this CPU runs; for DEV sim:N only)\n"
	"  --kv-dtype T    KV element type: bf16 (default), fp16, fp8, int8; bytes count\n"
	"                  what the type stores, scales included (token_bytes in JSON)\n"
	"  --attn-dots D   fp32 (default) or bf16: NPNM_ATTN_F_BF16_DOTS, the query and\n"
	"                  the softmax weights rounded to bf16 (the device must offer it)\n"
	"  --kv-layout L   packed (default) or adjacent: each 16-token block of K next to\n"
	"                  its block of V (kv_stride; the device must take it); the gather\n"
	"                  baseline reads the same layout\n"
	"Reports kv_bytes, seconds, effective_gbps (KV bytes read per second, mean over\n"
	"the timed commands), read_baseline_gbps (best of 3 single-pass streaming reads\n"
	"of a buffer as large as the KV stores, at most 2 GiB, with the same thread\n"
	"count on the same CPUs) and their ratio; gather_baseline_gbps (best of 3 reads of\n"
	"the K and V rows of as many random clusters, prefetched ahead, no arithmetic)\n"
	"and gather_ratio, for what the access pattern alone costs.  On a sim device\n"
	"also the compute ceiling of the kernel it runs (isa; peak_gflops: that kernel's\n"
	"inner-loop instruction mix on cache-resident rows, same threads and CPUs;\n"
	"compute_gbps = peak_gflops / group), roofline_gbps = min(read baseline,\n"
	"compute) and roofline_ratio, with cpu_model.\n";

static int parse(struct attn_opts *o, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "threads", required_argument, NULL, 't' }, { "context", required_argument, NULL, 'c' },
		{ "items", required_argument, NULL, 'n' }, { "head-dim", required_argument, NULL, 'd' },
		{ "group", required_argument, NULL, 'g' }, { "cluster", required_argument, NULL, 'k' },
		{ "select", required_argument, NULL, 's' }, { "iters", required_argument, NULL, 'i' },
		{ "cpus", required_argument, NULL, 'p' }, { "no-pin", no_argument, NULL, 'P' },
		{ "isa", required_argument, NULL, 'I' }, { "kv-dtype", required_argument, NULL, 'T' },
		{ "attn-dots", required_argument, NULL, 'D' },
		{ "kv-layout", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	uint64_t first = UINT64_MAX;
	int c, bad = 0;

	attn_defaults(o);
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': bad |= ctl_parse_uint(optarg, 1, 256, &o->threads); break;
		case 'c': bad |= ctl_parse_uint(optarg, 16, 1u << 24, &o->context); break;
		case 'n': bad |= ctl_parse_uint(optarg, 1, 4096, &o->items); break;
		case 'd': bad |= ctl_parse_uint(optarg, 16, 256, &o->head_dim); break;
		case 'g': bad |= ctl_parse_uint(optarg, 1, 16, &o->group); break;
		case 'k': bad |= ctl_parse_uint(optarg, 1, 4096, &o->cluster); break;
		case 's': bad |= ctl_parse_double(optarg, 0.0, 1.0, &o->select); break;
		case 'i': bad |= ctl_parse_uint(optarg, 1, 100000, &o->iters); break;
		case 'p': bad |= ctl_parse_uint(optarg, 0, 1023, &first); break;
		case 'P': o->pin = false; break;
		case 'I':
			bad |= nfw_isa_parse(optarg) < 0;
			o->isa = optarg;
			break;
		case 'T':
			o->kv_dtype = tl_kv_dtype_parse(optarg);
			bad |= !o->kv_dtype;
			break;
		case 'D':
			bad |= tl_attn_dots_parse(optarg, &o->attn_flags) != 0;
			break;
		case 'L': {
			int adj = tl_kv_layout_parse(optarg);

			bad |= adj < 0;
			o->adjacent = adj > 0;
			break;
		}
		case 'h': fputs(help, stdout); return 1;
		default: bad = 1; break;
		}
		if (bad) {
			fprintf(stderr, "nelssactl bench attn: bad option '%s'\n%s", argv[optind - 1], help);
			return -1;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "nelssactl bench attn: unexpected '%s'\n", argv[optind]);
		return -1;
	}
	if (first != UINT64_MAX) {
		if (!o->pin) {
			fprintf(stderr, "nelssactl bench attn: --cpus and --no-pin exclude each other\n");
			return -1;
		}
		o->cpu_first = (unsigned int)first;
		o->cpus_given = true;
	}
	return 0;
}

struct layout {
	struct tl_attn_store st;	/* one item's store */
	uint64_t nsel;			/* per item */
	uint64_t kv_bytes, in_bytes, items_bytes, out_bytes;
	uint64_t q_bytes, sel_base;
};

static void plan(const struct attn_opts *o, struct layout *l)
{
	tl_attn_store_plan(&l->st, o->kv_dtype, (uint32_t)o->head_dim, (uint32_t)o->context,
			   (uint32_t)o->cluster, o->adjacent);
	l->nsel = (uint64_t)llround(o->select * (double)l->st.nclusters);
	l->kv_bytes = l->st.bytes * o->items;
	l->q_bytes = o->items * o->group * o->head_dim * 4;
	l->sel_base = l->q_bytes;
	/* One selection per item per command, warm-up included. */
	l->in_bytes = l->sel_base + (o->iters + 1) * o->items * l->nsel * 4;
	l->items_bytes = (o->iters + 1) * o->items * sizeof(struct npnm_attn_item);
	l->out_bytes = o->items * (o->group * o->head_dim * 4 + o->group * 4);
}

/* A region's mapping as bytes; *@at stays NULL on failure. */
static int map_region(struct nelssa_pnm *p, uint32_t h, uint8_t **at)
{
	void *m;
	int ret = nelssa_pnm_mem_map(p, h, &m, NULL);

	if (!ret)
		*at = m;
	return ret;
}

static void fill_kv(uint8_t *kv, const struct attn_opts *o, const struct layout *l)
{
	uint64_t s = 0x2545f4914f6cdd1dull;

	for (uint64_t it = 0; it < o->items; it++)
		tl_attn_store_fill(&l->st, kv + it * l->st.bytes, &s);
}

/* Items and random distinct selections for command @k. */
static void fill_in(uint8_t *in, uint8_t *items, uint64_t k, const struct attn_opts *o,
		    const struct layout *l, uint32_t *perm)
{
	uint64_t s = 0x9e3779b97f4a7c15ull ^ (k * 0x100000001b3ull) ^ 1;

	for (uint64_t it = 0; it < o->items; it++) {
		uint64_t sel_off = l->sel_base + (k * o->items + it) * l->nsel * 4;

		tl_attn_select(&l->st, (uint32_t *)(in + sel_off), (uint32_t)l->nsel, perm, &s);
		((struct npnm_attn_item *)items)[k * o->items + it] = (struct npnm_attn_item){
			.k_off = it * l->st.bytes,
			.v_off = it * l->st.bytes + l->st.v_off,
			.table_off = it * l->st.bytes + l->st.table_off,
			.q_off = it * o->group * o->head_dim * 4,
			.sel_off = sel_off,
			.o_off = it * (o->group * o->head_dim * 4 + o->group * 4),
			.lse_off = it * (o->group * o->head_dim * 4 + o->group * 4) +
				   o->group * o->head_dim * 4,
			.nr_tokens = (uint32_t)o->context,
			.nr_clusters = l->st.nclusters,
			.nr_sel = (uint32_t)l->nsel,
		};
	}
}

/* Item 0 of the warm-up command against the numeric core's reference. */
static double check_item0(const uint8_t *kv, const uint8_t *in, const uint8_t *out,
			  const struct attn_opts *o, const struct layout *l)
{
	struct nelssa_attn_geom g = { (uint32_t)o->head_dim, (uint32_t)o->group,
				      (enum nelssa_kv_dtype)o->kv_dtype, 1.0f / sqrtf((float)o->head_dim),
				      o->attn_flags };
	float *ro = calloc(o->group * o->head_dim, sizeof(float)), rl[16];
	const uint64_t packed = nelssa_kv_bytes((enum nelssa_kv_dtype)o->kv_dtype,
						(uint32_t)o->head_dim, (uint32_t)o->context);
	uint8_t *k = malloc(packed), *v = malloc(packed);
	const float *got = (const float *)out;
	double err = -1.0;

	/* The reference reads the packed layout: item 0's store, unpacked. */
	if (k && v)
		tl_attn_store_unpack(&l->st, kv, k, v);
	if (ro && k && v && !nelssa_attn_clusters(&g, (const float *)in, k, v,
					(uint32_t)o->context,
					(const struct nelssa_cluster *)(kv + l->st.table_off),
					l->st.nclusters, (const uint32_t *)(in + l->sel_base),
					(uint32_t)l->nsel, ro, rl)) {
		err = 0.0;
		for (uint64_t i = 0; i < o->group * o->head_dim; i++)
			err = fmax(err, fabs((double)got[i] - ro[i]));
	}
	free(ro);
	free(k);
	free(v);
	return err;
}

void attn_defaults(struct attn_opts *o)
{
	*o = (struct attn_opts){ 1, 131072, 32, 128, 4, 16, 10, 0.04, true, 0, false, NULL,
				 NPNM_DTYPE_BF16, 0, false };
}

int attn_measure(const char *dev, const struct attn_opts *op, bool quiet, struct attn_result *res)
{
	const struct attn_opts o = *op;
	struct layout l;
	struct npnm_info info;
	struct nelssa_pnm *p;
	uint32_t h_kv = 0, h_in = 0, h_items = 0, h_out = 0, *perm = NULL;
	uint8_t *kv = NULL, *in = NULL, *items = NULL, *out = NULL;
	double total = 0.0, best = 0.0, err = -1.0;
	char opts[96];
	int ret, rc = EXIT_DEVICE;
	uint64_t bytes_per_cmd;
	unsigned int first = o.cpu_first;
	bool pin = false;

	memset(res, 0, sizeof(*res));
	plan(&o, &l);
	snprintf(opts, sizeof(opts), "cores=%llu,mem=%lluM%s%s", (unsigned long long)o.threads,
		 (unsigned long long)((l.kv_bytes + l.in_bytes + l.items_bytes + l.out_bytes) / (1 << 20) + 64),
		 o.isa ? ",isa=" : "", o.isa ? o.isa : "");
	if (o.pin && (o.cpus_given || !ctl_pick_cpus((unsigned int)o.threads, &first))) {
		size_t n = strlen(opts);

		snprintf(opts + n, sizeof(opts) - n, ",cpus=%u-%u", first,
			 first + (unsigned int)o.threads - 1);
		pin = true;
	}
	/* Options, pinning included, apply only to a sim device bench attn creates. */
	if (ctl_sim_name(res->name, sizeof(res->name), dev, opts)) {
		res->pinned = pin;
		res->cpu_first = first;
		if (o.pin && !pin && !quiet)
			fprintf(stderr, "the first %llu CPUs of this process are not consecutive: "
				"threads not pinned\n", (unsigned long long)o.threads);
	}
	p = ctl_open(res->name);
	if (!p)
		return EXIT_DEVICE;
	if (nelssa_pnm_info(p, &info)) {
		fprintf(stderr, "nelssactl: %s: %s\n", res->name, nelssa_pnm_strerror());
		goto out;
	}
	if (o.attn_flags & ~info.attn_flags) {
		fprintf(stderr, "nelssactl: %s does not offer bf16 dot products (attention flags "
			"0x%x; firmware %u.%u)\n", res->name, info.attn_flags, info.fw_version >> 16,
			info.fw_version & 0xffff);
		rc = EXIT_FAIL;
		goto out;
	}
	if (l.st.kv_stride && !(info.caps & NPNM_CAP_KV_STRIDE)) {
		fprintf(stderr, "nelssactl: %s takes no kv_stride (firmware %u.%u; 1.2 and later "
			"do): use --kv-layout packed\n", res->name, info.fw_version >> 16,
			info.fw_version & 0xffff);
		rc = EXIT_FAIL;
		goto out;
	}
	if (!quiet)
		fprintf(stderr, "preparing %llu KV stores of %llu tokens (%.2f GiB) on %s...\n",
			(unsigned long long)o.items, (unsigned long long)o.context,
			(double)l.kv_bytes / (1 << 30), res->name);
	if (nelssa_pnm_mem_alloc(p, l.kv_bytes, &h_kv, NULL) ||
	    nelssa_pnm_mem_alloc(p, l.in_bytes, &h_in, NULL) ||
	    nelssa_pnm_mem_alloc(p, l.items_bytes, &h_items, NULL) ||
	    nelssa_pnm_mem_alloc(p, l.out_bytes, &h_out, NULL)) {
		fprintf(stderr, "nelssactl: %s: %s\n", res->name, nelssa_pnm_strerror());
		goto out;
	}
	if (map_region(p, h_kv, &kv) || map_region(p, h_in, &in) ||
	    map_region(p, h_items, &items) || map_region(p, h_out, &out)) {
		fprintf(stderr, "nelssactl: %s: cannot map device memory: %s\n", res->name,
			nelssa_pnm_strerror());
		goto out;
	}
	perm = malloc(l.st.nclusters * sizeof(*perm));
	if (!perm) {
		fprintf(stderr, "nelssactl: out of memory\n");
		goto out;
	}
	fill_kv(kv, &o, &l);
	for (uint64_t i = 0; i < l.q_bytes / 4; i++)
		((float *)in)[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	for (uint64_t k = 0; k <= o.iters; k++)
		fill_in(in, items, k, &o, &l, perm);
	/* K and V of every token, scales included. */
	bytes_per_cmd = (uint64_t)((double)(o.items * l.nsel * o.cluster) * l.st.token_bytes);

	for (uint64_t k = 0; k <= o.iters; k++) {
		struct npnm_completion comp;
		struct npnm_cmd c;
		double t0, dt;

		memset(&c, 0, sizeof(c));
		c.opcode = NPNM_OP_SPARSE_ATTN;
		c.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ h_items, 0,
			k * o.items * sizeof(struct npnm_attn_item), o.items * sizeof(struct npnm_attn_item) };
		c.op[NPNM_ATTN_KV] = (struct npnm_operand){ h_kv, 0, 0, l.kv_bytes };
		c.op[NPNM_ATTN_IN] = (struct npnm_operand){ h_in, 0, 0, l.in_bytes };
		c.op[NPNM_ATTN_OUT] = (struct npnm_operand){ h_out, 0, 0, l.out_bytes };
		c.p.attn = (struct npnm_sparse_attn_params){
			.nr_items = (uint32_t)o.items, .head_dim = (uint16_t)o.head_dim,
			.group = (uint8_t)o.group, .kv_dtype = o.kv_dtype, .flags = o.attn_flags,
			.kv_stride = l.st.kv_stride,
		};
		t0 = tl_now();
		ret = nelssa_pnm_exec(p, &c, &comp);
		dt = tl_now() - t0;
		if (ret) {
			fprintf(stderr, "nelssactl: SPARSE_ATTN failed: %s\n", nelssa_pnm_strerror());
			rc = EXIT_FAIL;
			goto out;
		}
		if (k == 0) {
			err = check_item0(kv, in, out, &o, &l);	/* the warm-up is checked, not timed */
			continue;
		}
		total += dt;
		if ((double)bytes_per_cmd / dt / 1e9 > best)
			best = (double)bytes_per_cmd / dt / 1e9;
	}
	res->gbps = (double)bytes_per_cmd * (double)o.iters / total / 1e9;
	res->token_bytes = l.st.token_bytes;
	res->best_gbps = best;
	res->seconds = total;
	res->err = err;
	res->bytes_per_cmd = bytes_per_cmd;
	res->nsel = l.nsel;
	res->nclusters = l.st.nclusters;
	/* The layout used: adjacent needs whole 64-byte blocks (attn_store.c). */
	res->adjacent = l.st.kv_stride != 0;
	res->kv_bytes = l.kv_bytes;
	res->threads = info.nr_cores;
	res->mem_size = info.mem_size;
	/*
	 * The reference rounds the weights to bf16 relative to its own running
	 * maximum, the device to its own: each within half a bf16 ulp, 2^-8
	 * relative, so up to 2^-7 max|v| apart in an output (|v| < 1 here).
	 */
	rc = err >= 0.0 && err < 1e-3 + (o.attn_flags ? 0x1p-7 : 0.0) ? EXIT_OK : EXIT_FAIL;
	if (rc)
		fprintf(stderr, "nelssactl: SPARSE_ATTN output differs from the reference (%.3g)\n", err);
out:
	free(perm);
	nelssa_pnm_close(p);
	return rc;
}

/*
 * The ISA a sim device named @name runs SPARSE_ATTN with at @head_dim
 * (its isa= option, else the best this CPU has); -1 for a kernel device,
 * whose firmware runs elsewhere.
 */
static int device_isa(const char *name, uint32_t head_dim)
{
	const char *opt = strstr(name, ",isa=");
	char val[32];
	int isa = NFW_ISA_AUTO;

	if (strncmp(name, "sim:", 4))
		return -1;
	if (opt) {
		snprintf(val, sizeof(val), "%.*s", (int)strcspn(opt + 5, ","), opt + 5);
		isa = nfw_isa_parse(val);
		if (isa < 0)
			return -1;
	}
	return (int)nfw_attn_isa((enum nfw_isa)isa, head_dim);
}

struct peaker {
	struct ctl_timed tm;
	enum nfw_isa isa;
	uint32_t head_dim, group;
	uint8_t kv_dtype;
	uint32_t attn_flags;
	uint64_t passes, flops;
};

static void *peak_slice(void *arg)
{
	struct peaker *pk = arg;

	ctl_timed_begin(&pk->tm);
	pk->flops = nfw_attn_peak_flags(pk->isa, pk->head_dim, pk->group, pk->kv_dtype,
					pk->attn_flags, pk->passes);
	pk->tm.t_end = tl_now();
	return NULL;
}

/*
 * The compute ceiling of @isa's kernel on @threads threads pinned as the
 * baselines are: GFLOP/s, passes calibrated on one thread to about 25 ms,
 * best of 3 runs of all threads together; 0 if it cannot run.
 */
static double peak_gflops(enum nfw_isa isa, uint32_t d, uint32_t g, uint8_t kv_dtype,
			  uint32_t flags, unsigned int threads, unsigned int cpu_first,
			  unsigned int cpu_count)
{
	struct peaker pk[256];
	uint64_t passes = 16;
	double best = 0.0;

	if (threads == 0 || threads > 256)
		return 0.0;
	for (;;) {
		double t0 = tl_now(), dt;

		if (!nfw_attn_peak_flags(isa, d, g, kv_dtype, flags, passes))
			return 0.0;
		dt = tl_now() - t0;
		if (dt >= 0.02 || passes >= (1ull << 40))
			break;
		passes *= dt > 0.002 ? (uint64_t)(0.025 / dt) + 1 : 16;
	}
	for (int k = 0; k < 3; k++) {
		uint64_t flops = 0;
		double dt;

		for (unsigned int i = 0; i < threads; i++)
			pk[i] = (struct peaker){ .isa = isa, .head_dim = d, .group = g,
						 .kv_dtype = kv_dtype, .attn_flags = flags,
						 .passes = passes };
		dt = ctl_time_threads(threads, peak_slice, pk, sizeof(pk[0]), cpu_first, cpu_count);
		for (unsigned int i = 0; i < threads; i++)
			flops += pk[i].flops;
		if (dt > 0.0 && (double)flops / dt / 1e9 > best)
			best = (double)flops / dt / 1e9;
	}
	return best;
}

int bench_attn(struct ctl *ctl, const char *dev, int argc, char **argv)
{
	struct attn_opts o;
	struct attn_result r;
	struct gather_shape shape;
	double baseline, gather, peak = 0.0, compute = 0.0, roof = 0.0;
	int ret = parse(&o, argc, argv), rc, isa;
	char cpu[128];

	if (ret)
		return ret > 0 ? EXIT_OK : EXIT_USAGE;
	rc = attn_measure(dev, &o, ctl->json, &r);
	if (r.seconds <= 0.0)
		return rc;
	/* A buffer as large as the stores (at most 2 GiB): DRAM, not cache. */
	baseline = ctl_read_baseline(r.kv_bytes < (2ull << 30) ? r.kv_bytes : (2ull << 30),
				     r.threads, 3, r.cpu_first, r.pinned ? r.threads : 0);
	shape = (struct gather_shape){ o.items, r.nclusters, r.nsel,
				       (uint64_t)(o.cluster * r.token_bytes / 2), r.adjacent };
	gather = ctl_gather_baseline(&shape, r.threads, 3, r.cpu_first, r.pinned ? r.threads : 0);
	isa = device_isa(r.name, (uint32_t)o.head_dim);
	if (isa >= 0)
		peak = peak_gflops((enum nfw_isa)isa, (uint32_t)o.head_dim, (uint32_t)o.group,
				   o.kv_dtype, o.attn_flags, r.threads,
				   r.cpu_first, r.pinned ? r.threads : 0);
	if (peak > 0.0) {
		/* 2 * group flops per 2-byte KV element: group flops per byte. */
		/* 4 g d flops a token, in the instruction mix of the KV type's kernel. */
		compute = peak / (4.0 * (double)o.group * (double)o.head_dim) * r.token_bytes;
		roof = compute < baseline ? compute : baseline;
	}
	tl_cpu_model(cpu, sizeof(cpu));
	if (ctl->json) {
		json_object *j = json_object_new_object();

		json_object_object_add(j, "device", json_object_new_string(r.name));
		json_object_object_add(j, "kv_bytes", json_object_new_uint64(r.bytes_per_cmd * o.iters));
		json_object_object_add(j, "seconds", json_object_new_double(r.seconds));
		json_object_object_add(j, "effective_gbps", json_object_new_double(r.gbps));
		json_object_object_add(j, "best_gbps", json_object_new_double(r.best_gbps));
		json_object_object_add(j, "read_baseline_gbps", json_object_new_double(baseline));
		json_object_object_add(j, "ratio", json_object_new_double(r.gbps / baseline));
		json_object_object_add(j, "gather_baseline_gbps",
				       gather > 0.0 ? json_object_new_double(gather) : NULL);
		json_object_object_add(j, "gather_ratio",
				       gather > 0.0 ? json_object_new_double(r.gbps / gather) : NULL);
		json_object_object_add(j, "cpu_model", json_object_new_string(cpu));
		json_object_object_add(j, "isa", isa >= 0 ?
				       json_object_new_string(nfw_isa_name((enum nfw_isa)isa)) : NULL);
		json_object_object_add(j, "peak_gflops", peak > 0.0 ? json_object_new_double(peak) : NULL);
		json_object_object_add(j, "compute_gbps",
				       peak > 0.0 ? json_object_new_double(compute) : NULL);
		json_object_object_add(j, "roofline_gbps", peak > 0.0 ? json_object_new_double(roof) : NULL);
		json_object_object_add(j, "roofline_ratio",
				       peak > 0.0 ? json_object_new_double(r.gbps / roof) : NULL);
		json_object_object_add(j, "threads", json_object_new_int64(r.threads));
		if (r.pinned) {
			char cpus[32];

			snprintf(cpus, sizeof(cpus), "%u-%u", r.cpu_first, r.cpu_first + r.threads - 1);
			json_object_object_add(j, "cpus", json_object_new_string(cpus));
		} else {
			json_object_object_add(j, "cpus", NULL);
		}
		json_object_object_add(j, "context", json_object_new_uint64(o.context));
		json_object_object_add(j, "items", json_object_new_uint64(o.items));
		json_object_object_add(j, "head_dim", json_object_new_uint64(o.head_dim));
		json_object_object_add(j, "group", json_object_new_uint64(o.group));
		json_object_object_add(j, "kv_dtype", json_object_new_string(tl_kv_dtype_name(o.kv_dtype)));
		json_object_object_add(j, "attn_dots",
				       json_object_new_string(tl_attn_dots_name(o.attn_flags)));
		json_object_object_add(j, "kv_layout",
				       json_object_new_string(r.adjacent ? "adjacent" : "packed"));
		json_object_object_add(j, "token_bytes", json_object_new_double(r.token_bytes));
		json_object_object_add(j, "mtok_per_s",
				       json_object_new_double(r.gbps * 1e3 / r.token_bytes));
		json_object_object_add(j, "cluster_tokens", json_object_new_uint64(o.cluster));
		json_object_object_add(j, "selected_clusters", json_object_new_uint64(r.nsel));
		json_object_object_add(j, "iters", json_object_new_uint64(o.iters));
		json_object_object_add(j, "store_bytes", json_object_new_uint64(r.kv_bytes));
		json_object_object_add(j, "max_abs_err_vs_reference", json_object_new_double(r.err));
		ctl_print_json(j);
	} else {
		printf("SPARSE_ATTN  %llu items x %llu tokens, d=%llu, group %llu, %llu of %llu clusters "
		       "of %llu tokens, %u threads\n",
		       (unsigned long long)o.items, (unsigned long long)o.context,
		       (unsigned long long)o.head_dim, (unsigned long long)o.group,
		       (unsigned long long)r.nsel, (unsigned long long)r.nclusters,
		       (unsigned long long)o.cluster, r.threads);
		printf("  KV layout       %s\n", r.adjacent ?
		       "K and V blocks adjacent (kv_stride)" : "packed");
		printf("  KV read         %.1f MiB per command, %llu commands in %.3f s\n",
		       (double)r.bytes_per_cmd / (1 << 20), (unsigned long long)o.iters, r.seconds);
		printf("  effective       %.2f GB/s (best command %.2f GB/s)\n", r.gbps, r.best_gbps);
		printf("  read baseline   %.2f GB/s (streaming read, %u threads, same run)\n", baseline,
		       r.threads);
		if (r.pinned)
			printf("  CPUs            %u-%u, executors and readers alike\n", r.cpu_first,
			       r.cpu_first + r.threads - 1);
		else
			printf("  CPUs            not pinned\n");
		printf("  ratio           %.3f\n", r.gbps / baseline);
		if (gather > 0.0)
			printf("  gather baseline %.2f GB/s (the same clusters' bytes read, no arithmetic; "
			       "ratio %.3f)\n", gather, r.gbps / gather);
		if (peak > 0.0)
			printf("  compute ceiling %.2f GB/s (%s kernel's instruction mix, %.1f GFLOP/s, "
			       "%u threads, same run)\n"
			       "  roofline        %.2f GB/s = min(read, compute); ratio %.3f\n",
			       compute, nfw_isa_name((enum nfw_isa)isa), peak, r.threads, roof,
			       r.gbps / roof);
		printf("  CPU             %s\n", cpu);
		printf("  check           max |o - reference| = %.3g on the warm-up command\n", r.err);
	}
	return rc;
}
