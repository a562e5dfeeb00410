// SPDX-License-Identifier: MIT
/* nelssactl helpers: device opening, parsing, JSON, the read baseline. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <nelssa/util.h>

#include "nelssactl.h"
#include "tool_util.h"

struct nelssa_pnm *ctl_open(const char *name)
{
	struct nelssa_pnm *p = NULL;
	int ret = nelssa_pnm_open(name, &p);

	if (ret) {
		fprintf(stderr, "nelssactl: cannot open %s: %s (%s)\n", name, nelssa_pnm_strerror(),
			strerror(-ret));
		return NULL;
	}
	return p;
}

bool ctl_sim_name(char *buf, size_t len, const char *dev, const char *opts)
{
	if (!strncmp(dev, "sim:", 4) && !strchr(dev, ',')) {
		snprintf(buf, len, "%s,%s", dev, opts);
		return true;
	}
	snprintf(buf, len, "%s", dev);
	return false;
}

void ctl_print_json(struct json_object *obj)
{
	puts(json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY |
					    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(obj);
}

int ctl_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	return nelssa_parse_u64(s, min, max, out);
}

int ctl_parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= min && v <= max))
		return -EINVAL;
	*out = v;
	return 0;
}

void ctl_usage_error(const struct ctl *ctl, const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s %s: ", ctl->prog, cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s %s --help'.\n", ctl->prog, cmd);
}

const char *ctl_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
	return buf;
}

struct reader {
	struct ctl_timed tm;
	const uint64_t *p;
	size_t words;
};

static void *read_slice(void *arg)
{
	struct reader *r = arg;
	uint64_t a = 0, b = 0, c = 0, d = 0;

	ctl_timed_begin(&r->tm);
	/* Four independent chains so the loop is limited by memory only. */
	for (size_t i = 0; i + 4 <= r->words; i += 4) {
		a += r->p[i];
		b += r->p[i + 1];
		c += r->p[i + 2];
		d += r->p[i + 3];
	}
	r->tm.sum = a + b + c + d;
	r->tm.t_end = tl_now();
	return NULL;
}

int ctl_pick_cpus(unsigned int n, unsigned int *first)
{
	cpu_set_t allowed;
	unsigned int c = 0, run = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return -errno;
	while (c < CPU_SETSIZE && !CPU_ISSET(c, &allowed))
		c++;
	*first = c;
	while (c < CPU_SETSIZE && CPU_ISSET(c, &allowed) && run < n) {
		c++;
		run++;
	}
	return run == n ? 0 : -ERANGE;
}

static int start_pinned(pthread_t *t, void *(*fn)(void *), void *arg, unsigned int cpu_first,
			unsigned int cpu_count, unsigned int i)
{
	pthread_attr_t attr;
	cpu_set_t cpus;
	int ret;

	if (!cpu_count)
		return pthread_create(t, NULL, fn, arg);
	/* Pinning is for steadier numbers: a CPU refused still gets its thread. */
	CPU_ZERO(&cpus);
	CPU_SET(cpu_first + i % cpu_count, &cpus);
	ret = pthread_attr_init(&attr);
	if (ret)
		return ret;
	ret = pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus);
	if (!ret)
		ret = pthread_create(t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return ret ? pthread_create(t, NULL, fn, arg) : 0;
}

void ctl_timed_begin(struct ctl_timed *tm)
{
	pthread_barrier_wait(tm->start);
}

double ctl_time_threads(unsigned int threads, void *(*fn)(void *), void *args, size_t size,
			unsigned int cpu_first, unsigned int cpu_count)
{
	static volatile uint64_t sink;
	pthread_t t[256];
	pthread_barrier_t start;
	double t0, t1 = 0.0;

	if (threads == 0 || threads > 256)
		return -1.0;
	pthread_barrier_init(&start, NULL, threads + 1);
	for (unsigned int i = 0; i < threads; i++) {
		struct ctl_timed *tm = (struct ctl_timed *)((char *)args + i * size);

		tm->start = &start;
		start_pinned(&t[i], fn, tm, cpu_first, cpu_count, i);
	}
	t0 = tl_now();
	pthread_barrier_wait(&start);
	for (unsigned int i = 0; i < threads; i++) {
		struct ctl_timed *tm = (struct ctl_timed *)((char *)args + i * size);

		pthread_join(t[i], NULL);
		sink += tm->sum;
		if (tm->t_end > t1)
			t1 = tm->t_end;
	}
	pthread_barrier_destroy(&start);
	return t1 - t0;
}

double ctl_read_baseline(uint64_t bytes, unsigned int threads, unsigned int passes,
			 unsigned int cpu_first, unsigned int cpu_count)
{
	struct reader r[256];
	uint64_t *buf;
	double best = 0.0;

	if (threads == 0 || threads > 256)
		return 0.0;
	bytes &= ~(uint64_t)(4096 * threads - 1);
	buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return 0.0;
	/* The same kind of memory as a sim device's (huge pages where the kernel has them). */
	madvise(buf, bytes, MADV_HUGEPAGE);
	/* Touch every page with non-zero data: no zero-page shortcuts. */
	for (size_t i = 0; i < bytes / 8; i++)
		buf[i] = i * 0x9e3779b97f4a7c15ull;
	for (unsigned int pass = 0; pass < passes; pass++) {
		double dt;

		for (unsigned int i = 0; i < threads; i++)
			r[i] = (struct reader){ .p = buf + i * (bytes / 8 / threads),
						.words = bytes / 8 / threads };
		dt = ctl_time_threads(threads, read_slice, r, sizeof(r[0]), cpu_first, cpu_count);
		if (dt > 0.0 && (double)bytes / dt / 1e9 > best)
			best = (double)bytes / dt / 1e9;
	}
	munmap(buf, bytes);
	return best;
}
