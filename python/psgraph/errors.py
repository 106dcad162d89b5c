"""psgraph's errors as TensorFlow 1.x's: one exception class per C failure class
(psg_err_code_t, include/psgraph/error.h), raised with psgraph's message by the extension
(XGBoost's _check_call pattern). A failed graph build raises ValueError, as TF does. The
classes, their `error_code` and the code constants are TF's (tf.errors, error_codes.proto);
they are made as TF makes them, `XError(node_def, op, message)`, or from a message alone."""
from . import _psgraph

# TF's error codes (tensorflow/core/protobuf/error_codes.proto), as tf.errors has them
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """A step (or a file, or a data set) failed in the C library; `message` is psgraph's.
    TF's form, OpError(node_def, op, message, error_code), is taken too."""

    code_names = ()  # the C codes (psg_error_code_name) this class stands for
    _code = UNKNOWN

    def __init__(self, *args, **kwargs):
        names = ("node_def", "op", "message", "error_code")
        if len(args) == 1 and not kwargs:  # psgraph's own form: the message alone
            args = (None, None, args[0])
        given = dict(zip(names, args), **kwargs)
        unknown = set(given) - set(names)
        if unknown or len(args) > len(names):
            raise TypeError("%s(node_def, op, message) takes no %s"
                            % (type(self).__name__, sorted(unknown) or "more arguments"))
        self.message = given.get("message", "")
        super().__init__(self.message)
        self.node_def = given.get("node_def")
        self.op = given.get("op")
        code = given.get("error_code")
        self._error_code = type(self)._code if code is None else int(code)

    @property
    def error_code(self):
        """TF's integer code of the error (errors.UNAVAILABLE, ...)."""
        return self._error_code

    def __str__(self):
        return self.message


def _make(name, code, c_names=(), doc=None, base=OpError):
    def __init__(self, *args, **kwargs):
        if "error_code" in kwargs or len(args) > 3:
            raise TypeError("%s(node_def, op, message) takes no error_code" % name)
        OpError.__init__(self, *args, **kwargs)
    cls = type(name, (base,), {"__init__": __init__, "_code": code, "code_names": c_names,
                               "__doc__": doc or "TF's %s (code %d)." % (name, code),
                               "__module__": __name__})
    return cls


CancelledError = _make("CancelledError", CANCELLED, ("stopping", "job_done"),
                        "The server is stopping (or stops: the job is done).")
UnknownError = _make("UnknownError", UNKNOWN, ("unknown",),
                     "An unclassified failure (most kernels' errors: a bad value or shape at run "
                     "time).")
InvalidArgumentError = _make("InvalidArgumentError", INVALID_ARGUMENT, ("bad_request",),
                             "A malformed request or field; the message names it.")
DeadlineExceededError = _make("DeadlineExceededError", DEADLINE_EXCEEDED, ("timeout",))
NotFoundError = _make("NotFoundError", NOT_FOUND, ("not_found",))
AlreadyExistsError = _make("AlreadyExistsError", ALREADY_EXISTS)
PermissionDeniedError = _make("PermissionDeniedError", PERMISSION_DENIED, ("denied",))
ResourceExhaustedError = _make("ResourceExhaustedError", RESOURCE_EXHAUSTED, ("limit",))
OutOfMemoryError = _make("OutOfMemoryError", RESOURCE_EXHAUSTED, ("no_memory",),
                         "psgraph's: a device or host allocation failed (TF's code "
                         "RESOURCE_EXHAUSTED).", ResourceExhaustedError)
FailedPreconditionError = _make("FailedPreconditionError", FAILED_PRECONDITION)
AbortedError = _make("AbortedError", ABORTED, ("aborted",))
OutOfRangeError = _make("OutOfRangeError", OUT_OF_RANGE, ("closed",),
                        "An accumulator or a queue was closed (training ended).")
UnimplementedError = _make("UnimplementedError", UNIMPLEMENTED)
InternalError = _make("InternalError", INTERNAL)
UnavailableError = _make("UnavailableError", UNAVAILABLE, ("unavailable", "unreachable"),
                         "A task cannot be reached (not up, gone, or its connection lost for "
                         "the peer timeout), as TF raises it for a task it cannot reach.")
DataLossError = _make("DataLossError", DATA_LOSS)
UnauthenticatedError = _make("UnauthenticatedError", UNAUTHENTICATED)

_CLASSES = [CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError,
            NotFoundError, AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
            FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
            InternalError, UnavailableError, DataLossError, UnauthenticatedError]


def exception_type_from_error_code(error_code):
    """TF's: the class of a TF error code (KeyError for an unknown one)."""
    return {c._code: c for c in _CLASSES}[error_code]


def error_code_from_exception_type(cls):
    """TF's: the TF error code of a class (KeyError for a class that is not one of them)."""
    if cls not in _CLASSES and cls is not OutOfMemoryError:
        raise KeyError(cls)
    return cls._code


def _register():
    by_name = {n: c for c in _CLASSES + [OutOfMemoryError] for n in c.code_names}
    table = {}
    for code, name in _psgraph.error_code_names().items():
        if name in by_name:
            table[code] = by_name[name]
    _psgraph.register_errors(table)


_register()
