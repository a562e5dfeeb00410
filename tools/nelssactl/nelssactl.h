/* SPDX-License-Identifier: MIT */
/* nelssactl: shared declarations of the subcommands and their helpers. */
#ifndef NELSSACTL_H
#define NELSSACTL_H

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include <nelssa/pnm.h>

/* Exit codes, documented in Documentation/tools/nelssactl.rst. */
enum {
	EXIT_OK = 0,
	EXIT_FAIL = 1,		/* the operation ran and failed (selftest, bench) */
	EXIT_USAGE = 2,		/* bad command line */
	EXIT_DEVICE = 3,	/* the device cannot be opened or used */
};

struct ctl {
	bool json;
	const char *prog;
};

int cmd_list(struct ctl *ctl, int argc, char **argv);
int cmd_info(struct ctl *ctl, int argc, char **argv);
int cmd_selftest(struct ctl *ctl, int argc, char **argv);
int cmd_bench(struct ctl *ctl, int argc, char **argv);
int cmd_stats(struct ctl *ctl, int argc, char **argv);
int cmd_calibrate(struct ctl *ctl, int argc, char **argv);
int cmd_topology(struct ctl *ctl, int argc, char **argv);
int cmd_cluster(struct ctl *ctl, int argc, char **argv);

int bench_attn(struct ctl *ctl, const char *dev, int argc, char **argv);

/* The SPARSE_ATTN measurement behind 'bench attn' (also used by 'calibrate'). */
struct attn_opts {
	uint64_t threads, context, items, head_dim, group, cluster, iters;
	double select;
	bool pin;			/* executors (and baseline readers) on fixed CPUs */
	unsigned int cpu_first;		/* with cpus_given: the first of them */
	bool cpus_given;		/* else the first CPUs this process may use */
	const char *isa;		/* SPARSE_ATTN ISA of a sim device it creates; NULL: best */
	uint8_t kv_dtype;		/* enum npnm_kv_dtype of the stores */
	uint32_t attn_flags;		/* NPNM_ATTN_F_* of the commands */
	bool adjacent;			/* K and V blocks adjacent (kv_stride) */
};

struct attn_result {
	char name[256];			/* the device as opened */
	double gbps, best_gbps, seconds, err;
	double token_bytes;		/* K and V bytes of one token, scales included */
	uint64_t bytes_per_cmd, nsel, nclusters, kv_bytes;
	uint64_t mem_size;		/* the device's memory */
	unsigned int threads;
	bool pinned;			/* executors pinned to CPUs cpu_first.. */
	bool adjacent;			/* the stores' K and V blocks adjacent */
	unsigned int cpu_first;
};

void attn_defaults(struct attn_opts *o);
/* Runs the measurement; an EXIT_* code, with *res filled when it ran. */
int attn_measure(const char *dev, const struct attn_opts *o, bool quiet, struct attn_result *res);
int bench_bw(struct ctl *ctl, const char *dev, int argc, char **argv);
int bench_latency(struct ctl *ctl, const char *dev, int argc, char **argv);

/* Open @name, printing a clear error; NULL on failure. */
struct nelssa_pnm *ctl_open(const char *name);
/*
 * "sim:N" without options gets @opts appended; other names pass through.
 * True when @opts were appended.
 */
bool ctl_sim_name(char *buf, size_t len, const char *dev, const char *opts);

/* Print @obj (and free it): pretty JSON, or nothing when !json. */
void ctl_print_json(struct json_object *obj);

int ctl_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int ctl_parse_double(const char *s, double min, double max, double *out);
void ctl_usage_error(const struct ctl *ctl, const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Human-readable size: "1.00 GiB". */
const char *ctl_size(uint64_t bytes, char *buf, size_t len);

/*
 * Single-pass streaming read of @bytes with @threads threads, best of
 * @passes: the memory bandwidth a kernel that reads every byte once could
 * reach on this machine.  With @cpu_count, reader i runs on CPU
 * @cpu_first + i % @cpu_count.  Returns GB/s (1e9 bytes per second).
 */
double ctl_read_baseline(uint64_t bytes, unsigned int threads, unsigned int passes,
			 unsigned int cpu_first, unsigned int cpu_count);
/* What every measurement thread of ctl_time_threads() starts with. */
struct ctl_timed {
	void *start;		/* ctl_time_threads()'s; see ctl_timed_begin() */
	uint64_t sum;		/* a result, so the work is not optimised away */
	double t_end;		/* tl_now() when the work is done */
};

/* Called by a measurement thread first: returns when all may start. */
void ctl_timed_begin(struct ctl_timed *tm);

/*
 * Run @fn on @threads threads, thread i on the argument at @args + i *
 * @size (which starts with a struct ctl_timed), pinned to CPU @cpu_first +
 * i % @cpu_count when @cpu_count (unpinned if that CPU is refused).  All
 * start together; returns the seconds from that start to the last one's
 * t_end, or -1 for a thread count outside 1..256.
 */
double ctl_time_threads(unsigned int threads, void *(*fn)(void *), void *args, size_t size,
			unsigned int cpu_first, unsigned int cpu_count);

/* The layout 'bench attn' reads: per item, K of every cluster then V. */
struct gather_shape {
	uint64_t items, clusters, selected;	/* selected clusters per item */
	uint64_t chunk_bytes;			/* one cluster's K (= V) rows */
	bool adjacent;				/* each cluster's V right after its K */
};

/*
 * The memory side of SPARSE_ATTN alone: the K and V rows of randomly
 * selected clusters read with a prefetch running ahead, @threads threads
 * pinned like ctl_read_baseline()'s, best of @passes.  GB/s, or 0 when the
 * shape cannot be gathered in whole lines or memory is short.
 */
double ctl_gather_baseline(const struct gather_shape *sh, unsigned int threads,
			   unsigned int passes, unsigned int cpu_first, unsigned int cpu_count);
/*
 * The first @n CPUs this process may run on, when they are consecutive:
 * 0 and *@first, else -ERANGE.
 */
int ctl_pick_cpus(unsigned int n, unsigned int *first);

#endif /* NELSSACTL_H */
