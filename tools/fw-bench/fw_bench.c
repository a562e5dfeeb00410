// SPDX-License-Identifier: MIT
/*
 * nelssa-fw-bench: the firmware's SPARSE_ATTN kernel timed on the calling
 * thread, with no device runtime, queue or second core around it -- the
 * numbers behind the analysis in Documentation/performance.rst.
 *
 *   random    32 items of 128K tokens (2 GiB of stores), 4 % of the
 *             clusters selected at random, a fresh selection per command:
 *             what 'nelssactl bench attn' measures, minus the runtime;
 *   resident  one item small enough for L2, every cluster selected in
 *             random order: the arithmetic alone.
 *
 * Each ISA the CPU supports is timed (a head dim the ISA cannot tile runs
 * the scalar kernel under its name); outputs are checked against the
 * scalar kernel's.  Two ceilings are measured in the same run: a streaming
 * read of the random case's stores, and per ISA the compute ceiling of its
 * kernel (nfw_attn_peak(): the kernel's inner-loop instruction mix on
 * cache-resident rows).  The roofline is the lower of the two; the random
 * case is reported against it, the resident case against the compute
 * ceiling alone.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <nelssa/fw.h>

#include "attn_store.h"
#include "tool_util.h"

static const char *const prog = "nelssa-fw-bench";

struct opts {
	uint32_t context, items, resident_tokens, head_dim, group, cluster, iters;
	double select;
	int json;
	uint8_t kv_dtype;
	uint32_t attn_flags;	/* NPNM_ATTN_F_BF16_DOTS with --attn-dots bf16 */
	int adjacent;		/* --kv-layout adjacent */
};

/* One benchmark setting laid out in device memory: items | IN | OUT | stores. */
struct setup {
	struct nfw_mem mem;
	struct npnm_cmd cmd[2];		/* commands alternate between two selections */
	uint64_t kv_bytes_per_cmd, tokens_per_cmd;
	uint32_t clusters_per_cmd;
	float *ref;			/* the scalar kernel's output of cmd[0] */
};

/* The scalar kernel's output of the first command, once: every ISA is checked against it. */
static int reference(struct setup *s)
{
	const struct npnm_operand *out = &s->cmd[0].op[NPNM_ATTN_OUT];
	struct nfw_scratch scratch = { 0 };
	uint32_t detail;
	int ret = nfw_run(&s->mem, &s->cmd[0], NFW_ISA_SCALAR, &scratch, &detail);

	nfw_scratch_free(&scratch);
	if (ret) {
		fprintf(stderr, "%s: SPARSE_ATTN failed on the scalar kernel\n", prog);
		return -1;
	}
	s->ref = tl_calloc(prog, out->len / 4, sizeof(float));
	memcpy(s->ref, s->mem.base + out->offset, out->len);
	return 0;
}

/* @items stores planned as @st, and two commands selecting @select of their clusters. */
static int build(struct setup *s, const struct opts *o, uint32_t items,
		 const struct tl_attn_store *st, double select)
{
	const uint32_t nsel = (uint32_t)llround(select * st->nclusters);
	const uint64_t store = st->bytes;
	const uint64_t items_off = 0, items_bytes = 2ull * items * sizeof(struct npnm_attn_item);
	const uint64_t in_off = (items_bytes + 4095) & ~4095ull;
	const uint64_t q_bytes = (uint64_t)items * o->group * o->head_dim * 4;
	const uint64_t in_bytes = q_bytes + 2ull * items * nsel * 4;
	const uint64_t out_off = (in_off + in_bytes + 4095) & ~4095ull;
	const uint64_t per_out = (uint64_t)o->group * o->head_dim * 4 + o->group * 4;
	const uint64_t kv_off = (out_off + items * per_out + (2 << 20) - 1) & ~((2ull << 20) - 1);
	uint64_t rng = 0x2545f4914f6cdd1dull;
	uint32_t *perm = tl_calloc(prog, st->nclusters, sizeof(*perm));
	uint8_t *m;

	s->mem.size = kv_off + store * items;
	m = mmap(NULL, s->mem.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		fprintf(stderr, "%s: cannot map %llu bytes\n", prog, (unsigned long long)s->mem.size);
		free(perm);
		return -1;
	}
	madvise(m, s->mem.size, MADV_HUGEPAGE);	/* as a sim device's memory */
	s->mem.base = m;
	for (uint32_t it = 0; it < items; it++)
		tl_attn_store_fill(st, m + kv_off + it * store, &rng);
	for (uint64_t i = 0; i < q_bytes / 4; i++)
		((float *)(m + in_off))[i] = tl_frand(&rng);
	for (int k = 0; k < 2; k++) {
		struct npnm_cmd *c = &s->cmd[k];

		for (uint32_t it = 0; it < items; it++) {
			uint64_t sel_off = q_bytes + ((uint64_t)k * items + it) * nsel * 4;
			tl_attn_select(st, (uint32_t *)(m + in_off + sel_off), nsel, perm, &rng);
			((struct npnm_attn_item *)(m + items_off))[k * items + it] =
				(struct npnm_attn_item){
					.k_off = it * store, .v_off = it * store + st->v_off,
					.table_off = it * store + st->table_off,
					.q_off = (uint64_t)it * o->group * o->head_dim * 4,
					.sel_off = sel_off, .o_off = it * per_out,
					.lse_off = it * per_out + (uint64_t)o->group * o->head_dim * 4,
					.nr_tokens = st->context, .nr_clusters = st->nclusters,
					.nr_sel = nsel,
				};
		}
		memset(c, 0, sizeof(*c));
		c->opcode = NPNM_OP_SPARSE_ATTN;
		c->op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ 1, 0,
			items_off + (uint64_t)k * items * sizeof(struct npnm_attn_item),
			items * sizeof(struct npnm_attn_item) };
		c->op[NPNM_ATTN_KV] = (struct npnm_operand){ 1, 0, kv_off, store * items };
		c->op[NPNM_ATTN_IN] = (struct npnm_operand){ 1, 0, in_off, in_bytes };
		c->op[NPNM_ATTN_OUT] = (struct npnm_operand){ 1, 0, out_off, items * per_out };
		c->p.attn = (struct npnm_sparse_attn_params){
			.nr_items = items, .head_dim = (uint16_t)o->head_dim,
			.group = (uint8_t)o->group, .kv_dtype = o->kv_dtype,
			.flags = o->attn_flags, .kv_stride = st->kv_stride,
		};
	}
	s->clusters_per_cmd = items * nsel;
	s->tokens_per_cmd = (uint64_t)items * nsel * o->cluster;
	s->kv_bytes_per_cmd = (uint64_t)((double)s->tokens_per_cmd * st->token_bytes);
	free(perm);
	return reference(s);
}

struct result {
	double gbps, mtok_s, ns_per_cluster, max_err;
};

/*
 * The compute ceiling of @isa's kernel, GFLOP/s: passes calibrated to run
 * at least 20 ms, best of three.
 */
static double peak_gflops(enum nfw_isa isa, uint32_t d, uint32_t g, uint8_t kv_dtype,
			  uint32_t flags)
{
	uint64_t passes = 16;
	double best = 0.0;

	for (;;) {
		double t0 = tl_now(), dt;
		uint64_t flops = nfw_attn_peak_flags(isa, d, g, kv_dtype, flags, passes);

		dt = tl_now() - t0;
		if (!flops)
			return 0.0;
		if (dt >= 0.02 || passes >= (1ull << 40))
			break;
		passes *= dt > 0.002 ? (uint64_t)(0.025 / dt) + 1 : 16;
	}
	for (int k = 0; k < 3; k++) {
		double t0 = tl_now(), dt;
		uint64_t flops = nfw_attn_peak_flags(isa, d, g, kv_dtype, flags, passes);

		dt = tl_now() - t0;
		if (dt > 0.0 && (double)flops / dt / 1e9 > best)
			best = (double)flops / dt / 1e9;
	}
	return best;
}

/* @iters commands on @isa, alternating selections; outputs vs the scalar kernel's. */
static int run(struct setup *s, enum nfw_isa isa, uint32_t iters, struct result *r)
{
	const struct npnm_operand *out = &s->cmd[0].op[NPNM_ATTN_OUT];
	struct nfw_scratch scratch = { 0 };
	uint32_t detail;
	double t0, dt;

	r->max_err = 0.0;
	if (nfw_run(&s->mem, &s->cmd[0], isa, &scratch, &detail))
		goto fail;
	for (uint64_t i = 0; i < out->len / 4; i++) {
		double e = fabs((double)((float *)(s->mem.base + out->offset))[i] - s->ref[i]);

		r->max_err = e > r->max_err ? e : r->max_err;
	}
	t0 = tl_now();
	for (uint32_t k = 0; k < iters; k++)
		if (nfw_run(&s->mem, &s->cmd[(k + 1) % 2], isa, &scratch, &detail))
			goto fail;
	dt = tl_now() - t0;
	r->gbps = (double)s->kv_bytes_per_cmd * iters / dt / 1e9;
	r->mtok_s = (double)s->tokens_per_cmd * iters / dt / 1e6;
	r->ns_per_cluster = dt * 1e9 / ((double)s->clusters_per_cmd * iters);
	nfw_scratch_free(&scratch);
	return 0;
fail:
	fprintf(stderr, "%s: SPARSE_ATTN failed on %s\n", prog, nfw_isa_name(isa));
	nfw_scratch_free(&scratch);
	return -1;
}

static const char help[] =
	"usage: nelssa-fw-bench [OPTIONS]\n"
	"  --context N     tokens per item of the random case (default 131072)\n"
	"  --items N       items of the random case (default 32)\n"
	"  --select F      fraction of clusters selected in the random case (default 0.04)\n"
	"  --resident N    tokens of the cache-resident item (default 1024)\n"
	"  --head-dim N    (default 128)   --group N (default 4)   --cluster N (default 16)\n"
	"  --iters N       timed commands of the random case (default 10; the resident\n"
	"                  case runs as many clusters as the random case reads)\n"
	"  --kv-dtype T    bf16 (default), fp16, fp8 or int8; GB/s count the bytes\n"
	"                  the type stores (scales included), Mtok/s the tokens\n"
	"  --attn-dots D   fp32 (default) or bf16: NPNM_ATTN_F_BF16_DOTS (the query and\n"
	"                  the weights rounded to bf16; BFDOT where the CPU has it,\n"
	"                  and a row for VDPBF16PS, avx512-bf16, where it has that)\n"
	"  --kv-layout L   packed (default: all K blocks, then all V blocks) or adjacent\n"
	"                  (each 16-token block of K next to its block of V: kv_stride)\n"
	"  --json          one JSON object\n";

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "context", required_argument, NULL, 'c' }, { "items", required_argument, NULL, 'n' },
		{ "select", required_argument, NULL, 's' }, { "resident", required_argument, NULL, 'r' },
		{ "head-dim", required_argument, NULL, 'd' }, { "group", required_argument, NULL, 'g' },
		{ "cluster", required_argument, NULL, 'k' }, { "iters", required_argument, NULL, 'i' },
		{ "kv-dtype", required_argument, NULL, 't' },
		{ "attn-dots", required_argument, NULL, 'a' },
		{ "kv-layout", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	int c;

	*o = (struct opts){ 131072, 32, 1024, 128, 4, 16, 10, 0.04, 0, NPNM_DTYPE_BF16, 0, 0 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *end;
		int bad = 0;

		switch (c) {
		case 'c': bad = tl_parse_u32(prog, optarg, 64, 1u << 24, &o->context, "--context"); break;
		case 'n': bad = tl_parse_u32(prog, optarg, 1, 1024, &o->items, "--items"); break;
		case 'r': bad = tl_parse_u32(prog, optarg, 64, 1u << 20, &o->resident_tokens,
					     "--resident"); break;
		case 'd': bad = tl_parse_u32(prog, optarg, 32, 256, &o->head_dim, "--head-dim"); break;
		case 'g': bad = tl_parse_u32(prog, optarg, 1, 16, &o->group, "--group"); break;
		case 'k': bad = tl_parse_u32(prog, optarg, 1, 4096, &o->cluster, "--cluster"); break;
		case 'i': bad = tl_parse_u32(prog, optarg, 1, 100000, &o->iters, "--iters"); break;
		case 's':
			o->select = strtod(optarg, &end);
			if (*end || !(o->select > 0.0 && o->select <= 1.0)) {
				fprintf(stderr, "%s: --select %s: need a fraction in (0, 1]\n", prog, optarg);
				bad = -1;
			}
			break;
		case 't':
			o->kv_dtype = tl_kv_dtype_parse(optarg);
			if (!o->kv_dtype) {
				fprintf(stderr, "%s: --kv-dtype %s: need bf16, fp16, fp8 or int8\n",
					prog, optarg);
				bad = -1;
			}
			break;
		case 'a':
			if (tl_attn_dots_parse(optarg, &o->attn_flags)) {
				fprintf(stderr, "%s: --attn-dots %s: need fp32 or bf16\n", prog, optarg);
				bad = -1;
			}
			break;
		case 'l':
			o->adjacent = tl_kv_layout_parse(optarg);
			if (o->adjacent < 0) {
				fprintf(stderr, "%s: --kv-layout %s: need packed or adjacent\n", prog,
					optarg);
				bad = -1;
			}
			break;
		case 'j': o->json = 1; break;
		case 'h': fputs(help, stdout); exit(0);
		default: bad = -1; break;
		}
		if (bad) {
			fputs(help, stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected '%s'\n%s", prog, argv[optind], help);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const enum nfw_isa isas[] = { NFW_ISA_AVX512, NFW_ISA_AVX512_BF16, NFW_ISA_AVX2,
					     NFW_ISA_NEON, NFW_ISA_SCALAR };
	struct tl_attn_store rst, sst;
	struct setup rnd, res;
	struct opts o;
	uint64_t resident_iters;
	double stream;
	char cpu[128];
	int first = 1;

	if (parse(argc, argv, &o))
		return 2;
	if (!o.json)
		fprintf(stderr, "preparing %u items of %u tokens...\n", o.items, o.context);
	tl_attn_store_plan(&rst, o.kv_dtype, o.head_dim, o.context, o.cluster, o.adjacent);
	tl_attn_store_plan(&sst, o.kv_dtype, o.head_dim, o.resident_tokens, o.cluster, o.adjacent);
	if (build(&rnd, &o, o.items, &rst, o.select) || build(&res, &o, 1, &sst, 1.0))
		return 1;
	resident_iters = (uint64_t)rnd.clusters_per_cmd * o.iters / res.clusters_per_cmd + 1;
	/* The random case's own stores: the same memory and pages the kernel reads. */
	stream = tl_stream_read(rnd.mem.base + rnd.cmd[0].op[NPNM_ATTN_KV].offset,
			     rnd.cmd[0].op[NPNM_ATTN_KV].len);
	tl_cpu_model(cpu, sizeof(cpu));
	if (o.json)
		printf("{\"cpu_model\":\"%s\",\"head_dim\":%u,\"group\":%u,\"kv_dtype\":\"%s\","
		       "\"kv_layout\":\"%s\",\"attn_dots\":\"%s\",\"token_bytes\":%.6g,\"read_baseline_gbps\":%.6g,"
		       "\"random\":{\"items\":%u,\"context\":%u,\"select\":%g},"
		       "\"resident\":{\"tokens\":%u},\"isas\":[", cpu, o.head_dim, o.group,
		       tl_kv_dtype_name(o.kv_dtype), tl_kv_layout_name(&rst), tl_attn_dots_name(o.attn_flags), rst.token_bytes, stream, o.items, o.context,
		       o.select, o.resident_tokens);
	else
		printf("CPU %s; head dim %u, group %u, KV %s (%.1f bytes a token, %s blocks), "
		       "%s dot products; streaming read %.2f GB/s (1 thread)\n"
		       "ISA      random GB/s  Mtok/s  ns/cluster   resident GB/s  Mtok/s  ns/cluster   "
		       "peak GFLOP/s  compute GB/s  roofline GB/s  random/roofline  "
		       "resident/compute  max |err| vs scalar\n", cpu, o.head_dim, o.group,
		       tl_kv_dtype_name(o.kv_dtype), rst.token_bytes, tl_kv_layout_name(&rst),
		       tl_attn_dots_name(o.attn_flags), stream);
	for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
		struct result a, b;
		double peak, compute, roof;

		/* The VDPBF16PS build differs from AVX-512's only for bf16 dots. */
		if (!nfw_isa_supported(isas[i]) ||
		    (isas[i] == NFW_ISA_AVX512_BF16 && !(o.attn_flags & NPNM_ATTN_F_BF16_DOTS)))
			continue;
		peak = peak_gflops(isas[i], o.head_dim, o.group, o.kv_dtype, o.attn_flags);
		/*
		 * 4 * group * head_dim flops a token (logits and P.V), so the
		 * ceiling in tokens/s times the bytes a token takes; the peak is
		 * measured in the instruction mix of the type's own kernel (the
		 * 8-bit ones' decoding included).
		 */
		compute = peak / (4.0 * o.group * o.head_dim) * rst.token_bytes;
		roof = compute < stream ? compute : stream;
		if (run(&rnd, isas[i], o.iters, &a) || run(&res, isas[i], (uint32_t)resident_iters, &b))
			return 1;
		if (o.json)
			printf("%s{\"isa\":\"%s\",\"random_gbps\":%.6g,\"random_mtok_s\":%.6g,"
			       "\"random_ns_per_cluster\":%.2f,"
			       "\"resident_gbps\":%.6g,\"resident_mtok_s\":%.6g,"
			       "\"resident_ns_per_cluster\":%.2f,"
			       "\"peak_gflops\":%.6g,\"compute_gbps\":%.6g,\"roofline_gbps\":%.6g,"
			       "\"roofline_ratio\":%.6g,\"resident_compute_ratio\":%.6g,"
			       "\"max_abs_err\":%.3g}", first ? "" : ",", nfw_isa_name(isas[i]),
			       a.gbps, a.mtok_s, a.ns_per_cluster, b.gbps, b.mtok_s, b.ns_per_cluster,
			       peak, compute, roof,
			       roof > 0.0 ? a.gbps / roof : 0.0, compute > 0.0 ? b.gbps / compute : 0.0,
			       a.max_err > b.max_err ? a.max_err : b.max_err);
		else
			printf("%-8s %11.2f  %6.2f  %10.1f   %13.2f  %6.2f  %10.1f   %12.2f  %12.2f  "
			       "%13.2f  %15.3f  %16.3f  %.3g\n", nfw_isa_name(isas[i]), a.gbps, a.mtok_s,
			       a.ns_per_cluster, b.gbps, b.mtok_s, b.ns_per_cluster, peak, compute, roof,
			       roof > 0.0 ? a.gbps / roof : 0.0,
			       compute > 0.0 ? b.gbps / compute : 0.0,
			       a.max_err > b.max_err ? a.max_err : b.max_err);
		first = 0;
	}
	if (o.json)
		printf("]}\n");
	munmap(rnd.mem.base, rnd.mem.size);
	munmap(res.mem.base, res.mem.size);
	free(rnd.ref);
	free(res.ref);
	return 0;
}
