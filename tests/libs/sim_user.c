// SPDX-License-Identifier: MIT
/*
 * A program on libnelssa alone: opens the device its argument names and
 * prints its backend, or the library's words and exit status 3.  The
 * libraries' test runs it with and without libnelssa-sim beside it.
 */
#include <stdio.h>
#include <string.h>

#include <nelssa/pnm.h>

int main(int argc, char **argv)
{
	struct nelssa_pnm *pnm;
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: sim_user DEVICE\n");
		return 2;
	}
	ret = nelssa_pnm_open(argv[1], &pnm);
	if (ret) {
		printf("error %d: %s\n", ret, nelssa_pnm_strerror());
		return 3;
	}
	printf("backend %s\n", nelssa_pnm_backend(pnm));
	nelssa_pnm_close(pnm);
	return 0;
}
