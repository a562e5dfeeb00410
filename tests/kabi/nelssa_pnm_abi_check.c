// SPDX-License-Identifier: GPL-2.0-only
/*
 * Kernel-side twin of tests/abi/abi_layout.c: proves that
 * uapi/linux/nelssa_pnm.h compiles with the kernel's own types, flags and
 * checkers (sparse, -Werror builds), and that the layout the kernel sees is
 * the one userspace pins.  It also compiles driver/npnm_rules.h, the
 * command rules the driver shares with the firmware and the library, with
 * the kernel's flags.  The module is never loaded; building it is the
 * test.
 */
#include <linux/build_bug.h>
#include <linux/module.h>
#include <linux/stddef.h>
#include <linux/nelssa_pnm.h>

#include "npnm_rules.h"

static_assert(sizeof(struct npnm_info) == 96);
static_assert(sizeof(struct npnm_mem_alloc) == 48);
static_assert(sizeof(struct npnm_mem_free) == 16);
static_assert(sizeof(struct npnm_operand) == 24);
static_assert(sizeof(struct npnm_cluster) == 8);
static_assert(sizeof(struct npnm_kv_write_params) == 64);
static_assert(sizeof(struct npnm_sparse_attn_params) == 24);
static_assert(sizeof(struct npnm_attn_item) == 72);
static_assert(sizeof(struct npnm_cmd) == 192);
static_assert(offsetof(struct npnm_cmd, p) == 112);
static_assert(offsetof(struct npnm_cmd, reserved) == 176);
static_assert(sizeof(struct npnm_submit) == 48);
static_assert(sizeof(struct npnm_completion) == 40);
static_assert(sizeof(struct npnm_wait) == 48);
static_assert(sizeof(struct npnm_exec) == 16);
static_assert(NPNM_IOC_GET_INFO == 0x8060B900u);
static_assert(NPNM_IOC_EXEC == 0xC010B932u);

static int __init npnm_abi_check_init(void)
{
	struct npnm_cmd c = { .opcode = NPNM_OP_NOP };

	return npnm_rules_submit_errno(npnm_rules_check(&c));
}
module_init(npnm_abi_check_init);

static void __exit npnm_abi_check_exit(void)
{
}
module_exit(npnm_abi_check_exit);

MODULE_DESCRIPTION("NELSSA PNM uapi compile check (never loaded)");
MODULE_LICENSE("GPL");
