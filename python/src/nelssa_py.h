/* SPDX-License-Identifier: MIT */
/*
 * What the files of the nelssa extension share: the exception, buffer
 * access, argument converters and each type's registration.  One
 * interpreter, single-phase init: the state is the few globals below.
 */
#ifndef NELSSA_PY_H
#define NELSSA_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <stdint.h>

#include <nelssa/attention.h>

/* errors.c: nelssa.Error, an OSError carrying the errno and the library's words. */
extern PyObject *npy_error;
int npy_errors_init(PyObject *m);
/* Raises nelssa.Error(-@neg_errno, @msg) and returns NULL. */
PyObject *npy_raise(int neg_errno, const char *msg);
/* The same with a printf-style message. */
PyObject *npy_raisef(int neg_errno, const char *fmt, ...);

/* Argument converters for "O&": range-checked integers, no silent masking. */
int npy_conv_u8(PyObject *o, void *out);
int npy_conv_u16(PyObject *o, void *out);
int npy_conv_u32(PyObject *o, void *out);
int npy_conv_u64(PyObject *o, void *out);

/*
 * buffers.c: arrays in and out.  An input is anything with the buffer
 * protocol (numpy arrays, memoryviews, array.array) or a CPU torch.Tensor,
 * read through tensor.numpy() (zero-copy); it must be C-contiguous and of
 * the one element type asked for.  Id arrays also take other integer
 * types and plain sequences, converted to a uint32 copy.
 */
enum npy_elem {
	NPY_E_F32,	/* float32 ('f') */
	NPY_E_U32,	/* uint32 ('I'), ids and sizes */
	NPY_E_KV,	/* bf16 bits (uint16/int16, torch.bfloat16) or float16 */
	NPY_E_ANY,	/* any element type (row gathers) */
};

#define NPY_MAX_DIMS 4

struct npy_buf {
	Py_buffer view;
	int have_view;
	PyObject *holder;	/* what the view is of (a tensor's numpy array) */
	void *owned;		/* a converted copy, PyMem_Free()d */
	void *ptr;
	int ndim;
	Py_ssize_t shape[NPY_MAX_DIMS];
	Py_ssize_t len;		/* elements */
	Py_ssize_t itemsize;
	char fmt;		/* normalised one-letter format */
	enum nelssa_kv_dtype kv;	/* NPY_E_KV: which */
};

int npy_buf_get(PyObject *obj, const char *name, enum npy_elem elem, int writable,
		struct npy_buf *b);
/* Ids: uint32 zero-copy, other integer buffers or sequences copied; 1-D. */
int npy_buf_ids(PyObject *obj, const char *name, struct npy_buf *b);
void npy_buf_release(struct npy_buf *b);
/*
 * Checks @b's shape against @dims (@ndim of them; -1 takes any extent)
 * and raises ValueError naming @name otherwise.
 */
int npy_buf_shape(const struct npy_buf *b, const char *name, int ndim, const Py_ssize_t *dims);
/*
 * An output: @out when given (checked as a writable @fmt array of
 * @shape), else a new array (numpy.ndarray when numpy imports, else a
 * memoryview over a bytearray).  Returns a new reference with @b holding
 * its writable view, or NULL.
 */
PyObject *npy_buf_out(PyObject *out, const char *name, char fmt, int ndim,
		      const Py_ssize_t *shape, struct npy_buf *b);
/* A new array holding a copy of @n elements of @fmt at @src, in @shape. */
PyObject *npy_array_copy(char fmt, int ndim, const Py_ssize_t *shape, const void *src);

/* Waits for @lock with the GIL released when another thread holds it. */
void npy_lock(PyThread_type_lock lock);

/* Types and their registration. */
int npy_client_init(PyObject *m);
int npy_pending_init(PyObject *m);
int npy_index_init(PyObject *m);
int npy_algos_init(PyObject *m);
int npy_logfn_init(PyObject *m);
int npy_policy_init(PyObject *m);
int npy_placement_init(PyObject *m);

/* client.c, for pending.c */
struct npy_client;
struct nelssa_client;
/* Enters @c (locked, open) or raises; npy_client_leave() undoes. */
int npy_client_enter(struct npy_client *c);
void npy_client_leave(struct npy_client *c);
struct nelssa_client *npy_client_raw(struct npy_client *c);
int npy_client_is_open(struct npy_client *c);
/* Raises nelssa.Error with the connection's words; call while entered. */
PyObject *npy_client_raise(struct npy_client *c, int neg_errno);
extern PyTypeObject npy_client_type;

/* pending.c, for client.c */
struct nelssa_step_pending;
PyObject *npy_pending_new(struct npy_client *c, struct nelssa_step_pending *p, PyObject *o,
			  PyObject *lse, struct npy_buf *ob, struct npy_buf *lb);

/* index.c, for client.c */
extern PyTypeObject npy_index_type;
struct nelssa_cluster_index;
/* Locks the index and returns its C struct; npy_index_unlock() undoes. */
struct nelssa_cluster_index *npy_index_lock(PyObject *ix);
void npy_index_unlock(PyObject *ix);

#endif /* NELSSA_PY_H */
