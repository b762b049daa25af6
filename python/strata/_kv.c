// SPDX-License-Identifier: Apache-2.0
/*
 * _kv.c — the CPython extension under strata.kv: a thin layer over strata_kv.h (the agent, its
 * transfers and the lane) and the rendezvous store's client.
 *
 * The friendly surface (regions of numpy arrays and torch tensors, descriptors built from
 * offsets, the Python exceptions) is strata/kv.py; this file only turns Python objects into the
 * C API's arguments and back. It is a module of its own, beside _strata, so that each links its
 * own copy of the static runtime with every symbol kept inside.
 *
 * Invariants:
 *  - the GIL is released around every call that can block (connect, deregister, waits, lane
 *    calls, destroy), so the lane's serving threads, which take the GIL to run a Python handler,
 *    can never deadlock against a caller holding it;
 *  - the handler's state lives outside the Agent object and is freed only after
 *    strata_kv_agent_destroy returned, i.e. after every serving thread is joined;
 *  - a handler's exception becomes an error status in the reply (its strata status for a
 *    strata.Error, STRATA_ERR_ABORTED for anything else), never an unwinding through C;
 *  - an Agent is destroyed only after every transfer posted on it is released (an Xfer holds
 *    its Agent; Agent.close() cancels and releases the transfers still open first), and an Xfer
 *    holds the Python owners of the memory it touches until it is released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "strata.h"
#include "strata_kv.h"

/* Run stmt without the GIL, counted in `busy` so that whoever destroys the object under it (a
 * close() from another thread) first waits for it (wait_idle): every such call is bounded by a
 * timeout. The counter changes only with the GIL held. */
#define BLOCKING(busy, stmt) \
  do {                       \
    (busy)++;                \
    Py_BEGIN_ALLOW_THREADS;  \
    stmt;                    \
    Py_END_ALLOW_THREADS;    \
    (busy)--;                \
  } while (0)

static void wait_idle(const int *busy) {
  while (*busy > 0) {
    Py_BEGIN_ALLOW_THREADS;
    usleep(1000);
    Py_END_ALLOW_THREADS;
  }
}

/* The address of a C-contiguous buffer; writable asks for a writable one. The caller keeps the
 * object (a memoryview holding its own export) alive for as long as the address is used. */
static PyObject *mod_address(PyObject *Py_UNUSED(m), PyObject *args) {
  PyObject *obj;
  int writable = 1;
  if (!PyArg_ParseTuple(args, "O|p", &obj, &writable)) return NULL;
  Py_buffer view;
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &view, flags) != 0) return NULL;
  PyObject *r = Py_BuildValue("(Kn)", (unsigned long long)(uintptr_t)view.buf, view.len);
  PyBuffer_Release(&view);
  return r;
}

/* ---- the lane handler: a Python callable run on the agent's serving threads ---- */

typedef struct handler_state {
  PyObject *handler; /* None or a callable (from, tag, request: bytes) -> bytes-like or None */
  unsigned long long errors;
  char last_error[512];
} handler_state;

static int handler_failed(handler_state *hs) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  int status = STRATA_ERR_ABORTED;
  if (value && error_base && PyObject_IsInstance(value, error_base) == 1) {
    PyObject *code = PyObject_GetAttrString(value, "status");
    long c = code ? PyLong_AsLong(code) : 0;
    if (code && c < 0 && c > -1000) status = (int)c;
    Py_XDECREF(code);
    PyErr_Clear();
  }
  PyObject *text = value ? PyObject_Repr(value) : NULL;
  const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
  snprintf(hs->last_error, sizeof hs->last_error, "%s", s ? s : "an exception");
  PyErr_Clear();
  hs->errors++;
  PySys_WriteStderr("strata.kv: the lane handler raised %.400s; the caller gets %s\n",
                    hs->last_error, strata_err_name(status));
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return status;
}

static int lane_trampoline(void *ctx, const char *from, uint32_t tag, const void *request,
                           size_t request_bytes, void *reply, size_t reply_cap,
                           size_t *reply_bytes) {
  handler_state *hs = ctx;
  *reply_bytes = 0;
  if (_Py_IsFinalizing()) return STRATA_ERR_ABORTED; /* no interpreter to run it in */
  PyGILState_STATE gil = PyGILState_Ensure();
  int status = STRATA_OK;
  PyObject *handler = hs->handler;
  if (!handler || handler == Py_None) {
    status = STRATA_ERR_UNSUPPORTED;
    goto out;
  }
  Py_INCREF(handler);
  PyObject *r = PyObject_CallFunction(handler, "sIy#", from, (unsigned)tag, (const char *)request,
                                      (Py_ssize_t)request_bytes);
  Py_DECREF(handler);
  if (!r) {
    status = handler_failed(hs);
    goto out;
  }
  if (r != Py_None) {
    Py_buffer view;
    if (PyObject_GetBuffer(r, &view, PyBUF_C_CONTIGUOUS) != 0) {
      status = handler_failed(hs);
    } else {
      if ((size_t)view.len > reply_cap) {
        PyErr_Format(PyExc_ValueError, "the reply is %zd bytes, above the lane's %zu", view.len,
                     reply_cap);
        status = handler_failed(hs);
      } else {
        memcpy(reply, view.buf, (size_t)view.len);
        *reply_bytes = (size_t)view.len;
      }
      PyBuffer_Release(&view);
    }
  }
  Py_DECREF(r);
out:
  PyGILState_Release(gil);
  return status;
}

/* ---- Agent and Xfer ---- */

typedef struct XferObject XferObject;

typedef struct AgentObject {
  PyObject_HEAD strata_kv_agent *agent;
  handler_state *handler;
  XferObject *xfers; /* open transfers, released before the agent is destroyed */
  int busy;          /* calls running without the GIL */
} AgentObject;

struct XferObject {
  PyObject_HEAD strata_kv_xfer *xfer; /* NULL once released */
  AgentObject *owner;
  PyObject *keep; /* the owners of the local memory */
  XferObject *prev, *next;
  int busy; /* waits running without the GIL */
};

static PyTypeObject AgentType, XferType;

static void xfer_release(XferObject *x) {
  if (!x->xfer) return;
  strata_kv_xfer *xfer = x->xfer;
  if (x->busy) strata_kv_xfer_cancel(xfer); /* another thread waits on it: end that wait soon */
  wait_idle(&x->busy);
  if (!x->xfer) return; /* released meanwhile by the thread that waited */
  x->xfer = NULL;
  Py_BEGIN_ALLOW_THREADS strata_kv_xfer_release(xfer);
  Py_END_ALLOW_THREADS if (x->prev) x->prev->next = x->next;
  else if (x->owner) x->owner->xfers = x->next;
  if (x->next) x->next->prev = x->prev;
  x->prev = x->next = NULL;
  Py_CLEAR(x->keep);
}

static int agent_ready(AgentObject *self) {
  if (self->agent) return 1;
  raise_status(STRATA_ERR_INVALID_ARG, "the agent is closed");
  return 0;
}

static int Agent_init(AgentObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {
      "name",    "secret",  "job_id",    "listen_host",   "listen_port", "streams", "slice_bytes",
      "timeout", "backend", "bulk_nice", "lane_realtime", "seal",        NULL};
  strata_kv_config cfg;
  strata_kv_config_init(&cfg);
  const char *name = NULL, *secret = NULL, *job_id = NULL, *listen_host = NULL;
  Py_ssize_t slice_bytes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|zzziindiiii", keywords, &name, &secret, &job_id,
                                   &listen_host, &cfg.listen_port, &cfg.streams, &slice_bytes,
                                   &cfg.timeout_s, &cfg.backend, &cfg.bulk_nice, &cfg.lane_realtime,
                                   &cfg.seal))
    return -1;
  if (self->agent) {
    PyErr_SetString(PyExc_RuntimeError, "the agent is already initialised");
    return -1;
  }
  if (slice_bytes < 0) {
    PyErr_SetString(PyExc_ValueError, "slice_bytes must not be negative");
    return -1;
  }
  cfg.name = name;
  cfg.secret = secret;
  cfg.job_id = job_id;
  cfg.listen_host = listen_host;
  cfg.slice_bytes = (size_t)slice_bytes;
  self->handler = calloc(1, sizeof *self->handler);
  if (!self->handler) {
    PyErr_NoMemory();
    return -1;
  }
  strata_kv_agent *agent = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_kv_agent_create(&cfg, &agent);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) {
    raise_status(status, "cannot create the agent");
    return -1;
  }
  self->agent = agent;
  strata_kv_lane_set_handler(agent, lane_trampoline, self->handler);
  return 0;
}

static void agent_close(AgentObject *self) {
  strata_kv_agent *agent = self->agent;
  self->agent = NULL; /* later calls fail; the ones running are waited for */
  wait_idle(&self->busy);
  while (self->xfers) xfer_release(self->xfers);
  if (agent) {
    Py_BEGIN_ALLOW_THREADS strata_kv_agent_destroy(agent);
    Py_END_ALLOW_THREADS
  }
  if (self->handler) { /* every serving thread is joined: nothing runs the handler any more */
    Py_CLEAR(self->handler->handler);
    free(self->handler);
    self->handler = NULL;
  }
}

static PyObject *Agent_close(AgentObject *self, PyObject *Py_UNUSED(ignored)) {
  agent_close(self);
  Py_RETURN_NONE;
}

static void Agent_dealloc(AgentObject *self) {
  agent_close(self); /* no Xfer is left: each holds a reference to its agent */
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Agent_name(AgentObject *self, void *Py_UNUSED(closure)) {
  if (!agent_ready(self)) return NULL;
  return PyUnicode_FromString(strata_kv_agent_name(self->agent));
}

static PyObject *Agent_set_handler(AgentObject *self, PyObject *handler) {
  if (!agent_ready(self)) return NULL;
  if (handler != Py_None && !PyCallable_Check(handler)) {
    PyErr_SetString(PyExc_TypeError, "the handler must be callable (or None)");
    return NULL;
  }
  /* Serving threads read the handler with the GIL held, as this does. */
  Py_XSETREF(self->handler->handler, Py_NewRef(handler));
  Py_RETURN_NONE;
}

static PyObject *Agent_handler_errors(AgentObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!self->handler) return Py_BuildValue("(Ks)", 0ULL, "");
  return Py_BuildValue("(Ks)", self->handler->errors, self->handler->last_error);
}

static PyObject *Agent_register(AgentObject *self, PyObject *args) {
  unsigned long long addr;
  Py_ssize_t bytes;
  if (!PyArg_ParseTuple(args, "Kn", &addr, &bytes)) return NULL;
  if (!agent_ready(self)) return NULL;
  if (bytes <= 0) {
    PyErr_SetString(PyExc_ValueError, "a region needs at least one byte");
    return NULL;
  }
  uint32_t id = 0;
  int status = strata_kv_register(self->agent, (void *)(uintptr_t)addr, (size_t)bytes, &id);
  if (status != STRATA_OK) return raise_status(status, "cannot register the region");
  return PyLong_FromUnsignedLong(id);
}

static PyObject *Agent_deregister(AgentObject *self, PyObject *arg) {
  unsigned long id = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (!agent_ready(self)) return NULL;
  strata_kv_agent *agent = self->agent;
  int status;
  BLOCKING(self->busy, status = strata_kv_deregister(agent, (uint32_t)id));
  if (status != STRATA_OK) return raise_status(status, "cannot deregister the region");
  Py_RETURN_NONE;
}

static PyObject *Agent_metadata(AgentObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!agent_ready(self)) return NULL;
  void *blob = NULL;
  size_t bytes = 0;
  int status = strata_kv_metadata_export(self->agent, &blob, &bytes);
  if (status != STRATA_OK) return raise_status(status, "cannot export the metadata");
  PyObject *r = PyBytes_FromStringAndSize(blob, (Py_ssize_t)bytes);
  free(blob);
  return r;
}

static PyObject *Agent_load(AgentObject *self, PyObject *arg) {
  if (!agent_ready(self)) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(arg, &view, PyBUF_C_CONTIGUOUS) != 0) return NULL;
  strata_kv_agent *agent = self->agent;
  int peer = -1, status;
  BLOCKING(self->busy, status = strata_kv_peer_load(agent, view.buf, (size_t)view.len, &peer));
  PyBuffer_Release(&view);
  if (status != STRATA_OK) return raise_status(status, "cannot load the peer's metadata");
  return PyLong_FromLong(peer);
}

static PyObject *Agent_forget(AgentObject *self, PyObject *arg) {
  int peer = (int)PyLong_AsLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (!agent_ready(self)) return NULL;
  strata_kv_agent *agent = self->agent;
  int status;
  BLOCKING(self->busy, status = strata_kv_peer_forget(agent, peer));
  if (status != STRATA_OK) return raise_status(status, "cannot forget the peer");
  Py_RETURN_NONE;
}

static PyObject *Agent_peer_backend(AgentObject *self, PyObject *arg) {
  int peer = (int)PyLong_AsLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (!agent_ready(self)) return NULL;
  int backend = strata_kv_peer_backend(self->agent, peer);
  if (backend < 0) return raise_status(backend, "no such peer");
  return PyLong_FromLong(backend);
}

static PyObject *Agent_peer_regions(AgentObject *self, PyObject *arg) {
  int peer = (int)PyLong_AsLong(arg);
  if (PyErr_Occurred()) return NULL;
  if (!agent_ready(self)) return NULL;
  PyObject *list = PyList_New(0);
  for (size_t i = 0; list; i++) {
    uint32_t id;
    uint64_t addr, bytes;
    int status = strata_kv_peer_region(self->agent, peer, i, &id, &addr, &bytes);
    if (status == STRATA_ERR_NOT_FOUND) break;
    if (status != STRATA_OK) {
      Py_DECREF(list);
      return raise_status(status, "cannot list the peer's regions");
    }
    PyObject *t = Py_BuildValue("(kKK)", (unsigned long)id, (unsigned long long)addr,
                                (unsigned long long)bytes);
    if (!t || PyList_Append(list, t) != 0) Py_CLEAR(list);
    Py_XDECREF(t);
  }
  return list;
}

static PyObject *Agent_publish(AgentObject *self, PyObject *args) {
  const char *store;
  double timeout_s = 10;
  if (!PyArg_ParseTuple(args, "s|d", &store, &timeout_s)) return NULL;
  if (!agent_ready(self)) return NULL;
  strata_kv_agent *agent = self->agent;
  int status;
  BLOCKING(self->busy, status = strata_kv_metadata_publish(agent, store, timeout_s));
  if (status != STRATA_OK) return raise_status(status, "cannot publish the metadata to the store");
  Py_RETURN_NONE;
}

static PyObject *Agent_fetch(AgentObject *self, PyObject *args) {
  const char *store, *name;
  double timeout_s = 10;
  if (!PyArg_ParseTuple(args, "ss|d", &store, &name, &timeout_s)) return NULL;
  if (!agent_ready(self)) return NULL;
  strata_kv_agent *agent = self->agent;
  int peer = -1, status;
  BLOCKING(self->busy, status = strata_kv_peer_fetch(agent, store, name, timeout_s, &peer));
  if (status != STRATA_OK) return raise_status(status, "cannot fetch the peer from the store");
  return PyLong_FromLong(peer);
}

/* A list of (addr, bytes[, region]) tuples as descriptors; NULL with an exception set. */
static strata_kv_desc *descs_from(PyObject *seq, Py_ssize_t *count, const char *what) {
  PyObject *fast = PySequence_Fast(seq, "descriptors must be a sequence");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  strata_kv_desc *d = calloc(n ? (size_t)n : 1, sizeof *d);
  if (!d) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
    unsigned long long addr, bytes;
    unsigned long region = 0;
    if (!PyArg_ParseTuple(item, "KK|k", &addr, &bytes, &region)) {
      PyErr_Format(PyExc_TypeError, "%s descriptor %zd must be (addr, bytes[, region])", what, i);
      free(d);
      Py_DECREF(fast);
      return NULL;
    }
    d[i].addr = addr;
    d[i].bytes = bytes;
    d[i].region = (uint32_t)region;
  }
  Py_DECREF(fast);
  *count = n;
  return d;
}

static PyObject *Agent_post(AgentObject *self, PyObject *args) {
  int op, peer;
  PyObject *local_seq, *remote_seq, *keep;
  Py_buffer notif = {0};
  if (!PyArg_ParseTuple(args, "iiOOz*O", &op, &peer, &local_seq, &remote_seq, &notif, &keep))
    return NULL;
  XferObject *x = NULL;
  Py_ssize_t nlocal = 0, nremote = 0;
  strata_kv_desc *local = NULL, *remote = NULL;
  if (!agent_ready(self)) goto done;
  local = descs_from(local_seq, &nlocal, "local");
  if (local) remote = descs_from(remote_seq, &nremote, "remote");
  if (!remote) goto done;
  if (nlocal != nremote) {
    PyErr_Format(PyExc_ValueError, "%zd local descriptors for %zd remote ones", nlocal, nremote);
    goto done;
  }
  strata_kv_xfer *xfer = NULL;
  int status =
      strata_kv_xfer_post(self->agent, op ? STRATA_KV_WRITE : STRATA_KV_READ, peer, local, remote,
                          (size_t)nlocal, notif.buf, notif.buf ? (size_t)notif.len : 0, &xfer);
  if (status != STRATA_OK) {
    raise_status(status, "cannot post the transfer");
    goto done;
  }
  x = PyObject_New(XferObject, &XferType);
  if (!x) {
    strata_kv_xfer_release(xfer);
    goto done;
  }
  x->xfer = xfer;
  x->busy = 0;
  x->owner = (AgentObject *)Py_NewRef(self);
  x->keep = Py_NewRef(keep);
  x->prev = NULL;
  x->next = self->xfers;
  if (x->next) x->next->prev = x;
  self->xfers = x;
done:
  free(local);
  free(remote);
  if (notif.buf) PyBuffer_Release(&notif);
  return (PyObject *)x;
}

static PyObject *Agent_notify(AgentObject *self, PyObject *args) {
  int peer;
  Py_buffer msg;
  if (!PyArg_ParseTuple(args, "iy*", &peer, &msg)) return NULL;
  if (!agent_ready(self)) {
    PyBuffer_Release(&msg);
    return NULL;
  }
  strata_kv_agent *agent = self->agent;
  int status;
  BLOCKING(self->busy, status = strata_kv_notify(agent, peer, msg.buf, (size_t)msg.len));
  PyBuffer_Release(&msg);
  if (status != STRATA_OK) return raise_status(status, "cannot notify the peer");
  Py_RETURN_NONE;
}

static PyObject *Agent_notif_get(AgentObject *self, PyObject *args) {
  double timeout_s = 0;
  if (!PyArg_ParseTuple(args, "|d", &timeout_s)) return NULL;
  if (!agent_ready(self)) return NULL;
  strata_kv_agent *agent = self->agent;
  char from[STRATA_KV_NAME_BYTES] = "";
  uint8_t msg[STRATA_KV_NOTIF_MAX_BYTES];
  size_t bytes = 0;
  int status;
  BLOCKING(self->busy,
           status = strata_kv_notifs_get(agent, from, msg, sizeof msg, &bytes, timeout_s));
  if (status == STRATA_ERR_TIMEOUT) Py_RETURN_NONE;
  if (status != STRATA_OK) return raise_status(status, "cannot take a notification");
  return Py_BuildValue("(sy#)", from, (const char *)msg, (Py_ssize_t)bytes);
}

static PyObject *Agent_refusals(AgentObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!agent_ready(self)) return NULL;
  char last[256] = "";
  uint64_t n = strata_kv_agent_refusals(self->agent, last, sizeof last);
  return Py_BuildValue("(Ks)", (unsigned long long)n, last);
}

static PyObject *Agent_lane_call(AgentObject *self, PyObject *args) {
  int peer;
  unsigned int tag;
  Py_buffer request;
  double timeout_s = 0;
  if (!PyArg_ParseTuple(args, "iIy*|d", &peer, &tag, &request, &timeout_s)) return NULL;
  if (!agent_ready(self)) {
    PyBuffer_Release(&request);
    return NULL;
  }
  uint8_t *reply = malloc(STRATA_KV_LANE_MAX_BYTES);
  if (!reply) {
    PyBuffer_Release(&request);
    return PyErr_NoMemory();
  }
  strata_kv_agent *agent = self->agent;
  size_t reply_bytes = 0;
  int status;
  BLOCKING(self->busy,
           status = strata_kv_lane_call(agent, peer, tag, request.buf, (size_t)request.len, reply,
                                        STRATA_KV_LANE_MAX_BYTES, &reply_bytes, timeout_s));
  PyBuffer_Release(&request);
  PyObject *r = status == STRATA_OK
                    ? PyBytes_FromStringAndSize((const char *)reply, (Py_ssize_t)reply_bytes)
                    : raise_status(status, "the lane call failed");
  free(reply);
  return r;
}

static PyMethodDef Agent_methods[] = {
    {"close", (PyCFunction)Agent_close, METH_NOARGS, "Release open transfers, destroy."},
    {"set_handler", (PyCFunction)Agent_set_handler, METH_O, "The lane handler (or None)."},
    {"handler_errors", (PyCFunction)Agent_handler_errors, METH_NOARGS, "(count, last)."},
    {"register", (PyCFunction)Agent_register, METH_VARARGS, "register(addr, bytes) -> id"},
    {"deregister", (PyCFunction)Agent_deregister, METH_O, "deregister(id)"},
    {"metadata", (PyCFunction)Agent_metadata, METH_NOARGS, "The metadata blob (bytes)."},
    {"load", (PyCFunction)Agent_load, METH_O, "load(blob) -> peer index"},
    {"forget", (PyCFunction)Agent_forget, METH_O, "forget(peer)"},
    {"peer_backend", (PyCFunction)Agent_peer_backend, METH_O, "peer_backend(peer) -> int"},
    {"peer_regions", (PyCFunction)Agent_peer_regions, METH_O, "[(id, addr, bytes)]"},
    {"publish", (PyCFunction)Agent_publish, METH_VARARGS, "publish(store, timeout)"},
    {"fetch", (PyCFunction)Agent_fetch, METH_VARARGS, "fetch(store, name, timeout) -> peer"},
    {"post", (PyCFunction)Agent_post, METH_VARARGS,
     "post(op, peer, local, remote, notif, keep) -> Xfer"},
    {"notify", (PyCFunction)Agent_notify, METH_VARARGS, "notify(peer, msg)"},
    {"notif_get", (PyCFunction)Agent_notif_get, METH_VARARGS, "notif_get(timeout) -> (from, msg)"},
    {"refusals", (PyCFunction)Agent_refusals, METH_NOARGS, "(count, last reason)"},
    {"lane_call", (PyCFunction)Agent_lane_call, METH_VARARGS,
     "lane_call(peer, tag, request, timeout) -> reply"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Agent_getset[] = {{"name", (getter)Agent_name, NULL, "the agent's name", NULL},
                                     {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject AgentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._kv.Agent",
    .tp_basicsize = sizeof(AgentObject),
    .tp_dealloc = (destructor)Agent_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A strata_kv agent (use strata.kv.Agent).",
    .tp_methods = Agent_methods,
    .tp_getset = Agent_getset,
    .tp_init = (initproc)Agent_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *Xfer_wait(XferObject *self, PyObject *args) {
  double timeout_s = -1;
  if (!PyArg_ParseTuple(args, "|d", &timeout_s)) return NULL;
  if (!self->xfer) return raise_status(STRATA_ERR_INVALID_ARG, "the transfer is released");
  strata_kv_xfer *xfer = self->xfer;
  int status;
  BLOCKING(self->busy, status = strata_kv_xfer_wait(xfer, timeout_s));
  return PyLong_FromLong(status);
}

static PyObject *Xfer_status(XferObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!self->xfer) return raise_status(STRATA_ERR_INVALID_ARG, "the transfer is released");
  return PyLong_FromLong(strata_kv_xfer_status(self->xfer));
}

static PyObject *Xfer_error(XferObject *self, PyObject *Py_UNUSED(ignored)) {
  if (!self->xfer) return PyUnicode_FromString("");
  return PyUnicode_FromString(strata_kv_xfer_error(self->xfer));
}

static PyObject *Xfer_cancel(XferObject *self, PyObject *Py_UNUSED(ignored)) {
  if (self->xfer) strata_kv_xfer_cancel(self->xfer);
  Py_RETURN_NONE;
}

static PyObject *Xfer_release(XferObject *self, PyObject *Py_UNUSED(ignored)) {
  xfer_release(self);
  Py_RETURN_NONE;
}

static void Xfer_dealloc(XferObject *self) {
  xfer_release(self); /* cancels and waits: the memory it touches is still held */
  Py_CLEAR(self->owner);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Xfer_methods[] = {
    {"wait", (PyCFunction)Xfer_wait, METH_VARARGS, "wait(timeout=-1) -> status"},
    {"status", (PyCFunction)Xfer_status, METH_NOARGS, "the status now"},
    {"error", (PyCFunction)Xfer_error, METH_NOARGS, "why it failed"},
    {"cancel", (PyCFunction)Xfer_cancel, METH_NOARGS, "stop handing out slices"},
    {"release", (PyCFunction)Xfer_release, METH_NOARGS, "cancel, wait, free"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject XferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._kv.Xfer",
    .tp_basicsize = sizeof(XferObject),
    .tp_dealloc = (destructor)Xfer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A posted transfer (use strata.kv.Transfer).",
    .tp_methods = Xfer_methods,
};

/* ---- the rendezvous store: a client, and a server for tests and single-host runs ---- */

typedef struct StoreObject {
  PyObject_HEAD strata_store *store;
  int busy; /* calls running without the GIL */
} StoreObject;

static int Store_init(StoreObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"addr", "secret", "job_id", "timeout", NULL};
  const char *addr, *secret = NULL, *job_id = NULL;
  double timeout_s = 10;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|zzd", keywords, &addr, &secret, &job_id,
                                   &timeout_s))
    return -1;
  if (self->store) {
    PyErr_SetString(PyExc_RuntimeError, "the store is already connected");
    return -1;
  }
  strata_store *s = NULL;
  int status;
  Py_BEGIN_ALLOW_THREADS status = strata_store_connect_auth(
      addr, secret ? secret : "", job_id ? job_id : "strata-kv", timeout_s, &s);
  Py_END_ALLOW_THREADS if (status != STRATA_OK) {
    raise_status(status, "cannot connect to the store");
    return -1;
  }
  self->store = s;
  return 0;
}

static void store_close(StoreObject *self) {
  if (!self->store) return;
  strata_store *s = self->store;
  self->store = NULL;
  wait_idle(&self->busy);
  Py_BEGIN_ALLOW_THREADS strata_store_close(s);
  Py_END_ALLOW_THREADS
}

static int store_ready(StoreObject *self) {
  if (self->store) return 1;
  raise_status(STRATA_ERR_INVALID_ARG, "the store connection is closed");
  return 0;
}

static PyObject *Store_set(StoreObject *self, PyObject *args) {
  const char *key;
  Py_buffer value;
  if (!PyArg_ParseTuple(args, "sy*", &key, &value)) return NULL;
  if (!store_ready(self)) {
    PyBuffer_Release(&value);
    return NULL;
  }
  strata_store *s = self->store;
  int status;
  BLOCKING(self->busy, status = strata_store_set(s, key, value.buf, (size_t)value.len));
  PyBuffer_Release(&value);
  if (status != STRATA_OK) return raise_status(status, "store set failed");
  Py_RETURN_NONE;
}

static PyObject *Store_get(StoreObject *self, PyObject *args) {
  const char *key;
  double timeout_s = 10;
  if (!PyArg_ParseTuple(args, "s|d", &key, &timeout_s)) return NULL;
  if (!store_ready(self)) return NULL;
  strata_store *s = self->store;
  void *value = NULL;
  size_t len = 0;
  int status;
  BLOCKING(self->busy, status = strata_store_get(s, key, &value, &len, timeout_s));
  if (status != STRATA_OK) return raise_status(status, "store get failed");
  PyObject *r = PyBytes_FromStringAndSize(value, (Py_ssize_t)len);
  free(value);
  return r;
}

static PyObject *Store_add(StoreObject *self, PyObject *args) {
  const char *key;
  long long delta;
  if (!PyArg_ParseTuple(args, "sL", &key, &delta)) return NULL;
  if (!store_ready(self)) return NULL;
  strata_store *s = self->store;
  int64_t result = 0;
  int status;
  BLOCKING(self->busy, status = strata_store_add(s, key, delta, &result));
  if (status != STRATA_OK) return raise_status(status, "store add failed");
  return PyLong_FromLongLong(result);
}

static PyObject *Store_close(StoreObject *self, PyObject *Py_UNUSED(ignored)) {
  store_close(self);
  Py_RETURN_NONE;
}

static void Store_dealloc(StoreObject *self) {
  store_close(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Store_methods[] = {
    {"set", (PyCFunction)Store_set, METH_VARARGS, "set(key, value: bytes)"},
    {"get", (PyCFunction)Store_get, METH_VARARGS, "get(key, timeout=10) -> bytes (waits)"},
    {"add", (PyCFunction)Store_add, METH_VARARGS, "add(key, delta) -> new value"},
    {"close", (PyCFunction)Store_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._kv.Store",
    .tp_basicsize = sizeof(StoreObject),
    .tp_dealloc = (destructor)Store_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Store(addr, secret=None, job_id=None, timeout=10): a rendezvous store client.",
    .tp_methods = Store_methods,
    .tp_init = (initproc)Store_init,
    .tp_new = PyType_GenericNew,
};

typedef struct StoreServerObject {
  PyObject_HEAD strata_store_server *server;
} StoreServerObject;

static int StoreServer_init(StoreServerObject *self, PyObject *args, PyObject *kwds) {
  static char *keywords[] = {"addr", "secret", "job_id", NULL};
  const char *addr = "127.0.0.1:0", *secret = NULL, *job_id = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|szz", keywords, &addr, &secret, &job_id))
    return -1;
  if (self->server) {
    PyErr_SetString(PyExc_RuntimeError, "the store server is already running");
    return -1;
  }
  int status =
      strata_store_server_start_auth(addr, secret, job_id ? job_id : "strata-kv", &self->server);
  if (status != STRATA_OK) {
    raise_status(status, "cannot start the store server");
    return -1;
  }
  return 0;
}

static PyObject *StoreServer_port(StoreServerObject *self, void *Py_UNUSED(closure)) {
  if (!self->server) return raise_status(STRATA_ERR_INVALID_ARG, "the store server is stopped");
  return PyLong_FromLong(strata_store_server_port(self->server));
}

static void store_server_stop(StoreServerObject *self) {
  if (!self->server) return;
  strata_store_server *s = self->server;
  self->server = NULL;
  Py_BEGIN_ALLOW_THREADS strata_store_server_stop(s);
  Py_END_ALLOW_THREADS
}

static PyObject *StoreServer_stop(StoreServerObject *self, PyObject *Py_UNUSED(ignored)) {
  store_server_stop(self);
  Py_RETURN_NONE;
}

static void StoreServer_dealloc(StoreServerObject *self) {
  store_server_stop(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef StoreServer_methods[] = {
    {"stop", (PyCFunction)StoreServer_stop, METH_NOARGS, "stop serving"}, {NULL, NULL, 0, NULL}};

static PyGetSetDef StoreServer_getset[] = {
    {"port", (getter)StoreServer_port, NULL, "the port bound", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject StoreServerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strata._kv.StoreServer",
    .tp_basicsize = sizeof(StoreServerObject),
    .tp_dealloc = (destructor)StoreServer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "StoreServer(addr='127.0.0.1:0', secret=None, job_id=None): a store in a thread.",
    .tp_methods = StoreServer_methods,
    .tp_getset = StoreServer_getset,
    .tp_init = (initproc)StoreServer_init,
    .tp_new = PyType_GenericNew,
};

/* ---- the module ---- */

/* Where this module found libstrata's strata_version: the same address in every extension of
 * the package when the process holds one runtime (its memory registry, secret cache and log
 * level then exist once). */
static PyObject *module_runtime_id(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  return PyLong_FromVoidPtr((void *)(uintptr_t)&strata_version);
}

/* backends() -> {name: strata_kv_backend}: the names STRATA_KV_BACKEND takes, with the values
 * of strata_kv.h's enum, so Python keeps no copy of them. */
static PyObject *mod_backends(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
  return Py_BuildValue("{sisisisi}", "auto", STRATA_KV_BACKEND_AUTO, "tcp", STRATA_KV_BACKEND_TCP,
                       "shm", STRATA_KV_BACKEND_SHM, "ucx", STRATA_KV_BACKEND_UCX);
}

/* backend_supported(backend) -> whether this libstrata has it (UCX only when built with it). */
static PyObject *mod_backend_supported(PyObject *Py_UNUSED(m), PyObject *args) {
  int backend;
  if (!PyArg_ParseTuple(args, "i", &backend)) return NULL;
  return PyBool_FromLong(strata_kv_backend_supported(backend));
}

static PyMethodDef module_methods[] = {
    {"_set_errors", module_set_errors, METH_VARARGS, "Install strata.Error and its subclasses."},
    {"backends", mod_backends, METH_NOARGS, "backends() -> {name: strata_kv_backend value}"},
    {"backend_supported", mod_backend_supported, METH_VARARGS,
     "backend_supported(backend) -> True when this libstrata has that backend"},
    {"_runtime_id", module_runtime_id, METH_NOARGS, "libstrata's identity in this process"},
    {"address", mod_address, METH_VARARGS,
     "address(buffer, writable=True) -> (addr, bytes) of a C-contiguous buffer"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kv_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kv",
    .m_doc = "strata_kv.h: the agent, its transfers and the lane.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__kv(void) {
  PyTypeObject *types[] = {&AgentType, &XferType, &StoreType, &StoreServerType};
  const char *names[] = {"Agent", "Xfer", "Store", "StoreServer"};
  for (size_t i = 0; i < 4; i++)
    if (PyType_Ready(types[i]) < 0) return NULL;
  PyObject *m = PyModule_Create(&kv_module);
  if (!m) return NULL;
  for (size_t i = 0; i < 4; i++) {
    if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0) {
      Py_DECREF(m);
      return NULL;
    }
  }
  if (PyModule_AddIntConstant(m, "LANE_MAX_BYTES", STRATA_KV_LANE_MAX_BYTES) < 0 ||
      PyModule_AddIntConstant(m, "NOTIF_MAX_BYTES", STRATA_KV_NOTIF_MAX_BYTES) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
