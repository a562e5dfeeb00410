// SPDX-License-Identifier: MIT
/*
 * sim devices: a process-wide registry, so that every open of "sim:N" is a
 * new context on one shared device, as every open() of /dev/nelssa_pnmN is
 * on one card.  Device memory is an anonymous mapping reserved without
 * commitment, so a large device costs only what is touched.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "sim.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sim_dev *registry;

#define SIM_MAX_CPU 1023

/* "N" or "N-M": the host CPUs the executors are pinned to. */
static int parse_cpus(const char *val, struct sim_opts *o)
{
	unsigned long first, last;
	char *end;

	errno = 0;
	first = strtoul(val, &end, 10);
	if (errno || end == val || first > SIM_MAX_CPU)
		return -1;
	last = first;
	if (*end == '-') {
		const char *p = end + 1;

		last = strtoul(p, &end, 10);
		if (errno || end == p || last > SIM_MAX_CPU || last < first)
			return -1;
	}
	if (*end)
		return -1;
	o->cpu_first = (unsigned int)first;
	o->cpu_count = (unsigned int)(last - first + 1);
	return 0;
}

int sim_parse(const char *spec, struct sim_opts *o)
{
	char buf[128], *save = NULL, *tok, *end;
	unsigned long v;

	memset(o, 0, sizeof(*o));
	o->mem = 1ull << 30;
	o->cores = 1;
	o->isa = NFW_ISA_AUTO;
	o->spin_ns = 20000;
	if (strlen(spec) >= sizeof(buf))
		return npnm_priv_error(-EINVAL, "device name too long");
	strcpy(buf, spec + 4);	/* after "sim:" */
	tok = strtok_r(buf, ",", &save);
	if (!tok)
		return npnm_priv_error(-EINVAL, "%s: expected sim:N", spec);
	errno = 0;
	v = strtoul(tok, &end, 10);
	if (errno || end == tok || *end || v > 255)
		return npnm_priv_error(-EINVAL, "%s: device number must be 0..255", spec);
	o->index = (unsigned int)v;
	while ((tok = strtok_r(NULL, ",", &save))) {
		char *val = strchr(tok, '=');

		if (!val)
			return npnm_priv_error(-EINVAL, "%s: option '%s' needs a value", spec, tok);
		*val++ = 0;
		if (!strcmp(tok, "mem")) {
			if (nelssa_parse_size(val, &o->mem) || o->mem < 16 * SIM_ALIGN)
				return npnm_priv_error(-EINVAL, "%s: mem=%s: need a size of at least 64K",
						 spec, val);
			o->set |= SIM_OPT_MEM;
		} else if (!strcmp(tok, "cores")) {
			v = strtoul(val, &end, 10);
			if (end == val || *end || v < 1 || v > 256)
				return npnm_priv_error(-EINVAL, "%s: cores=%s: need 1..256", spec, val);
			o->cores = (unsigned int)v;
			o->set |= SIM_OPT_CORES;
		} else if (!strcmp(tok, "isa")) {
			int isa = nfw_isa_parse(val);

			if (isa < 0)
				return npnm_priv_error(-EINVAL, "%s: isa=%s: need auto, scalar, avx2, avx512, "
						 "avx512-bf16 or neon", spec, val);
			if (!nfw_isa_supported((enum nfw_isa)isa))
				return npnm_priv_error(-EOPNOTSUPP, "%s: isa=%s: not supported by this "
						 "CPU or build", spec, val);
			o->isa = (enum nfw_isa)isa;
			o->set |= SIM_OPT_ISA;
		} else if (!strcmp(tok, "spin_us")) {
			v = strtoul(val, &end, 10);
			if (end == val || *end || v > 1000000)
				return npnm_priv_error(-EINVAL, "%s: spin_us=%s: need 0..1000000", spec, val);
			o->spin_ns = (uint64_t)v * 1000;
			o->set |= SIM_OPT_SPIN;
		} else if (!strcmp(tok, "kv_stride")) {
			if (strcmp(val, "on") && strcmp(val, "off"))
				return npnm_priv_error(-EINVAL, "%s: kv_stride=%s: need on or off",
						 spec, val);
			o->no_kv_stride = !strcmp(val, "off");
			o->set |= SIM_OPT_KV_STRIDE;
		} else if (!strcmp(tok, "cpus")) {
			if (parse_cpus(val, o))
				return npnm_priv_error(-EINVAL, "%s: cpus=%s: need FIRST or FIRST-LAST, "
						 "CPU numbers 0..%d", spec, val, SIM_MAX_CPU);
			o->set |= SIM_OPT_CPUS;
		} else {
			return npnm_priv_error(-EINVAL, "%s: unknown option '%s' (mem, cores, isa, spin_us, "
					 "cpus, kv_stride)", spec, tok);
		}
	}
	return 0;
}

static int conflicts(const struct sim_opts *have, const struct sim_opts *want)
{
	return ((want->set & SIM_OPT_MEM) && want->mem != have->mem) ||
	       ((want->set & SIM_OPT_CORES) && want->cores != have->cores) ||
	       ((want->set & SIM_OPT_ISA) && want->isa != have->isa) ||
	       ((want->set & SIM_OPT_SPIN) && want->spin_ns != have->spin_ns) ||
	       ((want->set & SIM_OPT_KV_STRIDE) && want->no_kv_stride != have->no_kv_stride) ||
	       ((want->set & SIM_OPT_CPUS) && (want->cpu_first != have->cpu_first ||
					       want->cpu_count != have->cpu_count));
}

static int create(const struct sim_opts *o, struct sim_dev **out)
{
	struct nfw_runtime_config cfg = { 0 };
	struct sim_dev *dev = calloc(1, sizeof(*dev));
	int ret;

	if (!dev)
		return npnm_priv_error(-ENOMEM, "out of memory");
	dev->opts = *o;
	dev->mem = mmap(NULL, o->mem, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (dev->mem == MAP_FAILED) {
		free(dev);
		return npnm_priv_error(-ENOMEM, "sim:%u: cannot reserve %llu bytes of device memory",
				 o->index, (unsigned long long)o->mem);
	}
	/*
	 * Card memory is physically contiguous DRAM; huge pages model that
	 * (and spare SPARSE_ATTN a TLB miss per cluster).  Advisory only.
	 */
	madvise(dev->mem, o->mem, MADV_HUGEPAGE);
	ret = nelssa_extent_init(&dev->alloc, o->mem, SIM_ALIGN);
	if (ret)
		goto err_unmap;
	pthread_mutex_init(&dev->lock, NULL);
	cfg.mem = (struct nfw_mem){ dev->mem, o->mem };
	cfg.cores = o->cores;
	cfg.isa = o->isa;
	cfg.spin_ns = o->spin_ns;
	cfg.cpu_first = o->cpu_first;
	cfg.cpu_count = o->cpu_count;
	cfg.complete = sim_complete;
	ret = nfw_runtime_create(&cfg, &dev->rt);
	if (ret)
		goto err_alloc;
	dev->refs = 1;
	*out = dev;
	return 0;

err_alloc:
	pthread_mutex_destroy(&dev->lock);
	nelssa_extent_fini(&dev->alloc);
err_unmap:
	munmap(dev->mem, o->mem);
	free(dev);
	if (ret == -EINVAL && o->cpu_count)
		return npnm_priv_error(ret, "sim:%u: cpus=%u-%u: not all CPUs this process may run on",
				 o->index, o->cpu_first, o->cpu_first + o->cpu_count - 1);
	return npnm_priv_error(ret, "sim:%u: cannot start the device runtime", o->index);
}

int sim_dev_get(const struct sim_opts *o, struct sim_dev **out)
{
	struct sim_dev *dev;
	int ret = 0;

	pthread_mutex_lock(&registry_lock);
	for (dev = registry; dev; dev = dev->next)
		if (dev->opts.index == o->index)
			break;
	if (dev) {
		if (conflicts(&dev->opts, o))
			ret = npnm_priv_error(-EBUSY, "sim:%u is already open with other options", o->index);
		else
			dev->refs++;
	} else {
		ret = create(o, &dev);
		if (!ret) {
			dev->next = registry;
			registry = dev;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	if (!ret)
		*out = dev;
	return ret;
}

void sim_dev_put(struct sim_dev *dev)
{
	struct sim_dev **pp;

	pthread_mutex_lock(&registry_lock);
	if (--dev->refs) {
		pthread_mutex_unlock(&registry_lock);
		return;
	}
	for (pp = &registry; *pp != dev; pp = &(*pp)->next)
		;
	*pp = dev->next;
	pthread_mutex_unlock(&registry_lock);
	nfw_runtime_destroy(dev->rt);
	nelssa_extent_fini(&dev->alloc);
	pthread_mutex_destroy(&dev->lock);
	munmap(dev->mem, dev->opts.mem);
	free(dev);
}
