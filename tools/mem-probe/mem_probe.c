// SPDX-License-Identifier: MIT
/*
 * nelssa-mem-probe: how fast one core of this host reads chunks of memory
 * placed at random, next to how fast it streams -- the measurements behind
 * "why the SPARSE_ATTN ratio stops near 0.6" in Documentation/performance.rst.
 *
 * One thread, pinned to one CPU.  A buffer as large as the largest region
 * holds a known pattern.  For each region size, every pass gathers chunks
 * drawn at random from the first bytes of the buffer, no chunk twice (so
 * no pass hits in the caches by chance), after reading a separate buffer
 * several times the last-level cache (so no pass finds the previous one's
 * lines either).  Each line is read in full; a software prefetch runs a
 * fixed number of lines ahead through the same sequence.  The sum of every
 * word read is checked against the pattern's closed form, so a probe that
 * skipped or misplaced a read fails instead of reporting a rate.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tool_util.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

static const char *const prog = "nelssa-mem-probe";

static const char help[] =
	"usage: nelssa-mem-probe [OPTIONS]\n"
	"  --regions LIST  region sizes in MiB, comma-separated (default 256,512,1024,2048)\n"
	"  --chunk BYTES   bytes read contiguously per random chunk, a multiple of 64\n"
	"                  (default 4096: one 16-token cluster's K or V rows at head dim 128)\n"
	"  --bytes MIB     MiB gathered per pass (default 64), at most half the smallest region\n"
	"  --ahead LINES   64-byte lines the software prefetch runs ahead, 0 for none (default 256)\n"
	"  --passes N      passes per measurement, the best reported (default 4)\n"
	"  --pages KIND    thp (transparent huge pages, default) or 1g (hugetlb 1 GiB pages,\n"
	"                  reserved beforehand in /sys/kernel/mm/hugepages/)\n"
	"  --cpu N         the CPU to run on (default: the first this process may use)\n"
	"  --json          one JSON object\n"
	"One thread.  Reports stream_gbps (a sequential read of the largest region) and, per\n"
	"region, gather_gbps (distinct random chunks, caches flushed before each pass) and\n"
	"its ratio to the stream.\n";

/* The pattern: word i of the buffer holds i * PATTERN (mod 2^64). */
#define PATTERN 0x9e3779b97f4a7c15ull

struct opts {
	uint32_t regions[16], nr_regions;	/* MiB, as given */
	uint32_t chunk, mib, ahead, passes, cpu;
	int huge_1g, json, cpu_set;
};

/* Sum of the pattern's words [w0, w0 + n), mod 2^64. */
static uint64_t pattern_sum(uint64_t w0, uint64_t n)
{
	uint64_t tri = n % 2 ? (n - 1) / 2 * n : n / 2 * (n - 1);

	return PATTERN * (n * w0 + tri);
}

/* Line @l of chunk @c of the sequence. */
struct cursor {
	size_t c, l;
};

static inline void cursor_next(struct cursor *k, size_t lines_per_chunk)
{
	if (++k->l == lines_per_chunk) {
		k->l = 0;
		k->c++;
	}
}

/*
 * Every line of the @n chunks at byte offsets @off, in order, with the
 * prefetch @ahead lines on; returns the sum of the words read.
 */
static uint64_t gather(const uint8_t *buf, const uint64_t *off, size_t n, size_t chunk,
		       size_t ahead)
{
	const size_t lpc = chunk / 64;
	struct cursor rd = { 0, 0 }, pf = { 0, 0 };
	uint64_t a = 0, b = 0, c = 0, d = 0;

	for (size_t i = 0; i < ahead && pf.c < n; i++) {
		__builtin_prefetch(buf + off[pf.c] + pf.l * 64, 0, 3);
		cursor_next(&pf, lpc);
	}
	while (rd.c < n) {
		const uint64_t *p = (const uint64_t *)(buf + off[rd.c] + rd.l * 64);

		if (ahead && pf.c < n) {
			__builtin_prefetch(buf + off[pf.c] + pf.l * 64, 0, 3);
			cursor_next(&pf, lpc);
		}
		a += p[0] + p[4];
		b += p[1] + p[5];
		c += p[2] + p[6];
		d += p[3] + p[7];
		cursor_next(&rd, lpc);
	}
	return a + b + c + d;
}

/* Reads @bytes of @p in order: the streaming baseline, and the cache flush. */
static uint64_t stream(const uint8_t *p, size_t bytes)
{
	const uint64_t off = 0;

	return gather(p, &off, 1, bytes, 0);
}

/*
 * @n distinct chunk offsets among the @total chunks of @chunk bytes, in
 * random order: Floyd's sample marked in @seen, then shuffled.
 */
static void pick(uint64_t *off, size_t n, size_t total, size_t chunk, uint8_t *seen,
		 uint64_t *rng)
{
	size_t k = 0;

	memset(seen, 0, (total + 7) / 8);
	for (size_t j = total - n; j < total; j++) {
		size_t t = tl_next(rng) % (j + 1);

		if (seen[t / 8] & (1u << (t % 8)))
			t = j;
		seen[t / 8] |= 1u << (t % 8);
		off[k++] = (uint64_t)t * chunk;
	}
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = tl_next(rng) % (i + 1);
		uint64_t x = off[i];

		off[i] = off[j];
		off[j] = x;
	}
}

static uint8_t *map(size_t bytes, int huge_1g)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS;
	uint8_t *p;

	if (huge_1g)
		flags |= MAP_HUGETLB | (30 << MAP_HUGE_SHIFT);
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (p == MAP_FAILED) {
		if (huge_1g)
			fprintf(stderr, "%s: cannot map %zu MiB of 1 GiB pages: %s (reserve them "
				"first: echo %zu > /sys/kernel/mm/hugepages/hugepages-1048576kB/"
				"nr_hugepages)\n", prog, bytes >> 20, strerror(errno), bytes >> 30);
		else
			fprintf(stderr, "%s: cannot map %zu MiB: %s\n", prog, bytes >> 20,
				strerror(errno));
		return NULL;
	}
	if (!huge_1g)
		madvise(p, bytes, MADV_HUGEPAGE);
	return p;
}

/* Several times the last-level cache, and no less than 128 MiB. */
static size_t flush_bytes(void)
{
	long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
	size_t b = llc > 0 ? 4 * (size_t)llc : 0;

	return b > (128u << 20) ? (b + 4095) & ~(size_t)4095 : 128u << 20;
}

static int parse_regions(const char *s, struct opts *o)
{
	char *copy = strdup(s), *save = NULL, *tok;
	int ret = 0;

	if (!copy)
		return -1;
	o->nr_regions = 0;
	for (tok = strtok_r(copy, ",", &save); tok && !ret; tok = strtok_r(NULL, ",", &save)) {
		if (o->nr_regions == sizeof(o->regions) / sizeof(o->regions[0])) {
			fprintf(stderr, "%s: --regions: at most 16 sizes\n", prog);
			ret = -1;
			break;
		}
		ret = tl_parse_u32(prog, tok, 1, 1u << 20, &o->regions[o->nr_regions++],
				   "--regions");
	}
	if (!ret && !o->nr_regions) {
		fprintf(stderr, "%s: --regions '%s': no size given\n", prog, s);
		ret = -1;
	}
	free(copy);
	return ret;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "regions", required_argument, NULL, 'r' }, { "chunk", required_argument, NULL, 'c' },
		{ "bytes", required_argument, NULL, 'b' }, { "ahead", required_argument, NULL, 'a' },
		{ "passes", required_argument, NULL, 'p' }, { "pages", required_argument, NULL, 'P' },
		{ "cpu", required_argument, NULL, 'u' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	uint32_t smallest = UINT32_MAX;
	int c;

	*o = (struct opts){ .regions = { 256, 512, 1024, 2048 }, .nr_regions = 4, .chunk = 4096,
			    .mib = 64, .ahead = 256, .passes = 4 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		int bad = 0;

		switch (c) {
		case 'r': bad = parse_regions(optarg, o); break;
		case 'c': bad = tl_parse_u32(prog, optarg, 64, 1u << 30, &o->chunk, "--chunk"); break;
		case 'b': bad = tl_parse_u32(prog, optarg, 1, 1u << 19, &o->mib, "--bytes"); break;
		case 'a': bad = tl_parse_u32(prog, optarg, 0, 1u << 16, &o->ahead, "--ahead"); break;
		case 'p': bad = tl_parse_u32(prog, optarg, 1, 1000, &o->passes, "--passes"); break;
		case 'u': bad = tl_parse_u32(prog, optarg, 0, CPU_SETSIZE - 1, &o->cpu, "--cpu");
			o->cpu_set = 1;
			break;
		case 'P':
			if (!strcmp(optarg, "thp") || !strcmp(optarg, "1g")) {
				o->huge_1g = optarg[0] == '1';
			} else {
				fprintf(stderr, "%s: --pages %s: need thp or 1g\n", prog, optarg);
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
	if (o->chunk % 64) {
		fprintf(stderr, "%s: --chunk %u: need a multiple of 64 bytes\n", prog, o->chunk);
		return -1;
	}
	for (uint32_t i = 0; i < o->nr_regions; i++)
		smallest = o->regions[i] < smallest ? o->regions[i] : smallest;
	/* Distinct chunks: a pass may take at most half of a region's. */
	if ((uint64_t)o->mib * 2 > smallest || ((uint64_t)o->mib << 20) < o->chunk) {
		fprintf(stderr, "%s: --bytes %u: need at least one chunk and at most half the "
			"smallest region (%u MiB)\n", prog, o->mib, smallest);
		return -1;
	}
	return 0;
}

/* Runs on @o->cpu, or on the first CPU allowed when none was asked for. */
static int pin(struct opts *o)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, "%s: sched_getaffinity: %s\n", prog, strerror(errno));
		return -1;
	}
	if (!o->cpu_set) {
		for (o->cpu = 0; o->cpu < CPU_SETSIZE && !CPU_ISSET(o->cpu, &set); o->cpu++)
			;
	} else if (!CPU_ISSET(o->cpu, &set)) {
		fprintf(stderr, "%s: --cpu %u: not a CPU this process may run on\n", prog, o->cpu);
		return -1;
	}
	CPU_ZERO(&set);
	CPU_SET(o->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, "%s: cannot run on CPU %u: %s\n", prog, o->cpu, strerror(errno));
		return -1;
	}
	return 0;
}

struct probe {
	const struct opts *o;
	uint8_t *buf, *flush;
	size_t buf_bytes, flush_bytes;
	uint64_t *off;
	uint8_t *seen;
	uint64_t rng;
};

/* Best GB/s of the passes of one measurement; 0 after a wrong sum. */
static double best_of(struct probe *p, size_t region)
{
	const size_t chunk = p->o->chunk, n = ((size_t)p->o->mib << 20) / chunk;
	const size_t bytes = region ? n * chunk : p->buf_bytes;
	static volatile uint64_t sink;
	double best = 0.0;

	for (uint32_t pass = 0; pass < p->o->passes; pass++) {
		uint64_t want = 0, got;
		double t0, dt;

		if (region) {
			pick(p->off, n, region / chunk, chunk, p->seen, &p->rng);
			for (size_t i = 0; i < n; i++)
				want += pattern_sum(p->off[i] / 8, chunk / 8);
		} else {
			want = pattern_sum(0, p->buf_bytes / 8);
		}
		sink += stream(p->flush, p->flush_bytes);
		t0 = tl_now();
		got = region ? gather(p->buf, p->off, n, chunk, p->o->ahead) :
			       stream(p->buf, p->buf_bytes);
		dt = tl_now() - t0;
		if (got != want) {
			fprintf(stderr, "%s: the words read do not sum to the pattern's: %#llx, not "
				"%#llx\n", prog, (unsigned long long)got, (unsigned long long)want);
			return 0.0;
		}
		if (bytes / dt / 1e9 > best)
			best = bytes / dt / 1e9;
	}
	return best;
}

static int setup(struct probe *p, const struct opts *o)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	size_t largest = 0, ram = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;

	for (uint32_t i = 0; i < o->nr_regions; i++)
		if (((size_t)o->regions[i] << 20) > largest)
			largest = (size_t)o->regions[i] << 20;
	*p = (struct probe){ .o = o, .rng = 0x2545f4914f6cdd1dull };
	p->buf_bytes = o->huge_1g ? (largest + (1u << 30) - 1) & ~(((size_t)1 << 30) - 1) : largest;
	p->flush_bytes = flush_bytes();
	/* Every byte is written: a region past the machine's memory would end in the OOM killer. */
	if (ram && p->buf_bytes + p->flush_bytes > ram / 4 * 3) {
		fprintf(stderr, "%s: %zu MiB of buffers is more than 3/4 of this machine's %zu MiB\n",
			prog, (p->buf_bytes + p->flush_bytes) >> 20, ram >> 20);
		return -1;
	}
	p->buf = map(p->buf_bytes, o->huge_1g);
	p->flush = map(p->flush_bytes, 0);
	if (!p->buf || !p->flush)
		return -1;
	p->off = tl_calloc(prog, ((size_t)o->mib << 20) / o->chunk, sizeof(*p->off));
	p->seen = tl_calloc(prog, (largest / o->chunk + 7) / 8, 1);
	if (!o->json)
		fprintf(stderr, "filling %zu MiB...\n", p->buf_bytes >> 20);
	for (size_t i = 0; i < p->buf_bytes / 8; i++)
		((uint64_t *)p->buf)[i] = i * PATTERN;
	memset(p->flush, 1, p->flush_bytes);
	return 0;
}

int main(int argc, char **argv)
{
	double base, gbps[16];
	struct opts o;
	struct probe p;
	int ret = 1;

	if (parse(argc, argv, &o))
		return 2;
	if (pin(&o) || setup(&p, &o))
		return 1;
	base = best_of(&p, 0);
	if (base <= 0.0)
		goto out;
	if (!o.json)
		printf("one thread on CPU %u, %s pages, %u-byte chunks, prefetch %u lines ahead\n"
		       "stream        %7.2f GB/s (%zu MiB)\nregion MiB    gather GB/s   of stream\n",
		       o.cpu, o.huge_1g ? "1 GiB" : "transparent huge", o.chunk, o.ahead, base,
		       p.buf_bytes >> 20);
	for (uint32_t i = 0; i < o.nr_regions; i++) {
		gbps[i] = best_of(&p, (size_t)o.regions[i] << 20);
		if (gbps[i] <= 0.0)
			goto out;
		if (!o.json) {
			printf("%10u    %11.2f   %9.2f\n", o.regions[i], gbps[i], gbps[i] / base);
			fflush(stdout);
		}
	}
	if (o.json) {
		printf("{\"cpu\":%u,\"pages\":\"%s\",\"chunk\":%u,\"ahead\":%u,"
		       "\"bytes_per_pass\":%llu,\"passes\":%u,\"stream_gbps\":%.4f,\"regions\":[",
		       o.cpu, o.huge_1g ? "1g" : "thp", o.chunk, o.ahead,
		       (unsigned long long)o.mib << 20, o.passes, base);
		for (uint32_t i = 0; i < o.nr_regions; i++)
			printf("%s{\"mib\":%u,\"gather_gbps\":%.4f,\"ratio\":%.4f}", i ? "," : "",
			       o.regions[i], gbps[i], gbps[i] / base);
		printf("]}\n");
	}
	ret = 0;
out:
	munmap(p.buf, p.buf_bytes);
	munmap(p.flush, p.flush_bytes);
	free(p.off);
	free(p.seen);
	return ret;
}
