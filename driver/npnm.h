/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * nelssa_pnm internals: devices, contexts, regions and in-flight commands.
 *
 * DOC: object model
 *
 * A &struct npnm_device is one PNM card: a PCI function or an in-kernel
 * mock.  It embeds its &struct device, whose release frees it, so it lives
 * as long as anything points at it: every open context holds a reference.
 * Every open() of its character device creates a &struct npnm_context,
 * which owns the device-memory regions it allocates (&struct npnm_region,
 * named by a per-context handle) and the commands it submits (&struct
 * npnm_kcmd).  A command holds a reference on its context and on every
 * region it names, so neither can go while a backend still works on it.
 *
 * Commands reach the hardware through &struct npnm_backend_ops, after every
 * operand has been checked against the context and translated from
 * (handle, offset) to a device offset.  Every command completes exactly
 * once, through npnm_cmd_complete(): by the backend, by its own deadline
 * (NPNM_ST_TIMEOUT), by an abort (NPNM_ST_ABORTED) or by a device failure
 * (NPNM_ST_DEVICE_ERROR).  Completion and the backend letting go are two
 * events: a command that completed while the device still runs it stays
 * on the device's list, *quarantined*, until the backend reports it.
 *
 * The backend and the device memory are reached only inside an SRCU read
 * section that first checks the device is not gone; removal marks it gone
 * and waits for those sections, so after npnm_device_unregister() nothing
 * calls the backend or touches its memory any more.
 *
 * Lock order: &npnm_device.reset_lock > &npnm_device.ctx_lock >
 * &npnm_context.lock > &npnm_device.lock > &npnm_context.cq_lock.
 * Backends complete commands without holding a lock of their own.
 */
#ifndef NPNM_H
#define NPNM_H

#include <linux/atomic.h>
#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/bits.h>
#include <linux/fs.h>
#include <linux/genalloc.h>
#include <linux/ioport.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/srcu.h>
#include <linux/uidgid.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include <linux/nelssa_pnm.h>

/* mmap offsets: region handle h maps at h * NPNM_MMAP_STRIDE. */
#define NPNM_MMAP_STRIDE	BIT_ULL(36)
#define NPNM_MAX_BATCH		256
#define NPNM_MAX_INFLIGHT	1024

struct io_uring_cmd;
struct platform_device;
struct npnm_device;
struct npnm_kcmd;

/**
 * enum npnm_state - device state, shown in sysfs ``state``.
 * @NPNM_STATE_LIVE: accepting commands.
 * @NPNM_STATE_FAILED: the device watchdog fired, the heartbeat was lost or
 *	the device reported garbage; new commands fail with -EIO until a
 *	reset.
 * @NPNM_STATE_RESETTING: a reset is under way; new commands fail with -EIO.
 * @NPNM_STATE_GONE: removed (hot-unplug, module unload); every call on a
 *	context that is still open fails with -ENXIO.
 */
enum npnm_state {
	NPNM_STATE_LIVE,
	NPNM_STATE_FAILED,
	NPNM_STATE_RESETTING,
	NPNM_STATE_GONE,
};

/**
 * struct npnm_backend_ops - what a hardware backend provides.
 * @name: backend name, shown in sysfs.
 * @cmd_size: bytes of backend-private state per command, see
 *	npnm_kcmd_priv().
 * @submit: start a validated, resolved command.  The backend calls
 *	npnm_cmd_started() when the device begins running it,
 *	npnm_cmd_complete() when the device reports it and then
 *	npnm_cmd_release() to let go of it, all from contexts that may sleep.
 * @cancel: take back a command the device has not started: returns true
 *	when the backend dropped it (it will never run, and the backend has
 *	called or will call npnm_cmd_release()), false when it is already
 *	running and cannot be stopped.
 * @reset: bring the device back to a known state and let go of every
 *	command it holds (each already completed by the core).
 * @pfn: page frame of device-memory offset @off, for backends whose memory
 *	is not struct-page memory (a PCI BAR); NULL: use ndev->mem's pages.
 */
struct npnm_backend_ops {
	const char *name;
	size_t cmd_size;
	void (*submit)(struct npnm_device *ndev, struct npnm_kcmd *kc);
	bool (*cancel)(struct npnm_device *ndev, struct npnm_kcmd *kc);
	int (*reset)(struct npnm_device *ndev);
	unsigned long (*pfn)(struct npnm_device *ndev, u64 off);
};

/**
 * struct npnm_dax - the device-dax carve-out of a card's memory (dax.c).
 * @off: offset of the carve-out in device memory.
 * @size: its bytes; 0 without a carve-out.
 * @phys: its host physical address.
 * @node: NUMA node of its memory, the dax region's target node.
 * @res: its iomem resource, under the card's memory window.
 * @region_id: memregion id of the dax region; -1 while not exported.
 * @pdev: the platform device the dax region hangs from, while exported.
 * @name: the dax device, "daxX.0", or "" while not exported.
 * @lock: protects @region_id and @name changes, @online_pages,
 *	@onlining, @windows and @dying.
 * @online_pages: pages of the carve-out online as System RAM.
 * @onlining: the memory notifier let an onlining of carve-out memory start.
 * @windows: DAX windows (NPNM_MEM_F_DAX regions) of any context.
 * @dying: removal has begun: no onlining, no new window.
 * @node_list: on the list of exported carve-outs the memory notifier watches.
 */
struct npnm_dax {
	u64 off;
	u64 size;
	phys_addr_t phys;
	int node;
	struct resource res;
	int region_id;
	struct platform_device *pdev;
	char name[24];
	struct mutex lock;		/* see above */
	unsigned long online_pages;
	bool onlining;
	u32 windows;
	bool dying;
	struct list_head node_list;
};

/**
 * struct npnm_usage - what a tenant (uid) holds on one device.
 * @regions: regions whose memory is not back in the pool.
 * @bytes: their bytes.
 */
struct npnm_usage {
	u32 regions;
	u64 bytes;
};

/**
 * struct npnm_device - one PNM device.
 * @dev: its device in class nelssa_pnm; the release frees the structure.
 * @cdev: the character device /dev/nelssa_pnm<id>.
 * @name: "nelssa_pnm<id>".
 * @id: device index.
 * @srcu: read side of every use of @ops, @priv and @mem.
 * @ops: hardware backend; used only inside @srcu while not gone.
 * @priv: backend data.
 * @mem: kernel mapping of device memory.
 * @mem_size: bytes of device memory.
 * @mem_avail: bytes the region allocator manages (less a dax carve-out).
 * @fw_version: firmware interface version, 0 without firmware.
 * @pool: allocator of device-memory offsets (never hands out offset 0);
 *	destroyed with the device, after the last region went back.
 * @nr_cores: compute cores reported to userspace.
 * @opcodes: opcodes the backend executes (bit per opcode).
 * @caps: NPNM_CAP_* bits.
 * @kv_dtypes: KV element types the backend handles (bit per type).
 * @max_head_dim: largest head dimension of KV_WRITE/SPARSE_ATTN.
 * @max_group: largest GQA group of SPARSE_ATTN (0: the backend runs no attention).
 * @attn_flags: NPNM_ATTN_F_* bits SPARSE_ATTN accepts.
 * @lock: protects @inflight, @state, @epoch, @progress, @hold, @held and the
 *	watchdog's arming.
 * @inflight: commands from submission until the backend lets go, oldest
 *	first (completed ones among them are quarantined).
 * @state: enum npnm_state.
 * @epoch: bumped whenever every mapping is revoked (reset, failure,
 *	removal); a region from an older epoch is stale.
 * @progress: jiffies when the device last reported a started command.
 * @hold: test control (debugfs ``hold``): accept commands but keep them
 *	from the backend, so they stay queued until released.
 * @held: commands accepted while @hold was set, not given to the backend.
 * @wd_armed: the watchdog is queued to run at @wd_when.
 * @wd_when: jiffies of the next watchdog run.
 * @watchdog: expires commands past their deadline and fails a device
 *	that ran one command longer than the admin's watchdog.
 * @reset_lock: serialises resets and removal.
 * @ctx_lock: protects @contexts.
 * @contexts: open contexts.
 * @usage: uid -> &struct npnm_usage, for the per-uid quotas.
 * @debugfs: the device's debugfs directory.
 * @submitted: statistics, see sysfs.
 * @completed: statistics.
 * @failed: statistics (any status other than NPNM_ST_OK).
 * @timeouts: statistics (commands past their own deadline).
 * @aborted: statistics (commands taken back before they ran).
 * @resets: statistics (successful resets).
 * @dax: the device-dax carve-out, if any.
 */
struct npnm_device {
	struct device dev;
	struct cdev cdev;
	char name[32];
	int id;
	struct srcu_struct srcu;
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
	u32 attn_flags;
	spinlock_t lock;		/* inflight, state, epoch, watchdog arming */
	struct list_head inflight;
	enum npnm_state state;
	u32 epoch;
	unsigned long progress;
	bool hold;
	struct list_head held;
	bool wd_armed;
	unsigned long wd_when;
	struct delayed_work watchdog;
	struct mutex reset_lock;	/* resets against removal */
	struct mutex ctx_lock;		/* contexts */
	struct list_head contexts;
	struct xarray usage;
	struct dentry *debugfs;
	atomic64_t submitted, completed, failed, timeouts, aborted, resets;
	struct npnm_dax dax;
};

static inline struct npnm_device *npnm_dev_of(struct device *dev)
{
	return container_of(dev, struct npnm_device, dev);
}

struct npnm_context;

/**
 * struct npnm_region - a device-memory region of one context.
 * @ref: one for the handle, one per mapping, one per command using it; the
 *	memory returns to the pool with the last one.
 * @ctx: the owning context (outlives the region: handles, mappings and
 *	commands all keep the context).
 * @handle: name within the owning context (0 once freed).
 * @dev_off: offset in device memory.
 * @size: bytes.
 * @busy: commands of the context not yet completed that use it.
 * @epoch: the device's epoch at allocation; another one means stale.
 * @dax: a DAX window over the device-dax carve-out: neither allocated
 *	from the pool nor charged to quotas in bytes.
 */
struct npnm_region {
	struct kref ref;
	struct npnm_context *ctx;
	u32 handle;
	u64 dev_off;
	u64 size;
	atomic_t busy;
	u32 epoch;
	bool dax;
};

/**
 * struct npnm_context - one open file.
 * @ref: one for the file, one per command not yet released.
 * @ndev: the device (a reference is held).
 * @node: on the device's context list until the file is released.
 * @mapping: the file's address space, for revoking mappings.
 * @uid: the opener's effective uid: the tenant its memory is charged to.
 * @writable: opened for writing; a read-only open may only query.
 * @lock: protects @regions, @next_handle and the quota check.
 * @regions: handle -> region.
 * @next_handle: handles only grow, so a stale handle never names a new region.
 * @nr_regions: regions whose memory is not back in the pool (quota).
 * @bytes: their bytes (quota).
 * @cq_lock: protects @cq, @cq_len, @cmds, @inflight, @next_seqno, @closed.
 *	@inflight + @cq_len is bounded by NPNM_MAX_INFLIGHT, so a context that
 *	never reaps cannot pile up completions.
 * @cq: completed ioctl-submitted commands, waiting for NPNM_IOC_WAIT.
 * @cq_len: entries on @cq.
 * @cmds: commands submitted and not yet completed.
 * @inflight: entries on @cmds.
 * @next_seqno: sequence number of the next command.
 * @closed: the file is released: completions are dropped, not queued.
 * @cq_wait: woken on every completion.
 */
struct npnm_context {
	struct kref ref;
	struct npnm_device *ndev;
	struct list_head node;
	struct address_space *mapping;
	kuid_t uid;
	bool writable;
	struct mutex lock;		/* regions, handles, quota check */
	struct xarray regions;
	u32 next_handle;
	atomic_t nr_regions;
	atomic64_t bytes;
	spinlock_t cq_lock;		/* cq, cmds, counters */
	struct list_head cq;
	u32 cq_len;
	struct list_head cmds;
	u32 inflight;
	u64 next_seqno;
	bool closed;
	wait_queue_head_t cq_wait;
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
 * struct npnm_kcmd - a command from submission to release.
 * @ref: one for the backend, one for the completion path.
 * @ctx: submitting context (a reference is held).
 * @node: on the device's inflight list until the backend lets go.
 * @ctx_node: on the context's command list until completed.
 * @held_node: on the device's held list while the test hold keeps it.
 * @cq_node: on the context's completion queue once complete.
 * @done: set once by whoever completes the command.
 * @owner: the submitter's file table, compared (never dereferenced) to
 *	abort a dying process's commands.
 * @desc: the device's copy: operands resolved to device offsets.
 * @regions: regions the operands name, each holding a reference.
 * @deadline: jiffies after which the command completes NPNM_ST_TIMEOUT;
 *	counted from submission.
 * @started: jiffies when the device started it; 0 while it waits.
 * @t_submit: ktime of submission.
 * @t_start: ktime when the device started it.
 * @kind: where the completion goes: the context's queue (NPNM_KCMD_QUEUED),
 *	a waiting NPNM_IOC_EXEC (NPNM_KCMD_SYNC) or an io_uring CQE
 *	(NPNM_KCMD_URING).
 * @sync_done: what NPNM_IOC_EXEC waits on; it lives here, not on the
 *	waiter's stack, so a waiter killed early leaves nothing dangling.
 * @ioucmd: the io_uring command of an NPNM_KCMD_URING command.
 * @comp: the completion record.
 * @priv: the backend's per-command state, &npnm_backend_ops.cmd_size bytes.
 */
struct npnm_kcmd {
	struct kref ref;
	struct npnm_context *ctx;
	struct list_head node;
	struct list_head ctx_node;
	struct list_head held_node;
	struct list_head cq_node;
	atomic_t done;
	fl_owner_t owner;
	struct npnm_cmd desc;
	struct npnm_region *regions[NPNM_CMD_MAX_OPERANDS];
	unsigned long deadline;
	unsigned long started;
	ktime_t t_submit;
	ktime_t t_start;
	enum npnm_kcmd_kind kind;
	struct completion sync_done;
	struct io_uring_cmd *ioucmd;
	struct npnm_completion comp;
	u64 priv[];
};

static inline void *npnm_kcmd_priv(struct npnm_kcmd *kc)
{
	return kc->priv;
}

static inline struct npnm_device *npnm_kcmd_dev(const struct npnm_kcmd *kc)
{
	return kc->ctx->ndev;
}

/* Module parameters (main.c). */
extern unsigned int npnm_timeout_ms;
extern unsigned int npnm_watchdog_ms;
extern unsigned int npnm_ctx_max_regions;
extern unsigned long long npnm_ctx_max_bytes;
extern unsigned int npnm_uid_max_regions;
extern unsigned long long npnm_uid_max_bytes;

/* main.c */
int npnm_id_alloc(void);
void npnm_id_free(int id);
int npnm_device_init(struct npnm_device *ndev, struct device *parent);
int npnm_device_register(struct npnm_device *ndev);
void npnm_device_unregister(struct npnm_device *ndev);

/* context.c */
extern const struct file_operations npnm_fops;
struct npnm_region *npnm_region_get(struct npnm_context *ctx, u32 handle);
void npnm_region_put(struct npnm_region *r);
int npnm_mem_alloc(struct npnm_context *ctx, struct npnm_mem_alloc *ma);
int npnm_mem_free(struct npnm_context *ctx, u32 handle);
void npnm_ctx_put(struct npnm_context *ctx);
void npnm_revoke_mappings(struct npnm_device *ndev);

/* ioctl.c */
long npnm_ioctl(struct file *filp, unsigned int cmd, unsigned long arg);

/* cmd.c */
int npnm_cmd_submit(struct npnm_context *ctx, const struct npnm_cmd *uc,
		    enum npnm_kcmd_kind kind, struct io_uring_cmd *ioucmd,
		    struct npnm_kcmd **out, u64 *seqno);
void npnm_cmd_started(struct npnm_kcmd *kc);
void npnm_cmd_complete(struct npnm_kcmd *kc, u32 status, u32 detail);
void npnm_cmd_release(struct npnm_kcmd *kc);
void npnm_kcmd_put(struct npnm_kcmd *kc);
void npnm_cmd_abort_ctx(struct npnm_context *ctx, fl_owner_t owner);
void npnm_watchdog_fn(struct work_struct *work);
int npnm_device_reset(struct npnm_device *ndev, bool only_if_failed);
void npnm_device_fail(struct npnm_device *ndev, const char *why);
void npnm_device_abort_all(struct npnm_device *ndev, u32 status);
u32 npnm_quarantined(struct npnm_device *ndev);
void npnm_hold_set(struct npnm_device *ndev, bool hold);
void npnm_release_held(struct npnm_device *ndev);

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

/* dax.c */
extern const struct attribute_group npnm_dax_group;
int npnm_dax_init(void);
void npnm_dax_exit(void);
void npnm_dax_init_dev(struct npnm_device *ndev);
bool npnm_dax_mem_in_use(phys_addr_t base, u64 len);
void npnm_dax_carve(struct npnm_device *ndev, phys_addr_t phys, u64 heap_off, u64 *heap_size);
int npnm_dax_add(struct npnm_device *ndev);
void npnm_dax_remove(struct npnm_device *ndev);
int npnm_dax_window_get(struct npnm_device *ndev, u64 off, u64 size, u64 *dev_off);
void npnm_dax_window_put(struct npnm_device *ndev);

#endif /* NPNM_H */
