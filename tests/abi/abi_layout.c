// SPDX-License-Identifier: MIT
/*
 * Pins the layout of uapi/linux/nelssa_pnm.h.  Every size, every offset and
 * every ioctl number is written out literally, so any change to the ABI --
 * a reordered field, implicit padding that differs between i386 and x86-64,
 * a renumbered ioctl -- fails to compile.  check-abi.sh builds this file as
 * C11 and C++17, with -m64 and -m32; running it prints one TAP line.
 */
#include <linux/nelssa_pnm.h>
#include "nelssa_pnm_devif.h"
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
#define ABI_ASSERT(expr) static_assert(expr, #expr)
#else
#define ABI_ASSERT(expr) _Static_assert(expr, #expr)
#endif

#define SIZE(type, n) ABI_ASSERT(sizeof(struct type) == (n))
#define OFF(type, field, n) ABI_ASSERT(offsetof(struct type, field) == (n))

SIZE(npnm_info, 96);
OFF(npnm_info, abi_version, 0);
OFF(npnm_info, fw_version, 4);
OFF(npnm_info, caps, 8);
OFF(npnm_info, opcodes, 16);
OFF(npnm_info, mem_size, 24);
OFF(npnm_info, mem_align, 32);
OFF(npnm_info, nr_cores, 40);
OFF(npnm_info, max_batch, 44);
OFF(npnm_info, max_inflight, 48);
OFF(npnm_info, kv_dtypes, 52);
OFF(npnm_info, max_head_dim, 56);
OFF(npnm_info, max_group, 58);
OFF(npnm_info, attn_flags, 60);
OFF(npnm_info, reserved, 64);

SIZE(npnm_mem_alloc, 48);
OFF(npnm_mem_alloc, size, 0);
OFF(npnm_mem_alloc, flags, 8);
OFF(npnm_mem_alloc, handle, 12);
OFF(npnm_mem_alloc, mmap_offset, 16);
OFF(npnm_mem_alloc, alloc_size, 24);
OFF(npnm_mem_alloc, dax_offset, 32);
OFF(npnm_mem_alloc, reserved, 40);

SIZE(npnm_mem_free, 16);
OFF(npnm_mem_free, handle, 0);
OFF(npnm_mem_free, flags, 4);
OFF(npnm_mem_free, reserved, 8);

SIZE(npnm_operand, 24);
OFF(npnm_operand, handle, 0);
OFF(npnm_operand, flags, 4);
OFF(npnm_operand, offset, 8);
OFF(npnm_operand, len, 16);

SIZE(npnm_cluster, 8);
OFF(npnm_cluster, first, 0);
OFF(npnm_cluster, count, 4);

SIZE(npnm_fill_params, 16);
OFF(npnm_fill_params, pattern, 0);
OFF(npnm_fill_params, width, 8);
OFF(npnm_fill_params, pad, 12);

SIZE(npnm_kv_write_params, 64);
OFF(npnm_kv_write_params, k_off, 0);
OFF(npnm_kv_write_params, v_off, 8);
OFF(npnm_kv_write_params, table_off, 16);
OFF(npnm_kv_write_params, first_token, 24);
OFF(npnm_kv_write_params, nr_tokens, 28);
OFF(npnm_kv_write_params, first_cluster, 32);
OFF(npnm_kv_write_params, nr_clusters, 36);
OFF(npnm_kv_write_params, max_tokens, 40);
OFF(npnm_kv_write_params, max_clusters, 44);
OFF(npnm_kv_write_params, head_dim, 48);
OFF(npnm_kv_write_params, kv_dtype, 50);
OFF(npnm_kv_write_params, pad, 51);
OFF(npnm_kv_write_params, flags, 52);
OFF(npnm_kv_write_params, kv_stride, 56);
OFF(npnm_kv_write_params, reserved, 60);

SIZE(npnm_sparse_attn_params, 24);
OFF(npnm_sparse_attn_params, nr_items, 0);
OFF(npnm_sparse_attn_params, head_dim, 4);
OFF(npnm_sparse_attn_params, group, 6);
OFF(npnm_sparse_attn_params, kv_dtype, 7);
OFF(npnm_sparse_attn_params, scale_f32, 8);
OFF(npnm_sparse_attn_params, flags, 12);
OFF(npnm_sparse_attn_params, kv_stride, 16);
OFF(npnm_sparse_attn_params, reserved, 20);

SIZE(npnm_attn_item, 72);
OFF(npnm_attn_item, k_off, 0);
OFF(npnm_attn_item, v_off, 8);
OFF(npnm_attn_item, table_off, 16);
OFF(npnm_attn_item, q_off, 24);
OFF(npnm_attn_item, sel_off, 32);
OFF(npnm_attn_item, o_off, 40);
OFF(npnm_attn_item, lse_off, 48);
OFF(npnm_attn_item, nr_tokens, 56);
OFF(npnm_attn_item, nr_clusters, 60);
OFF(npnm_attn_item, nr_sel, 64);
OFF(npnm_attn_item, reserved, 68);

SIZE(npnm_selftest_params, 8);
OFF(npnm_selftest_params, mask, 0);
OFF(npnm_selftest_params, pad, 4);

SIZE(npnm_cmd, 192);
OFF(npnm_cmd, opcode, 0);
OFF(npnm_cmd, flags, 2);
OFF(npnm_cmd, timeout_ms, 4);
OFF(npnm_cmd, user_tag, 8);
OFF(npnm_cmd, op, 16);
OFF(npnm_cmd, p, 112);
OFF(npnm_cmd, reserved, 176);
ABI_ASSERT(sizeof(((struct npnm_cmd *)0)->p) == NPNM_CMD_PARAMS_BYTES);
ABI_ASSERT(sizeof(struct npnm_kv_write_params) <= NPNM_CMD_PARAMS_BYTES);

SIZE(npnm_submit, 48);
OFF(npnm_submit, cmds_ptr, 0);
OFF(npnm_submit, nr_cmds, 8);
OFF(npnm_submit, flags, 12);
OFF(npnm_submit, seqno, 16);
OFF(npnm_submit, nr_submitted, 24);
OFF(npnm_submit, error, 28);
OFF(npnm_submit, reserved, 32);

SIZE(npnm_completion, 40);
OFF(npnm_completion, user_tag, 0);
OFF(npnm_completion, seqno, 8);
OFF(npnm_completion, result, 16);
OFF(npnm_completion, status, 20);
OFF(npnm_completion, device_ns, 24);
OFF(npnm_completion, detail, 32);
OFF(npnm_completion, pad, 36);

SIZE(npnm_wait, 48);
OFF(npnm_wait, comps_ptr, 0);
OFF(npnm_wait, max_comps, 8);
OFF(npnm_wait, min_comps, 12);
OFF(npnm_wait, timeout_ns, 16);
OFF(npnm_wait, nr_comps, 24);
OFF(npnm_wait, flags, 28);
OFF(npnm_wait, reserved, 32);

/* Fits the 16-byte command area of a plain 64-byte io_uring SQE. */
SIZE(npnm_exec, 16);
OFF(npnm_exec, cmd_ptr, 0);
OFF(npnm_exec, flags, 8);
OFF(npnm_exec, status, 12);

/* The device interface (driver/nelssa_pnm_devif.h). */
SIZE(npnm_devif_hdr, 256);
OFF(npnm_devif_hdr, mem_size, 8);
OFF(npnm_devif_hdr, sq_entries, 48);
OFF(npnm_devif_hdr, opcodes, 64);
OFF(npnm_devif_hdr, fw_state, 80);
OFF(npnm_devif_hdr, heartbeat, 88);
OFF(npnm_devif_hdr, reset_epoch, 96);
OFF(npnm_devif_hdr, attn_flags, 100);
OFF(npnm_devif_hdr, sq_tail, 128);
OFF(npnm_devif_hdr, cq_head, 132);
OFF(npnm_devif_hdr, sq_head, 192);
OFF(npnm_devif_hdr, cq_tail, 196);
SIZE(npnm_devif_sqe, 256);
OFF(npnm_devif_sqe, cookie, 192);
SIZE(npnm_devif_cqe, 32);
OFF(npnm_devif_cqe, status, 8);
OFF(npnm_devif_cqe, device_ns, 16);
ABI_ASSERT(NPNM_DEVIF_MAGIC == 0x41534c4eu && NPNM_DEVIF_VERSION == 1);

/* Every struct is a multiple of 8 bytes: no tail padding differences. */
ABI_ASSERT(sizeof(struct npnm_info) % 8 == 0);
ABI_ASSERT(sizeof(struct npnm_cmd) % 8 == 0);
ABI_ASSERT(sizeof(struct npnm_attn_item) % 8 == 0);

/* ioctl numbers = io_uring cmd_op values; literal so renumbering fails. */
ABI_ASSERT(NPNM_IOC_GET_INFO == 0x8060B900u);
ABI_ASSERT(NPNM_IOC_MEM_ALLOC == 0xC030B910u);
ABI_ASSERT(NPNM_IOC_MEM_FREE == 0x4010B911u);
ABI_ASSERT(NPNM_IOC_SUBMIT == 0xC030B930u);
ABI_ASSERT(NPNM_IOC_WAIT == 0xC030B931u);
ABI_ASSERT(NPNM_IOC_EXEC == 0xC010B932u);

ABI_ASSERT(NPNM_ABI_VERSION == 1);
ABI_ASSERT(NPNM_OP_NOP == 0 && NPNM_OP_FILL == 1 && NPNM_OP_COPY == 2);
ABI_ASSERT(NPNM_OP_KV_WRITE == 3 && NPNM_OP_SPARSE_ATTN == 4);
ABI_ASSERT(NPNM_OP_SELFTEST == 5 && NPNM_OP_MAX == 6);
ABI_ASSERT(NPNM_DTYPE_BF16 == 1 && NPNM_DTYPE_FP16 == 2);
ABI_ASSERT(NPNM_DTYPE_FP8_E4M3 == 3 && NPNM_DTYPE_INT8 == 4);
ABI_ASSERT(NPNM_KV_QTILE == 16 && NPNM_KV_QGROUP == 32 && NPNM_KV_QALIGN == 64);
ABI_ASSERT(NPNM_ST_OK == 0 && NPNM_ST_SELFTEST_FAIL == 10);
ABI_ASSERT(NPNM_RES2_STATUS(0x123456789ULL) == 0x6789u);
ABI_ASSERT(NPNM_RES2_NS(0x123456789ULL) == 0x12345ULL);

int main(int argc, char **argv)
{
	/* The assertions above are the test; reaching here means they held. */
	printf("1..1\nok 1 - uapi layout pinned (%s, %u-bit)\n",
	       argc > 1 ? argv[1] : "abi", (unsigned int)(sizeof(void *) * 8));
	return 0;
}
