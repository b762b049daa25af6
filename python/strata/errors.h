// SPDX-License-Identifier: Apache-2.0
/*
 * errors.h — how strata's C extensions (_strata.c, _kv.c) raise a strata status as a Python
 * exception: the class for that status (strata.MismatchError, ...) from the table the package's
 * Python side installs with the module's _set_errors, strata.Error when the status has none,
 * RuntimeError before the table is installed. Each module includes it once and so has its own
 * table, installed by __init__.py and kv.py from the same classes.
 */
#ifndef STRATA_PYTHON_ERRORS_H
#define STRATA_PYTHON_ERRORS_H

#include <Python.h>

#include "strata.h"

static PyObject *error_classes; /* dict: status -> class */
static PyObject *error_base;    /* strata.Error */

/* Sets the exception for `status` with context (or the status's own text) and returns NULL. */
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

/* _set_errors(base, {status: class}) */
static PyObject *module_set_errors(PyObject *Py_UNUSED(m), PyObject *args) {
  PyObject *base, *classes;
  if (!PyArg_ParseTuple(args, "OO!", &base, &PyDict_Type, &classes)) return NULL;
  Py_XSETREF(error_base, Py_NewRef(base));
  Py_XSETREF(error_classes, Py_NewRef(classes));
  Py_RETURN_NONE;
}

#endif
