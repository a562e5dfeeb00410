/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * nelssa_pnm internals: devices, contexts, regions and in-flight commands.
 *
 * DOC: object model
 *
 * A &struct npnm_device is one PNM card (today: an in-kernel mock).  Every
 * open() of its character device creates a &struct npnm_context, which owns
 * the device-memory regions it allocates (&struct npnm_region, named by a
 * per-context handle) and the commands it submits (&struct npnm_kcmd).
 * Commands reach the hardware through &struct npnm_backend_ops, after every
 * operand has been checked against the context and translated from
 * (handle, offset) to a device offset.  Every command completes exactly
 * once, through npnm_cmd_complete(): by the backend, by the watchdog
 * (NPNM_ST_TIMEOUT), or by an abort (NPNM_ST_ABORTED).
 */
#ifndef NPNM_H
#define NPNM_H

#include <linux/atomic.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/bits.h>
#include <linux/genalloc.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include <linux/nelssa_pnm.h>

/* mmap offsets: region handle h maps at h * NPNM_MMAP_STRIDE. */
#define NPNM_MMAP_STRIDE	BIT_ULL(36)
#define NPNM_MAX_BATCH		256
#define NPNM_MAX_INFLIGHT	1024

struct io_uring_cmd;
struct npnm_device;
struct npnm_kcmd;

/**
 * enum npnm_state - device state, shown in sysfs.
 * @NPNM_STATE_LIVE: accepting commands.
 * @NPNM_STATE_FAILED: a command timed out or the device reported an error;
 *	new commands fail with -EIO until a reset.
 */
enum npnm_state {
	NPNM_STATE_LIVE,
	NPNM_STATE_FAILED,
};

/**
 * struct npnm_backend_ops - what a hardware backend provides.
 * @name: backend name, shown in sysfs.
 * @submit: start a validated, resolved command; the backend calls
 *	npnm_cmd_complete() exactly once when it is done with it, from any
 *	context that may sleep, and then drops its reference.
 * @reset: bring a failed device back; called with no command in flight.
 * @pfn: page frame of device-memory offset @off, for backends whose memory
 *	is not struct-page memory (a PCI BAR); NULL: use ndev->mem's pages.
 */
struct npnm_backend_ops {
	const char *name;
	void (*submit)(struct npnm_device *ndev, struct npnm_kcmd *kc);
	int (*reset)(struct npnm_device *ndev);
	unsigned long (*pfn)(struct npnm_device *ndev, u64 off);
};

/**
 * struct npnm_device - one PNM device.
 * @cdev: the character device /dev/nelssa_pnm<id>.
 * @dev: its device in class nelssa_pnm (sysfs attributes live here).
 * @name: "nelssa_pnm<id>".
 * @id: device index.
 * @ops: hardware backend.
 * @priv: backend data.
 * @mem: kernel mapping of device memory.
 * @mem_size: bytes of device memory.
 * @mem_avail: bytes the region allocator manages.
 * @fw_version: firmware interface version, 0 without firmware.
 * @pool: allocator of device-memory offsets (never hands out offset 0).
 * @nr_cores: compute cores reported to userspace.
 * @opcodes: opcodes the backend executes (bit per opcode).
 * @caps: NPNM_CAP_* bits.
 * @kv_dtypes: KV element types the backend handles (bit per type).
 * @max_head_dim: largest head dimension of KV_WRITE/SPARSE_ATTN.
 * @max_group: largest GQA group of SPARSE_ATTN (0: the backend runs no attention).
 * @lock: protects @inflight and @state.
 * @inflight: commands handed to the backend, oldest first.
 * @ctx_lock: protects @contexts; held across a reset.
 * @contexts: open contexts.
 * @state: enum npnm_state.
 * @watchdog: expires commands running longer than their timeout.
 * @debugfs: the device's debugfs directory.
 * @submitted: statistics, see sysfs.
 * @completed: statistics.
 * @failed: statistics (any status other than NPNM_ST_OK).
 * @timeouts: statistics.
 * @resets: statistics (successful resets).
 */
struct npnm_device {
	struct cdev cdev;
	struct device *dev;
	char name[32];
	int id;
	const struct npnm_backend_ops *ops;
	void *priv;
	void *mem;
	u64 mem_size;
	u64 mem_avail;
	u32 fw_version;
	struct gen_pool *pool;
	u32 nr_cores;
	u64 opcodes;
	u64 caps;
	u32 kv_dtypes;
	u16 max_head_dim;
	u16 max_group;
	spinlock_t lock;		/* inflight, state */
	struct list_head inflight;
	struct mutex ctx_lock;		/* contexts */
	struct list_head contexts;
	enum npnm_state state;
	struct delayed_work watchdog;
	struct dentry *debugfs;
	atomic64_t submitted, completed, failed, timeouts, resets;
};

/**
 * struct npnm_region - a device-memory region of one context.
 * @ref: one for the handle, one per mapping, one per command using it; the
 *	memory returns to the pool with the last one.
 * @ndev: its device.
 * @handle: name within the owning context (0 once freed).
 * @dev_off: offset in device memory.
 * @size: bytes.
 * @busy: commands queued or running on it (under the context lock).
 * @revoked: a reset took the memory away; faults raise SIGBUS.
 */
struct npnm_region {
	struct kref ref;
	struct npnm_device *ndev;
	u32 handle;
	u64 dev_off;
	u64 size;
	unsigned int busy;
	bool revoked;
};

/**
 * struct npnm_context - one open file.
 * @ndev: the device.
 * @lock: protects @regions, the completion queue and counters.
 * @regions: handle -> region.
 * @next_handle: handles only grow, so a stale handle never names a new region.
 * @cq: completed ioctl-submitted commands, waiting for NPNM_IOC_WAIT.
 * @cq_wait: woken on every completion.
 * @inflight: commands submitted and not yet completed.
 * @next_seqno: sequence number of the next command.
 * @node: on the device's context list.
 * @mapping: the file's address space, for revoking mappings on reset.
 */
struct npnm_context {
	struct npnm_device *ndev;
	struct list_head node;
	struct address_space *mapping;
	struct mutex lock;		/* regions, cq, counters */
	struct xarray regions;
	u32 next_handle;
	struct list_head cq;
	wait_queue_head_t cq_wait;
	u32 inflight;
	u64 next_seqno;
};

/**
 * enum npnm_kcmd_kind - how a command was submitted.
 * @NPNM_KCMD_QUEUED: NPNM_IOC_SUBMIT; reaped with NPNM_IOC_WAIT.
 * @NPNM_KCMD_SYNC: NPNM_IOC_EXEC; the ioctl waits for it.
 * @NPNM_KCMD_URING: IORING_OP_URING_CMD; completes in a CQE.
 */
enum npnm_kcmd_kind {
	NPNM_KCMD_QUEUED,
	NPNM_KCMD_SYNC,
	NPNM_KCMD_URING,
};

/**
 * struct npnm_kcmd - a command from submission to completion.
 * @node: on the device's inflight list while the backend has it.
 * @cq_node: on the context's completion queue once complete.
 * @ref: one for the backend, one for the completion path; the regions are
 *	released with the last, so a command the watchdog expired cannot reach
 *	memory that was already handed to someone else.
 * @done: set once by whoever completes the command.
 * @ctx: submitting context.
 * @desc: the device's copy: operands resolved to device offsets.
 * @regions: regions the operands name, each holding a reference.
 * @deadline: jiffies after which the watchdog expires the command.
 * @t_start: ktime when the backend got it.
 * @kind: where the completion goes: the context's queue (NPNM_KCMD_QUEUED),
 *	a waiting NPNM_IOC_EXEC (NPNM_KCMD_SYNC) or an io_uring CQE
 *	(NPNM_KCMD_URING).
 * @sync_done: what NPNM_IOC_EXEC waits on; it lives here, not on the
 *	waiter's stack, so a waiter killed early leaves nothing dangling.
 * @ioucmd: the io_uring command of an NPNM_KCMD_URING command.
 * @work: backend-private (the mock's worker item).
 * @be_node: backend-private (the PCI backend's backlog).
 * @comp: the completion record.
 */
struct npnm_kcmd {
	struct list_head node;
	struct list_head cq_node;
	struct kref ref;
	atomic_t done;
	struct npnm_context *ctx;
	struct npnm_cmd desc;
	struct npnm_region *regions[NPNM_CMD_MAX_OPERANDS];
	unsigned long deadline;
	ktime_t t_start;
	enum npnm_kcmd_kind kind;
	struct completion sync_done;
	struct io_uring_cmd *ioucmd;
	struct work_struct work;
	struct list_head be_node;
	struct npnm_completion comp;
};

extern unsigned int npnm_timeout_ms;

/* main.c */
int npnm_id_alloc(void);
void npnm_id_free(int id);
int npnm_device_register(struct npnm_device *ndev);
void npnm_device_unregister(struct npnm_device *ndev);

/* context.c */
extern const struct file_operations npnm_fops;
struct npnm_region *npnm_region_get(struct npnm_context *ctx, u32 handle);
void npnm_region_put(struct npnm_region *r);
int npnm_mem_alloc(struct npnm_context *ctx, struct npnm_mem_alloc *ma);
int npnm_mem_free(struct npnm_context *ctx, u32 handle);

/* ioctl.c */
long npnm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);

/* cmd.c */
int npnm_cmd_submit(struct npnm_context *ctx, const struct npnm_cmd *uc,
		    enum npnm_kcmd_kind kind, struct io_uring_cmd *ioucmd,
		    struct npnm_kcmd **out);
void npnm_cmd_complete(struct npnm_kcmd *kc, u32 status, u32 detail);
void npnm_kcmd_put(struct npnm_kcmd *kc);
void npnm_watchdog_fn(struct work_struct *work);
int npnm_device_reset(struct npnm_device *ndev);
void npnm_device_fail(struct npnm_device *ndev, const char *why);

/* uring.c */
int npnm_uring_cmd(struct io_uring_cmd *ioucmd, unsigned int issue_flags);
void npnm_uring_attach(struct io_uring_cmd *ioucmd, struct npnm_kcmd *kc);
void npnm_uring_complete(struct npnm_kcmd *kc);

/* mock.c */
int npnm_mock_create(int id, u64 mem_bytes, struct npnm_device **out);
void npnm_mock_destroy(struct npnm_device *ndev);

/* debugfs.c */
void npnm_debugfs_add(struct npnm_device *ndev);
void npnm_debugfs_remove(struct npnm_device *ndev);
void npnm_debugfs_exit(void);

/* pci.c */
extern struct pci_driver npnm_pci_driver;

/* sysfs.c */
extern const struct attribute_group *npnm_groups[];

#endif /* NPNM_H */
