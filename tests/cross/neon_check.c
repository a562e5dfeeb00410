// SPDX-License-Identifier: MIT
/*
 * The AArch64 NEON SPARSE_ATTN path, cross-compiled and run under
 * qemu-user by check-neon.sh (our machines are x86-64): against the
 * float64 reference, against the scalar path, and the firmware SELFTEST
 * (which checks every ISA the CPU supports).  Prints TAP.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/fw.h>

#include "../unit/fwfixture.h"

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

int main(void)
{
	static const uint32_t dims[] = { 64, 128, 256 }, groups[] = { 1, 4, 8 };
	struct nfw_scratch sc = { 0 };

	tu_init("neon");
	printf("1..%d\n", 3 + 3 * 3 + 2 + 4 + 1);
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
	nfw_scratch_free(&sc);
	return 0;
}
