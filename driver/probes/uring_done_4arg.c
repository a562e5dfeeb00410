// SPDX-License-Identifier: GPL-2.0-only
/* Probe: io_uring_cmd_done(cmd, ret, res2, issue_flags), as in 6.1.y stable. */
#include <linux/io_uring.h>

void npnm_probe(struct io_uring_cmd *c);
void npnm_probe(struct io_uring_cmd *c)
{
	io_uring_cmd_done(c, 0, 0, 0);
}
