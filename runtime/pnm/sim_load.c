// SPDX-License-Identifier: MIT
/*
 * The sim backend for libnelssa.so: found in the program when it linked
 * libnelssa-sim, else loaded on the first sim: device.  A program that only
 * opens /dev/nelssa_pnm* never maps the firmware or its ISA kernels.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pnm_internal.h"

typedef const struct pnm_backend_ops *(*sim_entry_fn)(const char *version);

static pthread_once_t sim_once = PTHREAD_ONCE_INIT;
static const struct pnm_backend_ops *sim_ops;
static char sim_why[512];

/*
 * The directory this library was loaded from comes first: the build tree
 * and an installed prefix both keep the two libraries side by side, and
 * the program's own search path may not name that directory.
 */
static void *open_beside_us(void)
{
	char path[4096];
	const char *slash;
	Dl_info info;
	int n;

	if (!dladdr((void *)pnm_sim_find, &info) || !info.dli_fname)
		return NULL;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		return NULL;
	n = snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
		     NELSSA_SIM_SONAME);
	if (n < 0 || (size_t)n >= sizeof(path))
		return NULL;
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void sim_load(void)
{
	sim_entry_fn entry;
	void *lib;

	entry = (sim_entry_fn)dlsym(RTLD_DEFAULT, "npnm_sim_backend");
	if (!entry) {
		/* Never closed: devices and their threads outlive any one open. */
		lib = open_beside_us();
		if (!lib)
			lib = dlopen(NELSSA_SIM_SONAME, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(sim_why, sizeof(sim_why), "%s", dlerror());
			return;
		}
		entry = (sim_entry_fn)dlsym(lib, "npnm_sim_backend");
		if (!entry) {
			snprintf(sim_why, sizeof(sim_why), "%s", dlerror());
			return;
		}
	}
	sim_ops = entry(NELSSA_VERSION_STRING);
	if (!sim_ops)
		snprintf(sim_why, sizeof(sim_why), "it is not from libnelssa %s's build",
			 NELSSA_VERSION_STRING);
}

const struct pnm_backend_ops *pnm_sim_find(void)
{
	pthread_once(&sim_once, sim_load);
	if (!sim_ops)
		npnm_priv_error(-ENODEV,
				"sim devices need %s (the embedded device and its firmware): %s; install it or link -lnelssa-sim",
				NELSSA_SIM_SONAME, sim_why);
	return sim_ops;
}
