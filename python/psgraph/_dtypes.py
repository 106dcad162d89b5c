"""DTypes as TensorFlow's (tf.float32, tf.int64, ...), each naming a psgraph dtype code
(psg_dtype_t) and its numpy dtype. bfloat16 has no numpy dtype: it is fed and fetched as
float32, converted by the C library."""
import numpy as np

from . import _psgraph

_INFO = _psgraph.dtype_info()  # {psgraph name: (code, bytes, numpy type number)}


class DType:
    __slots__ = ("name", "_code", "_np")

    def __init__(self, name, psg_name, np_dtype):
        self.name = name
        self._code = _INFO[psg_name][0]
        self._np = np_dtype

    @property
    def as_numpy_dtype(self):
        return self._np.type if self._np is not None else np.float32

    @property
    def is_floating(self):
        return self.name in ("float16", "bfloat16", "float32", "float64")

    @property
    def is_integer(self):
        return self.name in ("int32", "int64", "uint8")

    @property
    def is_bool(self):
        return self.name == "bool"

    @property
    def base_dtype(self):
        return self

    @property
    def size(self):
        return _INFO[_PSG_NAME[self.name]][1]

    def __repr__(self):
        return "tf.%s" % self.name

    def __eq__(self, other):
        try:
            return as_dtype(other) is self
        except TypeError:
            return False

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.name)


_PSG_NAME = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "uint8": "u8",
             "float16": "f16", "bfloat16": "bf16", "bool": "bool",
             "resource": "resource"}
_NP = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64,
       "uint8": np.uint8, "float16": np.float16, "bfloat16": None, "bool": np.bool_}

float32 = DType("float32", "f32", np.dtype(np.float32))
float64 = DType("float64", "f64", np.dtype(np.float64))
int32 = DType("int32", "i32", np.dtype(np.int32))
int64 = DType("int64", "i64", np.dtype(np.int64))
uint8 = DType("uint8", "u8", np.dtype(np.uint8))
float16 = DType("float16", "f16", np.dtype(np.float16))
bfloat16 = DType("bfloat16", "bf16", None)
bool_ = DType("bool", "bool", np.dtype(np.bool_))
# a variable's handle: an op's input or output (op.inputs of ApplyMomentum), never fed or fetched
resource = DType("resource", "resource", None)

_ALL = [float32, float64, int32, int64, uint8, float16, bfloat16, bool_]
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "half": float16, "int": int32})
_BY_CODE = {d._code: d for d in _ALL + [resource]}
_BY_NP = {np.dtype(_NP[d.name]): d for d in _ALL if _NP[d.name] is not None}


def as_dtype(value):
    """A DType from a DType, a name ("float32"), a numpy dtype or type, or a psgraph code."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        if value in _BY_NAME:
            return _BY_NAME[value]
        raise TypeError("psgraph does not have the dtype %r" % value)
    if isinstance(value, int) and not isinstance(value, bool) and value in _BY_CODE:
        return _BY_CODE[value]
    if value is bool:
        return bool_
    if value is float:
        return float32
    if value is int:
        return int32
    try:
        d = np.dtype(value)
    except TypeError:
        raise TypeError("cannot convert %r to a dtype" % (value,)) from None
    if d in _BY_NP:
        return _BY_NP[d]
    raise TypeError("psgraph does not have the dtype %s" % d)


def from_code(code):
    return _BY_CODE[code]
