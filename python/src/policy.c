// SPDX-License-Identifier: MIT
/*
 * nelssa.Router and nelssa.ThresholdCtl: the placement policy of
 * <nelssa/policy.h> for Python serving engines.  The objects hold the C
 * structs themselves and expose their fields as attributes, so an engine
 * routes with exactly the rules the C client and the simulator use
 * (Documentation/policy.rst) instead of a Python copy of them.
 */
#include "nelssa_py.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <structmember.h>

#include <nelssa/policy.h>

struct npy_router {
	PyObject_HEAD
	struct nelssa_router r;
};

struct npy_threshold {
	PyObject_HEAD
	struct nelssa_threshold_ctl c;
};

/* A built-in profile's name, else a profile file (nelssactl calibrate --output). */
static int load_profile(const char *name, struct nelssa_hw_profile *hw)
{
	char err[256] = "";
	int rc;

	if (nelssa_hw_profile_builtin(name, hw) == 0)
		return 0;
	rc = nelssa_hw_profile_load(name, hw, err, sizeof(err));
	if (rc == 0)
		return 0;
	if (rc == -ENOENT && !err[0])
		npy_raisef(rc, "hardware profile \"%s\": neither a built-in name "
			   "(h100-nvl, h200) nor a readable file", name);
	else
		npy_raisef(rc, "hardware profile \"%s\": %s", name, err);
	return -1;
}

static int router_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "profile", "layers", "kv_heads", "head_dim", "elem_bytes",
				  "weights", "compression", "select", "pnm_kv_dtype",
				  "devices", NULL };
	struct npy_router *o = (struct npy_router *)self;
	struct nelssa_model_profile m = { .elem_bytes = 2, .compression = 16, .select = 0.04 };
	struct nelssa_hw_profile hw;
	uint32_t n_dev = 1;
	const char *profile;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s|$O&O&O&O&dddO&O&", kwlist, &profile,
					 npy_conv_u32, &m.layers, npy_conv_u32, &m.kv_heads,
					 npy_conv_u32, &m.head_dim, npy_conv_u32, &m.elem_bytes,
					 &m.weights, &m.compression, &m.select, npy_conv_u32,
					 &m.pnm_kv_dtype, npy_conv_u32, &n_dev))
		return -1;
	if (load_profile(profile, &hw) < 0)
		return -1;
	rc = nelssa_router_init(&o->r, &hw, &m, n_dev);
	if (rc < 0) {
		npy_raise(rc, "Router: layers, kv_heads, head_dim, elem_bytes and devices must "
			  "be positive, compression > 1, 0 < select <= 1, weights >= 0");
		return -1;
	}
	return 0;
}

static double opt_final(PyObject *final_len, double len)
{
	return final_len == Py_None ? len : PyFloat_AsDouble(final_len);
}

PyDoc_STRVAR(route_doc,
"route(len, final_len=None, *, gpu_free=0.0, prev=-1, pinned=False, behind=False) -> int\n--\n\n"
"nelssa_route(): where a request of len tokens (ending at final_len,\n"
"default len) runs: ROUTE_GPU, ROUTE_PNM (admitted: counted until\n"
"leave()), ROUTE_QUEUE or ROUTE_REFUSE; ``why`` says why for the last two.");

static PyObject *router_route(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "len", "final_len", "gpu_free", "prev", "pinned", "behind",
				  NULL };
	struct npy_router *o = (struct npy_router *)self;
	struct nelssa_route_query q = { .prev = -1 };
	PyObject *final_len = Py_None;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "d|O$dipp", kwlist, &q.len, &final_len,
					 &q.gpu_free, &q.prev, &q.pinned, &q.behind))
		return NULL;
	q.final_len = opt_final(final_len, q.len);
	if (PyErr_Occurred())
		return NULL;
	if (!(q.len >= 0) || !(q.final_len >= 0) || !(q.gpu_free >= 0)) {
		PyErr_SetString(PyExc_ValueError, "route(): lengths and gpu_free must be >= 0");
		return NULL;
	}
	if (q.prev < -1 || q.prev > NELSSA_ROUTE_PNM) {
		PyErr_SetString(PyExc_ValueError, "route(): prev must be -1, ROUTE_GPU or ROUTE_PNM");
		return NULL;
	}
	return PyLong_FromLong(nelssa_route(&o->r, &q));
}

PyDoc_STRVAR(fits_doc,
"fits(final_len) -> int\n--\n\n"
"nelssa_router_fits(): FITS_GPU | FITS_PNM where a request ending at\n"
"final_len tokens can ever run; 0 where it cannot.");

static PyObject *router_fits(PyObject *self, PyObject *arg)
{
	double len = PyFloat_AsDouble(arg);

	if (len == -1.0 && PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(nelssa_router_fits(&((struct npy_router *)self)->r, len));
}

PyDoc_STRVAR(leave_doc,
"leave(len, final_len=None) -> None\n--\n\n"
"nelssa_router_leave(): a request admitted to the PNM tier left it, with\n"
"len tokens now and final_len (default len) reserved at admission.");

PyDoc_STRVAR(grow_doc,
"grow(tokens, final_len) -> None\n--\n\n"
"nelssa_router_grow(): a PNM request produced tokens more.");

static PyObject *router_leave_grow(PyObject *self, PyObject *args, int grow)
{
	struct npy_router *o = (struct npy_router *)self;
	PyObject *final_len = Py_None;
	double a, fin;

	if (!PyArg_ParseTuple(args, grow ? "dO:grow" : "d|O:leave", &a, &final_len))
		return NULL;
	fin = opt_final(final_len, a);
	if (PyErr_Occurred())
		return NULL;
	/* A NaN here would poison the tier's counts for good. */
	if (!(a >= 0) || !(fin >= 0) || !isfinite(a) || !isfinite(fin)) {
		PyErr_Format(PyExc_ValueError, "%s(): token counts must be finite and >= 0",
			     grow ? "grow" : "leave");
		return NULL;
	}
	if (grow)
		nelssa_router_grow(&o->r, a, fin);
	else
		nelssa_router_leave(&o->r, a, fin);
	Py_RETURN_NONE;
}

static PyObject *router_leave(PyObject *self, PyObject *args)
{
	return router_leave_grow(self, args, 0);
}

static PyObject *router_grow(PyObject *self, PyObject *args)
{
	return router_leave_grow(self, args, 1);
}

/*
 * A sequence of numbers as a PyMem_Malloc'd array of doubles.  Read from a
 * tuple copy: a number's __float__ could otherwise shrink a list under us.
 */
static double *doubles(PyObject *seq, const char *name, Py_ssize_t *n)
{
	PyObject *fast = PySequence_Check(seq) ? PySequence_Tuple(seq) : NULL;
	double *d;

	if (!fast) {
		if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
			PyErr_Clear();
			PyErr_SetString(PyExc_TypeError, name);
		}
		return NULL;
	}
	*n = PyTuple_GET_SIZE(fast);
	d = PyMem_Malloc(((size_t)*n + 1) * sizeof(*d));
	if (!d) {
		Py_DECREF(fast);
		PyErr_NoMemory();
		return NULL;
	}
	for (Py_ssize_t i = 0; i < *n; i++) {
		d[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(fast, i));
		if (d[i] == -1.0 && PyErr_Occurred()) {
			PyMem_Free(d);
			Py_DECREF(fast);
			return NULL;
		}
	}
	Py_DECREF(fast);
	return d;
}

PyDoc_STRVAR(pick_doc,
"pick_migration(ctx, final_ctx, gpu_kv_used, high_water) -> int\n--\n\n"
"nelssa_pick_migration_final(): the index in ctx (the GPU requests'\n"
"context lengths; final_ctx their ends, or None) of the request to move\n"
"to the PNM tier, or -1.");

static PyObject *router_pick(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "ctx", "final_ctx", "gpu_kv_used", "high_water", NULL };
	struct npy_router *o = (struct npy_router *)self;
	PyObject *ctx_o, *fin_o = Py_None;
	double used, high, *ctx, *fin = NULL;
	Py_ssize_t n, nf = 0;
	int pick;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOdd", kwlist, &ctx_o, &fin_o, &used, &high))
		return NULL;
	ctx = doubles(ctx_o, "ctx must be a sequence of numbers", &n);
	if (!ctx)
		return NULL;
	if (fin_o != Py_None) {
		fin = doubles(fin_o, "final_ctx must be a sequence of numbers", &nf);
		if (!fin) {
			PyMem_Free(ctx);
			return NULL;
		}
		if (nf != n) {
			PyMem_Free(ctx);
			PyMem_Free(fin);
			return PyErr_Format(PyExc_ValueError,
					    "final_ctx has %zd entries, ctx %zd", nf, n);
		}
	}
	pick = nelssa_pick_migration_final(&o->r, ctx, fin, (size_t)n, used, high);
	PyMem_Free(ctx);
	PyMem_Free(fin);
	return PyLong_FromLong(pick);
}

PyDoc_STRVAR(step_time_doc,
"pnm_step_time(tokens, reqs) -> float\n--\n\n"
"nelssa_pnm_step_time(): seconds of one PNM-tier decode step at that load.");

static PyObject *router_step_time(PyObject *self, PyObject *args)
{
	double tokens;
	uint32_t reqs;

	if (!PyArg_ParseTuple(args, "dO&:pnm_step_time", &tokens, npy_conv_u32, &reqs))
		return NULL;
	return PyFloat_FromDouble(nelssa_pnm_step_time(&((struct npy_router *)self)->r,
						       tokens, reqs));
}

PyDoc_STRVAR(step_of_doc,
"pnm_step_of(final_len, t_gpu_step) -> float\n--\n\n"
"nelssa_pnm_step_of(): seconds from one token of a PNM request ending at\n"
"final_len to its next, at the tier's load now (t_gpu_step: the GPU's\n"
"decode step now, 0 when not known); requests only the PNM tier can hold\n"
"are paced by it.");

static PyObject *router_step_of(PyObject *self, PyObject *args)
{
	double fin, t_gpu;

	if (!PyArg_ParseTuple(args, "dd:pnm_step_of", &fin, &t_gpu))
		return NULL;
	if (!(fin >= 0) || !(t_gpu >= 0)) {
		PyErr_SetString(PyExc_ValueError, "pnm_step_of(): final_len and t_gpu_step >= 0");
		return NULL;
	}
	return PyFloat_FromDouble(nelssa_pnm_step_of(&((struct npy_router *)self)->r, fin,
						     t_gpu));
}

PyDoc_STRVAR(crossover_doc,
"crossover() -> float\n--\n\n"
"nelssa_crossover() of the router's hardware, model and devices: the\n"
"context length from which the PNM tier wins (inf when it never does).");

static PyObject *router_crossover(PyObject *self, PyObject *unused)
{
	struct npy_router *o = (struct npy_router *)self;

	(void)unused;
	return PyFloat_FromDouble(nelssa_crossover(&o->r.hw, &o->r.m, o->r.n_dev));
}

static PyObject *router_why(PyObject *self, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(((struct npy_router *)self)->r.why);
}

static PyObject *router_profile(PyObject *self, void *unused)
{
	(void)unused;
	return PyUnicode_FromString(((struct npy_router *)self)->r.hw.name);
}

static PyObject *router_kv_bytes(PyObject *self, void *unused)
{
	(void)unused;
	return PyFloat_FromDouble(nelssa_kv_bytes_per_token(&((struct npy_router *)self)->r.m));
}

#define RMEMBER(f, flags, doc) \
	{ #f, T_DOUBLE, offsetof(struct npy_router, r.f), flags, doc }

static PyMemberDef router_members[] = {
	RMEMBER(t_input, 0, "routing threshold in use, tokens"),
	RMEMBER(gpu_kv, 0, "GPU KV pool, bytes"),
	RMEMBER(cap_pnm_mem, 0, "fraction of PNM memory the tier may fill"),
	RMEMBER(cap_step, 0, "PNM tier's step deadline, seconds"),
	RMEMBER(cap_gpu_meta, 0, "GPU bytes for PNM requests' centroids and windows"),
	RMEMBER(cap_gpu_share, 0, "see struct nelssa_router"),
	RMEMBER(cap_pnm_share, 0, "see struct nelssa_router"),
	RMEMBER(net_bw, 0, "bytes/s a migration moves KV at"),
	RMEMBER(cap_migrate_pause, 0, "see struct nelssa_router"),
	RMEMBER(pnm_tokens, READONLY, "tokens on the PNM tier now"),
	RMEMBER(pnm_final, READONLY, "tokens reserved on the PNM tier"),
	{ "pnm_mem", T_DOUBLE, offsetof(struct npy_router, r.hw.pnm_mem), READONLY,
	  "one PNM device's memory, bytes (the profile's)" },
	{ "gpu_bw", T_DOUBLE, offsetof(struct npy_router, r.hw.gpu_bw), READONLY,
	  "GPU memory bandwidth, bytes/s (the profile's)" },
	{ "window", T_UINT, offsetof(struct npy_router, r.window), 0,
	  "tokens each PNM request keeps on the GPU" },
	{ "pnm_requests", T_UINT, offsetof(struct npy_router, r.pnm_requests), READONLY,
	  "requests admitted to the PNM tier" },
	{ "devices", T_UINT, offsetof(struct npy_router, r.n_dev), READONLY, "PNM devices" },
	{ NULL, 0, 0, 0, NULL },
};

static PyGetSetDef router_getset[] = {
	{ "why", router_why, NULL, "reason of the last QUEUE or REFUSE", NULL },
	{ "profile", router_profile, NULL, "the hardware profile's name", NULL },
	{ "kv_bytes_per_token", router_kv_bytes, NULL, "M_kv, nelssa_kv_bytes_per_token()",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyMethodDef router_methods[] = {
	{ "route", (PyCFunction)(void (*)(void))router_route, METH_VARARGS | METH_KEYWORDS,
	  route_doc },
	{ "fits", router_fits, METH_O, fits_doc },
	{ "leave", router_leave, METH_VARARGS, leave_doc },
	{ "grow", router_grow, METH_VARARGS, grow_doc },
	{ "pick_migration", (PyCFunction)(void (*)(void))router_pick,
	  METH_VARARGS | METH_KEYWORDS, pick_doc },
	{ "pnm_step_time", router_step_time, METH_VARARGS, step_time_doc },
	{ "pnm_step_of", router_step_of, METH_VARARGS, step_of_doc },
	{ "crossover", router_crossover, METH_NOARGS, crossover_doc },
	{ NULL, NULL, 0, NULL },
};

PyDoc_STRVAR(router_doc,
"Router(profile, *, layers, kv_heads, head_dim, elem_bytes=2, weights=0.0,\n"
"       compression=16.0, select=0.04, pnm_kv_dtype=0, devices=1)\n\n"
"A struct nelssa_router (nelssa_router_init()): profile is a built-in\n"
"hardware profile (\"h100-nvl\", \"h200\") or a profile file such as\n"
"nelssactl calibrate --output writes.  The struct's fields are\n"
"attributes (set gpu_kv and the caps after construction).");

static PyTypeObject router_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.Router",
	.tp_basicsize = sizeof(struct npy_router),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = router_doc,
	.tp_new = PyType_GenericNew,
	.tp_init = router_init,
	.tp_methods = router_methods,
	.tp_members = router_members,
	.tp_getset = router_getset,
};

static int threshold_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "base", NULL };
	double base;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "d", kwlist, &base))
		return -1;
	if (!(base > 0) || !isfinite(base)) {
		PyErr_SetString(PyExc_ValueError, "ThresholdCtl: base must be finite and > 0");
		return -1;
	}
	nelssa_threshold_init(&((struct npy_threshold *)self)->c, base);
	return 0;
}

PyDoc_STRVAR(update_doc,
"update(u_gpu, u_pnm, dt) -> float\n--\n\n"
"nelssa_threshold_update(): feed each tier's pressure over the last dt\n"
"seconds; returns the threshold to use now.");

static PyObject *threshold_update(PyObject *self, PyObject *args)
{
	double ug, up, dt;

	if (!PyArg_ParseTuple(args, "ddd:update", &ug, &up, &dt))
		return NULL;
	if (!(ug >= 0) || !(up >= 0) || !(dt > 0)) {
		PyErr_SetString(PyExc_ValueError, "update(): pressures >= 0 and dt > 0");
		return NULL;
	}
	return PyFloat_FromDouble(nelssa_threshold_update(&((struct npy_threshold *)self)->c,
							  ug, up, dt));
}

#define TMEMBER(f, flags) \
	{ #f, T_DOUBLE, offsetof(struct npy_threshold, c.f), flags, NULL }

static PyMemberDef threshold_members[] = {
	TMEMBER(base, READONLY), TMEMBER(x, READONLY), TMEMBER(period, 0), TMEMBER(gain, 0),
	TMEMBER(deadband, 0), TMEMBER(max_step, 0), TMEMBER(hold, 0), TMEMBER(x_min, 0),
	TMEMBER(x_max, 0),
	{ NULL, 0, 0, 0, NULL },
};

static PyMethodDef threshold_methods[] = {
	{ "update", threshold_update, METH_VARARGS, update_doc },
	{ NULL, NULL, 0, NULL },
};

PyDoc_STRVAR(threshold_doc,
"ThresholdCtl(base)\n\n"
"The load-adaptive threshold (struct nelssa_threshold_ctl, defaults of\n"
"nelssa_threshold_init()); settings are attributes.");

static PyTypeObject threshold_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "nelssa.ThresholdCtl",
	.tp_basicsize = sizeof(struct npy_threshold),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = threshold_doc,
	.tp_new = PyType_GenericNew,
	.tp_init = threshold_init,
	.tp_methods = threshold_methods,
	.tp_members = threshold_members,
};

int npy_policy_init(PyObject *m)
{
	static const struct {
		const char *name;
		long value;
	} k[] = {
		{ "ROUTE_GPU", NELSSA_ROUTE_GPU },
		{ "ROUTE_PNM", NELSSA_ROUTE_PNM },
		{ "ROUTE_QUEUE", NELSSA_ROUTE_QUEUE },
		{ "ROUTE_REFUSE", NELSSA_ROUTE_REFUSE },
		{ "FITS_GPU", NELSSA_FITS_GPU },
		{ "FITS_PNM", NELSSA_FITS_PNM },
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (PyModule_AddIntConstant(m, k[i].name, k[i].value) < 0)
			return -1;
	/* Readies each type and adds it under its short name, reference and all. */
	if (PyModule_AddType(m, &router_type) < 0 || PyModule_AddType(m, &threshold_type) < 0)
		return -1;
	return 0;
}
