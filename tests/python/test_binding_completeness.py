"""Every public C++ op has a Python binding: the names declared in the engine's headers are
read here, so a new op without a binding fails this test."""
import pathlib
import re

import lazytensor as lt

INCLUDE = pathlib.Path(__file__).resolve().parents[2] / "include" / "lazytensor"

# C++ names whose Python form has another name or shape (and why).
ELSEWHERE = {
    "defined": "an undefined C++ Tensor is None in Python",
    "to_vector": "numpy() / tolist()",
    "to_host": "numpy()",
    "impl": "engine internals",
    "mutable_grad": "the settable grad property",
    "shape": "property",
    "dtype": "property",
    "device": "property",
    "is_pending": "property",
    "requires_grad": "property (and requires_grad_())",
    "is_leaf": "property",
    "grad": "property",
    "max": "max() and amax(dim)",
    "from_vector": "lt.tensor()",
    "from_host": "lt.tensor() / lt.from_numpy()",
    "from_values": "lt.tensor() (lt::detail)",
    "from_external": "lt.from_dlpack()",
    "host_memory": "Tensor.__dlpack__",
    "add": "Tensor.add and +",
    "sub": "Tensor.sub and -",
    "mul": "Tensor.mul and *",
    "div": "Tensor.div and /",
    "maximum": "Tensor.maximum",
    "minimum": "Tensor.minimum",
}


def declared(header, pattern):
    text = (INCLUDE / header).read_text()
    return set(re.findall(pattern, text, re.M))


def test_every_tensor_method_is_bound():
    text = (INCLUDE / "tensor.h").read_text()
    body = text[text.index("class Tensor {"):text.index("};", text.index("class Tensor {"))]
    names = set(re.findall(r"^\s+(?:Tensor&?|HostMemory|double|bool|int|int64_t|void)\s+(\w+)\(", body, re.M))
    missing = sorted(n for n in names if n not in ELSEWHERE and not hasattr(lt.Tensor, n))
    assert not missing, f"Tensor methods without a Python binding: {missing}"


def test_every_free_op_is_bound():
    names = declared("functional.h", r"^Tensor (\w+)\(") | declared("tensor.h", r"^Tensor (\w+)\(")
    names |= declared("autograd.h", r"^\w[\w:<>, ]* (\w+)\(")
    places = [lt, lt.nn.functional, lt.nn.utils]
    missing = sorted(n for n in names
                     if n not in ELSEWHERE and not any(hasattr(p, n) for p in places))
    assert not missing, f"functions without a Python binding: {missing}"


def test_every_elementwise_op_is_bound():
    """elementwise_ops.def's rows (declared through macros, so not seen by the tests above) in
    every Python form their row kind promises."""
    rows = re.findall(r"^(LT_\w+)\((\w+),", (INCLUDE / "elementwise_ops.def").read_text(), re.M)
    assert rows
    places = {
        "LT_UNARY_OP": [(lt.Tensor, "{}"), (lt.Tensor, "{}_"), (lt, "{}")],
        "LT_UNARY_FUNCTION": [(lt.Tensor, "{}"), (lt, "{}")],
        "LT_UNARY_NO_GRAD": [(lt.Tensor, "{}"), (lt, "{}")],
        "LT_BINARY_OP": [(lt.Tensor, "{}"), (lt.Tensor, "{}_")],
        "LT_BINARY_ALPHA_OP": [(lt.Tensor, "{}"), (lt.Tensor, "{}_")],
        "LT_ELEMENTWISE_EXTREMUM": [(lt.Tensor, "{}"), (lt.Tensor, "{}_")],
        "LT_ACTIVATION": [(lt.nn.functional, "{}")],
    }
    missing = [f"{kind} {name}: {place.__name__}.{form.format(name)}"
               for kind, name in rows for place, form in places[kind]
               if not hasattr(place, form.format(name))]
    assert not missing, f"elementwise ops without a Python binding: {missing}"


def test_runtime_and_metrics_functions_are_bound():
    names = declared("runtime.h", r"^\w[\w:<>, ]* (\w+)\(")
    names |= {f"metrics.{n}" for n in declared("metrics.h", r"^\w[\w:<>, ]* (\w+)\(")}
    # Python has its own forms: policies are strings, and events have no binding yet.
    not_yet = {"record_event", "scalar_policy_name", "parse_scalar_policy"}
    missing = []
    for n in sorted(names - not_yet):
        owner, _, attr = n.rpartition(".")
        if not hasattr(lt.metrics if owner else lt, attr):
            missing.append(n)
    assert not missing, f"runtime functions without a Python binding: {missing}"


def test_type_stubs_are_valid_python():
    """The stubs nanobind's stubgen writes at build time parse (a lambda patched onto Tensor
    once made them invalid)."""
    import ast

    stubs = sorted((pathlib.Path(lt.__file__).parent / "_C").glob("*.pyi"))
    assert stubs, "no stubs next to the extension"
    for stub in stubs:
        ast.parse(stub.read_text(), str(stub))
