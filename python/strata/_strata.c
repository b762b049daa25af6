/*
 * _strata.c — the CPython extension under the `strata` package: a thin layer over strata.h.
 *
 * What lives here and what does not. This file turns Python objects into the C API's arguments
 * and back: buffers (anything with the buffer protocol, or a raw address the Python layer took
 * from a torch tensor it keeps alive), status codes into exceptions, requests into objects. The
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
 *    size error is an exception, never an overrun.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "strata.h"

/* status -> exception class, installed by __init__.py (_set_errors); strata.Error otherwise. */
static PyObject *error_classes; /* dict */
static PyObject *error_base;

static PyObject *raise_status(int status, const char *context) {
  PyObject *cls = NULL;
  if (error_classes) {
    PyObject *key = PyLong_FromLong(status);
    if (key) {
      cls = PyDict_GetItemWithError(error_classes, key);
      Py_DECREF(key);
    }
  }
  if (!cls) cls = error_base ? error_base : PyExc_RuntimeError;
  PyObject *value = Py_BuildValue("(iss)", status, strata_err_name(status),
                                  context && *context ? context : strata_strerror(status));
  if (value) {
    PyErr_SetObject(cls, value);
    Py_DECREF(value);
  }
  return NULL;
}

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

/* The strata dtype of a buffer format, -1 if none ('h' and 'H' have none: strata has no 16-bit
 * integers; a uint16 array holding f16 or bf16 bits names its dtype explicitly). */
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
    .tp_doc = "An asynchronous operation of a communicator.",
    .tp_methods = Request_methods,
    .tp_getset = Request_getset,
};

/* ---- Comm ---- */

typedef struct CommObject {
  PyObject_HEAD strata_comm *comm;
} CommObject;

static int Comm_init(CommObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"settings", NULL};
  PyObject *settings = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Comm", keywords, &settings)) return -1;
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
  Py_BEGIN_ALLOW_THREADS status = strata_comm_init(&cfg, &comm);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) {
    raise_status(status, "cannot create the communicator (STRATA_LOG=info says more)");
    return -1;
  }
  self->comm = comm;
  return 0;
}

static int comm_check(CommObject *self) {
  if (self->comm) return 0;
  PyErr_SetString(PyExc_ValueError, "the communicator is destroyed");
  return -1;
}

static void comm_destroy(CommObject *self) {
  strata_comm *comm = self->comm;
  self->comm = NULL;
  if (comm) {
    Py_BEGIN_ALLOW_THREADS strata_comm_destroy(comm);
    Py_END_ALLOW_THREADS
  }
}

static void Comm_dealloc(CommObject *self) {
  comm_destroy(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Comm_destroy(CommObject *self, PyObject *Py_UNUSED(ignored)) {
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
  return Py_BuildValue("{sKsKsK}", "messages_sent", (unsigned long long)stats.messages_sent,
                       "data_bytes_sent", (unsigned long long)stats.data_bytes_sent,
                       "wire_bytes_sent", (unsigned long long)stats.wire_bytes_sent);
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
                   "a buffer of format '%s' has no strata dtype (float32/64/16, int8/32/64, "
                   "uint8/32/64; name bf16 or f16 for 16-bit patterns)",
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
  CommObject *obj = (CommObject *)cls->tp_alloc(cls, 0);
  if (!obj) {
    strata_comm_destroy(child);
    return NULL;
  }
  obj->comm = child;
  return (PyObject *)obj;
}

static PyMethodDef Comm_methods[] = {
    {"_split", (PyCFunction)Comm_split, METH_VARARGS, "_split(color, key, cls)"},
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

static PyGetSetDef Comm_getset[] = {{"rank", (getter)Comm_rank, NULL, "this rank", NULL},
                                    {"size", (getter)Comm_size, NULL, "the world size", NULL},
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

/* ---- module ---- */

static PyObject *module_version(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  return PyUnicode_FromString(strata_version());
}

static PyObject *module_set_errors(PyObject *Py_UNUSED(m), PyObject *args) {
  PyObject *base, *classes;
  if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &classes)) return NULL;
  Py_XSETREF(error_base, Py_NewRef(base));
  Py_XSETREF(error_classes, Py_NewRef(classes));
  Py_RETURN_NONE;
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

static PyMethodDef module_methods[] = {
    {"version", module_version, METH_NOARGS, "The C library's version."},
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
  if (PyType_Ready(&RequestType) < 0 || PyType_Ready(&CommType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "Comm", (PyObject *)&CommType) < 0 ||
      PyModule_AddObjectRef(m, "Request", (PyObject *)&RequestType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
