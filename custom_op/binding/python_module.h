// The Python module custom_op._C, on CPython's limited API (Py_LIMITED_API,
// an abi3 module: one binary for every CPython from the version torch's
// BuildExtension sets in Py_LIMITED_API on, 3.10 for torch 2.14). It holds only
// what is Python-specific and needs no tensor: the build key the loader
// checks, the libjpeg-turbo version for bug reports, the crop-width probe's
// answer, the core's memory limit and the DCT scale rule
// (csrc/scale_rule.h), which custom_op._decode._single.choose_scale asks rather than
// restating it. Every decode is a torch operator (STABLE_TORCH_LIBRARY in
// decode_and_crop_jpeg.cpp); loading this module is what registers them.
// Included only by decode_and_crop_jpeg.cpp, the extension's one
// translation unit, hence the anonymous namespace.
#pragma once

#ifndef Py_LIMITED_API
#error "custom_op's module is built on the limited API: _build_config defines Py_LIMITED_API"
#endif
#include <Python.h>

#include <string>

#include "binding/loaded_libjpeg.h"
#include "csrc/crop_quirk.h"
#include "csrc/jpeg_errors.h"
#include "csrc/limits.h"
#include "csrc/scale_rule.h"

namespace {

// The library loaded, when its file tells; else the headers' version.
PyObject* libjpeg_version_py(PyObject* /*module*/, PyObject* /*unused*/) {
  const std::string& loaded = custom_op::binding::loaded_libjpeg_version();
  return PyUnicode_FromString(loaded.empty() ? custom_op::libjpeg_turbo_version() : loaded.c_str());
}

PyObject* libjpeg_crop_width_fault_py(PyObject* /*module*/, PyObject* /*unused*/) {
  return PyBool_FromLong(custom_op::libjpeg_crop_width_fault() ? 1 : 0);
}

// choose_scale(crop_height, crop_width, out_height, out_width, antialias) -> int.
// The window's sides may be fractional (a resize grid's rectangle).
PyObject* choose_scale_py(PyObject* /*module*/, PyObject* args) {
  double crop_height = 0, crop_width = 0;
  long long out_height = 0, out_width = 0;
  int antialias = 0;
  if (!PyArg_ParseTuple(args, "ddLLp", &crop_height, &crop_width, &out_height, &out_width,
                        &antialias)) {
    return nullptr;
  }
  return PyLong_FromLong(custom_op::choose_scale_num(crop_height, crop_width, out_height,
                                                     out_width, antialias != 0));
}

PyMethodDef module_methods[] = {
    {"libjpeg_version", libjpeg_version_py, METH_NOARGS,
     "The libjpeg-turbo version loaded (else the headers')."},
    {"libjpeg_crop_width_fault", libjpeg_crop_width_fault_py, METH_NOARGS,
     "Whether the loaded libjpeg-turbo has the 4x2/2x4 crop-width fault."},
    {"choose_scale", choose_scale_py, METH_VARARGS,
     "choose_scale(crop_height, crop_width, out_height, out_width, antialias): the DCT scale "
     "numerator of csrc/scale_rule.h."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "custom_op._C",
    "custom_op's native core; use the functions of the custom_op package instead.",
    -1,
    module_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

// Adds the constants; false with a Python error set when one fails.
bool add_constants(PyObject* module, const char* build_key) {
  return PyModule_AddStringConstant(module, "build_key", build_key) == 0 &&
         PyModule_AddObject(module, "DEFAULT_MAX_MEMORY",
                            PyLong_FromLongLong(custom_op::Limits{}.max_memory)) == 0 &&
         PyModule_AddIntConstant(module, "SCALE_AUTO", static_cast<long>(custom_op::kScaleAuto)) == 0;
}

PyObject* create_module(const char* build_key) {
  PyObject* module = PyModule_Create(&module_definition);
  if (module != nullptr && !add_constants(module, build_key)) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}

}  // namespace
