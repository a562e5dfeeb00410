// SPDX-License-Identifier: GPL-2.0-only
/*
 * DOC: io_uring
 *
 * IORING_OP_URING_CMD with cmd_op = NPNM_IOC_EXEC submits one command per
 * SQE; the 16-byte struct npnm_exec sits in the SQE's command area, which
 * is user-writable ring memory, so it is read once and checked before
 * anything else.  The command completes asynchronously: the completion
 * path hands it to task work, which posts the CQE with res = 0 or -errno
 * and res2 = device status | device ns << 16 (seen with IORING_SETUP_CQE32).
 * Commands always complete -- by the device, their deadline or an abort --
 * and a dying process's commands that have not started are aborted when
 * its file table closes the device (npnm_flush()), so an exiting task
 * waits in io_uring's cancellation only for commands already running.
 *
 * Unknown cmd_op: -ENOTTY.  IOPOLL rings are refused (-EOPNOTSUPP): the
 * completion comes from the device's interrupt, not from polling.  CQE32
 * is optional: without it the status is lost but res still says 0 or
 * -errno.  sqe->cmd_op's high bits, the command area past struct
 * npnm_exec (with SQE128) and struct npnm_exec's own flags and status
 * must be zero.
 */
#include <linux/fs.h>
#include <linux/uaccess.h>

#include "npnm.h"
#include "compat.h"

/* The kcmd rides in the command's per-request storage. */
struct npnm_uring_pdu {
	struct npnm_kcmd *kc;
};

static void npnm_uring_task_done(NPNM_URING_TW_ARGS)
{
	struct npnm_uring_pdu *pdu = (struct npnm_uring_pdu *)ioucmd->pdu;
	struct npnm_kcmd *kc = pdu->kc;
	u64 res2 = (u64)(kc->comp.status & 0xffff) | (kc->comp.device_ns << 16);
	s32 ret = kc->comp.result;

	npnm_kcmd_put(kc);
	npnm_uring_done(ioucmd, ret, res2, issue_flags);
}

void npnm_uring_attach(struct io_uring_cmd *ioucmd, struct npnm_kcmd *kc)
{
	((struct npnm_uring_pdu *)ioucmd->pdu)->kc = kc;
}

void npnm_uring_complete(struct npnm_kcmd *kc)
{
	io_uring_cmd_complete_in_task(kc->ioucmd, npnm_uring_task_done);
}

int npnm_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags)
{
	struct npnm_context *ctx = ioucmd->file->private_data;
	const struct npnm_exec *uex = npnm_uring_payload(ioucmd);
	struct npnm_exec ex;
	struct npnm_cmd c;
	int ret;

	BUILD_BUG_ON(sizeof(struct npnm_uring_pdu) > sizeof(ioucmd->pdu));
	if (ioucmd->cmd_op != NPNM_IOC_EXEC)
		return -ENOTTY;
	if (issue_flags & IO_URING_F_IOPOLL)
		return -EOPNOTSUPP;
	ex.cmd_ptr = READ_ONCE(uex->cmd_ptr);
	ex.flags = READ_ONCE(uex->flags);
	ex.status = READ_ONCE(uex->status);
	if (ex.flags || ex.status)
		return -EINVAL;
	/* With 128-byte SQEs the rest of the command area must be zero too. */
	if ((issue_flags & IO_URING_F_SQE128) &&
	    memchr_inv((const u8 *)uex + sizeof(ex), 0, 80 - sizeof(ex)))
		return -EINVAL;
	if (copy_from_user(&c, u64_to_user_ptr(ex.cmd_ptr), sizeof(c)))
		return -EFAULT;
	ret = npnm_cmd_submit(ctx, &c, NPNM_KCMD_URING, ioucmd, NULL, NULL);
	if (ret)
		return ret;
	/* From here the completion path owns the CQE; kc may already be done. */
	return -EIOCBQUEUED;
}
