// SPDX-License-Identifier: GPL-2.0-only
/* Probe: task-work callbacks take (cmd, issue_flags), as in 6.1.y stable. */
#include <linux/io_uring.h>

static void npnm_cb(struct io_uring_cmd *c, unsigned int issue_flags)
{
}

void npnm_probe(struct io_uring_cmd *c);
void npnm_probe(struct io_uring_cmd *c)
{
	io_uring_cmd_complete_in_task(c, npnm_cb);
}
