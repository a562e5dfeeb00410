// SPDX-License-Identifier: GPL-2.0-only
/* Probe: struct io_uring_cmd has ->sqe rather than ->cmd (Linux 6.4 and later). */
#include <linux/io_uring.h>

const void *npnm_probe(struct io_uring_cmd *c);
const void *npnm_probe(struct io_uring_cmd *c)
{
	return c->sqe;
}
