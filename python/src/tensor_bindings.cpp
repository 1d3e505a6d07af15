// lt.Tensor and the ops over it, with PyTorch's names and keyword arguments. The Python layer
// (lazytensor/__init__.py) adds what is simpler in Python: lt.tensor() from nested lists,
// indexing, repr.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bindings.h"
#include "lazytensor/autocast.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "lazytensor/tensor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace lt_python {

namespace {

using lt::DType;
using lt::Tensor;
using Self = nb::pointer_and_handle<Tensor>;
// A dim argument as PyTorch takes it: one int, a sequence of them, or None (all dims).
using Dims = std::optional<std::variant<int, std::vector<int>>>;

std::vector<int> dims_of(const Dims& dims, const Tensor& t) {
  if (!dims) {
    std::vector<int> all(t.dim());
    for (int d = 0; d < t.dim(); ++d) all[d] = d;
    return all;
  }
  if (const int* one = std::get_if<int>(&*dims)) return {*one};
  return std::get<std::vector<int>>(*dims);
}

// An integer from anything with __index__ (Python and NumPy ints); TypeError otherwise.
int64_t index_value(nb::handle h) {
  PyObject* index = PyNumber_Index(h.ptr());
  if (!index) throw nb::python_error();
  const long long value = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) throw nb::python_error();
  return value;
}

// Sizes given as PyTorch takes them: t.reshape(2, 3) or t.reshape((2, 3)).
std::vector<int64_t> sizes_of(const nb::args& args) {
  std::vector<int64_t> sizes;
  if (args.size() == 1 && !PyIndex_Check(args[0].ptr())) {
    for (nb::handle a : nb::iter(args[0])) sizes.push_back(index_value(a));
    return sizes;
  }
  for (nb::handle a : args) sizes.push_back(index_value(a));
  return sizes;
}

std::vector<int> ints_of(const nb::args& args) {
  std::vector<int> out;
  for (int64_t v : sizes_of(args)) out.push_back(static_cast<int>(v));
  return out;
}

nb::tuple shape_tuple(const lt::Shape& shape) {
  nb::list sizes;
  for (int64_t s : shape) sizes.append(s);
  return nb::tuple(sizes);
}

nb::dlpack::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return nb::dtype<float>();
    case DType::f64:
      return nb::dtype<double>();
    case DType::i32:
      return nb::dtype<int32_t>();
    case DType::i64:
      return nb::dtype<int64_t>();
    case DType::boolean:
      return nb::dtype<bool>();
    case DType::f16:
      return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
    case DType::u8:
      return nb::dtype<uint8_t>();
    default:
      throw lt::Error(std::string("numpy: no NumPy dtype holds ") + lt::dtype_name(dtype));
  }
}

DType dtype_of_array(const nb::dlpack::dtype& d) {
  if (d == nb::dtype<float>()) return DType::f32;
  if (d == nb::dtype<double>()) return DType::f64;
  if (d == nb::dtype<int32_t>()) return DType::i32;
  if (d == nb::dtype<int64_t>()) return DType::i64;
  if (d == nb::dtype<bool>()) return DType::boolean;
  if (d == nb::dtype<uint8_t>()) return DType::u8;
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && d.bits == 16 &&
      d.lanes == 1) {
    return DType::f16;
  }
  throw lt::Error(
      "tensor: unsupported array dtype (lazytensor holds float32, float64, float16, int32, "
      "int64, uint8 and bool)");
}

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

Tensor from_array(const HostArray& array) {
  std::vector<int64_t> sizes(array.ndim());
  for (size_t d = 0; d < array.ndim(); ++d) sizes[d] = static_cast<int64_t>(array.shape(d));
  return lt::from_host(array.data(), lt::Shape(sizes), dtype_of_array(array.dtype()));
}

// The tensor's values in a new NumPy array (bf16, which NumPy lacks, widened to float32).
// Waits for the device with the GIL released, so other Python threads run meanwhile.
nb::ndarray<nb::numpy> to_numpy(const Tensor& t) {
  const Tensor host_typed = t.dtype() == DType::bf16 ? t.to(DType::f32) : t;
  const nb::dlpack::dtype dtype = numpy_dtype(host_typed.dtype());
  const size_t bytes = static_cast<size_t>(host_typed.numel()) * lt::dtype_size(host_typed.dtype());
  auto* data = new uint8_t[bytes > 0 ? bytes : 1];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  {
    const nb::gil_scoped_release release;
    host_typed.to_host(data);
  }
  std::vector<size_t> shape;
  for (int64_t s : host_typed.shape()) shape.push_back(static_cast<size_t>(s));
  return nb::ndarray<nb::numpy>(data, shape.size(), shape.data(), owner, nullptr, dtype);
}

// DLPack's element types for ours (bf16 is DLPack's bfloat16: the same 16 bits).
nb::dlpack::dtype dlpack_dtype(DType dtype) {
  if (dtype == DType::bf16) {
    return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  }
  return numpy_dtype(dtype);
}

DType dtype_of_dlpack(const nb::dlpack::dtype& d) {
  if (d.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) && d.bits == 16 &&
      d.lanes == 1) {
    return DType::bf16;
  }
  return dtype_of_array(d);
}

// A tensor's value as a DLPack capsule over its memory, without a copy: the capsule keeps the
// value alive, and the engine never writes into it meanwhile (Tensor::host_memory).
nb::object to_dlpack(const Tensor& t) {
  Tensor::HostMemory memory;
  {
    const nb::gil_scoped_release release;
    memory = t.host_memory();
  }
  std::vector<size_t> shape;
  for (int64_t s : t.shape()) shape.push_back(static_cast<size_t>(s));
  auto* keep = new std::shared_ptr<void>(std::move(memory.owner));
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  nb::ndarray<nb::ro> array(memory.data, shape.size(), shape.data(), owner, nullptr,
                            dlpack_dtype(t.dtype()), nb::device::cpu::value);
  return nb::cast(array);  // without a framework, nanobind returns the DLPack capsule itself
}

// Imported arrays the engine no longer reads, dropped with the GIL held: the engine may release
// them on its device thread, which must never wait for the GIL (the thread holding it may be
// waiting for the device). The device thread only queues them; the interpreter's main thread
// drops the queue through Py_AddPendingCall, and every import drops it too (so a full queue of
// pending calls delays the drop, never loses it).
using ImportedArray = nb::ndarray<nb::ro, nb::device::cpu>;
std::mutex g_released_mu;
std::vector<ImportedArray*> g_released;

int drop_released_arrays(void*) {
  std::vector<ImportedArray*> dropping;
  {
    const std::lock_guard<std::mutex> lock(g_released_mu);
    dropping.swap(g_released);
  }
  for (ImportedArray* array : dropping) delete array;
  return 0;
}

void release_imported(ImportedArray* array) {
  bool first;
  {
    const std::lock_guard<std::mutex> lock(g_released_mu);
    first = g_released.empty();
    g_released.push_back(array);
  }
  if (first) Py_AddPendingCall(&drop_released_arrays, nullptr);
}

// A tensor over a DLPack producer's memory (a torch or NumPy array), without a copy: C-contiguous
// host memory of a dtype lazytensor holds (lt.from_dlpack copies other layouts first).
Tensor from_dlpack(ImportedArray array) {
  const DType dtype = dtype_of_dlpack(array.dtype());
  std::vector<int64_t> sizes(array.ndim());
  for (size_t d = 0; d < array.ndim(); ++d) sizes[d] = static_cast<int64_t>(array.shape(d));
  bool contiguous = true;
  int64_t expected = 1;
  for (int d = static_cast<int>(array.ndim()) - 1; d >= 0; --d) {
    if (sizes[d] != 1 && array.stride(d) != expected) contiguous = false;
    expected *= sizes[d];
  }
  if (!contiguous) {
    throw lt::Error("from_dlpack: the array is not C-contiguous; call .contiguous() on it first");
  }
  drop_released_arrays(nullptr);
  auto* held = new ImportedArray(array);
  return lt::from_external(array.data(), lt::Shape(sizes), dtype,
                           [held] { release_imported(held); });
}

lt::Reduction reduction_of(const std::string& name) {
  if (name == "mean") return lt::Reduction::mean;
  if (name == "sum") return lt::Reduction::sum;
  if (name == "none") return lt::Reduction::none;
  throw lt::Error("reduction: expected 'mean', 'sum' or 'none', got '" + name + "'");
}

// The one element of an integer or bool tensor, exactly (item() goes through a double, which
// holds integers only up to 2^53).
int64_t exact_integer(const Tensor& t) {
  const nb::gil_scoped_release release;
  if (t.numel() != 1) t.item();  // throws lt::Error naming item() and the shape
  return t.to_vector<int64_t>()[0];
}

template <class Fn>
nb::object in_place(Self self, Fn&& fn) {
  fn(*self.p);
  return nb::borrow(self.h);
}

void bind_dtypes(nb::module_& m) {
  nb::enum_<DType>(m, "dtype")
      .value("float32", DType::f32)
      .value("float64", DType::f64)
      .value("bfloat16", DType::bf16)
      .value("float16", DType::f16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("bool", DType::boolean)
      .value("uint8", DType::u8);
}

// PyTorch's promotion of a tensor that meets a Python float: integer and bool tensors compute
// in the default dtype, f32 (ids * 0.5 is f32, as in PyTorch).
Tensor for_float_number(const Tensor& t) {
  return dtype_is_floating(t.dtype()) ? t : t.to(DType::f32);
}

// ~t: not on bool tensors, -t - 1 on integer ones (two's complement's ~, wrapping as it does).
Tensor bitwise_not(const Tensor& t) {
  if (t.dtype() == DType::boolean) return t.eq(0.0);
  if (dtype_is_floating(t.dtype())) {
    throw lt::Error(std::string("bitwise_not: not defined on ") + dtype_name(t.dtype()) +
                    " tensors (it takes integer and bool tensors)");
  }
  return -t - 1.0;
}

// The methods of elementwise_ops.def's ops, with PyTorch's keywords; in-place forms return the
// same Python object, as PyTorch returns self.
void bind_elementwise_ops(nb::class_<Tensor>& cls) {
#define LT_BINARY_IN_PLACE(name)                                                                \
  cls.def(                                                                                      \
         #name "_",                                                                             \
         [](Self s, const Tensor& o) { return in_place(s, [&](Tensor& t) { t.name##_(o); }); }, \
         "other"_a)                                                                             \
      .def(                                                                                     \
          #name "_",                                                                            \
          [](Self s, double o) { return in_place(s, [&](Tensor& t) { t.name##_(o); }); },       \
          "other"_a);
#define LT_BINARY_OP(name, Kind)                                                            \
  cls.def(#name, nb::overload_cast<const Tensor&>(&Tensor::name, nb::const_), "other"_a)    \
      .def(                                                                                 \
          #name, [](const Tensor& a, int64_t b) { return a.name(static_cast<double>(b)); }, \
          "other"_a)                                                                        \
      .def(                                                                                 \
          #name, [](const Tensor& a, double b) { return for_float_number(a).name(b); },     \
          "other"_a);                                                                       \
  LT_BINARY_IN_PLACE(name)
#define LT_BINARY_ALPHA_OP(name, Kind)                                                           \
  cls.def(                                                                                       \
         #name, [](const Tensor& a, const Tensor& b, double alpha) { return a.name(b, alpha); }, \
         "other"_a, nb::kw_only(), "alpha"_a = 1.0)                                              \
      .def(                                                                                      \
          #name,                                                                                 \
          [](const Tensor& a, int64_t b, int64_t alpha) {                                        \
            return a.name(static_cast<double>(b * alpha));                                       \
          },                                                                                     \
          "other"_a, nb::kw_only(), "alpha"_a = 1)                                               \
      .def(                                                                                      \
          #name,                                                                                 \
          [](const Tensor& a, double b, double alpha) {                                          \
            return for_float_number(a).name(b * alpha);                                          \
          },                                                                                     \
          "other"_a, nb::kw_only(), "alpha"_a = 1.0)                                             \
      .def(                                                                                      \
          #name "_",                                                                             \
          [](Self s, const Tensor& o, double alpha) {                                            \
            return in_place(s, [&](Tensor& t) { t.name##_(o, alpha); });                         \
          },                                                                                     \
          "other"_a, nb::kw_only(), "alpha"_a = 1.0)                                             \
      .def(                                                                                      \
          #name "_",                                                                             \
          [](Self s, double o, double alpha) {                                                   \
            return in_place(s, [&](Tensor& t) { t.name##_(o* alpha); });                         \
          },                                                                                     \
          "other"_a, nb::kw_only(), "alpha"_a = 1.0);
#define LT_ELEMENTWISE_EXTREMUM(name, Kind)                                                      \
  cls.def(#name, &Tensor::name, "other"_a)                                                       \
      .def(                                                                                      \
          #name "_",                                                                             \
          [](Self s, const Tensor& o) { return in_place(s, [&](Tensor& t) { t.name##_(o); }); }, \
          "other"_a);
#define LT_UNARY_OP(name, Kind)                             \
  cls.def(#name, &Tensor::name).def(#name "_", [](Self s) { \
    return in_place(s, [](Tensor& t) { t.name##_(); });     \
  });
#define LT_UNARY_FUNCTION(name, Kind) cls.def(#name, &Tensor::name);
#define LT_UNARY_NO_GRAD(name, Kind) cls.def(#name, &Tensor::name);
#include "lazytensor/elementwise_ops.def"
#undef LT_BINARY_IN_PLACE
}

using TensorClass = nb::class_<Tensor>;

// Constructors, shape, dtype, device.
void bind_tensor_shape(TensorClass& cls) {
  cls.def(nb::init<>())
      .def(nb::init<const Tensor&>(), "other"_a, "A handle on the same tensor (as a Parameter)")
      .def_prop_ro("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def(
          "size",
          [](const Tensor& t, std::optional<int> dim) -> nb::object {
            if (!dim) return shape_tuple(t.shape());
            const int rank = t.dim();
            const int d = *dim < 0 ? *dim + rank : *dim;
            if (d < 0 || d >= rank) {
              throw lt::Error("size: dim " + std::to_string(*dim) + " is out of range for rank " +
                              std::to_string(rank));
            }
            return nb::int_(t.shape()[d]);
          },
          "dim"_a = nb::none())
      .def_prop_ro("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device", [](const Tensor& t) { return t.device().str(); })
      .def_prop_ro("is_pending", &Tensor::is_pending)
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("__hash__", [](Self self) { return reinterpret_cast<intptr_t>(self.h.ptr()); });
}

// Values on the host.
void bind_tensor_host_values(TensorClass& cls) {
  cls.def("item",
          [](const Tensor& t) -> nb::object {
            if (lt::dtype_is_floating(t.dtype()) || t.dtype() == DType::boolean) {
              double value;
              {
                const nb::gil_scoped_release release;
                value = t.item();
              }
              if (t.dtype() == DType::boolean) return nb::bool_(value != 0);
              return nb::float_(value);
            }
            return nb::int_(exact_integer(t));
          })
      .def("numpy", &to_numpy)
      // copy=True exports a copy; other keywords of the protocol (stream, max_version) change
      // nothing for host memory.
      .def("__dlpack__",
           [](const Tensor& t, nb::kwargs kwargs) -> nb::object {
             if (kwargs.contains("copy") && nb::bool_(kwargs["copy"])) {
               return nb::cast(to_numpy(t)).attr("__dlpack__")();
             }
             return to_dlpack(t);
           })
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); })  // kDLCPU
      .def("__bool__",
           [](const Tensor& t) {
             const nb::gil_scoped_release release;
             return t.item() != 0;
           })
      .def("__float__",
           [](const Tensor& t) {
             const nb::gil_scoped_release release;
             return t.item();
           })
      .def("__int__", [](const Tensor& t) {
        if (!lt::dtype_is_floating(t.dtype())) return exact_integer(t);
        const nb::gil_scoped_release release;
        return static_cast<int64_t>(t.item());
      });
}

// Arithmetic, with PyTorch's keywords (the ops of elementwise_ops.def: bind_elementwise_ops).
void bind_tensor_arithmetic(TensorClass& cls) {
  cls.def(
         "pow", [](const Tensor& t, int64_t e) { return t.pow(static_cast<double>(e)); },
         "exponent"_a)
      .def(
          "pow", [](const Tensor& t, double e) { return for_float_number(t).pow(e); }, "exponent"_a)
      // A float bound makes an integer tensor's clamp f32, as PyTorch's type promotion does.
      .def(
          "clamp",
          [](const Tensor& t, nb::object lo, nb::object hi) {
            const bool floating = nb::isinstance<nb::float_>(lo) || nb::isinstance<nb::float_>(hi);
            const Tensor x = floating ? for_float_number(t) : t;
            if (!lo.is_none() && !hi.is_none()) {
              return x.clamp(nb::cast<double>(lo), nb::cast<double>(hi));
            }
            if (!lo.is_none()) return x.clamp_min(nb::cast<double>(lo));
            if (!hi.is_none()) return x.clamp_max(nb::cast<double>(hi));
            throw lt::Error("clamp: at least one of min and max must be given");
          },
          "min"_a = nb::none(), "max"_a = nb::none())
      .def("clamp_min", &Tensor::clamp_min, "min"_a)
      .def("clamp_max", &Tensor::clamp_max, "max"_a)
      .def("lerp", nb::overload_cast<const Tensor&, double>(&Tensor::lerp, nb::const_), "end"_a,
           "weight"_a)
      .def("lerp", nb::overload_cast<const Tensor&, const Tensor&>(&Tensor::lerp, nb::const_),
           "end"_a, "weight"_a)
      .def("addcmul", &Tensor::addcmul, "tensor1"_a, "tensor2"_a, nb::kw_only(), "value"_a = 1.0)
      .def("addcdiv", &Tensor::addcdiv, "tensor1"_a, "tensor2"_a, nb::kw_only(), "value"_a = 1.0)
      .def("clone", &Tensor::clone)
      .def("to", &Tensor::to, "dtype"_a)
      .def("float", [](const Tensor& t) { return t.to(DType::f32); })
      .def("double", [](const Tensor& t) { return t.to(DType::f64); })
      .def("bfloat16", [](const Tensor& t) { return t.to(DType::bf16); })
      .def("half", [](const Tensor& t) { return t.to(DType::f16); })
      .def("int", [](const Tensor& t) { return t.to(DType::i32); })
      .def("long", [](const Tensor& t) { return t.to(DType::i64); })
      .def("bool", [](const Tensor& t) { return t.to(DType::boolean); });
}

// In place: the same Python object back, as PyTorch returns self.
void bind_tensor_in_place(TensorClass& cls) {
  cls.def(
         "pow_", [](Self s, double e) { return in_place(s, [&](Tensor& t) { t.pow_(e); }); },
         "exponent"_a)
      .def(
          "clamp_",
          [](Self s, std::optional<double> lo, std::optional<double> hi) {
            return in_place(s, [&](Tensor& t) {
              if (lo && hi) {
                t.clamp_(*lo, *hi);
              } else if (lo) {
                t.clamp_min_(*lo);
              } else if (hi) {
                t.clamp_max_(*hi);
              } else {
                throw lt::Error("clamp_: at least one of min and max must be given");
              }
            });
          },
          "min"_a = nb::none(), "max"_a = nb::none())
      .def(
          "clamp_min_",
          [](Self s, double v) { return in_place(s, [&](Tensor& t) { t.clamp_min_(v); }); },
          "min"_a)
      .def(
          "clamp_max_",
          [](Self s, double v) { return in_place(s, [&](Tensor& t) { t.clamp_max_(v); }); },
          "max"_a)
      .def(
          "lerp_",
          [](Self s, const Tensor& end, double w) {
            return in_place(s, [&](Tensor& t) { t.lerp_(end, w); });
          },
          "end"_a, "weight"_a)
      .def(
          "lerp_",
          [](Self s, const Tensor& end, const Tensor& w) {
            return in_place(s, [&](Tensor& t) { t.lerp_(end, w); });
          },
          "end"_a, "weight"_a)
      .def(
          "addcmul_",
          [](Self s, const Tensor& a, const Tensor& b, double value) {
            return in_place(s, [&](Tensor& t) { t.addcmul_(a, b, value); });
          },
          "tensor1"_a, "tensor2"_a, nb::kw_only(), "value"_a = 1.0)
      .def(
          "addcdiv_",
          [](Self s, const Tensor& a, const Tensor& b, double value) {
            return in_place(s, [&](Tensor& t) { t.addcdiv_(a, b, value); });
          },
          "tensor1"_a, "tensor2"_a, nb::kw_only(), "value"_a = 1.0)
      .def(
          "copy_",
          [](Self s, const Tensor& src) { return in_place(s, [&](Tensor& t) { t.copy_(src); }); },
          "src"_a)
      .def("zero_", [](Self s) { return in_place(s, [](Tensor& t) { t.zero_(); }); })
      .def(
          "fill_", [](Self s, double v) { return in_place(s, [&](Tensor& t) { t.fill_(v); }); },
          "value"_a);
  ;
}

// Python operators. A failed match returns NotImplemented (nb::is_operator), so Python
// tries the other operand's method.
void bind_tensor_operators(TensorClass& cls) {
  // t (op) number and number (op) t, with PyTorch's promotion by the number's Python type: an
  // int keeps an integer tensor's dtype (a bool tensor's becomes i64), a float makes an integer
  // or bool tensor's op f32. The int overload comes first, so that Python ints take it.
#define LT_NUMBER_OPERATOR(dunder, expr)                 \
  cls.def(                                               \
         dunder,                                         \
         [](const Tensor& t, int64_t number) {           \
           const Tensor& a = t;                          \
           const double b = static_cast<double>(number); \
           return expr;                                  \
         },                                              \
         nb::is_operator())                              \
      .def(                                              \
          dunder,                                        \
          [](const Tensor& t, double b) {                \
            const Tensor a = for_float_number(t);        \
            return expr;                                 \
          },                                             \
          nb::is_operator());
#define LT_TENSOR_OPERATOR(dunder, expr) \
  cls.def(                               \
      dunder, [](const Tensor& a, const Tensor& b) { return expr; }, nb::is_operator());
  // A Python bool with a bool tensor keeps it bool (mask & True); with any other tensor it is
  // the number 0 or 1. First, so that bools take it rather than the int overload.
#define LT_BOOL_OPERATOR(dunder, expr)                                                        \
  cls.def(                                                                                    \
      dunder,                                                                                 \
      [](const Tensor& a, bool number) {                                                      \
        const Tensor b = lt::full({}, number ? 1.0 : 0.0,                                     \
                                  a.dtype() == DType::boolean ? DType::boolean : DType::i64); \
        return expr;                                                                          \
      },                                                                                      \
      nb::is_operator());
  LT_BOOL_OPERATOR("__add__", a + b)
  LT_BOOL_OPERATOR("__radd__", b + a)
  LT_BOOL_OPERATOR("__mul__", a * b)
  LT_BOOL_OPERATOR("__rmul__", b * a)
  LT_BOOL_OPERATOR("__and__", a.bitwise_and(b))
  LT_BOOL_OPERATOR("__rand__", a.bitwise_and(b))
  LT_BOOL_OPERATOR("__or__", a.bitwise_or(b))
  LT_BOOL_OPERATOR("__ror__", a.bitwise_or(b))
  LT_BOOL_OPERATOR("__xor__", a.bitwise_xor(b))
  LT_BOOL_OPERATOR("__rxor__", a.bitwise_xor(b))
#undef LT_BOOL_OPERATOR
  LT_TENSOR_OPERATOR("__add__", a + b)
  LT_NUMBER_OPERATOR("__add__", a + b)
  LT_NUMBER_OPERATOR("__radd__", b + a)
  LT_TENSOR_OPERATOR("__sub__", a - b)
  LT_NUMBER_OPERATOR("__sub__", a - b)
  LT_NUMBER_OPERATOR("__rsub__", b - a)
  LT_TENSOR_OPERATOR("__mul__", a * b)
  LT_NUMBER_OPERATOR("__mul__", a * b)
  LT_NUMBER_OPERATOR("__rmul__", b * a)
  LT_TENSOR_OPERATOR("__truediv__", a / b)
  LT_NUMBER_OPERATOR("__truediv__", a / b)
  LT_NUMBER_OPERATOR("__rtruediv__", b / a)
  LT_TENSOR_OPERATOR("__floordiv__", a.floor_divide(b))
  LT_NUMBER_OPERATOR("__floordiv__", a.floor_divide(b))
  LT_TENSOR_OPERATOR("__mod__", a.remainder(b))
  LT_NUMBER_OPERATOR("__mod__", a.remainder(b))
  LT_NUMBER_OPERATOR("__pow__", a.pow(b))
  LT_TENSOR_OPERATOR("__and__", a.bitwise_and(b))
  LT_NUMBER_OPERATOR("__and__", a.bitwise_and(b))
  LT_NUMBER_OPERATOR("__rand__", a.bitwise_and(b))
  LT_TENSOR_OPERATOR("__or__", a.bitwise_or(b))
  LT_NUMBER_OPERATOR("__or__", a.bitwise_or(b))
  LT_NUMBER_OPERATOR("__ror__", a.bitwise_or(b))
  LT_TENSOR_OPERATOR("__xor__", a.bitwise_xor(b))
  LT_NUMBER_OPERATOR("__xor__", a.bitwise_xor(b))
  LT_NUMBER_OPERATOR("__rxor__", a.bitwise_xor(b))
#undef LT_NUMBER_OPERATOR
#undef LT_TENSOR_OPERATOR
  cls.def(
         "__matmul__", [](const Tensor& a, const Tensor& b) { return lt::matmul(a, b); },
         nb::is_operator())
      .def("__neg__", [](const Tensor& a) { return -a; })
      .def("__abs__", [](const Tensor& a) { return a.abs(); })
      .def("__invert__", &bitwise_not)
      .def("bitwise_not", &bitwise_not);
#define LT_IN_PLACE_OPERATOR(dunder, name)                                                     \
  cls.def(                                                                                     \
         dunder,                                                                               \
         [](Self s, const Tensor& o) { return in_place(s, [&](Tensor& t) { t.name(o); }); },   \
         nb::is_operator())                                                                    \
      .def(                                                                                    \
          dunder, [](Self s, double o) { return in_place(s, [&](Tensor& t) { t.name(o); }); }, \
          nb::is_operator());
  LT_IN_PLACE_OPERATOR("__iadd__", add_)
  LT_IN_PLACE_OPERATOR("__isub__", sub_)
  LT_IN_PLACE_OPERATOR("__imul__", mul_)
  LT_IN_PLACE_OPERATOR("__itruediv__", div_)
  LT_IN_PLACE_OPERATOR("__ifloordiv__", floor_divide_)
  LT_IN_PLACE_OPERATOR("__imod__", remainder_)
  LT_IN_PLACE_OPERATOR("__iand__", bitwise_and_)
  LT_IN_PLACE_OPERATOR("__ior__", bitwise_or_)
  LT_IN_PLACE_OPERATOR("__ixor__", bitwise_xor_)
#undef LT_IN_PLACE_OPERATOR

  // Comparisons give bool tensors, as in PyTorch.
#define LT_COMPARISON(name, dunder)                                                                \
  cls.def(#name, nb::overload_cast<const Tensor&>(&Tensor::name, nb::const_), "other"_a)           \
      .def(#name, nb::overload_cast<double>(&Tensor::name, nb::const_), "other"_a)                 \
      .def(dunder, nb::overload_cast<const Tensor&>(&Tensor::name, nb::const_), nb::is_operator()) \
      .def(dunder, nb::overload_cast<double>(&Tensor::name, nb::const_), nb::is_operator());
  LT_COMPARISON(eq, "__eq__")
  LT_COMPARISON(ne, "__ne__")
  LT_COMPARISON(lt, "__lt__")
  LT_COMPARISON(le, "__le__")
  LT_COMPARISON(gt, "__gt__")
  LT_COMPARISON(ge, "__ge__")
#undef LT_COMPARISON
}

// Reductions.
void bind_tensor_reductions(TensorClass& cls) {
  cls.def(
         "sum",
         [](const Tensor& t, const Dims& dim, bool keepdim) {
           return dim || keepdim ? t.sum(dims_of(dim, t), keepdim) : t.sum();
         },
         "dim"_a = nb::none(), "keepdim"_a = false)
      .def(
          "mean",
          [](const Tensor& t, const Dims& dim, bool keepdim) {
            return dim || keepdim ? t.mean(dims_of(dim, t), keepdim) : t.mean();
          },
          "dim"_a = nb::none(), "keepdim"_a = false)
      .def(
          "amax",
          [](const Tensor& t, const Dims& dim, bool keepdim) {
            return dim || keepdim ? t.max(dims_of(dim, t), keepdim) : t.max();
          },
          "dim"_a = nb::none(), "keepdim"_a = false)
      // t.max() is the largest element; t.max(dim) is (values, indices), as in PyTorch.
      .def(
          "max",
          [](const Tensor& t, std::optional<int> dim, bool keepdim) -> nb::object {
            if (!dim) return nb::cast(t.max());
            return nb::make_tuple(t.max({*dim}, keepdim), t.argmax(*dim, keepdim));
          },
          "dim"_a = nb::none(), "keepdim"_a = false)
      .def(
          "argmax",
          [](const Tensor& t, std::optional<int> dim, bool keepdim) {
            return dim ? t.argmax(*dim, keepdim) : t.argmax();
          },
          "dim"_a = nb::none(), "keepdim"_a = false)
      .def(
          "norm",
          [](const Tensor& t, const Dims& dim, bool keepdim) {
            return dim || keepdim ? t.norm(dims_of(dim, t), keepdim) : t.norm();
          },
          "dim"_a = nb::none(), "keepdim"_a = false)
      .def(
          "var",
          [](const Tensor& t, const Dims& dim, bool unbiased, bool keepdim) {
            return t.var(dim ? dims_of(dim, t) : std::vector<int>{}, unbiased, keepdim);
          },
          "dim"_a = nb::none(), "unbiased"_a = true, "keepdim"_a = false)
      .def("softmax", &Tensor::softmax, "dim"_a)
      .def("log_softmax", &Tensor::log_softmax, "dim"_a)
      .def(
          "logsumexp",
          [](const Tensor& t, const Dims& dim, bool keepdim) {
            return t.logsumexp(dims_of(dim, t), keepdim);
          },
          "dim"_a, "keepdim"_a = false)
      .def("matmul", &Tensor::matmul, "other"_a);
}

// Views and shape changes.
void bind_tensor_views(TensorClass& cls) {
  cls.def("reshape", [](const Tensor& t, nb::args shape) { return t.reshape(sizes_of(shape)); })
      .def("view", [](const Tensor& t, nb::args shape) { return t.view(sizes_of(shape)); })
      .def("expand", [](const Tensor& t, nb::args sizes) { return t.expand(sizes_of(sizes)); })
      .def("permute", [](const Tensor& t, nb::args dims) { return t.permute(ints_of(dims)); })
      .def("flatten", &Tensor::flatten, "start_dim"_a = 0, "end_dim"_a = -1)
      .def("transpose", &Tensor::transpose, "dim0"_a, "dim1"_a)
      .def("t", &Tensor::t)
      .def_prop_ro("T",
                   [](const Tensor& t) {
                     std::vector<int> reversed;
                     for (int d = t.dim() - 1; d >= 0; --d) reversed.push_back(d);
                     return t.permute(reversed);
                   })
      .def("unsqueeze", &Tensor::unsqueeze, "dim"_a)
      .def(
          "squeeze",
          [](const Tensor& t, std::optional<int> dim) {
            return dim ? t.squeeze(*dim) : t.squeeze();
          },
          "dim"_a = nb::none())
      .def("slice", &Tensor::slice, "dim"_a, "start"_a, "end"_a, "step"_a = 1)
      .def("narrow", &Tensor::narrow, "dim"_a, "start"_a, "length"_a)
      .def("select", &Tensor::select, "dim"_a, "index"_a)
      .def("contiguous", &Tensor::contiguous)
      .def("index_select", &Tensor::index_select, "dim"_a, "index"_a)
      .def("index_add", &Tensor::index_add, "dim"_a, "index"_a, "source"_a, nb::kw_only(),
           "alpha"_a = 1.0)
      .def("masked_fill", &Tensor::masked_fill, "mask"_a, "value"_a);
}

// Autograd.
void bind_tensor_autograd(TensorClass& cls) {
  cls.def_prop_rw(
         "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
         [](Tensor& t, bool value) { t.requires_grad_(value); })
      .def(
          "requires_grad_",
          [](Self s, bool value) {
            return in_place(s, [&](Tensor& t) { t.requires_grad_(value); });
          },
          "requires_grad"_a = true)
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_rw(
          "grad",
          [](const Tensor& t) -> std::optional<Tensor> {
            Tensor g = t.grad();
            if (!g.defined()) return std::nullopt;
            return g;
          },
          [](Tensor& t, std::optional<Tensor> g) {
            if (g && (g->shape() != t.shape() || g->dtype() != t.dtype())) {
              throw lt::Error("grad: the assigned gradient is " + g->shape().str() + " " +
                              lt::dtype_name(g->dtype()) + ", the tensor " + t.shape().str() + " " +
                              lt::dtype_name(t.dtype()));
            }
            t.mutable_grad() = g ? *g : Tensor();
          },
          nb::arg("grad").none())
      .def(
          "backward",
          [](const Tensor& t, std::optional<Tensor> gradient, bool retain_graph) {
            t.backward(gradient ? *gradient : Tensor(), retain_graph);
          },
          "gradient"_a = nb::none(), "retain_graph"_a = false)
      .def("detach", &Tensor::detach)
      .def_prop_ro("data", &Tensor::detach, "The value, cut off from autograd (as detach())");
}

void bind_tensor_class(nb::module_& m) {
  TensorClass cls(m, "Tensor");
  bind_tensor_shape(cls);
  bind_tensor_host_values(cls);
  bind_tensor_arithmetic(cls);
  bind_tensor_in_place(cls);
  bind_elementwise_ops(cls);
  bind_tensor_operators(cls);
  bind_tensor_reductions(cls);
  bind_tensor_views(cls);
  bind_tensor_autograd(cls);
}

void bind_factories(nb::module_& m) {
  m.def("_from_array", &from_array, "array"_a);
  m.def("from_dlpack", &from_dlpack, "ext_tensor"_a,
        "A tensor over a DLPack producer's memory (torch.Tensor, NumPy array), without a copy");
  m.def(
      "zeros",
      [](const std::vector<int64_t>& size, DType dtype) {
        return lt::zeros(lt::Shape(size), dtype);
      },
      "size"_a, "dtype"_a = DType::f32);
  m.def(
      "ones",
      [](const std::vector<int64_t>& size, DType dtype) {
        return lt::ones(lt::Shape(size), dtype);
      },
      "size"_a, "dtype"_a = DType::f32);
  m.def(
      "full",
      [](const std::vector<int64_t>& size, double value, DType dtype) {
        return lt::full(lt::Shape(size), value, dtype);
      },
      "size"_a, "fill_value"_a, "dtype"_a = DType::f32);
  m.def("zeros_like", &lt::zeros_like, "input"_a);
  m.def(
      "arange",
      [](double start, std::optional<double> end, double step, DType dtype) {
        return end ? lt::arange(start, *end, step, dtype) : lt::arange(0.0, start, step, dtype);
      },
      "start"_a, "end"_a = nb::none(), "step"_a = 1.0, "dtype"_a = DType::i64);
  m.def(
      "rand",
      [](const std::vector<int64_t>& size, DType dtype) {
        return lt::rand(lt::Shape(size), dtype);
      },
      "size"_a, "dtype"_a = DType::f32);
  m.def(
      "randn",
      [](const std::vector<int64_t>& size, DType dtype) {
        return lt::randn(lt::Shape(size), dtype);
      },
      "size"_a, "dtype"_a = DType::f32);
  m.def("stochastic_round", &lt::stochastic_round, "input"_a, "dtype"_a = DType::bf16);
  m.def("manual_seed", &lt::manual_seed, "seed"_a);
  nb::class_<lt::GeneratorState>(m, "GeneratorState")
      .def(nb::init<uint64_t, uint64_t>(), "seed"_a, "offset"_a)
      .def_rw("seed", &lt::GeneratorState::seed)
      .def_rw("offset", &lt::GeneratorState::offset);
  m.def("generator_state", &lt::generator_state);
  m.def("set_generator_state", &lt::set_generator_state, "state"_a);
  m.def("promote_types", &lt::promote_types, "type1"_a, "type2"_a);
}

void bind_functional(nb::module_& m) {
  m.def("matmul", &lt::matmul, "input"_a, "other"_a);
  m.def("bmm", &lt::bmm, "input"_a, "mat2"_a);
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
        return lt::linear(x, w, b ? *b : Tensor());
      },
      "input"_a, "weight"_a, "bias"_a = nb::none());
  m.def("cat", &lt::cat, "tensors"_a, "dim"_a = 0);
  m.def("as_strided", &lt::as_strided, "input"_a, "size"_a, "stride"_a, "storage_offset"_a = 0);
  m.def("as_strided_scatter", &lt::as_strided_scatter, "input"_a, "src"_a, "size"_a, "stride"_a,
        "storage_offset"_a = 0);
  m.def("where", &lt::where, "condition"_a, "input"_a, "other"_a);
  // Sorting and scans; lazytensor/_selection.py gives them PyTorch's signatures and results.
  m.def("_argsort", &lt::argsort, "input"_a, "dim"_a, "descending"_a);
  m.def("_cumsum", &lt::cumsum, "input"_a, "dim"_a);
  m.def("_take_along_dim", &lt::take_along_dim, "input"_a, "indices"_a, "dim"_a);
  m.def(
      "embedding",
      [](const Tensor& ids, const Tensor& weight, std::optional<int64_t> padding_idx) {
        return lt::embedding(ids, weight, padding_idx);
      },
      "input"_a, "weight"_a, "padding_idx"_a = nb::none());
  m.def("softmax", &lt::softmax, "input"_a, "dim"_a);
  m.def("log_softmax", &lt::log_softmax, "input"_a, "dim"_a);
  m.def(
      "layer_norm",
      [](const Tensor& x, const std::vector<int64_t>& normalized_shape, std::optional<Tensor> w,
         std::optional<Tensor> b, double eps) {
        return lt::layer_norm(x, normalized_shape, w ? *w : Tensor(), b ? *b : Tensor(), eps);
      },
      "input"_a, "normalized_shape"_a, "weight"_a = nb::none(), "bias"_a = nb::none(),
      "eps"_a = 1e-5);
  m.def(
      "gelu",
      [](const Tensor& x, const std::string& approximate) {
        if (approximate != "none" && approximate != "tanh") {
          throw lt::Error("gelu: approximate must be 'none' or 'tanh', got '" + approximate + "'");
        }
        return lt::gelu(
            x, approximate == "tanh" ? lt::GeluApproximation::tanh : lt::GeluApproximation::none);
      },
      "input"_a, "approximate"_a = "none");
  m.def("dropout", &lt::dropout, "input"_a, "p"_a = 0.5, "training"_a = true);
  m.def(
      "cross_entropy",
      [](const Tensor& logits, const Tensor& targets, int64_t ignore_index,
         const std::string& reduction) {
        return lt::cross_entropy(logits, targets, ignore_index, reduction_of(reduction));
      },
      "input"_a, "target"_a, "ignore_index"_a = -100, "reduction"_a = "mean");
  m.def(
      "mse_loss",
      [](const Tensor& input, const Tensor& target, const std::string& reduction) {
        return lt::mse_loss(input, target, reduction_of(reduction));
      },
      "input"_a, "target"_a, "reduction"_a = "mean");
  // elementwise_ops.def's function forms: torch.erf's in lazytensor, the activations in
  // lazytensor.nn.functional (which imports _C._activations), and the unary ops that Python
  // also offers as functions of their tensor (lazytensor.exp(t)), listed for __init__.py.
  nb::module_ activations = m.def_submodule("_activations");
  nb::list unary_functions;
#define LT_UNARY_OP(name, Kind) unary_functions.append(#name);
#define LT_UNARY_NO_GRAD(name, Kind) unary_functions.append(#name);
#define LT_UNARY_FUNCTION(name, Kind) m.def(#name, &lt::name, "input"_a);
#define LT_ACTIVATION(name, Kind, p0, d0, p1, d1) \
  activations.def(#name, &lt::name, "input"_a, nb::arg(#p0) = d0, nb::arg(#p1) = d1);
#include "lazytensor/elementwise_ops.def"
  m.attr("_unary_functions") = nb::tuple(unary_functions);
  m.def("is_grad_enabled", &lt::is_grad_enabled);
  m.def("set_grad_enabled", &lt::set_grad_enabled, "mode"_a);
  // lt.autocast's guard: entered and left by the Python context manager, on one thread.
  struct AutocastScope {
    DType dtype;
    std::optional<lt::AutocastGuard> guard;
  };
  nb::class_<AutocastScope>(m, "_AutocastScope")
      .def(
          "__init__",
          [](AutocastScope* scope, DType dtype) {
            const lt::AutocastGuard check(dtype);  // an unsupported dtype is refused here
            new (scope) AutocastScope{dtype, std::nullopt};
          },
          "dtype"_a)
      .def("enter", [](AutocastScope& scope) { scope.guard.emplace(scope.dtype); })
      .def("exit", [](AutocastScope& scope) { scope.guard.reset(); });
  m.def("is_autocast_enabled", &lt::is_autocast_enabled);
  m.def("get_autocast_dtype", &lt::autocast_dtype);
  m.def("make_autocast_copies", &lt::make_autocast_copies, "tensors"_a);
  m.def(
      "grad",
      [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
         std::optional<std::vector<Tensor>> grad_outputs, bool retain_graph, bool allow_unused) {
        std::vector<std::optional<Tensor>> result;
        for (const Tensor& g :
             lt::grad(outputs, inputs, grad_outputs.value_or(std::vector<Tensor>{}), retain_graph,
                      allow_unused)) {
          result.push_back(g.defined() ? std::optional<Tensor>(g) : std::nullopt);
        }
        return result;
      },
      "outputs"_a, "inputs"_a, "grad_outputs"_a = nb::none(), "retain_graph"_a = false,
      "allow_unused"_a = false);
}

}  // namespace

void bind_tensor(nb::module_& m) {
  bind_dtypes(m);
  bind_tensor_class(m);
  bind_factories(m);
  bind_functional(m);
}

}  // namespace lt_python
