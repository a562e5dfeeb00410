/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Kernel API differences, decided by feature probes (scripts/kernel-probe.sh
 * writes compat_generated.h), never by version numbers: Debian's 6.1.192
 * carries backports that v6.1.0 lacks.
 */
#ifndef NPNM_COMPAT_H
#define NPNM_COMPAT_H

#include "compat_generated.h"

#if NPNM_HAVE_IO_URING_CMD_H
#include <linux/io_uring/cmd.h>
#else
#include <linux/io_uring.h>
#endif

/* The command area of the SQE (16 bytes, or 80 with IORING_SETUP_SQE128). */
static inline const void *npnm_uring_payload(struct io_uring_cmd *cmd)
{
#if NPNM_HAVE_URING_CMD_SQE
	return io_uring_sqe_cmd(cmd->sqe);
#else
	return cmd->cmd;
#endif
}

#if NPNM_HAVE_URING_DONE_4ARG && NPNM_HAVE_URING_TW_FLAGS
#define npnm_uring_done(cmd, ret, res2, flags) io_uring_cmd_done(cmd, ret, res2, flags)
#define NPNM_URING_TW_ARGS struct io_uring_cmd *ioucmd, unsigned int issue_flags
#else
#error "this kernel's io_uring_cmd_done()/task-work API is not supported yet: extend compat.h"
#endif

/* Class devnode callbacks got a const device in 6.2. */
#if NPNM_HAVE_CLASS_DEVNODE_CONST
#define NPNM_DEVNODE_CONST const
#else
#define NPNM_DEVNODE_CONST
#endif

#endif /* NPNM_COMPAT_H */
