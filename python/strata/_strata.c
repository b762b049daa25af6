// SPDX-License-Identifier: Apache-2.0
/*
 * _strata.c — the CPython extension under the `strata` package: a thin layer over strata.h.
 *
 * What lives here and what does not. This file turns Python objects into the C API's arguments
 * and back: buffers (anything with the buffer protocol, or a raw address the Python layer took
 * from a torch tensor it keeps alive), status codes into exceptions, requests into objects, a
 * Python store (torch's) into strata_store_ops, DiLoCo states into objects. The
 * friendly surface (keyword arguments, dtype and op names, torch tensors, the context manager)
 * is Python, in __init__.py; the semantics are the C library's, never re-implemented here.
 *
 * Invariants:
 *  - the GIL is released around every call that can block or move data (init, collectives,
 *    waits, destroy), so other Python threads run meanwhile;
 *  - a buffer handed to an asynchronous call stays exported (Py_buffer held) and its owner
 *    referenced until the request completes: a Request never lets go of memory the engine may
 *    still write, even when it is garbage-collected first (it waits then);
 *  - a buffer is checked against the bytes the collective will touch before the call, so a
 *    size error is an exception, never an overrun;
 *  - a DiLoCo object holds its parameter buffers and its communicator while its state lives,
 *    and a communicator closes the DiLoCo states over it before it is destroyed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "errors.h"
#include "strata.h"

/* ---- buffers ---- */

typedef struct arg_buffer {
  Py_buffer view;
  int held;       /* view must be released */
  void *address;  /* where the data is: the view's or a raw address */
  Py_ssize_t len; /* bytes available; -1 = unknown (a raw address) */
} arg_buffer;

static void arg_buffer_release(arg_buffer *b) {
  if (b->held) PyBuffer_Release(&b->view);
  b->held = 0;
}

/* None -> NULL, int -> that address, anything else -> its C-contiguous buffer. */
static int arg_buffer_get(PyObject *obj, int writable, arg_buffer *b, const char *what) {
  memset(b, 0, sizeof *b);
  b->len = -1;
  if (obj == Py_None) return 0;
  if (PyLong_Check(obj)) {
    b->address = PyLong_AsVoidPtr(obj);
    return PyErr_Occurred() ? -1 : 0;
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &b->view, flags) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "%s must be a C-contiguous%s buffer (numpy array, bytearray, memoryview) or a "
                 "CPU torch tensor, not %.100s",
                 what, writable ? ", writable" : "", Py_TYPE(obj)->tp_name);
    return -1;
  }
  b->held = 1;
  b->address = b->view.buf;
  b->len = b->view.len;
  return 0;
}

/* The strata dtype of a buffer format, -1 if none ('h' and 'H' are i16 and u16: a uint16 array
 * holding f16 or bf16 bits names its dtype explicitly). */
static int dtype_of_format(const char *format, Py_ssize_t itemsize) {
  if (!format) format = "B";
  if (strchr("@=<!", format[0])) format++; /* native or little-endian on x86-64 */
  if (format[0] == '\0' || format[1] != '\0') return -1;
  switch (format[0]) {
    case 'f':
      return STRATA_F32;
    case 'd':
      return STRATA_F64;
    case 'e':
      return STRATA_F16;
    case 'b':
      return STRATA_I8;
    case 'h':
      return itemsize == 2 ? STRATA_I16 : -1;
    case 'H':
      return itemsize == 2 ? STRATA_U16 : -1;
    case 'B':
    case 'c':
      return STRATA_U8;
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      return itemsize == 4 ? STRATA_I32 : itemsize == 8 ? STRATA_I64 : -1;
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
      return itemsize == 4 ? STRATA_U32 : itemsize == 8 ? STRATA_U64 : -1;
    default:
      return -1;
  }
}

/* ---- Request ---- */

typedef struct RequestObject {
  PyObject_HEAD strata_request *req; /* NULL once completed */
  int status;
  PyObject *comm; /* keeps the communicator alive while the request runs */
  PyObject *keep; /* the owners of raw addresses (torch tensors), kept until completion */
  arg_buffer send, recv;
} RequestObject;

static void request_finish(RequestObject *self, int status) {
  self->req = NULL;
  self->status = status;
  arg_buffer_release(&self->send);
  arg_buffer_release(&self->recv);
  Py_CLEAR(self->keep);
}

static PyObject *Request_wait(RequestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->req) {
    strata_request *req = self->req;
    int status;
    Py_BEGIN_ALLOW_THREADS status = strata_request_wait(req);
    Py_END_ALLOW_THREADS request_finish(self, status);
  }
  if (self->status != STRATA_OK) return raise_status(self->status, NULL);
  Py_RETURN_NONE;
}

static PyObject *Request_is_completed(RequestObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->req) {
    int status = strata_request_test(self->req);
    if (status == STRATA_ERR_IN_PROGRESS) Py_RETURN_FALSE;
    request_finish(self, status);
  }
  Py_RETURN_TRUE;
}

static PyObject *Request_status(RequestObject *self, void *Py_UNUSED(closure)) {
  if (self->req) return PyUnicode_FromString("STRATA_ERR_IN_PROGRESS");
  return PyUnicode_FromString(strata_err_name(self->status));
}

static void Request_dealloc(RequestObject *self) {
  if (self->req) { /* the engine may still touch the buffers: wait, never free under it */
    strata_request *req = self->req;
    int status;
    Py_BEGIN_ALLOW_THREADS status = strata_request_wait(req);
    Py_END_ALLOW_THREADS request_finish(self, status);
  }
  Py_CLEAR(self->comm);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Request_methods[] = {
    {"wait", (PyCFunction)Request_wait, METH_NOARGS,
     "Block until the operation completes (the GIL is released); raise its error if it failed."},
    {"is_completed", (PyCFunction)Request_is_completed, METH_NOARGS,
     "True once the operation completed (successfully or not); wait() then reports how."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Request_getset[] = {
    {"status", (getter)Request_status, NULL, "the C status name, STRATA_ERR_IN_PROGRESS until done",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject RequestType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._strata.Request",
    .tp_basicsize = sizeof(RequestObject),
    .tp_dealloc = (destructor)Request_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "An asynchronous operation of a communicator: what a collective called with\n"
        "async_op=True returns. wait() blocks until it completes and raises its error;\n"
        "is_completed() polls; status is the C status name.\n\n"
        ">>> import numpy as np, strata\n"
        ">>> with strata.Comm() as comm:\n"
        "...     x = np.ones(8, np.float32)\n"
        "...     req = comm.allreduce(x, async_op=True)\n"
        "...     req.wait()\n"
        "...     print(req.is_completed(), req.status)\n"
        "True STRATA_OK\n",
    .tp_methods = Request_methods,
    .tp_getset = Request_getset,
};

/* ---- Comm ---- */

struct DiLoCoObject;

typedef struct CommObject {
  PyObject_HEAD strata_comm *comm;
  PyObject *store;             /* the caller's store (torch's c10d.Store) the comm joined through:
                                  strata calls it back, so it lives as long as the comm */
  struct DiLoCoObject *diloco; /* the open DiLoCo states over this comm, closed before it */
} CommObject;

/* ---- a Python store (set/get/add/wait, as torch.distributed.Store) as strata_store_ops ----
 * strata calls these from the thread inside strata_comm_init_store or strata_comm_split, which
 * runs without the GIL: each takes it for the Python calls. */

static int store_failed(int status) {
  PyErr_Clear();
  return status;
}

static int py_store_set(void *context, const char *key, const void *value, size_t len) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod((PyObject *)context, "set", "sy#", key, (const char *)value,
                                    (Py_ssize_t)len);
  int status = r ? STRATA_OK : store_failed(STRATA_ERR_SYSTEM);
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return status;
}

static int py_store_get(void *context, const char *key, void **value, size_t *len,
                        double timeout_s) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *store = (PyObject *)context;
  int status = STRATA_ERR_SYSTEM;
  PyObject *datetime = PyImport_ImportModule("datetime");
  PyObject *timeout = NULL, *waited = NULL, *got = NULL;
  /* a zero timeout means "forever" to c10d; strata's never does */
  if (datetime)
    timeout =
        PyObject_CallMethod(datetime, "timedelta", "id", 0, timeout_s > 1e-3 ? timeout_s : 1e-3);
  if (timeout) {
    waited = PyObject_CallMethod(store, "wait", "[s]O", key, timeout);
    if (!waited) status = STRATA_ERR_TIMEOUT;
  }
  if (waited) got = PyObject_CallMethod(store, "get", "s", key);
  if (got) {
    char *bytes;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(got, &bytes, &n) == 0) {
      void *copy = malloc(n ? (size_t)n : 1);
      if (copy) {
        memcpy(copy, bytes, (size_t)n);
        *value = copy;
        *len = (size_t)n;
        status = STRATA_OK;
      } else {
        status = STRATA_ERR_NO_MEMORY;
      }
    }
  }
  if (status != STRATA_OK) store_failed(status);
  Py_XDECREF(got);
  Py_XDECREF(waited);
  Py_XDECREF(timeout);
  Py_XDECREF(datetime);
  PyGILState_Release(gil);
  return status;
}

static int py_store_add(void *context, const char *key, int64_t delta, int64_t *result) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *r = PyObject_CallMethod((PyObject *)context, "add", "sL", key, (long long)delta);
  int status = STRATA_ERR_SYSTEM;
  if (r) {
    long long v = PyLong_AsLongLong(r);
    if (!(v == -1 && PyErr_Occurred())) {
      *result = (int64_t)v;
      status = STRATA_OK;
    }
  }
  if (status != STRATA_OK) store_failed(status);
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return status;
}

/* store.compare_set(key, "", value) (torch.distributed stores): sets a missing key and returns
 * the value the key holds afterwards. A store without it raises, and the elastic agreements fall
 * back to their ticket. */
static int py_store_set_if_absent(void *context, const char *key, const void *value, size_t len,
                                  int *was_set) {
  PyGILState_STATE gil = PyGILState_Ensure();
  int status = STRATA_ERR_UNSUPPORTED;
  if (PyObject_HasAttrString((PyObject *)context, "compare_set")) {
    PyObject *r = PyObject_CallMethod((PyObject *)context, "compare_set", "sy#y#", key, "",
                                      (Py_ssize_t)0, (const char *)value, (Py_ssize_t)len);
    status = STRATA_ERR_SYSTEM;
    if (r && PyBytes_Check(r)) {
      *was_set = (size_t)PyBytes_GET_SIZE(r) == len && !memcmp(PyBytes_AS_STRING(r), value, len);
      status = STRATA_OK;
    }
    if (status != STRATA_OK) store_failed(status);
    Py_XDECREF(r);
  }
  PyGILState_Release(gil);
  return status;
}

static int Comm_init(CommObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"settings", "store", NULL};
  PyObject *settings = Py_None, *store = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:Comm", keywords, &settings, &store)) return -1;
  if (self->comm) {
    PyErr_SetString(PyExc_RuntimeError, "Comm is already initialised");
    return -1;
  }
  strata_config cfg;
  char err[512] = "";
  strata_config_init(&cfg);
  int status = strata_config_from_env(&cfg, err, sizeof err);
  if (status != STRATA_OK) {
    raise_status(status, err);
    return -1;
  }
  /* No launcher, no rank and no size: a world of one, as MPI's singleton init (and gloo with
   * world_size=1) run, its store on a free loopback port. */
  if (cfg.world_size < 1 && cfg.rank < 0 && store == Py_None) {
    cfg.rank = 0;
    cfg.world_size = 1;
    cfg.store_external = 0;
    if (!cfg.store_addr[0]) snprintf(cfg.store_addr, sizeof cfg.store_addr, "127.0.0.1:0");
  }
  if (settings != Py_None) {
    if (!PyDict_Check(settings)) {
      PyErr_SetString(PyExc_TypeError, "settings must be a dict of name -> value");
      return -1;
    }
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(settings, &pos, &key, &value)) {
      PyObject *text = PyObject_Str(value);
      if (!text) return -1;
      const char *name = PyUnicode_AsUTF8(key), *value_text = PyUnicode_AsUTF8(text);
      if (!name || !value_text) {
        Py_DECREF(text);
        return -1;
      }
      status = strata_config_set(&cfg, name, value_text, err, sizeof err);
      Py_DECREF(text);
      if (status != STRATA_OK) {
        raise_status(status, err);
        return -1;
      }
    }
  }
  strata_comm *comm = NULL;
  if (store != Py_None) {
    strata_store_ops ops = {.context = store,
                            .set = py_store_set,
                            .get = py_store_get,
                            .add = py_store_add,
                            .set_if_absent = py_store_set_if_absent};
    Py_BEGIN_ALLOW_THREADS status = strata_comm_init_store(&cfg, &ops, &comm);
    Py_END_ALLOW_THREADS
  } else {
    Py_BEGIN_ALLOW_THREADS status = strata_comm_init(&cfg, &comm);
    Py_END_ALLOW_THREADS
  }
  if (status != STRATA_OK) {
    raise_status(status, "cannot create the communicator (STRATA_LOG=info says more)");
    return -1;
  }
  self->comm = comm;
  if (store != Py_None) Py_XSETREF(self->store, Py_NewRef(store));
  return 0;
}

static int comm_check(CommObject *self) {
  if (self->comm) return 0;
  PyErr_SetString(PyExc_ValueError, "the communicator is destroyed");
  return -1;
}

static void diloco_close_all(CommObject *self);

static void comm_destroy(CommObject *self) {
  diloco_close_all(self); /* their exchanges run on this comm: they end first */
  strata_comm *comm = self->comm;
  self->comm = NULL;
  if (comm) {
    Py_BEGIN_ALLOW_THREADS strata_comm_destroy(comm);
    Py_END_ALLOW_THREADS
  }
}

static void Comm_dealloc(CommObject *self) {
  comm_destroy(self);
  Py_CLEAR(self->store);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static int diloco_any_busy(CommObject *self);

static PyObject *Comm_destroy(CommObject *self, PyObject *Py_UNUSED(ignored)) {
  if (diloco_any_busy(self))
    return PyErr_Format(PyExc_RuntimeError,
                        "a DiLoCo call over this communicator is running in another thread");
  comm_destroy(self);
  Py_RETURN_NONE;
}

static PyObject *Comm_abort(CommObject *self, PyObject *Py_UNUSED(ignored)) {
  if (comm_check(self)) return NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_comm_abort(self->comm);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) return raise_status(status, NULL);
  Py_RETURN_NONE;
}

static PyObject *Comm_rank(CommObject *self, void *Py_UNUSED(closure)) {
  if (comm_check(self)) return NULL;
  return PyLong_FromLong(strata_comm_rank(self->comm));
}

static PyObject *Comm_size(CommObject *self, void *Py_UNUSED(closure)) {
  if (comm_check(self)) return NULL;
  return PyLong_FromLong(strata_comm_size(self->comm));
}

static PyObject *Comm_stats(CommObject *self, PyObject *Py_UNUSED(ignored)) {
  if (comm_check(self)) return NULL;
  strata_comm_stats stats;
  int status = strata_comm_get_stats(self->comm, &stats);
  if (status != STRATA_OK) return raise_status(status, NULL);
  return Py_BuildValue("{sKsKsKsK}", "messages_sent", (unsigned long long)stats.messages_sent,
                       "data_bytes_sent", (unsigned long long)stats.data_bytes_sent,
                       "wire_bytes_sent", (unsigned long long)stats.wire_bytes_sent,
                       "wan_bytes_sent", (unsigned long long)stats.wan_bytes_sent);
}

static PyObject *Comm_transport(CommObject *self, PyObject *args) {
  int peer;
  if (!PyArg_ParseTuple(args, "i", &peer) || comm_check(self)) return NULL;
  return PyUnicode_FromString(strata_comm_transport_name(self->comm, peer));
}

static int check_room(const arg_buffer *b, uint64_t bytes, const char *what) {
  if (bytes == 0 || b->len < 0) return 0;
  if (!b->address) {
    PyErr_Format(PyExc_ValueError, "%s is missing (this collective needs %llu bytes)", what,
                 (unsigned long long)bytes);
    return -1;
  }
  if ((uint64_t)b->len < bytes) {
    PyErr_Format(PyExc_ValueError, "%s holds %zd bytes; this collective needs %llu", what, b->len,
                 (unsigned long long)bytes);
    return -1;
  }
  return 0;
}

/* collective(coll, send, recv, count, dtype, op, root, algo, compress, async_op, keep)
 * send/recv: None, an address (int) or a buffer; the same object for both is in place. dtype
 * -1 takes the buffer's format. Returns None, or a Request when async_op. */
static PyObject *Comm_collective(CommObject *self, PyObject *args) {
  int coll, dtype, op, root, algo, compress, async_op;
  Py_ssize_t count;
  PyObject *send_obj, *recv_obj, *keep;
  if (!PyArg_ParseTuple(args, "iOOniiiiipO", &coll, &send_obj, &recv_obj, &count, &dtype, &op,
                        &root, &algo, &compress, &async_op, &keep))
    return NULL;
  if (comm_check(self)) return NULL;
  if (coll < 0 || coll >= STRATA_COLL_COUNT || count < 0)
    return PyErr_Format(PyExc_ValueError, "bad collective %d or count %zd", coll, count);
  int same = send_obj == recv_obj && send_obj != Py_None;
  RequestObject *request = PyObject_New(RequestObject, &RequestType);
  if (!request) return NULL;
  request->req = NULL;
  request->status = STRATA_OK;
  request->comm = NULL;
  request->keep = NULL;
  memset(&request->send, 0, sizeof request->send);
  memset(&request->recv, 0, sizeof request->recv);
  int is_recv_side = coll != STRATA_COLL_SEND;
  if (arg_buffer_get(recv_obj, is_recv_side, &request->recv, "the output") != 0) goto fail;
  if (same) {
    request->send.address = request->recv.address;
    request->send.len = request->recv.len;
  } else if (arg_buffer_get(send_obj, 0, &request->send, "the input") != 0) {
    goto fail;
  }
  if (dtype < 0) {
    const arg_buffer *b = request->send.held ? &request->send : &request->recv;
    if (!b->held) {
      PyErr_SetString(PyExc_TypeError, "no dtype given and no buffer to take it from");
      goto fail;
    }
    dtype = dtype_of_format(b->view.format, b->view.itemsize);
    if (dtype < 0) {
      PyErr_Format(PyExc_TypeError,
                   "a buffer of format '%s' has no strata dtype (float32/64/16, int8/16/32/64, "
                   "uint8/16/32/64; name bf16 or f16 for 16-bit float patterns)",
                   b->view.format ? b->view.format : "B");
      goto fail;
    }
  }
  if (dtype >= STRATA_DTYPE_COUNT) {
    PyErr_Format(PyExc_ValueError, "bad dtype %d", dtype);
    goto fail;
  }
  strata_coll_args a = {.coll = (strata_coll)coll,
                        .sendbuf = coll == STRATA_COLL_RECV ? NULL : request->send.address,
                        .recvbuf = coll == STRATA_COLL_SEND ? NULL : request->recv.address,
                        .count = (size_t)count,
                        .dtype = (strata_dtype)dtype,
                        .op = (strata_op)op,
                        .root = root,
                        .algo = (strata_algo)algo,
                        .compress = (strata_compress)compress};
  if (coll == STRATA_COLL_SEND && !a.sendbuf) a.sendbuf = request->recv.address;
  if (coll == STRATA_COLL_RECV && !a.recvbuf) a.recvbuf = request->send.address;
  uint64_t send_bytes = 0, recv_bytes = 0;
  if (strata_coll_buffer_bytes(self->comm, &a, &send_bytes, &recv_bytes) != STRATA_OK) {
    PyErr_Format(PyExc_ValueError, "a count of %zd elements does not fit this collective", count);
    goto fail;
  }
  if (check_room(&request->send, send_bytes, "the input") != 0 ||
      check_room(&request->recv, recv_bytes, "the output") != 0)
    goto fail;
  strata_comm *comm = self->comm;
  int status;
  if (!async_op) {
    Py_BEGIN_ALLOW_THREADS status = strata_collective(comm, &a, NULL);
    Py_END_ALLOW_THREADS request_finish(request, status);
    Py_DECREF(request);
    if (status != STRATA_OK) return raise_status(status, NULL);
    Py_RETURN_NONE;
  }
  strata_request *req = NULL;
  Py_BEGIN_ALLOW_THREADS status = strata_collective(comm, &a, &req);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) {
    request_finish(request, status);
    Py_DECREF(request);
    return raise_status(status, NULL);
  }
  request->req = req;
  Py_INCREF(self);
  request->comm = (PyObject *)self;
  if (keep != Py_None) {
    Py_INCREF(keep);
    request->keep = keep;
  }
  return (PyObject *)request;
fail:
  request_finish(request, STRATA_OK);
  Py_DECREF(request);
  return NULL;
}

static PyTypeObject CommType;

/* _split(color, key, cls): the new communicator as an instance of cls (a Comm subclass, made
 * without running its __init__), or None for STRATA_UNDEFINED. */
/* A new communicator of type `cls` that split, shrink or grow made from `self`: it calls the
 * parent's store too (a caller's store is held: strata_comm_split's contract). */
static PyObject *comm_wrap(CommObject *self, PyTypeObject *cls, strata_comm *made) {
  CommObject *obj = (CommObject *)cls->tp_alloc(cls, 0);
  if (!obj) {
    strata_comm_destroy(made);
    return NULL;
  }
  obj->comm = made;
  if (self->store) obj->store = Py_NewRef(self->store);
  return (PyObject *)obj;
}

static PyObject *Comm_split(CommObject *self, PyObject *args) {
  int color, key;
  PyTypeObject *cls;
  if (!PyArg_ParseTuple(args, "iiO!", &color, &key, &PyType_Type, &cls) || comm_check(self))
    return NULL;
  if (!PyType_IsSubtype(cls, &CommType))
    return PyErr_Format(PyExc_TypeError, "%s is not a Comm type", cls->tp_name);
  strata_comm *comm = self->comm, *child = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_comm_split(comm, color, key, &child);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) return raise_status(status, NULL);
  if (!child) Py_RETURN_NONE;
  return comm_wrap(self, cls, child);
}

static PyObject *Comm_revoke(CommObject *self, PyObject *Py_UNUSED(ignored)) {
  if (comm_check(self)) return NULL;
  int status = strata_comm_revoke(self->comm); /* never blocks */
  if (status != STRATA_OK) return raise_status(status, NULL);
  Py_RETURN_NONE;
}

static PyObject *Comm_elastic(CommObject *self, PyObject *args, int grow) {
  PyTypeObject *cls;
  if (!PyArg_ParseTuple(args, "O!", &PyType_Type, &cls) || comm_check(self)) return NULL;
  if (!PyType_IsSubtype(cls, &CommType))
    return PyErr_Format(PyExc_TypeError, "%s is not a Comm type", cls->tp_name);
  strata_comm *comm = self->comm, *made = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS status =
      grow ? strata_comm_grow(comm, &made) : strata_comm_shrink(comm, &made);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) return raise_status(status, NULL);
  if (!made) Py_RETURN_NONE;
  return comm_wrap(self, cls, made);
}

static PyObject *Comm_shrink(CommObject *self, PyObject *args) {
  return Comm_elastic(self, args, 0);
}

static PyObject *Comm_grow(CommObject *self, PyObject *args) {
  return Comm_elastic(self, args, 1);
}

static PyObject *Comm_agree(CommObject *self, PyObject *args) {
  int flag;
  if (!PyArg_ParseTuple(args, "p", &flag) || comm_check(self)) return NULL;
  strata_comm *comm = self->comm;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_comm_agree(comm, &flag);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) return raise_status(status, NULL);
  return PyBool_FromLong(flag);
}

static PyObject *Comm_failed_ranks(CommObject *self, PyObject *Py_UNUSED(ignored)) {
  if (comm_check(self)) return NULL;
  int n = strata_comm_failed_ranks(self->comm, NULL, 0);
  if (n < 0) return raise_status(n, NULL);
  int *ranks = PyMem_Malloc(sizeof(int) * (size_t)(n ? n : 1));
  if (!ranks) return PyErr_NoMemory();
  strata_comm_failed_ranks(self->comm, ranks, n);
  PyObject *list = PyList_New(n);
  for (int i = 0; list && i < n; i++) PyList_SET_ITEM(list, i, PyLong_FromLong(ranks[i]));
  PyMem_Free(ranks);
  return list;
}

/* sync_shared(names, buffers, revision): the buffers are writable, contiguous buffer objects
 * (numpy arrays; torch tensors through .numpy()), held for the call. */
static PyObject *Comm_sync_shared(CommObject *self, PyObject *args) {
  PyObject *names, *buffers;
  unsigned long long revision;
  if (!PyArg_ParseTuple(args, "O!O!K", &PyList_Type, &names, &PyList_Type, &buffers, &revision) ||
      comm_check(self))
    return NULL;
  Py_ssize_t count = PyList_GET_SIZE(names);
  if (PyList_GET_SIZE(buffers) != count)
    return PyErr_Format(PyExc_ValueError, "sync_shared: %zd names but %zd buffers", count,
                        PyList_GET_SIZE(buffers));
  strata_shared_entry *entries = PyMem_Calloc((size_t)(count ? count : 1), sizeof *entries);
  Py_buffer *views = PyMem_Calloc((size_t)(count ? count : 1), sizeof *views);
  Py_ssize_t held = 0;
  PyObject *result = NULL;
  if (!entries || !views) {
    PyErr_NoMemory();
    goto out;
  }
  for (; held < count; held++) {
    const char *name = PyUnicode_AsUTF8(PyList_GET_ITEM(names, held));
    if (!name) goto out;
    if (PyObject_GetBuffer(PyList_GET_ITEM(buffers, held), &views[held],
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0)
      goto out;
    entries[held] = (strata_shared_entry){name, views[held].buf, (size_t)views[held].len};
  }
  strata_shared_state state = {revision, (int)count, entries};
  strata_shared_sync_info info;
  strata_comm *comm = self->comm;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_shared_sync(comm, &state, &info);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) {
    raise_status(status, NULL);
    goto out;
  }
  result = Py_BuildValue(
      "{sKsisisisKsK}", "revision", (unsigned long long)info.revision, "ranks_in_majority",
      info.ranks_in_majority, "pulled", info.pulled, "source", info.source, "bytes_received",
      (unsigned long long)info.bytes_received, "bytes_sent", (unsigned long long)info.bytes_sent);
out:
  for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
  PyMem_Free(views);
  PyMem_Free(entries);
  return result;
}

static PyObject *Comm_epoch(CommObject *self, void *Py_UNUSED(closure)) {
  if (comm_check(self)) return NULL;
  return PyLong_FromUnsignedLongLong((unsigned long long)strata_comm_epoch(self->comm));
}

static PyMethodDef Comm_methods[] = {
    {"_split", (PyCFunction)Comm_split, METH_VARARGS, "_split(color, key, cls)"},
    {"_shrink", (PyCFunction)Comm_shrink, METH_VARARGS, "_shrink(cls)"},
    {"_grow", (PyCFunction)Comm_grow, METH_VARARGS, "_grow(cls)"},
    {"revoke", (PyCFunction)Comm_revoke, METH_NOARGS,
     "Fail every pending and future operation with RevokedError on every live rank; never "
     "blocks, callable from any thread."},
    {"agree", (PyCFunction)Comm_agree, METH_VARARGS,
     "agree(flag) -> the AND of flag over the live ranks (works after failures; "
     "failed_ranks() then lists the ranks that did not take part)."},
    {"_sync_shared", (PyCFunction)Comm_sync_shared, METH_VARARGS,
     "_sync_shared(names, buffers, revision)"},
    {"failed_ranks", (PyCFunction)Comm_failed_ranks, METH_NOARGS,
     "The ranks the last agree() or shrink() found failed."},
    {"collective", (PyCFunction)Comm_collective, METH_VARARGS,
     "collective(coll, send, recv, count, dtype, op, root, algo, compress, async_op, keep)"},
    {"destroy", (PyCFunction)Comm_destroy, METH_NOARGS,
     "Leave the job; every rank calls it (idempotent)."},
    {"abort", (PyCFunction)Comm_abort, METH_NOARGS,
     "Fail every pending and future operation on every rank."},
    {"stats", (PyCFunction)Comm_stats, METH_NOARGS, "Counters of what this rank sent."},
    {"transport", (PyCFunction)Comm_transport, METH_VARARGS,
     "The transport that carries data to a peer: 'self', 'shm' or 'tcp'."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Comm_getset[] = {
    {"rank", (getter)Comm_rank, NULL, "this rank", NULL},
    {"size", (getter)Comm_size, NULL, "the world size", NULL},
    {"epoch", (getter)Comm_epoch, NULL, "0 from init, one more per shrink or grow", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._strata.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_dealloc = (destructor)Comm_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A strata communicator (see strata.Comm).",
    .tp_methods = Comm_methods,
    .tp_getset = Comm_getset,
    .tp_init = (initproc)Comm_init,
    .tp_new = PyType_GenericNew,
};

/* ---- DiLoCo ----
 * A strata_diloco state over the caller's parameter buffers. The state reads and writes those
 * buffers on every step, so the object holds them for its whole life: the Py_buffer exports of
 * buffer objects (a numpy array cannot be resized under it) and a reference to the owners of
 * raw addresses (the torch tensors strata.torch passes by data pointer). It also holds its
 * communicator, and sits in that communicator's list of states: destroying the communicator
 * closes them first, since their exchanges run on it. `busy` refuses a second call from another
 * thread while one runs without the GIL. */

typedef struct DiLoCoObject {
  PyObject_HEAD strata_diloco *state; /* NULL once closed */
  CommObject *comm;
  PyObject *keep;   /* owners of raw addresses */
  Py_buffer *views; /* exported parameter buffers, nviews of them */
  Py_ssize_t nviews;
  int fragments;
  int busy;
  struct DiLoCoObject *next, **prev_next; /* in comm->diloco */
} DiLoCoObject;

static void diloco_link(DiLoCoObject *self, CommObject *comm) {
  self->comm = (CommObject *)Py_NewRef((PyObject *)comm);
  self->next = comm->diloco;
  if (comm->diloco) comm->diloco->prev_next = &self->next;
  self->prev_next = &comm->diloco;
  comm->diloco = self;
}

static void diloco_unlink(DiLoCoObject *self) {
  if (!self->comm) return;
  *self->prev_next = self->next;
  if (self->next) self->next->prev_next = self->prev_next;
  self->next = NULL;
  self->prev_next = NULL;
  Py_CLEAR(self->comm);
}

static void diloco_release_buffers(DiLoCoObject *self) {
  for (Py_ssize_t i = 0; i < self->nviews; i++) PyBuffer_Release(&self->views[i]);
  PyMem_Free(self->views);
  self->views = NULL;
  self->nviews = 0;
  Py_CLEAR(self->keep);
}

static void diloco_close(DiLoCoObject *self) {
  strata_diloco *state = self->state;
  self->state = NULL;
  if (state) {
    Py_BEGIN_ALLOW_THREADS strata_diloco_destroy(state);
    Py_END_ALLOW_THREADS
  }
  diloco_unlink(self);
  diloco_release_buffers(self);
}

static void diloco_close_all(CommObject *self) {
  while (self->diloco) diloco_close(self->diloco);
}

static int diloco_any_busy(CommObject *self) {
  for (DiLoCoObject *d = self->diloco; d; d = d->next)
    if (d->busy) return 1;
  return 0;
}

/* The state, or NULL with an exception when it is closed or in use by another thread. */
static strata_diloco *diloco_get(DiLoCoObject *self) {
  if (!self->state) {
    PyErr_SetString(PyExc_ValueError, "the DiLoCo state is closed");
    return NULL;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "the DiLoCo state is in use by another thread");
    return NULL;
  }
  return self->state;
}

/* One parameter: a writable C-contiguous buffer (its format gives the dtype), (buffer, dtype)
 * for 16-bit patterns such as bf16 in a uint16 array, or (address, count, dtype) for memory
 * whose owner is in `keep`. A taken buffer export goes to *view (held = 1). */
static int diloco_param(PyObject *item, Py_ssize_t index, strata_diloco_param *p, Py_buffer *view,
                        int *held) {
  *held = 0;
  PyObject *obj = item, *dtype_obj = NULL;
  if (PyTuple_Check(item)) {
    Py_ssize_t n = PyTuple_GET_SIZE(item);
    if (n == 3 && PyLong_Check(PyTuple_GET_ITEM(item, 0))) {
      void *address = PyLong_AsVoidPtr(PyTuple_GET_ITEM(item, 0));
      Py_ssize_t count = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
      long dtype = PyLong_AsLong(PyTuple_GET_ITEM(item, 2));
      if (PyErr_Occurred()) return -1;
      if (!address || count < 0 || dtype < 0 || dtype >= STRATA_DTYPE_COUNT) {
        PyErr_Format(PyExc_ValueError,
                     "parameter %zd: (address, count, dtype) needs a non-null address, a count "
                     ">= 0 and a strata dtype code",
                     index);
        return -1;
      }
      p->data = address;
      p->count = (size_t)count;
      p->dtype = (strata_dtype)dtype;
      return 0;
    }
    if (n != 2) {
      PyErr_Format(PyExc_TypeError,
                   "parameter %zd: a buffer, (buffer, dtype) or (address, count, dtype)", index);
      return -1;
    }
    obj = PyTuple_GET_ITEM(item, 0);
    dtype_obj = PyTuple_GET_ITEM(item, 1);
  }
  if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "parameter %zd must be a writable C-contiguous buffer (a numpy array), not "
                 "%.100s",
                 index, Py_TYPE(obj)->tp_name);
    return -1;
  }
  *held = 1;
  long dtype;
  if (dtype_obj) {
    dtype = PyLong_AsLong(dtype_obj);
    if (dtype == -1 && PyErr_Occurred()) return -1;
    if (dtype < 0 || dtype >= STRATA_DTYPE_COUNT) {
      PyErr_Format(PyExc_ValueError, "parameter %zd: bad dtype %ld", index, dtype);
      return -1;
    }
  } else {
    dtype = dtype_of_format(view->format, view->itemsize);
    if (dtype < 0) {
      PyErr_Format(PyExc_TypeError,
                   "parameter %zd: a buffer of format '%s' has no strata dtype (DiLoCo takes "
                   "float32, or bfloat16 bits named with dtype='bf16')",
                   index, view->format ? view->format : "B");
      return -1;
    }
  }
  size_t size = strata_dtype_size((strata_dtype)dtype);
  if (size == 0 || (size_t)view->len % size != 0) {
    PyErr_Format(PyExc_ValueError, "parameter %zd: %zd bytes is not a whole number of elements",
                 index, view->len);
    return -1;
  }
  p->data = view->buf;
  p->count = (size_t)view->len / size;
  p->dtype = (strata_dtype)dtype;
  return 0;
}

static int DiLoCo_init(DiLoCoObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"comm",           "params",   "sync_every", "outer_lr",
                             "outer_momentum", "nesterov", "fragments",  "delay",
                             "alpha",          "compress", "keep",       NULL};
  strata_diloco_options opt;
  strata_diloco_options_init(&opt);
  PyObject *comm_obj, *params, *keep = Py_None;
  int nesterov = opt.nesterov, compress = (int)opt.compress;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|iddpiidiO:DiLoCo", keywords, &comm_obj, &params,
                                   &opt.sync_every, &opt.outer_lr, &opt.outer_momentum, &nesterov,
                                   &opt.fragments, &opt.delay, &opt.alpha, &compress, &keep))
    return -1;
  if (self->state || self->comm) {
    PyErr_SetString(PyExc_RuntimeError, "DiLoCo is already initialised");
    return -1;
  }
  /* None: a joining worker's state, attached by sync() once it is in */
  if (comm_obj != Py_None && !PyObject_TypeCheck(comm_obj, &CommType)) {
    PyErr_Format(PyExc_TypeError, "comm must be a strata.Comm or None, not %.100s",
                 Py_TYPE(comm_obj)->tp_name);
    return -1;
  }
  CommObject *comm = comm_obj == Py_None ? NULL : (CommObject *)comm_obj;
  if (comm && comm_check(comm)) return -1;
  if (compress < 0 || compress >= STRATA_COMPRESS_COUNT) {
    PyErr_Format(PyExc_ValueError, "bad compress code %d", compress);
    return -1;
  }
  opt.nesterov = nesterov;
  opt.compress = (strata_compress)compress;
  PyObject *seq = PySequence_Fast(params, "params must be a list of parameter buffers");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  strata_diloco_param *ps = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ps);
  self->views = PyMem_Calloc(n ? (size_t)n : 1, sizeof *self->views);
  if (!ps || !self->views) {
    PyMem_Free(ps);
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    int held;
    int bad = diloco_param(PySequence_Fast_GET_ITEM(seq, i), i, &ps[i], &self->views[self->nviews],
                           &held);
    if (held) self->nviews++;
    if (bad) {
      PyMem_Free(ps);
      Py_DECREF(seq);
      diloco_release_buffers(self);
      return -1;
    }
  }
  Py_DECREF(seq);
  if (keep != Py_None) self->keep = Py_NewRef(keep);
  strata_comm *c = comm ? comm->comm : NULL;
  strata_diloco *state = NULL;
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_diloco_create(c, ps, (size_t)n, &opt, &state);
  Py_END_ALLOW_THREADS self->busy = 0;
  PyMem_Free(ps);
  if (status != STRATA_OK) {
    diloco_release_buffers(self);
    raise_status(status, status == STRATA_ERR_INVALID_ARG
                             ? "a bad DiLoCo option or parameter buffer (strata.h: "
                               "strata_diloco_options)"
                             : NULL);
    return -1;
  }
  self->state = state;
  self->fragments = opt.fragments;
  if (comm) diloco_link(self, comm);
  return 0;
}

static void DiLoCo_dealloc(DiLoCoObject *self) {
  diloco_close(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *DiLoCo_step(DiLoCoObject *self, PyObject *Py_UNUSED(ignored)) {
  strata_diloco *state = diloco_get(self);
  if (!state) return NULL;
  int applied = 0, status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_diloco_step(state, &applied);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, NULL);
  return PyLong_FromLong(applied);
}

static PyObject *diloco_fragment_call(DiLoCoObject *self, PyObject *args,
                                      int (*call)(strata_diloco *, int)) {
  int fragment, status;
  if (!PyArg_ParseTuple(args, "i", &fragment)) return NULL;
  strata_diloco *state = diloco_get(self);
  if (!state) return NULL;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = call(state, fragment);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, NULL);
  Py_RETURN_NONE;
}

static PyObject *DiLoCo_outer_start(DiLoCoObject *self, PyObject *args) {
  return diloco_fragment_call(self, args, strata_diloco_outer_start);
}

static PyObject *DiLoCo_outer_finish(DiLoCoObject *self, PyObject *args) {
  return diloco_fragment_call(self, args, strata_diloco_outer_finish);
}

static PyObject *DiLoCo_fragment(DiLoCoObject *self, PyObject *args) {
  int fragment;
  if (!PyArg_ParseTuple(args, "i", &fragment)) return NULL;
  if (!self->state) return diloco_get(self), NULL;
  size_t first = 0, n = 0;
  int status = strata_diloco_fragment(self->state, fragment, &first, &n); /* P on success */
  if (status < 0) return raise_status(status, NULL);
  return Py_BuildValue("(nn)", (Py_ssize_t)first, (Py_ssize_t)n);
}

static PyObject *DiLoCo_save(DiLoCoObject *self, PyObject *Py_UNUSED(ignored)) {
  strata_diloco *state = diloco_get(self);
  if (!state) return NULL;
  size_t bytes = 0;
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_diloco_state_bytes(state, &bytes);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, NULL);
  PyObject *blob = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes);
  if (!blob) return NULL;
  char *buf = PyBytes_AS_STRING(blob); /* not yet seen by any other code */
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_diloco_save(state, buf, bytes);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) {
    Py_DECREF(blob);
    return raise_status(status, NULL);
  }
  return blob;
}

static PyObject *DiLoCo_load(DiLoCoObject *self, PyObject *args) {
  Py_buffer blob;
  if (!PyArg_ParseTuple(args, "y*", &blob)) return NULL;
  strata_diloco *state = diloco_get(self);
  if (!state) {
    PyBuffer_Release(&blob);
    return NULL;
  }
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_diloco_load(state, blob.buf, (size_t)blob.len);
  Py_END_ALLOW_THREADS self->busy = 0;
  PyBuffer_Release(&blob);
  if (status != STRATA_OK) return raise_status(status, NULL);
  Py_RETURN_NONE;
}

/* set_comm(comm) and sync(comm): the state moves to `comm` (sync also gives every rank the
 * members' outer state; *pulled says whether this rank took it), then is listed under it. */
static PyObject *diloco_move(DiLoCoObject *self, PyObject *args, int sync, int *pulled) {
  PyObject *comm_obj;
  if (!PyArg_ParseTuple(args, "O!", &CommType, &comm_obj)) return NULL;
  CommObject *comm = (CommObject *)comm_obj;
  strata_diloco *state = diloco_get(self);
  if (!state || comm_check(comm)) return NULL;
  strata_comm *c = comm->comm;
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status =
      sync ? strata_diloco_sync(state, c, pulled) : strata_diloco_set_comm(state, c);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, NULL);
  diloco_unlink(self);
  diloco_link(self, comm);
  Py_RETURN_NONE;
}

static PyObject *DiLoCo_set_comm(DiLoCoObject *self, PyObject *args) {
  return diloco_move(self, args, 0, NULL);
}

static PyObject *DiLoCo_sync(DiLoCoObject *self, PyObject *args) {
  int pulled = 0;
  PyObject *moved = diloco_move(self, args, 1, &pulled);
  if (!moved) return NULL;
  Py_DECREF(moved);
  return PyBool_FromLong(pulled);
}

static PyObject *DiLoCo_close(DiLoCoObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->busy)
    return PyErr_Format(PyExc_RuntimeError, "the DiLoCo state is in use by another thread");
  diloco_close(self);
  Py_RETURN_NONE;
}

static PyObject *DiLoCo_enter(DiLoCoObject *self, PyObject *Py_UNUSED(ignored)) {
  return Py_NewRef((PyObject *)self);
}

static PyObject *DiLoCo_exit(DiLoCoObject *self, PyObject *Py_UNUSED(args)) {
  PyObject *r = DiLoCo_close(self, NULL);
  if (!r) return NULL;
  Py_DECREF(r);
  Py_RETURN_FALSE;
}

static PyObject *DiLoCo_inner_steps(DiLoCoObject *self, void *Py_UNUSED(closure)) {
  if (!self->state) return diloco_get(self), NULL;
  return PyLong_FromUnsignedLongLong(strata_diloco_inner_steps(self->state));
}

static PyObject *DiLoCo_outer_steps(DiLoCoObject *self, void *Py_UNUSED(closure)) {
  if (!self->state) return diloco_get(self), NULL;
  return PyLong_FromUnsignedLongLong(strata_diloco_outer_steps(self->state));
}

static PyObject *DiLoCo_fragments(DiLoCoObject *self, void *Py_UNUSED(closure)) {
  return PyLong_FromLong(self->fragments);
}

static PyObject *DiLoCo_comm(DiLoCoObject *self, void *Py_UNUSED(closure)) {
  if (!self->comm) Py_RETURN_NONE;
  return Py_NewRef((PyObject *)self->comm);
}

static PyObject *DiLoCo_closed(DiLoCoObject *self, void *Py_UNUSED(closure)) {
  return PyBool_FromLong(self->state == NULL);
}

static PyMethodDef DiLoCo_methods[] = {
    {"step", (PyCFunction)DiLoCo_step, METH_NOARGS,
     "Call after every inner optimizer step: starts the exchanges due, applies those whose delay "
     "has passed; returns the number of fragments applied."},
    {"outer_start", (PyCFunction)DiLoCo_outer_start, METH_VARARGS,
     "outer_start(fragment): compute the fragment's outer gradient and start its average."},
    {"outer_finish", (PyCFunction)DiLoCo_outer_finish, METH_VARARGS,
     "outer_finish(fragment): wait for it, apply the outer optimizer and merge."},
    {"fragment", (PyCFunction)DiLoCo_fragment, METH_VARARGS,
     "fragment(p) -> (first, n): the parameter buffers fragment p covers."},
    {"save", (PyCFunction)DiLoCo_save, METH_NOARGS,
     "The state (theta_global, momentum, counters) as bytes; not the parameters themselves."},
    {"load", (PyCFunction)DiLoCo_load, METH_VARARGS,
     "load(blob): restore a state saved by a DiLoCo of the same buffers and options."},
    {"sync", (PyCFunction)DiLoCo_sync, METH_VARARGS,
     "sync(comm) -> pulled: move to comm (after a grow) and give every rank the members' "
     "global parameters, momentum and step counts; a joiner (made with comm=None) pulls them."},
    {"set_comm", (PyCFunction)DiLoCo_set_comm, METH_VARARGS,
     "set_comm(comm): move to another communicator (after a shrink, say)."},
    {"close", (PyCFunction)DiLoCo_close, METH_NOARGS,
     "Wait for exchanges in flight and free the state (idempotent)."},
    {"__enter__", (PyCFunction)DiLoCo_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)DiLoCo_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef DiLoCo_getset[] = {
    {"inner_steps", (getter)DiLoCo_inner_steps, NULL, "inner steps counted so far", NULL},
    {"outer_steps", (getter)DiLoCo_outer_steps, NULL, "outer steps applied (all fragments)", NULL},
    {"fragments", (getter)DiLoCo_fragments, NULL, "the number of fragments", NULL},
    {"comm", (getter)DiLoCo_comm, NULL, "the communicator (None once closed)", NULL},
    {"closed", (getter)DiLoCo_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject DiLoCoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._strata.DiLoCo",
    .tp_basicsize = sizeof(DiLoCoObject),
    .tp_dealloc = (destructor)DiLoCo_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A DiLoCo state over parameter buffers (see strata.DiLoCo).",
    .tp_methods = DiLoCo_methods,
    .tp_getset = DiLoCo_getset,
    .tp_init = (initproc)DiLoCo_init,
    .tp_new = PyType_GenericNew,
};

/* ---- RL weight sync ----
 * A strata_weights publisher or subscriber over the caller's tensors, given by address: the
 * Python layer (strata/weights.py) turns numpy arrays and torch tensors (bf16 included, by their
 * storage) into (name, address, bytes, dtype, shape) and passes their owners in `keep`, which
 * the object holds until close(), since the handle reads (publisher) or writes (subscriber) that
 * memory on every call. Each round takes the communicator it runs over, so none is kept. */

typedef struct WeightsObject {
  PyObject_HEAD strata_weights *w; /* NULL once closed */
  PyObject *keep;
  int publisher;
  int busy;
} WeightsObject;

static strata_weights *weights_get(WeightsObject *self) {
  if (!self->w) {
    PyErr_SetString(PyExc_ValueError, "the weights handle is closed");
    return NULL;
  }
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError, "the weights handle is in use by another thread");
    return NULL;
  }
  return self->w;
}

static int weights_tensor_arg(PyObject *item, Py_ssize_t index, strata_weights_tensor *t,
                              PyObject **name_bytes) {
  PyObject *name, *shape;
  unsigned long long address, bytes;
  int dtype;
  if (!PyArg_ParseTuple(item, "UKKiO", &name, &address, &bytes, &dtype, &shape)) {
    PyErr_Format(PyExc_TypeError, "tensor %zd: (name, address, bytes, dtype, shape) expected",
                 index);
    return -1;
  }
  *name_bytes = PyUnicode_AsUTF8String(name);
  if (!*name_bytes) return -1;
  t->name = PyBytes_AS_STRING(*name_bytes);
  t->data = (void *)(uintptr_t)address;
  t->dtype = (strata_dtype)dtype;
  PyObject *seq = PySequence_Fast(shape, "shape must be a sequence of ints");
  if (!seq) return -1;
  Py_ssize_t ndim = PySequence_Fast_GET_SIZE(seq);
  if (ndim > STRATA_WEIGHTS_MAX_DIMS) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "tensor '%s': at most %d dimensions", t->name,
                 STRATA_WEIGHTS_MAX_DIMS);
    return -1;
  }
  t->ndim = (int)ndim;
  unsigned long long elements = 1;
  for (Py_ssize_t d = 0; d < ndim; d++) {
    t->shape[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    elements *= t->shape[d] > 0 ? (unsigned long long)t->shape[d] : 0;
  }
  Py_DECREF(seq);
  size_t esize = dtype >= 0 && dtype < STRATA_DTYPE_COUNT ? strata_dtype_size(t->dtype) : 0;
  if (esize && elements * esize != bytes) {
    PyErr_Format(PyExc_ValueError, "tensor '%s': %llu bytes do not hold its shape", t->name, bytes);
    return -1;
  }
  return 0;
}

static int Weights_init(WeightsObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"publisher",  "tensors",     "anchor_every", "history",
                             "zstd_level", "chunk_bytes", "keep",         NULL};
  strata_weights_options opt;
  strata_weights_options_init(&opt);
  int publisher;
  PyObject *tensors, *keep = Py_None;
  Py_ssize_t chunk = (Py_ssize_t)opt.chunk_bytes;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "pO|iiinO:Weights", keywords, &publisher, &tensors,
                                   &opt.anchor_every, &opt.history, &opt.zstd_level, &chunk, &keep))
    return -1;
  if (self->w) {
    PyErr_SetString(PyExc_RuntimeError, "Weights is already initialised");
    return -1;
  }
  opt.chunk_bytes = chunk > 0 ? (size_t)chunk : 0;
  PyObject *seq = PySequence_Fast(tensors, "tensors must be a list");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  strata_weights_tensor *ts = PyMem_Calloc(n ? (size_t)n : 1, sizeof *ts);
  PyObject **names = PyMem_Calloc(n ? (size_t)n : 1, sizeof *names);
  int bad = !ts || !names;
  if (bad) PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n && !bad; i++)
    bad = weights_tensor_arg(PySequence_Fast_GET_ITEM(seq, i), i, &ts[i], &names[i]) != 0;
  int status = STRATA_OK;
  strata_weights *w = NULL;
  if (!bad) {
    Py_BEGIN_ALLOW_THREADS status = publisher
                                        ? strata_weights_publisher_create(ts, (size_t)n, &opt, &w)
                                        : strata_weights_subscriber_create(ts, (size_t)n, &w);
    Py_END_ALLOW_THREADS
  }
  for (Py_ssize_t i = 0; names && i < n; i++) Py_XDECREF(names[i]);
  PyMem_Free(names);
  PyMem_Free(ts);
  Py_DECREF(seq);
  if (bad) return -1;
  if (status != STRATA_OK) {
    raise_status(status,
                 "a bad tensor or option (STRATA_LOG=error names it; strata.h: "
                 "strata_weights_tensor, strata_weights_options)");
    return -1;
  }
  self->w = w;
  self->publisher = publisher;
  if (keep != Py_None) self->keep = Py_NewRef(keep);
  return 0;
}

static void weights_close(WeightsObject *self) {
  strata_weights *w = self->w;
  self->w = NULL;
  strata_weights_destroy(w);
  Py_CLEAR(self->keep);
}

static void Weights_dealloc(WeightsObject *self) {
  weights_close(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *round_info_dict(const strata_weights_round_info *info) {
  return Py_BuildValue("{sKsKsKsisisisisd}", "version", (unsigned long long)info->version,
                       "stream_bytes", (unsigned long long)info->stream_bytes, "bytes_sent",
                       (unsigned long long)info->bytes_sent, "blobs_applied", info->blobs_applied,
                       "full_applied", info->full_applied, "subscribers", info->subscribers,
                       "refused", info->refused, "reached_s", info->reached_s);
}

static PyObject *Weights_publish(WeightsObject *self, PyObject *Py_UNUSED(ignored)) {
  strata_weights *w = weights_get(self);
  if (!w) return NULL;
  uint64_t version = 0;
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_weights_publish(w, &version);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, strata_weights_error(w));
  return PyLong_FromUnsignedLongLong(version);
}

static PyObject *weights_round(WeightsObject *self, PyObject *args, int serve) {
  PyObject *comm_obj;
  unsigned long long target = STRATA_WEIGHTS_NEWEST;
  if (!PyArg_ParseTuple(args, serve ? "O!" : "O!|K", &CommType, &comm_obj, &target)) return NULL;
  CommObject *comm = (CommObject *)comm_obj;
  strata_weights *w = weights_get(self);
  if (!w || comm_check(comm)) return NULL;
  strata_weights_round_info info;
  memset(&info, 0, sizeof info);
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = serve ? strata_weights_serve(w, comm->comm, &info)
                                        : strata_weights_update(w, comm->comm, target, &info);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, strata_weights_error(w));
  return round_info_dict(&info);
}

static PyObject *Weights_serve(WeightsObject *self, PyObject *args) {
  return weights_round(self, args, 1);
}

static PyObject *Weights_update(WeightsObject *self, PyObject *args) {
  return weights_round(self, args, 0);
}

static PyObject *Weights_prepare(WeightsObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"comm", "warm_bytes", NULL};
  PyObject *comm_obj, *warm_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!|O", kwlist, &CommType, &comm_obj, &warm_obj))
    return NULL;
  uint64_t warm = STRATA_WEIGHTS_WARM_AUTO;
  if (warm_obj != Py_None) {
    unsigned long long v = PyLong_AsUnsignedLongLong(warm_obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    warm = v;
  }
  CommObject *comm = (CommObject *)comm_obj;
  strata_weights *w = weights_get(self);
  if (!w || comm_check(comm)) return NULL;
  strata_weights_prepare_info info;
  int status;
  self->busy = 1;
  Py_BEGIN_ALLOW_THREADS status = strata_weights_prepare(w, comm->comm, warm, &info);
  Py_END_ALLOW_THREADS self->busy = 0;
  if (status != STRATA_OK) return raise_status(status, strata_weights_error(w));
  return Py_BuildValue("{sisisisKsKsd}", "parent", info.parent, "children", info.children,
                       "refused", info.refused, "warm_bytes_sent",
                       (unsigned long long)info.warm_bytes_sent, "warm_bytes_received",
                       (unsigned long long)info.warm_bytes_received, "seconds", info.seconds);
}

static PyObject *Weights_version_info(WeightsObject *self, PyObject *args) {
  unsigned long long version;
  if (!PyArg_ParseTuple(args, "K", &version)) return NULL;
  strata_weights *w = weights_get(self);
  if (!w) return NULL;
  strata_weights_version_stats st;
  int status = strata_weights_version_info(w, version, &st);
  if (status != STRATA_OK)
    return raise_status(status, "that version is not kept (or not a publisher)");
  return Py_BuildValue(
      "{sKsisKsKsKsKsKsdsd}", "version", (unsigned long long)st.version, "anchor", st.anchor,
      "elements", (unsigned long long)st.elements, "changed", (unsigned long long)st.changed,
      "full_bytes", (unsigned long long)st.full_bytes, "patch_bytes",
      (unsigned long long)st.patch_bytes, "patch_raw_bytes", (unsigned long long)st.patch_raw_bytes,
      "encode_s", st.encode_s, "hash_s", st.hash_s);
}

static PyObject *Weights_close(WeightsObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->busy)
    return PyErr_Format(PyExc_RuntimeError, "the weights handle is in use by another thread");
  weights_close(self);
  Py_RETURN_NONE;
}

static PyObject *Weights_version(WeightsObject *self, void *Py_UNUSED(closure)) {
  return PyLong_FromUnsignedLongLong(self->w ? strata_weights_version(self->w) : 0);
}

static PyObject *Weights_closed(WeightsObject *self, void *Py_UNUSED(closure)) {
  return PyBool_FromLong(self->w == NULL);
}

static PyMethodDef Weights_methods[] = {
    {"publish", (PyCFunction)Weights_publish, METH_NOARGS,
     "Publisher: encode the tensors' current bytes as the next version; returns its number."},
    {"serve", (PyCFunction)Weights_serve, METH_VARARGS,
     "serve(comm) -> info: the publisher's side of a round (rank 0 of comm)."},
    {"update", (PyCFunction)Weights_update, METH_VARARGS,
     "update(comm, target=0) -> info: a subscriber's side of a round; 0 = the newest version."},
    {"prepare", (PyCFunction)(void (*)(void))Weights_prepare, METH_VARARGS | METH_KEYWORDS,
     "prepare(comm, warm_bytes=None) -> info: before the first round, on every rank: checks the "
     "tensor sets, draws the fan-out tree and opens the TCP windows of its edges between sites "
     "(None: twice the bandwidth-delay product)."},
    {"version_info", (PyCFunction)Weights_version_info, METH_VARARGS,
     "version_info(v) -> dict: what publishing version v cost (publisher)."},
    {"close", (PyCFunction)Weights_close, METH_NOARGS, "Free the handle (idempotent)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Weights_getset[] = {
    {"version", (getter)Weights_version, NULL, "held (subscriber) or newest (publisher)", NULL},
    {"closed", (getter)Weights_closed, NULL, "True once closed", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject WeightsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._strata.Weights",
    .tp_basicsize = sizeof(WeightsObject),
    .tp_dealloc = (destructor)Weights_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A weight-sync publisher or subscriber (see strata.weights).",
    .tp_methods = Weights_methods,
    .tp_getset = Weights_getset,
    .tp_init = (initproc)Weights_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ---- */

static PyObject *module_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  return PyUnicode_FromString(strata_version());
}

static PyObject *module_names(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  PyObject *statuses = PyDict_New();
  if (!statuses) return NULL;
  for (int s = STRATA_STATUS_MIN; s <= 0; s++) {
    PyObject *key = PyLong_FromLong(s), *name = PyUnicode_FromString(strata_err_name(s));
    if (!key || !name || PyDict_SetItem(statuses, key, name) != 0) {
      Py_XDECREF(key);
      Py_XDECREF(name);
      Py_DECREF(statuses);
      return NULL;
    }
    Py_DECREF(key);
    Py_DECREF(name);
  }
  return statuses;
}

/* Where this module found libstrata's strata_version: the same address in every extension of
 * the package when the process holds one runtime (its memory registry, secret cache and log
 * level then exist once). */
static PyObject *module_runtime_id(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  return PyLong_FromVoidPtr((void *)(uintptr_t)&strata_version);
}

/* ---- the C enums by name ----
 * The Python layer takes the names of dtypes, ops, collectives, algorithms and wire encodings
 * from here rather than keeping copies of strata.h's enums: a value the C library adds is
 * known to Python without a change there. */

typedef enum enum_kind { ENUM_DTYPE, ENUM_OP, ENUM_COLL, ENUM_ALGO, ENUM_COMPRESS } enum_kind;

static const char *const enum_kinds[] = {"dtype", "op", "coll", "algo", "compress"};

static int enum_kind_of(const char *kind) {
  for (int i = 0; i < (int)(sizeof enum_kinds / sizeof enum_kinds[0]); i++)
    if (strcmp(kind, enum_kinds[i]) == 0) return i;
  PyErr_Format(PyExc_ValueError, "no enum %s (dtype, op, coll, algo or compress)", kind);
  return -1;
}

static int enum_count(enum_kind kind) {
  switch (kind) {
    case ENUM_DTYPE:
      return STRATA_DTYPE_COUNT;
    case ENUM_OP:
      return STRATA_OP_COUNT;
    case ENUM_COLL:
      return STRATA_COLL_COUNT;
    case ENUM_ALGO:
      return STRATA_ALGO_COUNT;
    case ENUM_COMPRESS:
      return STRATA_COMPRESS_COUNT;
  }
  return 0;
}

static const char *enum_name(enum_kind kind, int value) {
  switch (kind) {
    case ENUM_DTYPE:
      return strata_dtype_name((strata_dtype)value);
    case ENUM_OP:
      return strata_op_name((strata_op)value);
    case ENUM_COLL:
      return strata_coll_name((strata_coll)value);
    case ENUM_ALGO:
      return strata_algo_name((strata_algo)value);
    case ENUM_COMPRESS:
      return strata_compress_name((strata_compress)value);
  }
  return "?";
}

/* The C parser of `kind` on `name`: its value, or -1 for a name it does not know. */
static int enum_parse(enum_kind kind, const char *name) {
  int status = STRATA_ERR_INVALID_ARG, value = -1;
  switch (kind) {
    case ENUM_DTYPE: {
      strata_dtype v;
      if ((status = strata_dtype_parse(name, &v)) == STRATA_OK) value = (int)v;
      break;
    }
    case ENUM_OP: {
      strata_op v;
      if ((status = strata_op_parse(name, &v)) == STRATA_OK) value = (int)v;
      break;
    }
    case ENUM_COLL: {
      strata_coll v;
      if ((status = strata_coll_parse(name, &v)) == STRATA_OK) value = (int)v;
      break;
    }
    case ENUM_ALGO: {
      strata_algo v;
      if ((status = strata_algo_parse(name, &v)) == STRATA_OK) value = (int)v;
      break;
    }
    case ENUM_COMPRESS: {
      strata_compress v;
      if ((status = strata_compress_parse(name, &v)) == STRATA_OK) value = (int)v;
      break;
    }
  }
  return status == STRATA_OK ? value : -1;
}

/* enum_names(kind) -> [the name of value 0, of value 1, ...] */
static PyObject *module_enum_names(PyObject *Py_UNUSED(m), PyObject *args) {
  const char *kind_name;
  if (!PyArg_ParseTuple(args, "s", &kind_name)) return NULL;
  int kind = enum_kind_of(kind_name);
  if (kind < 0) return NULL;
  int count = enum_count((enum_kind)kind);
  PyObject *list = PyList_New(count);
  for (int i = 0; list && i < count; i++) {
    PyObject *name = PyUnicode_FromString(enum_name((enum_kind)kind, i));
    if (!name)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, i, name);
  }
  return list;
}

/* enum_parse(kind, name) -> value, or -1 when the C parser knows no such name */
static PyObject *module_enum_parse(PyObject *Py_UNUSED(m), PyObject *args) {
  const char *kind_name, *name;
  if (!PyArg_ParseTuple(args, "ss", &kind_name, &name)) return NULL;
  int kind = enum_kind_of(kind_name);
  if (kind < 0) return NULL;
  return PyLong_FromLong(enum_parse((enum_kind)kind, name));
}

/* dtype_sizes() -> [bytes of one element of dtype 0, of dtype 1, ...] */
static PyObject *module_dtype_sizes(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  PyObject *list = PyList_New(STRATA_DTYPE_COUNT);
  for (int i = 0; list && i < STRATA_DTYPE_COUNT; i++) {
    PyObject *size = PyLong_FromSize_t(strata_dtype_size((strata_dtype)i));
    if (!size)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, i, size);
  }
  return list;
}

static PyMethodDef module_methods[] = {
    {"version", module_version, METH_NOARGS, "The C library's version."},
    {"enum_names", module_enum_names, METH_VARARGS,
     "enum_names(kind) -> the C names of values 0, 1, ... of kind 'dtype', 'op', 'coll', 'algo' "
     "or 'compress'."},
    {"enum_parse", module_enum_parse, METH_VARARGS,
     "enum_parse(kind, name) -> the value the C library's parser gives name (its aliases "
     "included), or -1."},
    {"dtype_sizes", module_dtype_sizes, METH_NOARGS, "Bytes of one element of each dtype."},
    {"_runtime_id", module_runtime_id, METH_NOARGS, "libstrata's identity in this process"},
    {"_set_errors", module_set_errors, METH_VARARGS, "Install the exception classes."},
    {"status_names", module_names, METH_NOARGS, "status code -> STRATA_ERR_* name"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_strata",
    .m_doc = "The C layer of the strata package.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__strata(void) {
  if (PyType_Ready(&RequestType) < 0 || PyType_Ready(&CommType) < 0 ||
      PyType_Ready(&DiLoCoType) < 0 || PyType_Ready(&WeightsType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Comm", (PyObject *)&CommType) < 0 ||
      PyModule_AddObjectRef(m, "Request", (PyObject *)&RequestType) < 0 ||
      PyModule_AddObjectRef(m, "DiLoCo", (PyObject *)&DiLoCoType) < 0 ||
      PyModule_AddObjectRef(m, "Weights", (PyObject *)&WeightsType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
