// SPDX-License-Identifier: MIT
/*
 * nelssactl topology: where a card (or a CXL memory device) sits in the
 * CXL hierarchy -- bus, host bridge, root port, switch ports, endpoint --
 * with its memory ranges, the HDM decoders on that path, the regions that
 * map it and the dax device of its carve-out.  Everything CXL comes from
 * libcxl, the dax devices from libdaxctl (both from ndctl); the field
 * names of the CXL objects are those of 'cxl list', so the two can be
 * compared object by object.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "nelssactl.h"

static const char topology_help[] =
	"usage: nelssactl topology [DEV] [--json]\n"
	"Show the CXL bus, host bridge, root port and endpoint DEV sits under, its\n"
	"memory ranges, the HDM decoders on that path, the regions that map it and\n"
	"the dax device of its carve-out.  DEV is /dev/nelssa_pnmN (a card), a CXL\n"
	"memory device (memN) or a PCI device (DDDD:bb:dd.f); without DEV, every\n"
	"card and every CXL memory device.  A machine with no CXL bus says so and\n"
	"exits 0.\n";

/* --json and --help anywhere; the index of the operand (or argc), -1 after --help, -2 on error. */
static int topology_args(struct ctl *ctl, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (ch == 'j') {
			ctl->json = true;
		} else if (ch == 'h') {
			fputs(topology_help, stdout);
			return -1;
		} else {
			ctl_usage_error(ctl, "topology", "bad option '%s'", argv[optind - 1]);
			return -2;
		}
	}
	if (argc - optind > 1) {
		ctl_usage_error(ctl, "topology", "expected at most one DEV");
		return -2;
	}
	return optind;
}

#ifndef NELSSA_HAVE_LIBCXL

int cmd_topology(struct ctl *ctl, int argc, char **argv)
{
	int idx = topology_args(ctl, argc, argv);

	if (idx < 0)
		return idx == -1 ? EXIT_OK : EXIT_USAGE;
	fprintf(stderr, "nelssactl topology: not available: nelssactl was built without libcxl "
		"(install libcxl-dev and libdaxctl-dev, then rebuild)\n");
	return EXIT_FAIL;
}

#else /* NELSSA_HAVE_LIBCXL */

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include <cxl/libcxl.h>
#include <daxctl/libdaxctl.h>

#define MAX_CHAIN 16

enum target_kind { KIND_CARD, KIND_MEMDEV, KIND_PCI };

static const char *const kind_names[] = {
	[KIND_CARD] = "nelssa-card", [KIND_MEMDEV] = "cxl-memdev", [KIND_PCI] = "pci-device",
};

/* One step of the path from the bus down: a port and the dport of it we go through. */
struct hop {
	struct cxl_port *port;
	struct cxl_dport *dport;	/* NULL at the last port when nothing below matched */
};

struct target {
	char name[PATH_MAX];		/* as the user (or the listing) names it */
	enum target_kind kind;
	char pci[64];			/* PCI device name, "" when none */
	char syspath[PATH_MAX];		/* its device directory under /sys/devices, "" when none */
	struct cxl_memdev *memdev;	/* the CXL memdev it is (or whose host it is), or NULL */
	struct cxl_bus *bus;
	struct hop chain[MAX_CHAIN];	/* root port of the bus first */
	int nhops;
	struct cxl_endpoint *endpoint;
	char note[256];			/* why part of the path is missing */
};

static json_object *jstr(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

static void add_u64(json_object *o, const char *k, unsigned long long v)
{
	json_object_object_add(o, k, json_object_new_uint64(v));
}

/* "a/b/c" under /sys/devices: is @name one of its components? */
static bool path_has(const char *path, const char *name)
{
	size_t len = strlen(name);

	if (!name[0])
		return false;
	for (const char *p = path; (p = strstr(p, name)); p++)
		if ((p == path || p[-1] == '/') && (p[len] == '/' || p[len] == 0))
			return true;
	return false;
}

/* The name under which a dport appears in a device path: its PCI or platform node. */
static const char *dport_node(struct cxl_dport *dport)
{
	const char *phys = cxl_dport_get_physical_node(dport);

	return phys ? phys : cxl_dport_get_devname(dport);
}

/* The path of a memdev through libcxl: endpoint, then each parent and the dport mapping it. */
static bool chain_by_memdev(struct target *t)
{
	struct cxl_port *ports[MAX_CHAIN], *port;
	int n = 0;

	t->endpoint = cxl_memdev_get_endpoint(t->memdev);
	if (!t->endpoint)
		return false;
	for (port = cxl_endpoint_get_parent(t->endpoint); port && n < MAX_CHAIN;
	     port = cxl_port_is_root(port) ? NULL : cxl_port_get_parent(port))
		ports[n++] = port;
	t->nhops = 0;
	for (int i = n - 1; i >= 0; i--) {
		t->chain[t->nhops].port = ports[i];
		t->chain[t->nhops].dport = cxl_port_get_dport_by_memdev(ports[i], t->memdev);
		t->nhops++;
	}
	t->bus = cxl_memdev_get_bus(t->memdev);
	return t->nhops > 0;
}

/*
 * The path of any PCI device by its place in the device tree: from each
 * bus's root port follow the dport whose node is a component of the
 * device's path, then the child port that dport leads to.  This is how a
 * device that is no CXL memdev (a type-2 card without CXL.mem on this
 * kernel) is placed.
 */
static bool chain_by_path(struct cxl_ctx *ctx, struct target *t)
{
	struct cxl_bus *bus;

	if (!t->syspath[0])
		return false;
	cxl_bus_foreach(ctx, bus) {
		struct cxl_port *port = cxl_bus_get_port(bus);
		int n = 0;

		while (port && n < MAX_CHAIN) {
			struct cxl_dport *dport, *hit = NULL;
			struct cxl_port *child, *next = NULL;

			cxl_dport_foreach(port, dport)
				if (path_has(t->syspath, dport_node(dport))) {
					hit = dport;
					break;
				}
			if (!hit)
				break;
			t->chain[n].port = port;
			t->chain[n].dport = hit;
			n++;
			/* The port below: hosted by that dport (a host bridge) or by a device on the path (a switch). */
			cxl_port_foreach(port, child) {
				const char *host = cxl_port_get_host(child);

				if (cxl_port_is_endpoint(child))
					continue;
				if (!strcmp(host, cxl_dport_get_devname(hit)) ||
				    path_has(t->syspath, host)) {
					next = child;
					break;
				}
			}
			port = next;
		}
		if (n) {
			t->nhops = n;
			t->bus = bus;
			return true;
		}
	}
	return false;
}

static void resolve_chain(struct cxl_ctx *ctx, struct target *t)
{
	if (t->memdev && chain_by_memdev(t))
		return;
	t->endpoint = NULL;
	if (chain_by_path(ctx, t)) {
		if (t->memdev)
			snprintf(t->note, sizeof(t->note), "%s has no enabled endpoint port",
				 cxl_memdev_get_devname(t->memdev));
		else
			snprintf(t->note, sizeof(t->note),
				 "no CXL memdev has %s as its host: not a CXL.mem endpoint on this kernel",
				 t->pci);
		return;
	}
	snprintf(t->note, sizeof(t->note), "%.200s is not below a CXL host bridge",
		 t->pci[0] ? t->pci : t->name);
}

static void set_pci(struct target *t, const char *pci)
{
	char link[PATH_MAX];

	snprintf(t->pci, sizeof(t->pci), "%s", pci);
	snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s", pci);
	if (!realpath(link, t->syspath))
		t->syspath[0] = 0;
}

static struct cxl_memdev *memdev_by_host(struct cxl_ctx *ctx, const char *pci)
{
	struct cxl_memdev *m;

	cxl_memdev_foreach(ctx, m)
		if (!strcmp(cxl_memdev_get_host(m), pci))
			return m;
	return NULL;
}

/* A card by its char device or class name: its PCI device from the class link. */
static int card_target(struct cxl_ctx *ctx, const char *name, struct target *t)
{
	const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
	char link[PATH_MAX], real[PATH_MAX];

	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->kind = KIND_CARD;
	snprintf(link, sizeof(link), "/sys/class/nelssa_pnm/%s/device", base);
	if (!realpath(link, real))
		return -ENODEV;
	set_pci(t, strrchr(real, '/') + 1);
	t->memdev = memdev_by_host(ctx, t->pci);
	return 0;
}

static void memdev_target(struct cxl_memdev *m, struct target *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", cxl_memdev_get_devname(m));
	t->kind = KIND_MEMDEV;
	t->memdev = m;
	set_pci(t, cxl_memdev_get_host(m));
}

static int named_target(struct cxl_ctx *ctx, const char *name, struct target *t)
{
	struct cxl_memdev *m;
	char link[PATH_MAX];

	if (!strncmp(name, "/dev/nelssa_pnm", 15) || !strncmp(name, "nelssa_pnm", 10))
		return card_target(ctx, name, t);
	cxl_memdev_foreach(ctx, m)
		if (!strcmp(cxl_memdev_get_devname(m), name)) {
			memdev_target(m, t);
			return 0;
		}
	snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s", name);
	if (strchr(name, '/') || access(link, F_OK))
		return -ENODEV;
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->kind = KIND_PCI;
	set_pci(t, name);
	t->memdev = memdev_by_host(ctx, name);
	return 0;
}

/* ---- JSON of the CXL objects, keyed like 'cxl list' ---- */

static json_object *bus_json(struct cxl_bus *bus)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "bus", jstr(cxl_bus_get_devname(bus)));
	json_object_object_add(o, "provider", jstr(cxl_bus_get_provider(bus)));
	json_object_object_add(o, "nr_dports",
			       json_object_new_int(cxl_port_get_nr_dports(cxl_bus_get_port(bus))));
	return o;
}

static json_object *port_json(struct cxl_port *port, const char *key)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, key, jstr(cxl_port_get_devname(port)));
	json_object_object_add(o, "host", jstr(cxl_port_get_host(port)));
	json_object_object_add(o, "depth", json_object_new_int(cxl_port_get_depth(port)));
	if (!cxl_port_is_endpoint(port))
		json_object_object_add(o, "nr_dports",
				       json_object_new_int(cxl_port_get_nr_dports(port)));
	if (!cxl_port_is_enabled(port))
		json_object_object_add(o, "state", jstr("disabled"));
	return o;
}

static json_object *dport_json(struct cxl_dport *dport)
{
	json_object *o = json_object_new_object();
	const char *phys = cxl_dport_get_physical_node(dport);

	json_object_object_add(o, "dport", jstr(cxl_dport_get_devname(dport)));
	if (phys)
		json_object_object_add(o, "alias", jstr(phys));
	json_object_object_add(o, "id", json_object_new_int(cxl_dport_get_id(dport)));
	return o;
}

static json_object *memdev_json(struct cxl_memdev *m)
{
	json_object *o = json_object_new_object();
	unsigned long long serial = cxl_memdev_get_serial(m);
	int node = cxl_memdev_get_numa_node(m);

	json_object_object_add(o, "memdev", jstr(cxl_memdev_get_devname(m)));
	add_u64(o, "pmem_size", cxl_memdev_get_pmem_size(m));
	add_u64(o, "ram_size", cxl_memdev_get_ram_size(m));
	if (serial < ULLONG_MAX)
		add_u64(o, "serial", serial);
	if (node >= 0)
		json_object_object_add(o, "numa_node", json_object_new_int(node));
	json_object_object_add(o, "host", jstr(cxl_memdev_get_host(m)));
	if (!cxl_memdev_is_enabled(m))
		json_object_object_add(o, "state", jstr("disabled"));
	return o;
}

static const char *ttype_name(enum cxl_decoder_target_type t)
{
	return t == CXL_DECODER_TTYPE_EXPANDER ? "expander" :
	       t == CXL_DECODER_TTYPE_ACCELERATOR ? "accelerator" : "unknown";
}

/*
 * A decoder as 'cxl list' shows it, plus "port", "locked", "target_type"
 * and "routes_here": whether it decodes towards @via (the dport of the
 * path at its port; for an endpoint's decoders, whether it is active).
 */
static json_object *decoder_json(struct cxl_decoder *d, struct cxl_dport *via)
{
	struct cxl_port *port = cxl_decoder_get_port(d);
	json_object *o = json_object_new_object();
	unsigned long long size = cxl_decoder_get_size(d), res = cxl_decoder_get_resource(d);
	unsigned int ways = cxl_decoder_get_interleave_ways(d);
	struct cxl_region *region = cxl_decoder_get_region(d);
	bool routes = false;

	json_object_object_add(o, "decoder", jstr(cxl_decoder_get_devname(d)));
	json_object_object_add(o, "port", jstr(cxl_port_get_devname(port)));
	if (size && res < ULLONG_MAX)
		add_u64(o, "resource", res);
	if (size && size < ULLONG_MAX)
		add_u64(o, "size", size);
	if (ways < UINT_MAX) {
		json_object_object_add(o, "interleave_ways", json_object_new_int((int)ways));
		if (ways > 1 && cxl_decoder_get_interleave_granularity(d) < UINT_MAX)
			json_object_object_add(o, "interleave_granularity", json_object_new_int(
				(int)cxl_decoder_get_interleave_granularity(d)));
	}
	if (region)
		json_object_object_add(o, "region", jstr(cxl_region_get_devname(region)));
	if (!size)
		json_object_object_add(o, "state", jstr("disabled"));
	json_object_object_add(o, "locked", json_object_new_boolean(cxl_decoder_is_locked(d)));
	json_object_object_add(o, "target_type", jstr(ttype_name(cxl_decoder_get_target_type(d))));
	if (cxl_port_is_endpoint(port)) {
		enum cxl_decoder_mode mode = cxl_decoder_get_mode(d);
		unsigned long long dsize = cxl_decoder_get_dpa_size(d);
		unsigned long long dres = cxl_decoder_get_dpa_resource(d);

		if (dsize && dres < ULLONG_MAX)
			add_u64(o, "dpa_resource", dres);
		if (dsize && dsize < ULLONG_MAX)
			add_u64(o, "dpa_size", dsize);
		if (mode > CXL_DECODER_MODE_NONE)
			json_object_object_add(o, "mode", jstr(cxl_decoder_mode_name(mode)));
		routes = size != 0;
	} else {
		json_object *targets = json_object_new_array();
		struct cxl_target *tg;

		if (cxl_port_is_root(port)) {
			if (cxl_decoder_is_mem_capable(d) &&
			    cxl_decoder_get_max_available_extent(d) < ULLONG_MAX)
				add_u64(o, "max_available_extent",
					cxl_decoder_get_max_available_extent(d));
			if (cxl_decoder_is_mem_capable(d) && cxl_decoder_is_pmem_capable(d))
				json_object_object_add(o, "pmem_capable", json_object_new_boolean(true));
			if (cxl_decoder_is_mem_capable(d) && cxl_decoder_is_volatile_capable(d))
				json_object_object_add(o, "volatile_capable",
						       json_object_new_boolean(true));
			if (cxl_decoder_is_accelmem_capable(d))
				json_object_object_add(o, "accelmem_capable",
						       json_object_new_boolean(true));
		}
		json_object_object_add(o, "nr_targets",
				       json_object_new_int(cxl_decoder_get_nr_targets(d)));
		cxl_target_foreach(d, tg) {
			json_object *jt = json_object_new_object();
			const char *phys = cxl_target_get_physical_node(tg);

			json_object_object_add(jt, "target", jstr(cxl_target_get_devname(tg)));
			if (phys)
				json_object_object_add(jt, "alias", jstr(phys));
			json_object_object_add(jt, "position",
					       json_object_new_int(cxl_target_get_position(tg)));
			add_u64(jt, "id", cxl_target_get_id(tg));
			json_object_array_add(targets, jt);
			if (via && !strcmp(cxl_target_get_devname(tg), cxl_dport_get_devname(via)))
				routes = true;
		}
		json_object_object_add(o, "targets", targets);
	}
	json_object_object_add(o, "routes_here", json_object_new_boolean(routes));
	return o;
}

static json_object *region_json(struct cxl_region *r)
{
	json_object *o = json_object_new_object(), *maps = json_object_new_array();
	struct cxl_memdev_mapping *m;
	unsigned long long v;

	json_object_object_add(o, "region", jstr(cxl_region_get_devname(r)));
	if ((v = cxl_region_get_resource(r)) < ULLONG_MAX)
		add_u64(o, "resource", v);
	if ((v = cxl_region_get_size(r)) < ULLONG_MAX)
		add_u64(o, "size", v);
	if (cxl_region_get_interleave_ways(r) < INT_MAX)
		json_object_object_add(o, "interleave_ways",
				       json_object_new_int((int)cxl_region_get_interleave_ways(r)));
	if (cxl_region_get_interleave_granularity(r) < INT_MAX)
		json_object_object_add(o, "interleave_granularity", json_object_new_int(
			(int)cxl_region_get_interleave_granularity(r)));
	json_object_object_add(o, "decode_state",
			       jstr(cxl_region_decode_is_committed(r) ? "commit" : "reset"));
	if (!cxl_region_is_enabled(r))
		json_object_object_add(o, "state", jstr("disabled"));
	cxl_mapping_foreach(r, m) {
		json_object *jm = json_object_new_object();
		struct cxl_decoder *d = cxl_mapping_get_decoder(m);

		json_object_object_add(jm, "position",
				       json_object_new_int((int)cxl_mapping_get_position(m)));
		if (d && cxl_decoder_get_memdev(d))
			json_object_object_add(jm, "memdev",
					       jstr(cxl_memdev_get_devname(cxl_decoder_get_memdev(d))));
		if (d)
			json_object_object_add(jm, "decoder", jstr(cxl_decoder_get_devname(d)));
		json_object_array_add(maps, jm);
	}
	json_object_object_add(o, "mappings", maps);
	return o;
}

static bool region_maps(struct cxl_region *r, struct cxl_memdev *memdev)
{
	struct cxl_memdev_mapping *m;

	cxl_mapping_foreach(r, m) {
		struct cxl_decoder *d = cxl_mapping_get_decoder(m);

		if (d && cxl_decoder_get_memdev(d) == memdev)
			return true;
	}
	return false;
}

/* ---- memory ranges ---- */

/* A card's memory BARs: libcxl has no accessor for PCI resources; this is the PCI core's file. */
static void pci_bars(const struct target *t, json_object *mem)
{
	char path[PATH_MAX + 16];
	unsigned long long start, end, flags;
	FILE *f;

	if (!t->syspath[0])
		return;
	snprintf(path, sizeof(path), "%s/resource", t->syspath);
	f = fopen(path, "re");
	if (!f)
		return;
	/* Lines 0-5 are the BARs; IORESOURCE_MEM is 0x200. */
	for (int bar = 0; bar < 6 && fscanf(f, "%llx %llx %llx", &start, &end, &flags) == 3; bar++) {
		json_object *r;

		if (!(flags & 0x200) || !end)
			continue;
		r = json_object_new_object();
		json_object_object_add(r, "kind", jstr("pci-bar"));
		json_object_object_add(r, "bar", json_object_new_int(bar));
		add_u64(r, "start", start);
		add_u64(r, "size", end - start + 1);
		json_object_array_add(mem, r);
	}
	fclose(f);
}

static void memdev_ranges(struct cxl_memdev *m, json_object *mem)
{
	unsigned long long ram = cxl_memdev_get_ram_size(m), pmem = cxl_memdev_get_pmem_size(m);
	json_object *r;

	/* Device physical addresses: the volatile partition first, then the persistent one. */
	if (ram) {
		r = json_object_new_object();
		json_object_object_add(r, "kind", jstr("ram"));
		add_u64(r, "dpa_start", 0);
		add_u64(r, "size", ram);
		json_object_array_add(mem, r);
	}
	if (pmem) {
		r = json_object_new_object();
		json_object_object_add(r, "kind", jstr("pmem"));
		add_u64(r, "dpa_start", ram);
		add_u64(r, "size", pmem);
		json_object_array_add(mem, r);
	}
}

/* Host physical ranges the endpoint's committed decoders map. */
static void hpa_ranges(struct cxl_endpoint *ep, json_object *mem)
{
	struct cxl_decoder *d;

	if (!ep)
		return;
	cxl_decoder_foreach(cxl_endpoint_get_port(ep), d) {
		unsigned long long size = cxl_decoder_get_size(d);
		json_object *r;

		if (!size || size == ULLONG_MAX)
			continue;
		r = json_object_new_object();
		json_object_object_add(r, "kind", jstr("hpa"));
		json_object_object_add(r, "decoder", jstr(cxl_decoder_get_devname(d)));
		add_u64(r, "start", cxl_decoder_get_resource(d));
		add_u64(r, "size", size);
		json_object_array_add(mem, r);
	}
}

/* ---- dax ---- */

struct range {
	unsigned long long start, size;
};

/*
 * The dax devices of a target: those whose dax region sits below its
 * device node (a carve-out its driver exports), and those whose memory
 * lies in one of @ranges (a CXL region that maps it).
 */
static json_object *dax_json(struct daxctl_ctx *dctx, const struct target *t,
			     const struct range *ranges, int nranges)
{
	json_object *arr = json_object_new_array();
	struct daxctl_region *reg;

	if (!dctx)
		return arr;
	daxctl_region_foreach(dctx, reg) {
		char real[PATH_MAX];
		const char *rpath = daxctl_region_get_path(reg);
		bool below = false;
		struct daxctl_dev *dev;
		size_t n = strlen(t->syspath);

		if (n && rpath && realpath(rpath, real) && !strncmp(real, t->syspath, n) &&
		    (real[n] == '/' || real[n] == 0))
			below = true;
		daxctl_dev_foreach(reg, dev) {
			unsigned long long res = daxctl_dev_get_resource(dev);
			unsigned long long size = daxctl_dev_get_size(dev);
			bool in_range = false;
			json_object *o;

			if (!size)
				continue;	/* the seed of a region, not a device */
			for (int i = 0; i < nranges; i++)
				if (res >= ranges[i].start && res - ranges[i].start < ranges[i].size)
					in_range = true;
			if (!below && !in_range)
				continue;
			o = json_object_new_object();
			json_object_object_add(o, "chardev", jstr(daxctl_dev_get_devname(dev)));
			add_u64(o, "resource", res);
			add_u64(o, "size", size);
			json_object_object_add(o, "region_id",
					       json_object_new_int(daxctl_region_get_id(reg)));
			json_object_object_add(o, "mode",
					       jstr(daxctl_dev_get_memory(dev) ? "system-ram" : "devdax"));
			json_object_object_add(o, "found_by", jstr(below ? "device-node" : "cxl-region"));
			json_object_array_add(arr, o);
		}
	}
	return arr;
}

/* ---- one target ---- */

static json_object *target_json(struct daxctl_ctx *dctx, struct target *t)
{
	json_object *o = json_object_new_object(), *decs = json_object_new_array();
	json_object *regs = json_object_new_array(), *mem = json_object_new_array();
	json_object *sw = json_object_new_array();
	struct range ranges[64];
	int nranges = 0;

	json_object_object_add(o, "device", jstr(t->name));
	json_object_object_add(o, "kind", jstr(kind_names[t->kind]));
	json_object_object_add(o, "pci", t->pci[0] ? jstr(t->pci) : NULL);
	json_object_object_add(o, "bus", t->bus ? bus_json(t->bus) : NULL);
	/* chain[0] is the bus's root port (its dport: the host bridge), chain[1] the host bridge. */
	json_object_object_add(o, "host_bridge", t->nhops > 1 ?
			       port_json(t->chain[1].port, "port") : NULL);
	if (t->nhops > 0 && t->chain[0].dport)
		json_object_object_add(o, "host_bridge_dport", dport_json(t->chain[0].dport));
	else
		json_object_object_add(o, "host_bridge_dport", NULL);
	json_object_object_add(o, "root_port", t->nhops > 1 && t->chain[1].dport ?
			       dport_json(t->chain[1].dport) : NULL);
	for (int i = 2; i < t->nhops; i++) {
		json_object *s = port_json(t->chain[i].port, "port");

		if (t->chain[i].dport)
			json_object_object_add(s, "dport", dport_json(t->chain[i].dport));
		json_object_array_add(sw, s);
	}
	json_object_object_add(o, "switch_ports", sw);
	json_object_object_add(o, "endpoint", t->endpoint ?
			       port_json(cxl_endpoint_get_port(t->endpoint), "endpoint") : NULL);
	json_object_object_add(o, "memdev", t->memdev ? memdev_json(t->memdev) : NULL);
	if (t->note[0])
		json_object_object_add(o, "note", jstr(t->note));

	if (t->memdev)
		memdev_ranges(t->memdev, mem);
	hpa_ranges(t->endpoint, mem);
	pci_bars(t, mem);
	json_object_object_add(o, "memory", mem);

	/* HDM decoders of every port on the path, then the endpoint's. */
	for (int i = 0; i < t->nhops; i++) {
		struct cxl_decoder *d;

		cxl_decoder_foreach(t->chain[i].port, d) {
			struct cxl_region *r;

			json_object_array_add(decs, decoder_json(d, t->chain[i].dport));
			if (!cxl_port_is_root(t->chain[i].port) || !t->memdev)
				continue;
			cxl_region_foreach(d, r) {
				if (!region_maps(r, t->memdev))
					continue;
				json_object_array_add(regs, region_json(r));
				if (nranges < 64 && cxl_region_get_size(r) &&
				    cxl_region_get_size(r) < ULLONG_MAX) {
					ranges[nranges].start = cxl_region_get_resource(r);
					ranges[nranges].size = cxl_region_get_size(r);
					nranges++;
				}
			}
		}
	}
	if (t->endpoint) {
		struct cxl_decoder *d;

		cxl_decoder_foreach(cxl_endpoint_get_port(t->endpoint), d)
			json_object_array_add(decs, decoder_json(d, NULL));
	}
	json_object_object_add(o, "decoders", decs);
	json_object_object_add(o, "regions", regs);
	json_object_object_add(o, "dax", dax_json(dctx, t, ranges, nranges));
	return o;
}

/* ---- human output ---- */

static const char *js(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) && v ? json_object_get_string(v) : NULL;
}

static unsigned long long ju(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) && v ? json_object_get_uint64(v) : 0;
}

static json_object *jget(json_object *o, const char *k)
{
	json_object *v;

	return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static void print_target(json_object *t)
{
	json_object *bus = jget(t, "bus"), *hb = jget(t, "host_bridge"), *rp = jget(t, "root_port");
	json_object *hbd = jget(t, "host_bridge_dport"), *ep = jget(t, "endpoint");
	json_object *md = jget(t, "memdev"), *arr;
	char sz[32], sz2[32];
	size_t n;

	printf("%s: %s%s%s\n", js(t, "device"), js(t, "kind"), js(t, "pci") ? ", PCI " : "",
	       js(t, "pci") ? js(t, "pci") : "");
	if (bus)
		printf("  bus          %s (%s)\n", js(bus, "bus"), js(bus, "provider"));
	else
		printf("  bus          none\n");
	if (hb)
		printf("  host bridge  %s (%s%s%s)\n", js(hb, "port"), js(hb, "host"),
		       hbd && js(hbd, "alias") ? ", " : "", hbd && js(hbd, "alias") ? js(hbd, "alias") : "");
	if (rp)
		printf("  root port    %s (dport id %llu)\n", js(rp, "dport"), ju(rp, "id"));
	arr = jget(t, "switch_ports");
	for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
		json_object *s = json_object_array_get_idx(arr, i), *d = jget(s, "dport");

		printf("  switch port  %s (%s) via %s\n", js(s, "port"), js(s, "host"),
		       d ? js(d, "dport") : "?");
	}
	if (ep)
		printf("  endpoint     %s (%s)\n", js(ep, "endpoint"), js(ep, "host"));
	else
		printf("  endpoint     none\n");
	if (md)
		printf("  memdev       %s: ram %s, pmem %s\n", js(md, "memdev"),
		       ctl_size(ju(md, "ram_size"), sz, sizeof(sz)),
		       ctl_size(ju(md, "pmem_size"), sz2, sizeof(sz2)));
	if (js(t, "note"))
		printf("  note         %s\n", js(t, "note"));
	arr = jget(t, "memory");
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *r = json_object_array_get_idx(arr, i);
		const char *k = js(r, "kind");

		printf("  %-12s ", i ? "" : "memory");
		if (!strcmp(k, "pci-bar"))
			printf("BAR%llu 0x%llx, %s\n", ju(r, "bar"), ju(r, "start"),
			       ctl_size(ju(r, "size"), sz, sizeof(sz)));
		else if (!strcmp(k, "hpa"))
			printf("HPA 0x%llx, %s (%s)\n", ju(r, "start"),
			       ctl_size(ju(r, "size"), sz, sizeof(sz)), js(r, "decoder"));
		else
			printf("%s DPA 0x%llx, %s\n", k, ju(r, "dpa_start"),
			       ctl_size(ju(r, "size"), sz, sizeof(sz)));
	}
	if (!n)
		printf("  memory       none\n");
	arr = jget(t, "decoders");
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(arr, i);

		printf("  %-12s %s (%s): ", i ? "" : "decoders", js(d, "decoder"), js(d, "port"));
		if (js(d, "state"))
			printf("disabled");
		else
			printf("0x%llx, %s, %llu-way", ju(d, "resource"),
			       ctl_size(ju(d, "size"), sz, sizeof(sz)), ju(d, "interleave_ways"));
		if (js(d, "mode"))
			printf(", %s", js(d, "mode"));
		if (js(d, "region"))
			printf(", %s", js(d, "region"));
		printf("%s\n", json_object_get_boolean(jget(d, "routes_here")) ? ", routes here" : "");
	}
	if (!n)
		printf("  decoders     none\n");
	arr = jget(t, "regions");
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *r = json_object_array_get_idx(arr, i);

		printf("  %-12s %s: 0x%llx, %s, %s\n", i ? "" : "regions", js(r, "region"),
		       ju(r, "resource"), ctl_size(ju(r, "size"), sz, sizeof(sz)),
		       js(r, "decode_state"));
	}
	if (!n)
		printf("  regions      none\n");
	arr = jget(t, "dax");
	n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *d = json_object_array_get_idx(arr, i);

		printf("  %-12s %s: 0x%llx, %s, %s\n", i ? "" : "dax", js(d, "chardev"),
		       ju(d, "resource"), ctl_size(ju(d, "size"), sz, sizeof(sz)), js(d, "mode"));
	}
	if (!n)
		printf("  dax          none\n");
}

/* libcxl and libdaxctl log to stderr by default; their messages are not ours to print. */
static void quiet_log(struct cxl_ctx *ctx, int priority, const char *file, int line,
		      const char *fn, const char *format, va_list args)
{
	(void)ctx, (void)priority, (void)file, (void)line, (void)fn, (void)format, (void)args;
}

static void quiet_dax_log(struct daxctl_ctx *ctx, int priority, const char *file, int line,
			  const char *fn, const char *format, va_list args)
{
	(void)ctx, (void)priority, (void)file, (void)line, (void)fn, (void)format, (void)args;
}

static int add_card_targets(struct cxl_ctx *ctx, struct target **ts, int *n)
{
	struct dirent **ents;
	int m = scandir("/sys/class/nelssa_pnm", &ents, NULL, versionsort);

	for (int i = 0; i < m; i++) {
		if (ents[i]->d_name[0] != '.') {
			struct target *t = realloc(*ts, (size_t)(*n + 1) * sizeof(**ts));

			if (t) {
				*ts = t;
				if (!card_target(ctx, ents[i]->d_name, &t[*n])) {
					char dev[PATH_MAX];

					snprintf(dev, sizeof(dev), "/dev/%s", ents[i]->d_name);
					snprintf(t[*n].name, sizeof(t[*n].name), "%s", dev);
					(*n)++;
				}
			}
		}
		free(ents[i]);
	}
	if (m >= 0)
		free(ents);
	return 0;
}

int cmd_topology(struct ctl *ctl, int argc, char **argv)
{
	static const char no_bus[] = "no CXL bus on this machine";
	int idx = topology_args(ctl, argc, argv), ret = EXIT_OK, n = 0;
	struct daxctl_ctx *dctx = NULL;
	struct target *ts = NULL;
	struct cxl_ctx *ctx;
	struct cxl_bus *bus;
	json_object *root, *buses, *devs;

	if (idx < 0)
		return idx == -1 ? EXIT_OK : EXIT_USAGE;
	ret = cxl_new(&ctx);
	if (ret) {
		fprintf(stderr, "nelssactl topology: libcxl: cannot start (%s)\n", strerror(-ret));
		return EXIT_FAIL;
	}
	cxl_set_log_fn(ctx, quiet_log);
	if (!cxl_bus_get_first(ctx)) {
		if (ctl->json) {
			root = json_object_new_object();
			json_object_object_add(root, "cxl_bus", json_object_new_boolean(false));
			json_object_object_add(root, "message", jstr(no_bus));
			json_object_object_add(root, "buses", json_object_new_array());
			json_object_object_add(root, "devices", json_object_new_array());
			ctl_print_json(root);
		} else {
			printf("%s\n", no_bus);
		}
		cxl_unref(ctx);
		return EXIT_OK;
	}
	if (daxctl_new(&dctx) == 0)
		daxctl_set_log_fn(dctx, quiet_dax_log);
	else
		dctx = NULL;

	if (idx < argc) {
		ts = calloc(1, sizeof(*ts));
		if (!ts || named_target(ctx, argv[idx], ts)) {
			fprintf(stderr, "nelssactl topology: %s: no such card, CXL memdev or PCI device\n",
				argv[idx]);
			ret = EXIT_DEVICE;
			goto out;
		}
		n = 1;
	} else {
		struct cxl_memdev *m;

		add_card_targets(ctx, &ts, &n);
		cxl_memdev_foreach(ctx, m) {
			struct target *t;
			bool seen = false;

			for (int i = 0; i < n; i++)
				seen |= ts[i].memdev == m;
			if (seen || !(t = realloc(ts, (size_t)(n + 1) * sizeof(*ts))))
				continue;
			ts = t;
			memdev_target(m, &ts[n++]);
		}
	}

	root = json_object_new_object();
	buses = json_object_new_array();
	devs = json_object_new_array();
	cxl_bus_foreach(ctx, bus)
		json_object_array_add(buses, bus_json(bus));
	for (int i = 0; i < n; i++) {
		resolve_chain(ctx, &ts[i]);
		json_object_array_add(devs, target_json(dctx, &ts[i]));
	}
	json_object_object_add(root, "cxl_bus", json_object_new_boolean(true));
	json_object_object_add(root, "buses", buses);
	json_object_object_add(root, "devices", devs);
	if (ctl->json) {
		ctl_print_json(root);
	} else {
		for (int i = 0; i < n; i++)
			print_target(json_object_array_get_idx(devs, (size_t)i));
		if (!n)
			printf("CXL bus present; no NELSSA card and no CXL memory device\n");
		json_object_put(root);
	}
out:
	free(ts);
	daxctl_unref(dctx);
	cxl_unref(ctx);
	return ret;
}

#endif /* NELSSA_HAVE_LIBCXL */
