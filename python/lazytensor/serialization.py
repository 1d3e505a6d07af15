"""lazytensor.save and lazytensor.load: nested dicts, lists and tuples of tensors and plain
values (numbers, strings, booleans, None) in one safetensors file. The tensors are the file's
tensors; the structure around them is JSON in its metadata. Loading parses JSON and reads
tensors: it never runs code from the file, as unpickling a torch.save file can."""
import json

from . import _C
from ._C import Tensor

_KEY = "lazytensor.structure"


def _encode(value, tensors):
    if isinstance(value, Tensor):
        name = str(len(tensors))
        tensors[name] = value.detach()
        return {"tensor": name}
    if isinstance(value, dict):
        return {"dict": [[_encode_key(k), _encode(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(v, tensors) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"save: cannot save a {type(value).__name__} (tensors, dicts, lists, tuples, "
                    "numbers, strings, booleans and None can be saved)")


def _encode_key(key):
    if key is None or isinstance(key, (bool, int, float, str)):
        return key
    raise TypeError(f"save: a dict key must be a number, string, boolean or None, not "
                    f"{type(key).__name__}")


def _decode(node, tensors):
    if not isinstance(node, dict) or len(node) != 1:
        raise _C.Error("load: the file's structure is not lazytensor.save's")
    (kind, body), = node.items()
    if kind == "tensor":
        return tensors[body]
    if kind == "dict":
        return {k: _decode(v, tensors) for k, v in body}
    if kind == "list":
        return [_decode(v, tensors) for v in body]
    if kind == "tuple":
        return tuple(_decode(v, tensors) for v in body)
    if kind == "value":
        return body
    raise _C.Error(f"load: unknown entry {kind!r} in the file's structure")


def save(obj, f):
    """Writes ``obj`` (a tensor, or dicts, lists and tuples of tensors and plain values, such as
    a model's and an optimizer's state_dict()) to the file ``f`` (written to a temporary file
    and renamed, so a crash never leaves half of it)."""
    tensors = {}
    structure = _encode(obj, tensors)
    _C.safetensors.save(str(f), tensors, {_KEY: json.dumps(structure)})


def load(f, map_location=None, weights_only=True):
    """Reads what save() wrote. ``map_location`` may name a CPU device (the only kind);
    ``weights_only`` is accepted for torch.load's callers: nothing but tensors and plain values
    is ever read."""
    from ._device import check_device
    check_device(map_location if isinstance(map_location, (str, type(None))) else None, "load")
    tensors, metadata = _C.safetensors.load(str(f))
    if _KEY not in metadata:
        raise _C.Error(f"load: {f} was not written by lazytensor.save (no '{_KEY}' in its metadata)")
    return _decode(json.loads(metadata[_KEY]), tensors)
