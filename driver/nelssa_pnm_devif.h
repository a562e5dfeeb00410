/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * NELSSA PNM device interface, version 1: the contract between the
 * nelssa_pnm driver and a PNM card's firmware (or nelssa-devemu, which
 * plays the card behind QEMU's ivshmem-doorbell device).  Not a syscall
 * ABI, so not in uapi/: it lives beside the command rules (npnm_rules.h),
 * the other header the driver and the firmware compile alike, and is
 * licensed as that one is.  Documentation/device-interface.rst is the
 * specification; everything here is little-endian.
 *
 * Device memory (the memory BAR) starts with struct npnm_devif_hdr, then
 * the submission ring (SQ) and the completion ring (CQ), then the heap the
 * driver allocates regions from.  Ring indices are free-running 32-bit
 * counters; slot = index & (entries - 1).  Each index has one writer: the
 * driver writes sq_tail and cq_head, the firmware sq_head and cq_tail.
 * A producer writes the entry, then (release) the index; a consumer reads
 * the index (acquire), then the entry.
 */
#ifndef NELSSA_PNM_DEVIF_H
#define NELSSA_PNM_DEVIF_H

#include <linux/types.h>
#include <linux/nelssa_pnm.h>

#define NPNM_DEVIF_MAGIC	0x41534c4eU	/* "NLSA" */
#define NPNM_DEVIF_VERSION	1
#define NPNM_DEVIF_HEARTBEAT_MS	10		/* firmware heartbeat period */

/* PCI identity of the development device: QEMU ivshmem-doorbell. */
#define NPNM_DEVIF_IVSHMEM_VENDOR	0x1af4
#define NPNM_DEVIF_IVSHMEM_DEVICE	0x1110
#define NPNM_DEVIF_REGS_BAR		0	/* registers */
#define NPNM_DEVIF_MEM_BAR		2	/* device memory */
/* ivshmem registers (BAR0): IVPosition (own peer id), Doorbell. */
#define NPNM_DEVIF_REG_IVPOSITION	0x08
#define NPNM_DEVIF_REG_DOORBELL		0x0c
/* The firmware is ivshmem peer 0; vector 0 of each side is used. */
#define NPNM_DEVIF_FW_PEER		0

/* fw_state, written by the firmware. */
#define NPNM_FW_BOOTING		0
#define NPNM_FW_READY		1
#define NPNM_FW_FAILED		2

/* driver_state, written by the driver. */
#define NPNM_DRV_DETACHED	0
#define NPNM_DRV_ATTACHED	1
#define NPNM_DRV_RESET		2	/* abort everything, zero the rings */
/*
 * A reset request also carries a number in bits 8-31, new for every request,
 * so the firmware serves each request exactly once however soon the next one
 * follows (it cannot rely on seeing NPNM_DRV_ATTACHED in between).
 */
#define NPNM_DRV_STATE(v)	((v) & 0xff)
#define NPNM_DRV_RESET_REQ(n)	(NPNM_DRV_RESET | ((__u32)(n) << 8))

/**
 * struct npnm_devif_hdr - at offset 0 of device memory.
 * @magic: NPNM_DEVIF_MAGIC; a driver never binds without it.
 * @version: NPNM_DEVIF_VERSION of the firmware.
 * @hdr_size: bytes of this header (room to grow).
 * @mem_size: bytes of device memory.
 * @heap_off: start of the region heap (1 MiB aligned).
 * @heap_size: bytes of heap.
 * @sq_off: submission ring, @sq_entries of struct npnm_devif_sqe.
 * @cq_off: completion ring, @cq_entries of struct npnm_devif_cqe.
 * @sq_entries: power of two.
 * @cq_entries: power of two, at least @sq_entries.
 * @nr_cores: compute cores.
 * @fw_version: major << 16 | minor.
 * @opcodes: bit per supported NPNM_OP_*.
 * @kv_dtypes: bit per supported NPNM_DTYPE_*.
 * @max_head_dim: largest head dimension.
 * @max_group: largest GQA group.
 * @fw_state: NPNM_FW_*; firmware-written.
 * @driver_state: NPNM_DRV_*; driver-written.
 * @heartbeat: incremented by the firmware every NPNM_DEVIF_HEARTBEAT_MS.
 * @reset_epoch: incremented by the firmware when a reset is complete.
 * @attn_flags: NPNM_ATTN_F_* bits SPARSE_ATTN accepts (0 before firmware 1.1).
 * @reserved0: zero.
 * @sq_tail: driver-written: next SQ slot it fills.
 * @cq_head: driver-written: next CQ entry it consumes.
 * @pad1: zero; keeps driver- and firmware-written words on separate lines.
 * @sq_head: firmware-written: next SQ slot it consumes.
 * @cq_tail: firmware-written: next CQ entry it fills.
 * @pad2: zero.
 */
struct npnm_devif_hdr {
	__le32 magic;		/*   0 */
	__le16 version;		/*   4 */
	__le16 hdr_size;	/*   6 */
	__le64 mem_size;	/*   8 */
	__le64 heap_off;	/*  16 */
	__le64 heap_size;	/*  24 */
	__le64 sq_off;		/*  32 */
	__le64 cq_off;		/*  40 */
	__le32 sq_entries;	/*  48 */
	__le32 cq_entries;	/*  52 */
	__le32 nr_cores;	/*  56 */
	__le32 fw_version;	/*  60 */
	__le64 opcodes;		/*  64 */
	__le32 kv_dtypes;	/*  72 */
	__le16 max_head_dim;	/*  76 */
	__le16 max_group;	/*  78 */
	__le32 fw_state;	/*  80 */
	__le32 driver_state;	/*  84 */
	__le64 heartbeat;	/*  88 */
	__le32 reset_epoch;	/*  96 */
	__le32 attn_flags;	/* 100 */
	__u8 reserved0[24];	/* 104 */
	__le32 sq_tail;		/* 128 */
	__le32 cq_head;		/* 132 */
	__u8 pad1[56];		/* 136 */
	__le32 sq_head;		/* 192 */
	__le32 cq_tail;		/* 196 */
	__u8 pad2[56];		/* 200 */
};				/* 256 */

/**
 * struct npnm_devif_sqe - one submission: a resolved descriptor.
 * @cmd: the command, operands as absolute device-memory offsets (a used
 *	operand has a non-zero handle).
 * @cookie: the driver's tag, returned in the completion.
 * @reserved: zero.
 */
struct npnm_devif_sqe {
	struct npnm_cmd cmd;	/*   0 */
	__le64 cookie;		/* 192 */
	__u8 reserved[56];	/* 200 */
};				/* 256 */

/**
 * struct npnm_devif_cqe - one completion.
 * @cookie: the submission's cookie.
 * @status: enum npnm_status.
 * @detail: opcode-specific detail.
 * @device_ns: time the firmware spent on the command.
 * @reserved: zero.
 */
struct npnm_devif_cqe {
	__le64 cookie;		/*  0 */
	__le32 status;		/*  8 */
	__le32 detail;		/* 12 */
	__le64 device_ns;	/* 16 */
	__le64 reserved;	/* 24 */
};				/* 32 */

#endif /* NELSSA_PNM_DEVIF_H */
