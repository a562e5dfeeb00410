// SPDX-License-Identifier: MIT
/*
 * The AArch64 NEON SPARSE_ATTN path, cross-compiled and run under
 * qemu-user by check-neon.sh (our machines are x86-64): against the
 * float64 reference, against the scalar path, and the firmware SELFTEST
 * (which checks every ISA the CPU supports); NPNM_ATTN_F_BF16_DOTS through
 * BFDOT on a CPU with BF16 and through the plain kernel on one without
 * (--without-bf16).  Prints TAP numbered from --first (1), with the plan
 * unless --no-plan.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/fw.h>

#include "../unit/fwfixture.h"
#include "../../firmware/fw_internal.h"

static int n;

static void report(int ok, const char *what)
{
	printf("%sok %d - %s\n", ok ? "" : "not ", ++n, what);
}

static const char *dtype_name(uint8_t dtype)
{
	return dtype == NPNM_DTYPE_FP16 ? "fp16" : dtype == NPNM_DTYPE_FP8_E4M3 ? "fp8" :
	       dtype == NPNM_DTYPE_INT8 ? "int8" : "bf16";
}

static int shape(uint32_t d, uint32_t g, uint8_t dtype)
{
	struct tu_rng rng;
	struct fx f;
	uint32_t detail;
	float *ref;
	uint64_t out;
	int bad = 0;
	char what[64];

	tu_rng_for(&rng, "neon", d * 100u + g * 10u + dtype);
	fx_init(&f, 8ull << 20, d, g, dtype);
	fx_add_item(&f, &rng, 700, 24, 300);
	fx_add_item(&f, &rng, 333, 7, 1000);
	fx_add_item(&f, &rng, 50, 5, 0);
	fx_finish(&f);
	out = f.cmd.op[NPNM_ATTN_OUT].offset;
	bad |= nfw_run(&f.mem, &f.cmd, NFW_ISA_SCALAR, &f.scratch, &detail) != NPNM_ST_OK;
	ref = tu_alloc(f.out_used);
	memcpy(ref, f.mem.base + out, f.out_used);
	bad |= nfw_run(&f.mem, &f.cmd, NFW_ISA_NEON, &f.scratch, &detail) != NPNM_ST_OK;
	for (uint32_t i = 0; i < f.nr_items; i++) {
		snprintf(what, sizeof(what), "neon d%u g%u %s item %u", d, g,
			 dtype_name(dtype), i);
		bad |= fx_check(&f, i, what);
	}
	for (uint64_t i = 0; i < f.out_used / 4; i++) {
		float a = ((float *)(f.mem.base + out))[i], b = ref[i];

		if (!(fabsf(a - b) <= 2e-5f * (1.0f + fabsf(b))) && !(isinf(a) && a == b))
			bad = 1;
	}
	free(ref);
	fx_free(&f);
	snprintf(what, sizeof(what), "neon d%u g%u %s vs float64 and scalar", d, g,
		 dtype_name(dtype));
	report(!bad, what);
	return bad;
}

/*
 * NPNM_ATTN_F_BF16_DOTS against float64 over the rounded queries; the
 * binary32 reference must reject the same outputs.  (Not against the
 * scalar path: the two round weights relative to different running
 * maxima, so their outputs differ by up to the weights' rounding.)
 */
static int shape_bf16_dots(uint32_t d, uint32_t g, uint8_t dtype, const char *path)
{
	struct tu_rng rng;
	struct fx f;
	uint32_t detail;
	int bad = 0, off = 0;
	char what[96];

	tu_rng_for(&rng, "neon-bf16", d * 100u + g * 10u + dtype);
	fx_init(&f, 8ull << 20, d, g, dtype);
	f.flags = NPNM_ATTN_F_BF16_DOTS;
	fx_add_item(&f, &rng, 700, 24, 300);
	fx_add_item(&f, &rng, 333, 7, 1000);
	fx_add_item(&f, &rng, 31, 5, 1000);
	fx_finish(&f);
	bad |= nfw_run(&f.mem, &f.cmd, NFW_ISA_NEON, &f.scratch, &detail) != NPNM_ST_OK;
	for (uint32_t i = 0; i < f.nr_items; i++) {
		snprintf(what, sizeof(what), "%s d%u g%u %s item %u", path, d, g,
			 dtype_name(dtype), i);
		bad |= fx_check(&f, i, what);
	}
	f.flags = 0;
	for (uint32_t i = 0; i < f.nr_items; i++)
		off += fx_check(&f, i, "binary32 reference (must fail)") != 0;
	bad |= off != (int)f.nr_items;
	fx_free(&f);
	snprintf(what, sizeof(what), "%s d%u g%u %s bf16 dots vs float64", path, d, g,
		 dtype_name(dtype));
	report(!bad, what);
	return bad;
}

int main(int argc, char **argv)
{
	static const uint32_t dims[] = { 64, 128, 256 }, groups[] = { 1, 4, 8 };
	struct nfw_scratch sc = { 0 };
	int plan = 1, without_bf16 = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--no-plan"))
			plan = 0;
		else if (!strcmp(argv[i], "--without-bf16"))
			without_bf16 = 1;
		else if (!strcmp(argv[i], "--first") && i + 1 < argc)
			n = atoi(argv[++i]) - 1;
	}
	tu_init("neon");
	if (without_bf16) {
		/* A CPU without BF16: the flag is honoured by rounding in the plain kernel. */
		if (plan)
			printf("1..4\n");
		report(nfw_attn_kernel(NFW_ISA_NEON, 128, NPNM_ATTN_F_BF16_DOTS) ==
		       nfw_attn_item_neon, "no BF16: bf16 dots take the plain NEON kernel");
		shape_bf16_dots(128, 4, NPNM_DTYPE_BF16, "neon");
		shape_bf16_dots(64, 8, NPNM_DTYPE_BF16, "neon");
		shape_bf16_dots(128, 4, NPNM_DTYPE_FP16, "neon");
		return 0;
	}
	if (plan)
		printf("1..%d\n", 3 + 3 * 3 + 2 + 4 + 1 + 9);
	report(nfw_isa_supported(NFW_ISA_NEON), "NEON path built and supported");
	report(nfw_isa_resolve(NFW_ISA_AUTO) == NFW_ISA_NEON, "auto selects NEON");
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			shape(dims[i], groups[j], NPNM_DTYPE_BF16);
	shape(128, 4, NPNM_DTYPE_FP16);
	shape(72, 4, NPNM_DTYPE_BF16);	/* not a multiple of 8: scalar fallback */
	/* The 8-bit types: the extending loads and the binary16 path of E4M3. */
	shape(128, 4, NPNM_DTYPE_FP8_E4M3);
	shape(128, 4, NPNM_DTYPE_INT8);
	shape(64, 8, NPNM_DTYPE_FP8_E4M3);
	shape(256, 1, NPNM_DTYPE_INT8);
	report(nfw_selftest(0, &sc) == 0, "firmware SELFTEST on aarch64");
	/* The NEON kernel's compute ceiling runs and counts its flops (2 per element, row, token). */
	report(nfw_attn_isa(NFW_ISA_AUTO, 128) == NFW_ISA_NEON &&
	       nfw_attn_peak(NFW_ISA_NEON, 128, 4, 2) == 2ull * 2 * 4 * 128 * 48 &&
	       nfw_attn_peak(NFW_ISA_NEON, 72, 3, 1) == 2ull * 3 * 72 * 48,
	       "NEON compute ceiling (nfw_attn_peak)");
	/* BFDOT where the CPU has it, for bf16 dots over any dim that tiles. */
	report(nfw_attn_kernel(NFW_ISA_NEON, 128, NPNM_ATTN_F_BF16_DOTS) ==
	       nfw_attn_item_neon_bf16 &&
	       nfw_attn_kernel(NFW_ISA_NEON, 128, 0) == nfw_attn_item_neon &&
	       nfw_attn_kernel(NFW_ISA_NEON, 68, NPNM_ATTN_F_BF16_DOTS) == nfw_attn_item_scalar,
	       "BF16: bf16 dots take the BFDOT kernel");
	report(nfw_attn_peak_flags(NFW_ISA_NEON, 128, 4, NPNM_DTYPE_BF16, NPNM_ATTN_F_BF16_DOTS,
				   2) == 2ull * 2 * 4 * 128 * 48 &&
	       nfw_attn_peak_flags(NFW_ISA_NEON, 64, 3, NPNM_DTYPE_BF16, NPNM_ATTN_F_BF16_DOTS,
				   1) == 2ull * 3 * 64 * 48,
	       "BFDOT compute ceiling (nfw_attn_peak_flags)");
	for (int i = 0; i < 3; i++)
		shape_bf16_dots(dims[i], groups[i], NPNM_DTYPE_BF16, "bfdot");
	shape_bf16_dots(128, 5, NPNM_DTYPE_BF16, "bfdot");	/* row blocks 4 + 1 */
	shape_bf16_dots(72, 2, NPNM_DTYPE_BF16, "bfdot");	/* a single 8-channel chunk */
	/* The other types keep widening, with the operands rounded. */
	shape_bf16_dots(128, 4, NPNM_DTYPE_FP16, "bfdot kernel");
	shape_bf16_dots(128, 4, NPNM_DTYPE_INT8, "bfdot kernel");
	nfw_scratch_free(&sc);
	return 0;
}
