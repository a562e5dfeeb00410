/* SPDX-License-Identifier: MIT */
/*
 * PNM User Library: the Memory and Command API of a PNM device.
 *
 * A device is opened by name:
 *
 *   sim:N[,mem=SIZE][,cores=N][,isa=NAME][,spin_us=N]
 *	An embedded emulated device: the firmware's Device Runtime runs in
 *	this process on its own threads, device memory is host memory of SIZE
 *	bytes (suffix K, M or G; default 1G, committed lazily).  Every open of
 *	the same N in a process is a separate context on one shared device;
 *	options apply when the device is created by the first open.
 *   /dev/nelssa_pnmN
 *	A card through the nelssa_pnm kernel driver (backend "kdev").
 *
 * Every open handle is a *context* with the isolation rules of the driver
 * (Documentation/userspace-api/nelssa_pnm.rst): it names regions by
 * handles valid only in it, and closing it aborts its queued commands,
 * waits for running ones and frees its memory.  Commands and completions
 * use the uapi structures of <linux/nelssa_pnm.h> unchanged.
 *
 * All functions are thread-safe and return 0 (or a count) on success and
 * -errno on failure; nelssa_pnm_strerror() explains a failure of the last
 * call on this thread in words.
 */
#ifndef NELSSA_PNM_H
#define NELSSA_PNM_H

#include <stddef.h>
#include <stdint.h>

#include <linux/nelssa_pnm.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nelssa_pnm;

/**
 * nelssa_pnm_open() - open a device and create a context on it.
 * @name: "sim:N[,options]" or "/dev/nelssa_pnmN".
 * @out: receives the context.
 *
 * Return: 0; -EINVAL for a malformed name or option, -ENODEV when there is
 * no such device, -EBUSY when options conflict with an existing sim device,
 * -ENOMEM, or the error of open(2).
 */
int nelssa_pnm_open(const char *name, struct nelssa_pnm **out);

/**
 * nelssa_pnm_close() - close a context.
 * @pnm: context, may be NULL.
 *
 * Aborts queued commands, waits for running ones, frees every region of
 * the context and closes it.  Mappings die with it.
 */
void nelssa_pnm_close(struct nelssa_pnm *pnm);

/**
 * nelssa_pnm_name() - the name the context was opened with.
 * @pnm: context.
 *
 * Return: the name given to nelssa_pnm_open(); valid while @pnm is open.
 */
const char *nelssa_pnm_name(const struct nelssa_pnm *pnm);

/**
 * nelssa_pnm_backend() - the backend serving the context.
 * @pnm: context.
 *
 * Return: "sim" or "kdev"; a static string.
 */
const char *nelssa_pnm_backend(const struct nelssa_pnm *pnm);

/**
 * nelssa_pnm_info() - device facts.
 * @pnm: context.
 * @info: receives struct npnm_info as NPNM_IOC_GET_INFO returns it
 *	(zeroed first).
 *
 * Return: 0, or a negative errno.
 */
int nelssa_pnm_info(struct nelssa_pnm *pnm, struct npnm_info *info);

/* Memory API */

/**
 * nelssa_pnm_mem_alloc() - allocate a zeroed device-memory region.
 * @pnm: context.
 * @size: bytes, rounded up to the device's alignment.
 * @handle: receives the region's handle (non-zero).
 * @alloc_size: receives the rounded size; may be NULL.
 *
 * Return: 0, -EINVAL for size 0, -ENOMEM when the device is full.
 */
int nelssa_pnm_mem_alloc(struct nelssa_pnm *pnm, uint64_t size, uint32_t *handle,
			 uint64_t *alloc_size);

/*
 * NELSSA_PNM_MEM_PINNABLE: memory whose mapping (nelssa_pnm_mem_map()) the
 * kernel can pin -- register for RDMA (ibv_reg_mr(), ucp_mem_map()), use
 * for O_DIRECT.  A card's own mappings are raw page frames and cannot be
 * pinned; its device-dax carve-out can (Documentation/admin-guide/nelssa_pnm.rst).
 */
#define NELSSA_PNM_MEM_PINNABLE	(1u << 0)

/**
 * nelssa_pnm_mem_alloc_flags() - nelssa_pnm_mem_alloc() with placement flags.
 * @pnm: context.
 * @size: bytes, rounded up to the device's alignment (for a pinnable
 *	region on a card, to its dax device's, 2 MiB).
 * @flags: 0 or NELSSA_PNM_MEM_PINNABLE.
 * @handle: receives the region's handle (non-zero).
 * @alloc_size: receives the rounded size; may be NULL.
 *
 * A pinnable region on a sim device is a region like any other (host
 * memory).  On a card it is placed in the card's device-dax carve-out: a
 * DAX window (NPNM_MEM_F_DAX) this context allocates from the carve-out,
 * mapped through /dev/daxX.Y, zeroed by the card (FILL) before it is
 * returned; commands use it like any region.  The first one takes the
 * carve-out for this context (an exclusive flock() of /dev/daxX.Y, until
 * the context is closed).
 *
 * Return: 0, -EINVAL for size 0 or an unknown flag, -ENOMEM when the
 * device (or the carve-out) is full; for a pinnable region on a card,
 * -EOPNOTSUPP when it has no carve-out, -EBUSY when another context holds
 * it, or the error of opening /dev/daxX.Y.
 */
int nelssa_pnm_mem_alloc_flags(struct nelssa_pnm *pnm, uint64_t size, uint32_t flags,
			       uint32_t *handle, uint64_t *alloc_size);

/**
 * nelssa_pnm_mem_free() - free a region.
 * @pnm: context.
 * @handle: region handle.
 *
 * Return: 0, -EINVAL for an unknown handle, -EBUSY while a queued or
 * running command uses the region.  Mappings stay valid until unmapped.
 */
int nelssa_pnm_mem_free(struct nelssa_pnm *pnm, uint32_t handle);

/**
 * nelssa_pnm_mem_map() - map a whole region into this process.
 * @pnm: context.
 * @handle: region handle.
 * @addr: receives the address; untouched on error.
 * @size: receives the region size; may be NULL.
 *
 * Return: 0, or a negative errno like every call of the library
 * (-EINVAL: unknown handle or no @addr; -ENOMEM; mmap's own errors).
 */
int nelssa_pnm_mem_map(struct nelssa_pnm *pnm, uint32_t handle, void **addr, uint64_t *size);

/**
 * nelssa_pnm_mem_unmap() - undo nelssa_pnm_mem_map().
 * @pnm: context.
 * @addr: an address nelssa_pnm_mem_map() returned in this context.
 *
 * Return: 0, -EINVAL when @addr is not a mapping of this context, or (on
 * a kdev context) the error of munmap(2).
 */
int nelssa_pnm_mem_unmap(struct nelssa_pnm *pnm, void *addr);

/**
 * nelssa_pnm_mem_write() - copy host memory into a region (bulk path; it
 * bypasses the command queue, as prefill ingest does).
 * @pnm: context.
 * @handle: region handle.
 * @offset: byte offset in the region.
 * @src: source.
 * @len: bytes.
 *
 * Return: 0, or -EINVAL when [@offset, @offset + @len) leaves the region.
 */
int nelssa_pnm_mem_write(struct nelssa_pnm *pnm, uint32_t handle, uint64_t offset,
			 const void *src, size_t len);

/**
 * nelssa_pnm_mem_read() - copy a region into host memory (bulk path).
 * @pnm: context.
 * @handle: region handle.
 * @offset: byte offset in the region.
 * @dst: destination.
 * @len: bytes.
 *
 * The reverse of nelssa_pnm_mem_write(), with the same rules: it bypasses
 * the command queue.
 *
 * Return: 0, or -EINVAL when [@offset, @offset + @len) leaves the region
 * or @handle is unknown.
 */
int nelssa_pnm_mem_read(struct nelssa_pnm *pnm, uint32_t handle, uint64_t offset, void *dst,
			size_t len);

/* Command API */

/**
 * nelssa_pnm_submit() - queue commands for asynchronous execution.
 * @pnm: context.
 * @cmds: descriptors (operands name this context's regions).
 * @n: number of descriptors, 1..max_batch.
 * @first_seqno: receives the sequence number of the first accepted
 *	command (the others follow consecutively); may be NULL.
 *
 * Commands are checked and queued in order; the first one that is
 * rejected stops the batch.
 *
 * Return: the number queued (then the next command was rejected when it
 * is below @n; submitting it alone reports why), or -errno when none was:
 * -EINVAL (bad handle, operand outside its region, non-zero reserved
 * fields), -EAGAIN (max_inflight reached), -ESHUTDOWN (device stopping).
 * Every queued command completes exactly once.
 */
int nelssa_pnm_submit(struct nelssa_pnm *pnm, const struct npnm_cmd *cmds, uint32_t n,
		      uint64_t *first_seqno);

/**
 * nelssa_pnm_wait() - reap completions of submitted commands.
 * @pnm: context.
 * @comps: receives completions.
 * @min: completions to wait for (0 polls).
 * @max: capacity of @comps (>= @min, >= 1).
 * @timeout_ns: relative timeout; negative waits without limit.
 *
 * Return: completions written (>= @min, or fewer once the timeout passed
 * with at least one), -ETIMEDOUT when it passed with none, -EINVAL.
 */
int nelssa_pnm_wait(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t min,
		    uint32_t max, int64_t timeout_ns);

/**
 * nelssa_pnm_poll() - reap completions without blocking.
 * @pnm: context.
 * @comps: receives completions.
 * @max: capacity of @comps (>= 1).
 *
 * nelssa_pnm_wait(@pnm, @comps, 0, @max, 0), except that finding none is
 * not an error.
 *
 * Return: completions written (0 when none was waiting), or -EINVAL.
 */
int nelssa_pnm_poll(struct nelssa_pnm *pnm, struct npnm_completion *comps, uint32_t max);

/**
 * nelssa_pnm_event_fd() - a file descriptor for poll/epoll loops.
 * @pnm: context.
 *
 * The descriptor polls readable (POLLIN) while completions are waiting to
 * be reaped.  It belongs to the context: do not read or close it.
 *
 * Return: the file descriptor, valid until the context is closed.
 */
int nelssa_pnm_event_fd(struct nelssa_pnm *pnm);

/**
 * nelssa_pnm_inflight() - commands submitted and not yet reaped.
 * @pnm: context.
 *
 * Return: the number of commands queued or running, or completed but not
 * yet reaped.
 */
uint32_t nelssa_pnm_inflight(struct nelssa_pnm *pnm);

/**
 * nelssa_pnm_exec() - run one command and wait for it.
 * @pnm: context.
 * @cmd: descriptor.
 * @comp: receives the completion; may be NULL.
 *
 * The completions of asynchronous commands are not disturbed.
 *
 * Return: the command's result (0, -EIO, -ETIMEDOUT, -ECANCELED) or a
 * submission error.
 */
int nelssa_pnm_exec(struct nelssa_pnm *pnm, const struct npnm_cmd *cmd,
		    struct npnm_completion *comp);

/**
 * nelssa_pnm_status_str() - text for a completion status.
 * @status: an NPNM_ST_* value.
 *
 * Return: a static string ("ok", "operand out of bounds", ...);
 * "unknown status" for a value the library does not know.
 */
const char *nelssa_pnm_status_str(uint32_t status);

/**
 * nelssa_pnm_strerror() - words about the last failure on this thread.
 *
 * Return: a thread-local message about the last failure of a call of the
 * library on this thread, "" if none; the thread's next failure overwrites
 * it.
 */
const char *nelssa_pnm_strerror(void);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_PNM_H */
