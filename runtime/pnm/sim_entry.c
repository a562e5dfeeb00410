// SPDX-License-Identifier: MIT
/*
 * The sim backend's entry point, the one symbol libnelssa-sim exports.
 * The ops table is private to this build, so a library from another
 * version refuses rather than run with a table of another shape.
 */
#include <string.h>

#include "sim.h"

const struct pnm_backend_ops *npnm_sim_backend(const char *version)
{
	if (!version || strcmp(version, NELSSA_VERSION_STRING))
		return NULL;
	return &pnm_sim_ops;
}
