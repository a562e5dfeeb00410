/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * NELSSA processing-near-memory (PNM) device: userspace ABI, version 1.
 *
 * One character device per PNM card, /dev/nelssa_pnm<N>.  Every open() is a
 * *context*: it owns the device-memory regions it allocates and the commands
 * it submits, and everything is reclaimed when the file is released.
 *
 * Documentation/userspace-api/nelssa_pnm.rst describes every call, its
 * errors and a worked example; Documentation/numeric-conventions.rst the
 * arithmetic behind NPNM_OP_SPARSE_ATTN.
 *
 * Rules every structure here follows: only __u8..__u64/__s32/__s64 fields,
 * natural alignment with explicit padding, sizes a multiple of 8, and
 * reserved/pad fields that must be zero on input (-EINVAL otherwise) so they
 * can gain a meaning later.  User pointers travel as __u64.  Multi-byte
 * values that live in device memory (work items, cluster tables) are
 * little-endian.
 */
#ifndef _UAPI_LINUX_NELSSA_PNM_H
#define _UAPI_LINUX_NELSSA_PNM_H

#include <linux/const.h>
#include <linux/ioctl.h>
#include <linux/types.h>

/** NPNM_ABI_VERSION - reported in &npnm_info.abi_version. */
#define NPNM_ABI_VERSION	1

/*
 * 0xB9 is unassigned in Documentation/userspace-api/ioctl/ioctl-number.rst
 * (checked against 6.1).  Number ranges: 0x00-0x0f query, 0x10-0x2f memory,
 * 0x30-0x4f submission and completion, 0x50-0x5f fd export (future),
 * 0x80-0x9f firmware (future).  Numbers are never reused.
 */
#define NPNM_IOCTL_MAGIC	0xB9

/* Capability bits, &npnm_info.caps. */
#define NPNM_CAP_URING_CMD	_BITULL(0) /* IORING_OP_URING_CMD submission */
#define NPNM_CAP_CQE32_STATUS	_BITULL(1) /* device status in CQE32 res2 */
#define NPNM_CAP_MMAP		_BITULL(2) /* regions can be mmap()ed */
#define NPNM_CAP_COMPUTE	_BITULL(3) /* runs compute kernels (not a mock) */
#define NPNM_CAP_KV_SCATTER	_BITULL(4) /* NPNM_KV_F_SCATTER supported */
#define NPNM_CAP_DAX		_BITULL(5) /* a device-dax carve-out: NPNM_MEM_F_DAX */
#define NPNM_CAP_KV_STRIDE	_BITULL(6) /* kv_stride of KV_WRITE and SPARSE_ATTN */

/**
 * enum npnm_kv_dtype - element type of K and V rows (a __u8 field on the wire).
 * @NPNM_DTYPE_BF16: bfloat16, the default.
 * @NPNM_DTYPE_FP16: IEEE binary16.
 * @NPNM_DTYPE_FP8_E4M3: OCP FP8 E4M3 (bias 7, no infinities, 0x7f and 0xff
 *	NaN, largest finite 448) with scales, in tiles (below).
 * @NPNM_DTYPE_INT8: two's-complement int8 with scales, in tiles (below).
 *
 * Zero is deliberately invalid so that a zeroed descriptor is rejected.
 * Values 5..15 are reserved (int4 and others).  The enum documents values;
 * no field has enum type.
 *
 * The 16-bit types are row-addressed: token t's K row is head_dim elements
 * at k_off + t * head_dim * 2.  The 8-bit types are tile-addressed: the
 * tokens go in tiles of NPNM_KV_QTILE, and tile i starts at k_off + i *
 * tile bytes.  A tile is NPNM_KV_QTILE rows of head_dim bytes (a tile past
 * the last token is padded with rows the device never reads), then one
 * little-endian IEEE binary32 scale per NPNM_KV_QGROUP channels of the row
 * (the last group may be shorter), then zero padding to a multiple of
 * NPNM_KV_QALIGN bytes.  Element j of a row in the tile stands for the
 * binary32 value scale[j / NPNM_KV_QGROUP] * code, rounded once to
 * binary32.  V is laid out the same way at v_off.  Documentation/
 * numeric-conventions.rst gives the quantisation the host library uses.
 *
 * Blocks and the kv_stride field: the tokens of every type go in blocks of
 * NPNM_KV_QTILE (NPNM_KV_QTILE rows of a 16-bit type, one tile of an 8-bit
 * one), and block i of the K array starts at k_off + i * kv_stride (V
 * likewise at v_off).  kv_stride 0 means the packed layout above (the
 * stride is the block's own size).  A larger stride leaves room between
 * blocks, and with v_off = k_off + block bytes and kv_stride = 2 * block
 * bytes each block of K lies next to its block of V: one 8 KiB run per 16
 * tokens of a 128-wide bf16 head instead of two 4 KiB reads, which is what
 * a gathering kernel reads fastest.  A stride is 0 or at least a block's
 * bytes and a multiple of 64; a device that takes it reports
 * NPNM_CAP_KV_STRIDE, and one that does not (firmware before 1.2) refuses a
 * non-zero stride with NPNM_ST_BAD_RESERVED, the field having been reserved.
 */
enum npnm_kv_dtype {
	NPNM_DTYPE_BF16 = 1,
	NPNM_DTYPE_FP16 = 2,
	NPNM_DTYPE_FP8_E4M3 = 3,
	NPNM_DTYPE_INT8 = 4,
};

/* Tile geometry of the 8-bit KV types (see enum npnm_kv_dtype). */
#define NPNM_KV_QTILE		16	/* tokens per tile */
#define NPNM_KV_QGROUP		32	/* channels per scale */
#define NPNM_KV_QALIGN		64	/* tile size granularity, bytes */
#define NPNM_KV_STRIDE_ALIGN	64	/* a non-zero kv_stride is a multiple */

/**
 * struct npnm_info - NPNM_IOC_GET_INFO: what this device and driver offer.
 * @abi_version: Out. NPNM_ABI_VERSION of the driver.
 * @fw_version: Out. Firmware interface version, major << 16 | minor; 0 for
 *	a device without firmware (the in-kernel mock).
 * @caps: Out. NPNM_CAP_* bits.
 * @opcodes: Out. Bit (1 << op) set for every NPNM_OP_* the device executes.
 * @mem_size: Out. Bytes of device memory the region allocator hands out
 *	(a device-dax carve-out is not counted).
 * @mem_align: Out. Allocation granularity and alignment in bytes; a power
 *	of two, at least the page size.
 * @nr_cores: Out. Compute cores (CMD Executor threads) on the device.
 * @max_batch: Out. Most commands one NPNM_IOC_SUBMIT accepts.
 * @max_inflight: Out. Most commands one context may have in flight or
 *	completed and not yet reaped.
 * @kv_dtypes: Out. Bit (1 << dtype) set for every supported npnm_kv_dtype.
 * @max_head_dim: Out. Largest head dimension SPARSE_ATTN/KV_WRITE accept.
 * @max_group: Out. Largest GQA group (query rows per work item); 0 on a
 *	device that runs no attention.
 * @attn_flags: Out. The NPNM_ATTN_F_* bits SPARSE_ATTN accepts; a device
 *	(or a driver) older than a bit reports it clear.
 * @reserved: Out. Zero.
 */
struct npnm_info {
	__u32 abi_version;	/*  0 */
	__u32 fw_version;	/*  4 */
	__u64 caps;		/*  8 */
	__u64 opcodes;		/* 16 */
	__u64 mem_size;		/* 24 */
	__u64 mem_align;	/* 32 */
	__u32 nr_cores;		/* 40 */
	__u32 max_batch;	/* 44 */
	__u32 max_inflight;	/* 48 */
	__u32 kv_dtypes;	/* 52 */
	__u16 max_head_dim;	/* 56 */
	__u16 max_group;	/* 58 */
	__u32 attn_flags;	/* 60 */
	__u64 reserved[4];	/* 64 */
};				/* 96 */

/**
 * struct npnm_mem_alloc - NPNM_IOC_MEM_ALLOC: allocate a device-memory region.
 * @size: In. Bytes wanted; rounded up to &npnm_info.mem_align. Non-zero.
 * @flags: In. NPNM_MEM_F_* bits; any other bit is -EINVAL.
 * @handle: Out. Non-zero handle naming the region in this context only.
 * @mmap_offset: Out. Offset to pass to mmap() on the same file descriptor.
 * @alloc_size: Out. Bytes actually allocated (@size rounded up).
 * @dax_offset: In. With NPNM_MEM_F_DAX: where the window starts in the
 *	device-dax carve-out, a multiple of &npnm_info.mem_align; otherwise
 *	must be zero.
 * @reserved: In. Must be zero.
 *
 * Region contents are zeroed before the region is handed out, so one
 * context never sees another's data -- except for a DAX window, which
 * shows the carve-out as it is.
 */
struct npnm_mem_alloc {
	__u64 size;		/*  0 */
	__u32 flags;		/*  8 */
	__u32 handle;		/* 12 */
	__u64 mmap_offset;	/* 16 */
	__u64 alloc_size;	/* 24 */
	__u64 dax_offset;	/* 32 */
	__u64 reserved;		/* 40 */
};				/* 48 */

/*
 * The region is a window on the device-dax carve-out (NPNM_CAP_DAX): @size
 * bytes at @dax_offset of the memory /dev/daxX.Y maps, not allocated and
 * not zeroed, shared with every other user of the carve-out.
 */
#define NPNM_MEM_F_DAX		_BITUL(0)

/**
 * struct npnm_mem_free - NPNM_IOC_MEM_FREE: release a region.
 * @handle: In. Handle from NPNM_IOC_MEM_ALLOC.
 * @flags: In. Must be zero.
 * @reserved: In. Must be zero.
 *
 * Fails with -EBUSY while a command of this context still uses the region.
 * Existing mappings stay valid until unmapped; the memory returns to the
 * device only after the last mapping is gone.
 */
struct npnm_mem_free {
	__u32 handle;		/*  0 */
	__u32 flags;		/*  4 */
	__u64 reserved;		/*  8 */
};				/* 16 */

/**
 * struct npnm_operand - one memory operand of a command.
 * @handle: In. Region handle of the submitting context; 0 marks the slot
 *	unused, and then every other field must be zero too.
 * @flags: In. Must be zero.
 * @offset: In. Byte offset of the operand inside the region.
 * @len: In. Bytes of the operand; [@offset, @offset + @len) must lie inside
 *	the region.  The firmware never reads or writes outside it.
 *
 * Commands never carry device addresses: the driver checks each operand
 * against the context and translates it before the device sees it.
 */
struct npnm_operand {
	__u32 handle;		/*  0 */
	__u32 flags;		/*  4 */
	__u64 offset;		/*  8 */
	__u64 len;		/* 16 */
};				/* 24 */

/**
 * struct npnm_cluster - one entry of a cluster table (in device memory).
 * @first: Index of the cluster's first token in the K/V arrays.
 * @count: Tokens in the cluster; they are stored contiguously.  A cluster
 *	with @count 0 is valid and contributes nothing.
 */
struct npnm_cluster {
	__u32 first;
	__u32 count;
};

/**
 * struct npnm_fill_params - NPNM_OP_FILL parameters.
 * @pattern: Value repeated over the destination (little-endian, low
 *	@width bytes used; higher bytes must be zero).
 * @width: Bytes of the pattern: 1, 2, 4 or 8.  The destination length
 *	must be a multiple of it.
 * @pad: Must be zero.
 *
 * Operand NPNM_FILL_DST.
 */
struct npnm_fill_params {
	__u64 pattern;
	__u32 width;
	__u32 pad;
};

/**
 * struct npnm_kv_write_params - NPNM_OP_KV_WRITE parameters.
 * @k_off: Byte offset of token 0's K row inside operand NPNM_KV_DST.
 * @v_off: Byte offset of token 0's V row inside operand NPNM_KV_DST.
 * @table_off: Byte offset of cluster 0's &npnm_cluster in NPNM_KV_DST.
 * @first_token: Destination token index of source row 0 (ignored with
 *	NPNM_KV_F_SCATTER).
 * @nr_tokens: K/V rows in the source.
 * @first_cluster: Table index of the first entry written.
 * @nr_clusters: Table entries in the source; 0 leaves the table alone.
 * @max_tokens: Capacity of the destination K and V arrays, in tokens.
 * @max_clusters: Capacity of the destination table, in entries.
 * @head_dim: Elements per K/V row.
 * @kv_dtype: enum npnm_kv_dtype.
 * @pad: Must be zero.
 * @flags: NPNM_KV_F_* bits.
 * @kv_stride: Bytes from one block of NPNM_KV_QTILE tokens of the K (and V)
 *	array to the next; 0 for the packed layout (enum npnm_kv_dtype).
 *	Devices with NPNM_CAP_KV_STRIDE.
 * @reserved: Must be zero.
 *
 * Source (operand NPNM_KV_SRC) layout, packed in this order: K rows
 * [@nr_tokens][@head_dim], V rows [@nr_tokens][@head_dim], @nr_clusters
 * &npnm_cluster entries, then with NPNM_KV_F_SCATTER a __u32 destination
 * token index per row.  For an 8-bit @kv_dtype the K and V rows are whole
 * tiles (enum npnm_kv_dtype), @first_token is a multiple of NPNM_KV_QTILE
 * and NPNM_KV_F_SCATTER is refused.  Appending decode-time clusters is a
 * KV_WRITE at the end of the arrays: the host owns the layout and knows
 * where the end is.
 */
struct npnm_kv_write_params {
	__u64 k_off;		/*  0 */
	__u64 v_off;		/*  8 */
	__u64 table_off;	/* 16 */
	__u32 first_token;	/* 24 */
	__u32 nr_tokens;	/* 28 */
	__u32 first_cluster;	/* 32 */
	__u32 nr_clusters;	/* 36 */
	__u32 max_tokens;	/* 40 */
	__u32 max_clusters;	/* 44 */
	__u16 head_dim;		/* 48 */
	__u8 kv_dtype;		/* 50 */
	__u8 pad;		/* 51 */
	__u32 flags;		/* 52 */
	__u32 kv_stride;	/* 56 */
	__u32 reserved;		/* 60 */
};				/* 64 */

/* Rows go to the positions listed after the table, not first_token + i. */
#define NPNM_KV_F_SCATTER	_BITUL(0)

/**
 * struct npnm_sparse_attn_params - NPNM_OP_SPARSE_ATTN parameters.
 * @nr_items: &npnm_attn_item entries at the start of operand NPNM_ATTN_ITEMS.
 * @head_dim: Elements per query, K, V and output row.
 * @group: Query rows per item (the GQA group of one KV head).
 * @kv_dtype: enum npnm_kv_dtype of the K and V rows.
 * @scale_f32: IEEE binary32 bit pattern of the softmax scale, positive and
 *	finite; 0 selects 1/sqrt(@head_dim).
 * @flags: NPNM_ATTN_F_* bits the device reports in &npnm_info.attn_flags.
 *	A bit no NPNM_ATTN_F_* names fails submission with -EINVAL, one the
 *	device does not report with -EOPNOTSUPP (a device that gets it
 *	anyway completes with NPNM_ST_BAD_RESERVED).
 * @kv_stride: Bytes from one block of NPNM_KV_QTILE tokens of an item's K
 *	(and V) array to the next, the same for every item; 0 for the packed
 *	layout (enum npnm_kv_dtype).  Devices with NPNM_CAP_KV_STRIDE.
 * @reserved: Must be zero.
 */
struct npnm_sparse_attn_params {
	__u32 nr_items;		/*  0 */
	__u16 head_dim;		/*  4 */
	__u8 group;		/*  6 */
	__u8 kv_dtype;		/*  7 */
	__u32 scale_f32;	/*  8 */
	__u32 flags;		/* 12 */
	__u32 kv_stride;	/* 16 */
	__u32 reserved;		/* 20 */
};				/* 24 */

/*
 * The GPU kernels' dot-product numerics (FlashAttention's): each query
 * element and each softmax weight is rounded to bfloat16 (to nearest, ties
 * to even) before it multiplies a K or V element; products and sums stay
 * binary32, and the weights' sum (the LSE's and the divisor's) is taken
 * from the unrounded weights.  It lets a device use native bf16 dot
 * products (Arm BFDOT, x86 VDPBF16PS) for twice the products per
 * instruction.  Documentation/numeric-conventions.rst has the error it
 * adds; without the bit every product has binary32 operands.
 */
#define NPNM_ATTN_F_BF16_DOTS	_BITUL(0)

/**
 * struct npnm_attn_item - one SPARSE_ATTN work item (in device memory).
 * @k_off: K rows of this (sequence, layer, KV head), in NPNM_ATTN_KV (tiles
 *	for an 8-bit type: enum npnm_kv_dtype).
 * @v_off: V rows, in NPNM_ATTN_KV.
 * @table_off: Cluster table (&npnm_cluster[@nr_clusters]), in NPNM_ATTN_KV.
 * @q_off: Queries, fp32 [group][head_dim], in NPNM_ATTN_IN.
 * @sel_off: Selected cluster ids, __u32 [@nr_sel], in NPNM_ATTN_IN.
 * @o_off: Output, fp32 [group][head_dim], in NPNM_ATTN_OUT.
 * @lse_off: Log-sum-exp, fp32 [group], in NPNM_ATTN_OUT.
 * @nr_tokens: Tokens stored at @k_off/@v_off (in blocks of the command's
 *	kv_stride); every table entry must lie inside them.
 * @nr_clusters: Entries in the table; every selected id must be below it.
 * @nr_sel: Selected ids.  Zero gives o = 0, lse = -inf.  Duplicates are
 *	rejected.
 * @reserved: Must be zero.
 *
 * Offsets are relative to the operand, whose length bounds every access.
 * For each query row the device computes o = softmax(scale * q K^T) V over
 * the union of the selected clusters' tokens and lse = log sum exp(scale *
 * q k), natural log, accumulated in fp32.
 */
struct npnm_attn_item {
	__u64 k_off;		/*  0 */
	__u64 v_off;		/*  8 */
	__u64 table_off;	/* 16 */
	__u64 q_off;		/* 24 */
	__u64 sel_off;		/* 32 */
	__u64 o_off;		/* 40 */
	__u64 lse_off;		/* 48 */
	__u32 nr_tokens;	/* 56 */
	__u32 nr_clusters;	/* 60 */
	__u32 nr_sel;		/* 64 */
	__u32 reserved;		/* 68 */
};				/* 72 */

/**
 * struct npnm_selftest_params - NPNM_OP_SELFTEST parameters.
 * @mask: Bit per built-in test to run; 0 runs all of them.
 * @pad: Must be zero.
 *
 * The completion's detail field holds the mask of tests that failed.
 */
struct npnm_selftest_params {
	__u32 mask;
	__u32 pad;
};

/**
 * enum npnm_opcode - command opcodes (a __u16 field on the wire).
 * @NPNM_OP_NOP: Completes with NPNM_ST_OK; no operands, no parameters.
 * @NPNM_OP_FILL: Fill operand 0 with a pattern.
 * @NPNM_OP_COPY: Copy operand 1 to operand 0 (equal lengths; overlapping
 *	ranges behave like memmove).
 * @NPNM_OP_KV_WRITE: Write K/V rows and cluster-table entries (write and
 *	append).
 * @NPNM_OP_SPARSE_ATTN: Sparse attention over selected clusters for a batch
 *	of work items.
 * @NPNM_OP_SELFTEST: Run the firmware's built-in kernel checks.
 * @NPNM_OP_MAX: One past the largest opcode.
 */
enum npnm_opcode {
	NPNM_OP_NOP = 0,
	NPNM_OP_FILL = 1,
	NPNM_OP_COPY = 2,
	NPNM_OP_KV_WRITE = 3,
	NPNM_OP_SPARSE_ATTN = 4,
	NPNM_OP_SELFTEST = 5,
	NPNM_OP_MAX,
};

/* Operand slots, per opcode. */
#define NPNM_FILL_DST		0
#define NPNM_COPY_DST		0
#define NPNM_COPY_SRC		1
#define NPNM_KV_SRC		0
#define NPNM_KV_DST		1
#define NPNM_ATTN_ITEMS		0
#define NPNM_ATTN_KV		1
#define NPNM_ATTN_IN		2
#define NPNM_ATTN_OUT		3

#define NPNM_CMD_MAX_OPERANDS	4
#define NPNM_CMD_PARAMS_BYTES	64

/**
 * struct npnm_cmd - a command descriptor, the unit of submission.
 * @opcode: In. enum npnm_opcode.
 * @flags: In. Must be zero (room for ordering fences).
 * @timeout_ms: In. Deadline for the command in milliseconds counted from
 *	submission (queue time included); 0 uses the driver's default.  Past
 *	it this command alone completes NPNM_ST_TIMEOUT; the device goes on.
 * @user_tag: In. Opaque, returned in the completion.
 * @op: In. Operands; the slots an opcode does not use must be all zero.
 * @p: In. Opcode parameters; the bytes of @p beyond the opcode's parameter
 *	structure must be zero.
 * @p.fill: NPNM_OP_FILL.
 * @p.kv_write: NPNM_OP_KV_WRITE.
 * @p.attn: NPNM_OP_SPARSE_ATTN.
 * @p.selftest: NPNM_OP_SELFTEST.
 * @p.raw: The whole parameter area.
 * @reserved: In. Must be zero.
 *
 * NOP and COPY take no parameters: all of @p must be zero.
 */
struct npnm_cmd {
	__u16 opcode;		/*   0 */
	__u16 flags;		/*   2 */
	__u32 timeout_ms;	/*   4 */
	__u64 user_tag;		/*   8 */
	struct npnm_operand op[NPNM_CMD_MAX_OPERANDS];	/* 16 */
	union {
		struct npnm_fill_params fill;
		struct npnm_kv_write_params kv_write;
		struct npnm_sparse_attn_params attn;
		struct npnm_selftest_params selftest;
		__u64 raw[NPNM_CMD_PARAMS_BYTES / 8];
	} p;			/* 112 */
	__u64 reserved[2];	/* 176 */
};				/* 192 */

/**
 * enum npnm_status - device completion status (NPNM_RES2_STATUS(),
 *	&npnm_completion.status).
 * @NPNM_ST_OK: Success.
 * @NPNM_ST_BAD_OPCODE: Opcode unknown to the device.
 * @NPNM_ST_BAD_RESERVED: A reserved or pad field was not zero.
 * @NPNM_ST_BAD_OPERAND: An operand lies outside device memory, or an access
 *	the parameters describe does not fit inside its operand.
 * @NPNM_ST_BAD_PARAM: A parameter is out of range (dtype, head_dim, group,
 *	fill width, scale, ...).
 * @NPNM_ST_BAD_CLUSTER: A selected cluster id is beyond the table, a table
 *	entry is beyond the stored tokens, or an id is selected twice.
 * @NPNM_ST_UNSUPPORTED: Valid, but this device cannot run it (a compute
 *	opcode on the in-kernel mock).
 * @NPNM_ST_TIMEOUT: The command's own deadline passed.
 * @NPNM_ST_ABORTED: The command was taken back before it ran (close, the
 *	submitting process's death, a reset, the device's removal) or was
 *	running when the device was reset or removed.
 * @NPNM_ST_DEVICE_ERROR: The device failed while running the command.
 * @NPNM_ST_SELFTEST_FAIL: SELFTEST found a failing kernel; see the detail.
 */
enum npnm_status {
	NPNM_ST_OK = 0,
	NPNM_ST_BAD_OPCODE = 1,
	NPNM_ST_BAD_RESERVED = 2,
	NPNM_ST_BAD_OPERAND = 3,
	NPNM_ST_BAD_PARAM = 4,
	NPNM_ST_BAD_CLUSTER = 5,
	NPNM_ST_UNSUPPORTED = 6,
	NPNM_ST_TIMEOUT = 7,
	NPNM_ST_ABORTED = 8,
	NPNM_ST_DEVICE_ERROR = 9,
	NPNM_ST_SELFTEST_FAIL = 10,
};

/*
 * io_uring completions (IORING_SETUP_CQE32): res is 0 or -errno, big_cqe[0]
 * (res2) packs the device status in bits 0-15 and device time in ns in bits
 * 16-63.
 */
#define NPNM_RES2_STATUS(res2)	((__u32)((res2) & 0xffffULL))
#define NPNM_RES2_NS(res2)	((__u64)(res2) >> 16)

/**
 * struct npnm_submit - NPNM_IOC_SUBMIT: queue a batch of commands.
 * @cmds_ptr: In. User pointer to an array of &npnm_cmd.
 * @nr_cmds: In. Commands in the array, 1..&npnm_info.max_batch.
 * @flags: In. Must be zero.
 * @seqno: Out. Sequence number of the first accepted command; the others
 *	follow consecutively.
 * @nr_submitted: Out. Commands accepted, in array order.
 * @error: Out. -errno for command @nr_submitted when it was rejected, else 0.
 * @reserved: In. Must be zero.
 *
 * Commands are validated and queued in order; the first invalid one stops
 * the batch.  The call returns 0 when all were accepted, otherwise the
 * rejected command's -errno, with the Out fields written either way.  Every
 * accepted command completes exactly once, reaped with NPNM_IOC_WAIT.
 */
struct npnm_submit {
	__u64 cmds_ptr;		/*  0 */
	__u32 nr_cmds;		/*  8 */
	__u32 flags;		/* 12 */
	__u64 seqno;		/* 16 */
	__u32 nr_submitted;	/* 24 */
	__s32 error;		/* 28 */
	__u64 reserved[2];	/* 32 */
};				/* 48 */

/**
 * struct npnm_completion - one reaped completion.
 * @user_tag: The command's user tag.
 * @seqno: The command's sequence number.
 * @result: 0, or -errno: -EIO for a device status other than NPNM_ST_OK,
 *	-ETIMEDOUT for NPNM_ST_TIMEOUT, -ECANCELED for NPNM_ST_ABORTED.
 * @status: enum npnm_status.
 * @device_ns: Time the device spent on the command.
 * @detail: Opcode-specific detail (SELFTEST: mask of failed tests).
 * @pad: Zero.
 */
struct npnm_completion {
	__u64 user_tag;		/*  0 */
	__u64 seqno;		/*  8 */
	__s32 result;		/* 16 */
	__u32 status;		/* 20 */
	__u64 device_ns;	/* 24 */
	__u32 detail;		/* 32 */
	__u32 pad;		/* 36 */
};				/* 40 */

/**
 * struct npnm_wait - NPNM_IOC_WAIT: reap completions of submitted commands.
 * @comps_ptr: In. User pointer to an array of &npnm_completion.
 * @max_comps: In. Capacity of the array, non-zero.
 * @min_comps: In. Completions to wait for, at most @max_comps.
 * @timeout_ns: In. Absolute CLOCK_MONOTONIC deadline; 0 does not block; a
 *	negative value waits without deadline (signals still interrupt).
 * @nr_comps: Out. Completions written.
 * @flags: In. Must be zero.
 * @reserved: In. Must be zero.
 *
 * Returns 0 with @nr_comps >= @min_comps, or once the deadline passed with
 * at least one completion reaped; -ETIMEDOUT when it passed with none; and
 * -EINTR on a signal with none.  Completions are never lost: what was reaped
 * is always in the array.
 */
struct npnm_wait {
	__u64 comps_ptr;	/*  0 */
	__u32 max_comps;	/*  8 */
	__u32 min_comps;	/* 12 */
	__s64 timeout_ns;	/* 16 */
	__u32 nr_comps;		/* 24 */
	__u32 flags;		/* 28 */
	__u64 reserved[2];	/* 32 */
};				/* 48 */

/**
 * struct npnm_exec - NPNM_IOC_EXEC: run one command; also the io_uring
 *	payload.
 * @cmd_ptr: In. User pointer to one &npnm_cmd, copied at submission.
 * @flags: In. Must be zero.
 * @status: Out (ioctl only): enum npnm_status.  Must be zero on input; an
 *	io_uring submission gets the status in the CQE's res2 instead.
 *
 * As an ioctl it blocks until the command completes and returns its result
 * (0 or -errno).  As IORING_OP_URING_CMD with cmd_op = NPNM_IOC_EXEC, this
 * 16-byte struct fills the SQE's command area (a plain 64-byte SQE is
 * enough) and the command completes asynchronously in the CQE.
 */
struct npnm_exec {
	__u64 cmd_ptr;		/*  0 */
	__u32 flags;		/*  8 */
	__u32 status;		/* 12 */
};				/* 16 */

/* ioctl numbers, which are also the io_uring cmd_op values. */
#define NPNM_IOC_GET_INFO	_IOR(NPNM_IOCTL_MAGIC, 0x00, struct npnm_info)
#define NPNM_IOC_MEM_ALLOC	_IOWR(NPNM_IOCTL_MAGIC, 0x10, struct npnm_mem_alloc)
#define NPNM_IOC_MEM_FREE	_IOW(NPNM_IOCTL_MAGIC, 0x11, struct npnm_mem_free)
#define NPNM_IOC_SUBMIT		_IOWR(NPNM_IOCTL_MAGIC, 0x30, struct npnm_submit)
#define NPNM_IOC_WAIT		_IOWR(NPNM_IOCTL_MAGIC, 0x31, struct npnm_wait)
#define NPNM_IOC_EXEC		_IOWR(NPNM_IOCTL_MAGIC, 0x32, struct npnm_exec)

#endif /* _UAPI_LINUX_NELSSA_PNM_H */
