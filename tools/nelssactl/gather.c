// SPDX-License-Identifier: MIT
/*
 * The gather baseline of 'bench attn': read the K and V rows of randomly
 * selected clusters -- the memory side of SPARSE_ATTN with no arithmetic
 * -- as fast as this machine allows, so that the SPARSE_ATTN figure can be
 * set against what its access pattern alone costs as well as against a
 * streaming read.
 *
 * Every 64-byte line is read (all of its words summed, as the streaming
 * baseline does) and a prefetch runs a fixed distance ahead through the
 * same sequence of lines, the K and V lines of two clusters interleaved:
 * the fastest of the schemes measured for Documentation/performance.rst.
 * Each thread gathers a contiguous share of the clusters; a share's last
 * odd cluster is left out (not counted either).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>

#include "nelssactl.h"
#include "tool_util.h"

/* Lines the prefetch runs ahead of the reads. */
#define GATHER_AHEAD 256

struct gatherer {
	struct ctl_timed tm;
	const uint8_t *base;		/* the stores */
	const uint64_t *chunk;		/* byte offsets of this thread's K chunks */
	size_t nr_chunks;
	uint64_t chunk_bytes, v_delta;	/* a cluster's K (= V) bytes; V - K offset */
};

/* Chunks read together (two pages each): measured 3-5 % faster than one, 4 slower. */
#define GATHER_WAYS 2

/*
 * A position in the thread's sequence of lines: GATHER_WAYS chunks at a
 * time, their K and V lines interleaved, so 2 * GATHER_WAYS pages are read
 * together.
 */
struct cursor {
	size_t chunk, line;	/* first chunk of the group; line < group lines */
};

static inline const uint64_t *cursor_line(const struct gatherer *g, const struct cursor *c)
{
	size_t way = c->line % (2 * GATHER_WAYS), row = c->line / (2 * GATHER_WAYS);

	return (const uint64_t *)(g->base + g->chunk[c->chunk + way / 2] + (way & 1) * g->v_delta +
				  row * 64);
}

static inline void cursor_next(struct cursor *c, size_t per_group)
{
	if (++c->line == per_group) {
		c->line = 0;
		c->chunk += GATHER_WAYS;
	}
}

static void *gather_slice(void *arg)
{
	struct gatherer *g = arg;
	const size_t per_chunk = g->chunk_bytes / 64 * 2 * GATHER_WAYS;
	struct cursor rd = { 0, 0 }, pf = { 0, 0 };
	uint64_t a = 0, b = 0, c = 0, d = 0;

	ctl_timed_begin(&g->tm);
	for (size_t j = 0; j < GATHER_AHEAD && pf.chunk + GATHER_WAYS <= g->nr_chunks; j++) {
		__builtin_prefetch(cursor_line(g, &pf), 0, 3);
		cursor_next(&pf, per_chunk);
	}
	while (rd.chunk + GATHER_WAYS <= g->nr_chunks) {
		const uint64_t *p = cursor_line(g, &rd);

		if (pf.chunk + GATHER_WAYS <= g->nr_chunks) {
			__builtin_prefetch(cursor_line(g, &pf), 0, 3);
			cursor_next(&pf, per_chunk);
		}
		a += p[0] + p[4];
		b += p[1] + p[5];
		c += p[2] + p[6];
		d += p[3] + p[7];
		cursor_next(&rd, per_chunk);
	}
	g->tm.sum = a + b + c + d;
	g->tm.t_end = tl_now();
	return NULL;
}

double ctl_gather_baseline(const struct gather_shape *sh, unsigned int threads,
			   unsigned int passes, unsigned int cpu_first, unsigned int cpu_count)
{
	const uint64_t store = 2 * sh->chunk_bytes * sh->clusters;	/* K then V */
	const uint64_t bytes = store * sh->items, chunks = sh->items * sh->selected;
	uint64_t *chunk = malloc(chunks * sizeof(*chunk)), s = 0x853c49e6748fea9bull;
	struct gatherer g[256];
	uint8_t *buf = NULL;
	double best = 0.0;

	if (!chunk || !chunks || sh->chunk_bytes % 64 || threads == 0 || threads > 256)
		goto out;
	buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		buf = NULL;
		goto out;
	}
	madvise(buf, bytes, MADV_HUGEPAGE);
	for (size_t i = 0; i < bytes / 8; i++)
		((uint64_t *)buf)[i] = i * 0x9e3779b97f4a7c15ull;
	for (unsigned int pass = 0; pass < passes; pass++) {
		uint64_t read = 0;
		double dt;

		/* Fresh clusters per pass, distinct enough at 4 % of 8192 not to matter. */
		for (uint64_t i = 0; i < chunks; i++)
			chunk[i] = i / sh->selected * store + tl_next(&s) % sh->clusters *
				   (sh->adjacent ? 2 : 1) * sh->chunk_bytes;
		for (unsigned int i = 0; i < threads; i++) {
			uint64_t from = chunks * i / threads, to = chunks * (i + 1) / threads;

			g[i] = (struct gatherer){ .base = buf, .chunk = chunk + from,
						  .nr_chunks = to - from,
						  .chunk_bytes = sh->chunk_bytes,
						  .v_delta = sh->adjacent ? sh->chunk_bytes : store / 2 };
			read += (to - from) / GATHER_WAYS * GATHER_WAYS * 2 * sh->chunk_bytes;
		}
		dt = ctl_time_threads(threads, gather_slice, g, sizeof(g[0]), cpu_first, cpu_count);
		if (dt > 0.0 && (double)read / dt / 1e9 > best)
			best = (double)read / dt / 1e9;
	}
out:
	if (buf)
		munmap(buf, bytes);
	free(chunk);
	return best;
}
