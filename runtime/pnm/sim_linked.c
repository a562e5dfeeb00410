// SPDX-License-Identifier: MIT
/*
 * The sim backend for programs that link it in: the static build of the
 * PNM User Library (tests, the fuzzers), where there is nothing to load.
 */
#include "pnm_internal.h"

const struct pnm_backend_ops *pnm_sim_find(void)
{
	return npnm_sim_backend(NELSSA_VERSION_STRING);
}
