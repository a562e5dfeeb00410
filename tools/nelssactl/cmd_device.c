// SPDX-License-Identifier: MIT
/* nelssactl list, info and selftest. */
#define _GNU_SOURCE
#include <getopt.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>

#include <nelssa/fw.h>

#include "attn_store.h"
#include "nelssactl.h"
#include "npnm_rules.h"

/*
 * Common option handling: --json and --help anywhere after the command;
 * returns the index of the first operand, -1 after --help, -2 on error.
 */
static int parse_common(struct ctl *ctl, int argc, char **argv, const char *help,
			const struct option *extra, int (*on_opt)(int c, const char *arg, void *),
			void *priv)
{
	struct option opts[8] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
	};
	int n = 2, c;

	for (; extra && extra[n - 2].name; n++)
		opts[n] = extra[n - 2];
	opts[n] = (struct option){ 0 };
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'j') {
			ctl->json = true;
		} else if (c == 'h') {
			fputs(help, stdout);
			return -1;
		} else if (c == '?' || !on_opt || on_opt(c, optarg, priv)) {
			ctl_usage_error(ctl, argv[0], "bad option '%s'", argv[optind - 1]);
			return -2;
		}
	}
	return optind;
}

/*
 * Tokens of one KV head (its K and V) of @dtype the device's memory holds
 * at @head_dim: what 8-bit KV buys, in the size rule the firmware bounds
 * every access with (scales and padding included).
 */
static uint64_t kv_capacity(const struct npnm_info *in, uint8_t dtype, uint32_t head_dim)
{
	return in->mem_size / NPNM_KV_QTILE / (2 * npnm_kv_bytes(dtype, head_dim, NPNM_KV_QTILE)) *
	       NPNM_KV_QTILE;
}

static const uint8_t info_dtypes[] = { NPNM_DTYPE_BF16, NPNM_DTYPE_FP16, NPNM_DTYPE_FP8_E4M3,
				       NPNM_DTYPE_INT8 };

/* The dot products SPARSE_ATTN offers: ["fp32"], and "bf16" with NPNM_ATTN_F_BF16_DOTS. */
static json_object *attn_dots_json(const struct npnm_info *in)
{
	json_object *a = json_object_new_array();

	if (in->max_group) {
		json_object_array_add(a, json_object_new_string("fp32"));
		if (in->attn_flags & NPNM_ATTN_F_BF16_DOTS)
			json_object_array_add(a, json_object_new_string("bf16"));
	}
	return a;
}

static json_object *info_json(struct nelssa_pnm *p, const struct npnm_info *in,
			      uint32_t head_dim)
{
	json_object *o = json_object_new_object(), *types = json_object_new_array();
	json_object *cap = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(nelssa_pnm_name(p)));
	json_object_object_add(o, "backend", json_object_new_string(nelssa_pnm_backend(p)));
	json_object_object_add(o, "abi_version", json_object_new_int(in->abi_version));
	json_object_object_add(o, "fw_version", json_object_new_int64(in->fw_version));
	json_object_object_add(o, "caps", json_object_new_uint64(in->caps));
	json_object_object_add(o, "opcodes", json_object_new_uint64(in->opcodes));
	json_object_object_add(o, "mem_size", json_object_new_uint64(in->mem_size));
	json_object_object_add(o, "mem_align", json_object_new_uint64(in->mem_align));
	json_object_object_add(o, "nr_cores", json_object_new_int64(in->nr_cores));
	json_object_object_add(o, "max_batch", json_object_new_int64(in->max_batch));
	json_object_object_add(o, "max_inflight", json_object_new_int64(in->max_inflight));
	json_object_object_add(o, "kv_dtypes", json_object_new_int64(in->kv_dtypes));
	for (unsigned int i = 0; i < sizeof(info_dtypes); i++) {
		if (!(in->kv_dtypes & (1u << info_dtypes[i])))
			continue;
		json_object_array_add(types, json_object_new_string(tl_kv_dtype_name(info_dtypes[i])));
		json_object_object_add(cap, tl_kv_dtype_name(info_dtypes[i]),
				       json_object_new_uint64(kv_capacity(in, info_dtypes[i], head_dim)));
	}
	json_object_object_add(o, "kv_types", types);
	json_object_object_add(o, "kv_head_dim", json_object_new_int64(head_dim));
	json_object_object_add(o, "kv_head_tokens", cap);
	json_object_object_add(o, "max_head_dim", json_object_new_int(in->max_head_dim));
	json_object_object_add(o, "max_group", json_object_new_int(in->max_group));
	json_object_object_add(o, "attn_flags", json_object_new_int64(in->attn_flags));
	json_object_object_add(o, "attn_dots", attn_dots_json(in));
	return o;
}

static void info_text(struct nelssa_pnm *p, const struct npnm_info *in, uint32_t head_dim)
{
	static const char *const ops[] = { "nop", "fill", "copy", "kv_write", "sparse_attn",
					   "selftest" };
	static const char *const caps[] = { "uring_cmd", "cqe32_status", "mmap", "compute",
					    "kv_scatter", "dax", "kv_stride" };
	char size[32];

	printf("%s (backend %s)\n", nelssa_pnm_name(p), nelssa_pnm_backend(p));
	printf("  abi version   %u\n", in->abi_version);
	printf("  firmware      %u.%u\n", in->fw_version >> 16, in->fw_version & 0xffff);
	printf("  memory        %s (alignment %llu)\n", ctl_size(in->mem_size, size, sizeof(size)),
	       (unsigned long long)in->mem_align);
	printf("  cores         %u\n", in->nr_cores);
	printf("  opcodes      ");
	for (unsigned int i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (in->opcodes & (1ull << i))
			printf(" %s", ops[i]);
	printf("\n  capabilities ");
	for (unsigned int i = 0; i < sizeof(caps) / sizeof(caps[0]); i++)
		if (in->caps & (1ull << i))
			printf(" %s", caps[i]);
	printf("\n  kv types     ");
	for (unsigned int i = 0; i < sizeof(info_dtypes); i++)
		if (in->kv_dtypes & (1u << info_dtypes[i]))
			printf(" %s", tl_kv_dtype_name(info_dtypes[i]));
	printf("\n  kv capacity   tokens of one KV head at head dim %u:", head_dim);
	for (unsigned int i = 0; i < sizeof(info_dtypes); i++)
		if (in->kv_dtypes & (1u << info_dtypes[i]))
			printf(" %s %llu", tl_kv_dtype_name(info_dtypes[i]),
			       (unsigned long long)kv_capacity(in, info_dtypes[i], head_dim));
	printf("\n");
	printf("  limits        batch %u, in flight %u, head dim %u, group %u\n", in->max_batch,
	       in->max_inflight, in->max_head_dim, in->max_group);
	if (in->max_group)
		printf("  attention     fp32 dot products%s\n",
		       in->attn_flags & NPNM_ATTN_F_BF16_DOTS ? ", bf16 dot products" : "");
}

int cmd_list(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl list [--json]\n"
		"List PNM devices: /dev/nelssa_pnm* of the kernel driver, and the embedded\n"
		"sim backend every program linking libnelssa can open as sim:N.\n";
	json_object *devs = json_object_new_array(), *root;
	glob_t g = { 0 };
	int idx = parse_common(ctl, argc, argv, help, NULL, NULL, NULL);

	if (idx < 0) {
		json_object_put(devs);
		return idx == -1 ? EXIT_OK : EXIT_USAGE;
	}
	if (idx < argc) {
		json_object_put(devs);
		ctl_usage_error(ctl, "list", "unexpected argument '%s'", argv[idx]);
		return EXIT_USAGE;
	}
	glob("/dev/nelssa_pnm[0-9]*", 0, NULL, &g);
	for (size_t i = 0; i < g.gl_pathc; i++) {
		struct nelssa_pnm *p = NULL;
		struct npnm_info in;
		json_object *d;

		if (nelssa_pnm_open(g.gl_pathv[i], &p) || nelssa_pnm_info(p, &in)) {
			d = json_object_new_object();
			json_object_object_add(d, "name", json_object_new_string(g.gl_pathv[i]));
			json_object_object_add(d, "error", json_object_new_string(nelssa_pnm_strerror()));
		} else {
			d = info_json(p, &in, 128);
		}
		nelssa_pnm_close(p);
		json_object_array_add(devs, d);
	}
	globfree(&g);
	if (ctl->json) {
		root = json_object_new_object();
		json_object_object_add(root, "devices", devs);
		json_object_object_add(root, "embedded", json_object_new_string("sim:N"));
		ctl_print_json(root);
		return EXIT_OK;
	}
	if (!json_object_array_length(devs))
		printf("no /dev/nelssa_pnm* devices (is the nelssa_pnm module loaded?)\n");
	for (size_t i = 0; i < json_object_array_length(devs); i++) {
		json_object *d = json_object_array_get_idx(devs, i), *v;

		if (json_object_object_get_ex(d, "error", &v))
			printf("%-20s unusable: %s\n",
			       json_object_get_string(json_object_object_get(d, "name")),
			       json_object_get_string(v));
		else
			printf("%-20s %s, %llu bytes, %d cores\n",
			       json_object_get_string(json_object_object_get(d, "name")),
			       json_object_get_string(json_object_object_get(d, "backend")),
			       (unsigned long long)json_object_get_uint64(
				       json_object_object_get(d, "mem_size")),
			       json_object_get_int(json_object_object_get(d, "nr_cores")));
	}
	printf("embedded: sim:N (emulated in-process; see 'nelssactl info sim:0')\n");
	json_object_put(devs);
	return EXIT_OK;
}

static int head_dim_opt(int c, const char *arg, void *priv)
{
	uint64_t v;

	if (c != 'd' || ctl_parse_uint(arg, 1, 1024, &v))
		return -1;
	*(uint32_t *)priv = (uint32_t)v;
	return 0;
}

int cmd_info(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl info DEV [--head-dim N] [--json]\n"
		"Show the ABI version, firmware version, memory, cores, opcodes, capabilities\n"
		"and limits of DEV (/dev/nelssa_pnmN or sim:N[,options]), the KV types it\n"
		"reads and how many tokens of one KV head (K and V, at --head-dim, default\n"
		"128) its memory holds in each: an 8-bit type about twice bf16's.\n";
	static const struct option extra[] = {
		{ "head-dim", required_argument, NULL, 'd' }, { 0 },
	};
	uint32_t head_dim = 128;
	struct nelssa_pnm *p;
	struct npnm_info in;
	int idx = parse_common(ctl, argc, argv, help, extra, head_dim_opt, &head_dim);

	if (idx < 0)
		return idx == -1 ? EXIT_OK : EXIT_USAGE;
	if (argc - idx != 1) {
		ctl_usage_error(ctl, "info", "expected exactly one DEV");
		return EXIT_USAGE;
	}
	p = ctl_open(argv[idx]);
	if (!p)
		return EXIT_DEVICE;
	if (nelssa_pnm_info(p, &in)) {
		fprintf(stderr, "nelssactl: %s: %s\n", argv[idx], nelssa_pnm_strerror());
		nelssa_pnm_close(p);
		return EXIT_DEVICE;
	}
	if (ctl->json)
		ctl_print_json(info_json(p, &in, head_dim));
	else
		info_text(p, &in, head_dim);
	nelssa_pnm_close(p);
	return EXIT_OK;
}

static int selftest_opt(int c, const char *arg, void *priv)
{
	uint64_t v;

	if (c != 'm' || ctl_parse_uint(arg, 0, 0xffffffff, &v))
		return -1;
	*(uint32_t *)priv = (uint32_t)v;
	return 0;
}

int cmd_selftest(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl selftest DEV [--mask M] [--json]\n"
		"Run the firmware's built-in checks on DEV: 0x1 FILL/COPY, 0x2 KV_WRITE,\n"
		"0x4 SPARSE_ATTN on every ISA (bf16), 0x8 SPARSE_ATTN on fp16 KV,\n"
		"0x10 descriptor validation, 0x20 SPARSE_ATTN with bf16 dot products\n"
		"(firmware 1.1).  --mask selects tests (default: all the device has).\n"
		"Exit status 1 when a test fails.\n";
	static const char *const names[] = { "memops", "kv_write", "attn", "attn_fp16", "validate",
					     "attn_bf16_dots" };
	_Static_assert(NFW_SELFTEST_ALL == (1u << sizeof(names) / sizeof(names[0])) - 1,
		       "a name per firmware self-test");
	struct npnm_info info;
	static const struct option extra[] = { { "mask", required_argument, NULL, 'm' }, { 0 } };
	struct npnm_completion comp;
	struct nelssa_pnm *p;
	struct npnm_cmd c;
	uint32_t mask = 0, run;
	int idx = parse_common(ctl, argc, argv, help, extra, selftest_opt, &mask), ret;

	if (idx < 0)
		return idx == -1 ? EXIT_OK : EXIT_USAGE;
	if (argc - idx != 1) {
		ctl_usage_error(ctl, "selftest", "expected exactly one DEV");
		return EXIT_USAGE;
	}
	if (mask & ~NFW_SELFTEST_ALL) {
		ctl_usage_error(ctl, "selftest", "--mask 0x%x: only bits 0x%x exist", mask,
				NFW_SELFTEST_ALL);
		return EXIT_USAGE;
	}
	p = ctl_open(argv[idx]);
	if (!p)
		return EXIT_DEVICE;
	if (nelssa_pnm_info(p, &info)) {
		fprintf(stderr, "nelssactl: %s: %s\n", argv[idx], nelssa_pnm_strerror());
		nelssa_pnm_close(p);
		return EXIT_DEVICE;
	}
	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_SELFTEST;
	c.p.selftest.mask = mask;
	ret = nelssa_pnm_exec(p, &c, &comp);
	nelssa_pnm_close(p);
	if (ret && comp.status != NPNM_ST_SELFTEST_FAIL) {
		fprintf(stderr, "nelssactl: %s: selftest could not run: %s\n", argv[idx],
			nelssa_pnm_strerror());
		return EXIT_DEVICE;
	}
	/* All of them, but the bf16-dots test where the firmware (before 1.1) has none. */
	run = mask ? mask : info.attn_flags & NPNM_ATTN_F_BF16_DOTS ? NFW_SELFTEST_ALL :
		NFW_SELFTEST_ALL & ~NFW_SELFTEST_ATTN_BF16_DOTS;
	if (ctl->json) {
		json_object *o = json_object_new_object(), *tests = json_object_new_object();

		for (unsigned int i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (run & (1u << i))
				json_object_object_add(tests, names[i], json_object_new_string(
						       comp.detail & (1u << i) ? "fail" : "pass"));
		json_object_object_add(o, "device", json_object_new_string(argv[idx]));
		json_object_object_add(o, "passed", json_object_new_boolean(!comp.detail));
		json_object_object_add(o, "failed_mask", json_object_new_int64(comp.detail));
		json_object_object_add(o, "tests", tests);
		json_object_object_add(o, "device_ns", json_object_new_uint64(comp.device_ns));
		ctl_print_json(o);
	} else {
		for (unsigned int i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (run & (1u << i))
				printf("%-14s %s\n", names[i],
				       comp.detail & (1u << i) ? "FAIL" : "pass");
		printf("selftest %s on %s (%.1f ms)\n", comp.detail ? "FAILED" : "passed", argv[idx],
		       (double)comp.device_ns / 1e6);
	}
	return comp.detail ? EXIT_FAIL : EXIT_OK;
}

int cmd_bench(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl bench DEV bw|attn|latency [OPTIONS] [--json]\n"
		"  bw       device FILL/COPY and bulk write/read bandwidth vs host memcpy\n"
		"  attn     SPARSE_ATTN effective KV bandwidth vs this machine's streaming read\n"
		"  latency  submit->complete latency percentiles of NOP and small commands\n"
		"Each accepts --help for its options.  On sim:N without options the\n"
		"benchmark sizes the device itself (cores from --threads).\n";
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			ctl->json = true;
			memmove(&argv[i], &argv[i + 1], (size_t)(argc - i - 1) * sizeof(*argv));
			argc--;
			i--;
		}
	}
	if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		fputs(help, stdout);
		return EXIT_OK;
	}
	if (argc < 3) {
		ctl_usage_error(ctl, "bench", "expected DEV and one of bw, attn, latency");
		return EXIT_USAGE;
	}
	if (!strcmp(argv[2], "attn"))
		return bench_attn(ctl, argv[1], argc - 2, argv + 2);
	if (!strcmp(argv[2], "bw"))
		return bench_bw(ctl, argv[1], argc - 2, argv + 2);
	if (!strcmp(argv[2], "latency"))
		return bench_latency(ctl, argv[1], argc - 2, argv + 2);
	ctl_usage_error(ctl, "bench", "unknown benchmark '%s' (bw, attn, latency)", argv[2]);
	return EXIT_USAGE;
}
