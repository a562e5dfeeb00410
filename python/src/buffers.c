// SPDX-License-Identifier: MIT
/*
 * Arrays in and out through the buffer protocol.  The C library takes
 * plain pointers to C-contiguous rows, so an input is used in place when
 * its layout is that already (zero-copy), and refused with a message that
 * names the argument, the element type wanted and the one given when it is
 * not: a silent copy or cast would hide a 2x memory cost or a wrong dtype
 * in a serving loop.  Only id lists are converted, being small.
 *
 * torch.Tensor does not export the buffer protocol; a CPU tensor is read
 * through tensor.detach().numpy(), which shares its memory (bfloat16,
 * which numpy lacks, first as tensor.view(torch.int16): the same bits).
 */
#include "nelssa_py.h"

#include <string.h>

/* --- torch, looked at only when the program imported it -------------- */

static PyObject *torch_tensor, *torch_bf16, *torch_i16;

/* 1: @obj is a torch.Tensor; 0: it is not (or torch is not loaded); -1: error. */
static int is_tensor(PyObject *obj)
{
	if (!torch_tensor) {
		PyObject *name = PyUnicode_FromString("torch"), *torch;

		if (!name)
			return -1;
		/* A tensor cannot exist before torch is imported: never import it here. */
		torch = PyImport_GetModule(name);
		Py_DECREF(name);
		if (!torch)
			return PyErr_Occurred() ? -1 : 0;
		torch_tensor = PyObject_GetAttrString(torch, "Tensor");
		torch_bf16 = PyObject_GetAttrString(torch, "bfloat16");
		torch_i16 = PyObject_GetAttrString(torch, "int16");
		Py_DECREF(torch);
		if (!torch_tensor || !torch_bf16 || !torch_i16) {
			Py_CLEAR(torch_tensor);
			Py_CLEAR(torch_bf16);
			Py_CLEAR(torch_i16);
			return -1;
		}
	}
	return PyObject_IsInstance(obj, torch_tensor);
}

/* The numpy array sharing a CPU tensor's memory, or NULL with an exception. */
static PyObject *tensor_array(PyObject *t, const char *name)
{
	PyObject *dev, *type, *dtype, *view = NULL, *det = NULL, *arr = NULL;
	int cpu, bf16;

	dev = PyObject_GetAttrString(t, "device");
	if (!dev)
		return NULL;
	type = PyObject_GetAttrString(dev, "type");
	Py_DECREF(dev);
	if (!type)
		return NULL;
	cpu = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "cpu") == 0;
	if (!cpu) {
		PyErr_Format(PyExc_ValueError,
			     "%s is a torch tensor on device '%S': move it to the CPU (tensor.cpu())",
			     name, type);
		Py_DECREF(type);
		return NULL;
	}
	Py_DECREF(type);
	dtype = PyObject_GetAttrString(t, "dtype");
	if (!dtype)
		return NULL;
	bf16 = dtype == torch_bf16;
	Py_DECREF(dtype);
	if (bf16)
		view = PyObject_CallMethod(t, "view", "O", torch_i16);
	else
		view = Py_NewRef(t);
	if (!view)
		return NULL;
	/* detach(): numpy() refuses a tensor that requires grad; same storage. */
	det = PyObject_CallMethod(view, "detach", NULL);
	Py_DECREF(view);
	if (det)
		arr = PyObject_CallMethod(det, "numpy", NULL);
	Py_XDECREF(det);
	return arr;
}

/* --- element types ---------------------------------------------------- */

/* The one-letter struct format of a view ("<f", "=f", "@f" -> 'f'), or 0. */
static char norm_fmt(const char *f)
{
	if (!f)
		return 'B';
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (*f == '@' || *f == '=' || *f == '<')
#else
	if (*f == '@' || *f == '=' || *f == '>' || *f == '!')
#endif
		f++;
	return f[0] && !f[1] ? f[0] : 0;
}

static const char *fmt_name(char fmt, Py_ssize_t itemsize)
{
	switch (fmt) {
	case 'f': return "float32";
	case 'd': return "float64";
	case 'e': return "float16";
	case 'g': return "longdouble";
	case '?': return "bool";
	case 'b': return "int8";
	case 'B': return "uint8";
	case 'h': return "int16";
	case 'H': return "uint16";
	case 'i': return "int32";
	case 'I': return "uint32";
	case 'l': case 'q': return itemsize == 8 ? "int64" : "int32";
	case 'L': case 'Q': return itemsize == 8 ? "uint64" : "uint32";
	default: return "an unsupported element type";
	}
}

static int is_int_fmt(char fmt)
{
	return fmt && strchr("bBhHiIlLqQnN", fmt) != NULL;
}

static int is_signed_fmt(char fmt)
{
	return fmt && strchr("bhilqn", fmt) != NULL;
}

static const char *elem_want(enum npy_elem e)
{
	switch (e) {
	case NPY_E_F32: return "float32";
	case NPY_E_U32: return "uint32";
	case NPY_E_KV:
		return "bf16 bits as uint16 (or int16, or a torch.bfloat16 tensor) or float16";
	default: return "any";
	}
}

/* 0 when @fmt of @itemsize is what @e takes; sets b->kv for K/V. */
static int elem_ok(enum npy_elem e, char fmt, Py_ssize_t itemsize, struct npy_buf *b)
{
	switch (e) {
	case NPY_E_F32:
		return fmt == 'f' && itemsize == 4 ? 0 : -1;
	case NPY_E_U32:
		return (fmt == 'I' || fmt == 'L') && itemsize == 4 ? 0 : -1;
	case NPY_E_KV:
		if ((fmt == 'H' || fmt == 'h') && itemsize == 2) {
			b->kv = NELSSA_KV_BF16;
			return 0;
		}
		if (fmt == 'e' && itemsize == 2) {
			b->kv = NELSSA_KV_FP16;
			return 0;
		}
		return -1;
	default:
		return fmt ? 0 : -1;
	}
}

/* --- getting and releasing views -------------------------------------- */

void npy_buf_release(struct npy_buf *b)
{
	if (b->have_view)
		PyBuffer_Release(&b->view);
	b->have_view = 0;
	Py_CLEAR(b->holder);
	PyMem_Free(b->owned);
	b->owned = NULL;
	b->ptr = NULL;
}

/* The view of @obj (or of its tensor's array), unchecked; fills b->holder. */
static int get_view(PyObject *obj, const char *name, struct npy_buf *b)
{
	int t = is_tensor(obj);

	if (t < 0)
		return -1;
	b->holder = t ? tensor_array(obj, name) : Py_NewRef(obj);
	if (!b->holder)
		return -1;
	if (!PyObject_CheckBuffer(b->holder)) {
		PyErr_Format(PyExc_TypeError,
			     "%s must be a numpy array, a CPU torch tensor or another object "
			     "with the buffer protocol, not %.100s", name, Py_TYPE(obj)->tp_name);
		Py_CLEAR(b->holder);
		return -1;
	}
	if (PyObject_GetBuffer(b->holder, &b->view, PyBUF_RECORDS_RO) < 0) {
		Py_CLEAR(b->holder);
		return -1;
	}
	b->have_view = 1;
	b->fmt = norm_fmt(b->view.format);
	b->itemsize = b->view.itemsize;
	return 0;
}

/* Layout checks common to every input and output. */
static int check_layout(const char *name, int writable, struct npy_buf *b)
{
	if (writable && b->view.readonly) {
		PyErr_Format(PyExc_ValueError, "%s must be writable", name);
		return -1;
	}
	if (!PyBuffer_IsContiguous(&b->view, 'C')) {
		PyErr_Format(PyExc_ValueError,
			     "%s must be C-contiguous (numpy.ascontiguousarray() or "
			     "tensor.contiguous() makes a copy that is)", name);
		return -1;
	}
	if (b->view.ndim > NPY_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "%s has %d dimensions, at most %d are taken",
			     name, b->view.ndim, NPY_MAX_DIMS);
		return -1;
	}
	/* The library reads whole elements: a misaligned float is undefined behaviour. */
	if (b->itemsize > 1 && (uintptr_t)b->view.buf % (uintptr_t)b->itemsize) {
		PyErr_Format(PyExc_ValueError, "%s is not aligned to its %zd-byte elements",
			     name, b->itemsize);
		return -1;
	}
	b->ptr = b->view.buf;
	b->ndim = b->view.ndim;
	b->len = b->itemsize ? b->view.len / b->itemsize : 0;
	for (int i = 0; i < b->ndim; i++)
		b->shape[i] = b->view.shape ? b->view.shape[i] : b->len;
	return 0;
}

int npy_buf_get(PyObject *obj, const char *name, enum npy_elem elem, int writable,
		struct npy_buf *b)
{
	memset(b, 0, sizeof(*b));
	if (get_view(obj, name, b) < 0)
		return -1;
	if (elem_ok(elem, b->fmt, b->itemsize, b) < 0) {
		PyErr_Format(PyExc_TypeError, "%s must be %s, not %s", name, elem_want(elem),
			     fmt_name(b->fmt, b->itemsize));
		goto fail;
	}
	if (check_layout(name, writable, b) < 0)
		goto fail;
	return 0;
fail:
	npy_buf_release(b);
	return -1;
}

/* Copies integer elements of any width into b->owned as uint32, range-checked. */
static int ids_from_ints(const char *name, struct npy_buf *b)
{
	const Py_ssize_t n = b->len;
	uint32_t *ids = PyMem_Malloc(n ? (size_t)n * 4 : 1);

	if (!ids) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		const char *p = (const char *)b->view.buf + i * b->itemsize;
		long long sv = 0;
		unsigned long long uv = 0;

		if (is_signed_fmt(b->fmt)) {
			switch (b->itemsize) {
			case 1: sv = *(const int8_t *)p; break;
			case 2: sv = *(const int16_t *)p; break;
			case 4: sv = *(const int32_t *)p; break;
			default: sv = *(const int64_t *)p; break;
			}
			uv = (unsigned long long)sv;
		} else {
			switch (b->itemsize) {
			case 1: uv = *(const uint8_t *)p; break;
			case 2: uv = *(const uint16_t *)p; break;
			case 4: uv = *(const uint32_t *)p; break;
			default: uv = *(const uint64_t *)p; break;
			}
		}
		if (sv < 0 || uv > UINT32_MAX) {
			PyErr_Format(PyExc_ValueError, "%s[%zd] is out of range for a uint32 id",
				     name, i);
			PyMem_Free(ids);
			return -1;
		}
		ids[i] = (uint32_t)uv;
	}
	b->owned = ids;
	b->ptr = ids;
	return 0;
}

static int ids_from_sequence(PyObject *obj, const char *name, struct npy_buf *b)
{
	PyObject *seq = PySequence_Fast(obj, "");
	uint32_t *ids;
	Py_ssize_t n;

	if (!seq) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "%s must be a uint32 array or a sequence of integers, not %.100s",
			     name, Py_TYPE(obj)->tp_name);
		return -1;
	}
	n = PySequence_Fast_GET_SIZE(seq);
	ids = PyMem_Malloc(n ? (size_t)n * 4 : 1);
	if (!ids) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
		PyObject *ix = PyNumber_Index(it);
		unsigned long long v = ix ? PyLong_AsUnsignedLongLong(ix) : 0;

		Py_XDECREF(ix);
		if (!ix || PyErr_Occurred() || v > UINT32_MAX) {
			PyErr_Clear();
			PyErr_Format(PyExc_ValueError, "%s[%zd] is not an integer in [0, 2**32)",
				     name, i);
			PyMem_Free(ids);
			Py_DECREF(seq);
			return -1;
		}
		ids[i] = (uint32_t)v;
	}
	Py_DECREF(seq);
	b->owned = ids;
	b->ptr = ids;
	b->ndim = 1;
	b->len = n;
	b->shape[0] = n;
	b->itemsize = 4;
	b->fmt = 'I';
	return 0;
}

int npy_buf_ids(PyObject *obj, const char *name, struct npy_buf *b)
{
	int t;

	memset(b, 0, sizeof(*b));
	t = is_tensor(obj);
	if (t < 0)
		return -1;
	if (!t && !PyObject_CheckBuffer(obj))
		return ids_from_sequence(obj, name, b);
	if (get_view(obj, name, b) < 0)
		return -1;
	if (!is_int_fmt(b->fmt)) {
		PyErr_Format(PyExc_TypeError, "%s must be an integer array (uint32 is used in place), "
			     "not %s", name, fmt_name(b->fmt, b->itemsize));
		goto fail;
	}
	if (check_layout(name, 0, b) < 0)
		goto fail;
	if (b->ndim != 1) {
		PyErr_Format(PyExc_ValueError, "%s must be one-dimensional, not %d-dimensional",
			     name, b->ndim);
		goto fail;
	}
	if (elem_ok(NPY_E_U32, b->fmt, b->itemsize, b) < 0 && ids_from_ints(name, b) < 0)
		goto fail;
	/* The converted copy stands alone: let go of the view at once. */
	if (b->owned) {
		PyBuffer_Release(&b->view);
		b->have_view = 0;
		Py_CLEAR(b->holder);
		b->itemsize = 4;
		b->fmt = 'I';
	}
	return 0;
fail:
	npy_buf_release(b);
	return -1;
}

static PyObject *shape_tuple(int ndim, const Py_ssize_t *shape)
{
	PyObject *t = PyTuple_New(ndim);

	for (int i = 0; t && i < ndim; i++) {
		PyObject *v = PyLong_FromSsize_t(shape[i]);

		if (!v) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, i, v);
	}
	return t;
}

int npy_buf_shape(const struct npy_buf *b, const char *name, int ndim, const Py_ssize_t *dims)
{
	int ok = b->ndim == ndim;
	PyObject *got, *want;

	for (int i = 0; ok && i < ndim; i++)
		ok = dims[i] < 0 || dims[i] == b->shape[i];
	if (ok)
		return 0;
	got = shape_tuple(b->ndim, b->shape);
	want = shape_tuple(ndim, dims);
	if (got && want)
		PyErr_Format(PyExc_ValueError, "%s must have shape %R (-1: any), not %R",
			     name, want, got);
	Py_XDECREF(got);
	Py_XDECREF(want);
	return -1;
}

/* --- new arrays ------------------------------------------------------- */

/* numpy.empty, when numpy imports; NULL and no exception when it does not. */
static PyObject *numpy_empty(void)
{
	static PyObject *empty;
	static int tried;
	PyObject *np;

	if (tried)
		return empty;
	tried = 1;
	np = PyImport_ImportModule("numpy");
	if (!np) {
		/* Outputs then are memoryviews: numpy is optional. */
		PyErr_Clear();
		return NULL;
	}
	empty = PyObject_GetAttrString(np, "empty");
	Py_DECREF(np);
	PyErr_Clear();
	return empty;
}

static PyObject *new_array(char fmt, int ndim, const Py_ssize_t *shape)
{
	PyObject *empty = numpy_empty(), *shp, *res;
	Py_ssize_t bytes = 1;
	char f[2] = { fmt, 0 };

	shp = shape_tuple(ndim, shape);
	if (!shp)
		return NULL;
	if (empty) {
		res = PyObject_CallFunction(empty, "Os", shp, f);
	} else {
		PyObject *ba, *mv;

		for (int i = 0; i < ndim; i++)
			bytes *= shape[i];
		bytes *= fmt == 'e' || fmt == 'H' || fmt == 'h' ? 2 : 4;
		ba = PyByteArray_FromStringAndSize(NULL, bytes);
		mv = ba ? PyMemoryView_FromObject(ba) : NULL;
		Py_XDECREF(ba);
		res = mv ? PyObject_CallMethod(mv, "cast", "sO", f, shp) : NULL;
		Py_XDECREF(mv);
	}
	Py_DECREF(shp);
	return res;
}

PyObject *npy_buf_out(PyObject *out, const char *name, char fmt, int ndim,
		      const Py_ssize_t *shape, struct npy_buf *b)
{
	const enum npy_elem e = fmt == 'f' ? NPY_E_F32 : fmt == 'I' ? NPY_E_U32 : NPY_E_ANY;
	PyObject *obj = out && out != Py_None ? Py_NewRef(out) : new_array(fmt, ndim, shape);

	if (!obj)
		return NULL;
	if (npy_buf_get(obj, name, e, 1, b) < 0) {
		Py_DECREF(obj);
		return NULL;
	}
	if ((e == NPY_E_ANY && b->fmt != fmt) || npy_buf_shape(b, name, ndim, shape) < 0) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_TypeError, "%s must be %s", name,
				     fmt_name(fmt, b->itemsize));
		npy_buf_release(b);
		Py_DECREF(obj);
		return NULL;
	}
	return obj;
}

PyObject *npy_array_copy(char fmt, int ndim, const Py_ssize_t *shape, const void *src)
{
	struct npy_buf b;
	PyObject *obj = npy_buf_out(NULL, "result", fmt, ndim, shape, &b);

	if (!obj)
		return NULL;
	if (b.len)
		memcpy(b.ptr, src, (size_t)b.len * (size_t)b.itemsize);
	npy_buf_release(&b);
	return obj;
}

void npy_lock(PyThread_type_lock lock)
{
	if (PyThread_acquire_lock(lock, NOWAIT_LOCK))
		return;
	Py_BEGIN_ALLOW_THREADS
	PyThread_acquire_lock(lock, WAIT_LOCK);
	Py_END_ALLOW_THREADS
}
