"""psgraph's errors as TensorFlow 1.x's: one exception class per C failure class
(psg_err_code_t, include/psgraph/error.h), raised with psgraph's message by the extension
(XGBoost's _check_call pattern). A failed graph build raises ValueError, as TF does."""
from . import _psgraph


class OpError(Exception):
    """A step (or a file, or a data set) failed in the C library; `message` is psgraph's."""

    code_name = "unknown"

    def __init__(self, message, node_def=None, op=None):
        super().__init__(message)
        self.message = message
        self.node_def = node_def
        self.op = op

    def __str__(self):
        return self.message


class UnknownError(OpError):
    """An unclassified failure (most kernels' errors: a bad value or shape at run time)."""


class InvalidArgumentError(OpError):
    """A malformed request or field; the message names it."""
    code_name = "bad_request"


class NotFoundError(OpError):
    code_name = "not_found"


class ResourceExhaustedError(OpError):
    code_name = "limit"


class OutOfMemoryError(ResourceExhaustedError):
    code_name = "no_memory"


class DeadlineExceededError(OpError):
    code_name = "timeout"


class AbortedError(OpError):
    code_name = "aborted"


class OutOfRangeError(OpError):
    """An accumulator or a queue was closed (training ended)."""
    code_name = "closed"


class CancelledError(OpError):
    """The server is stopping."""
    code_name = "stopping"


class PermissionDeniedError(OpError):
    code_name = "denied"


class UnavailableError(OpError):
    code_name = "unavailable"


_CLASSES = [UnknownError, InvalidArgumentError, NotFoundError, ResourceExhaustedError,
            DeadlineExceededError, AbortedError, OutOfRangeError, CancelledError,
            PermissionDeniedError, OutOfMemoryError, UnavailableError]


def _register():
    by_name = {c.code_name: c for c in _CLASSES}
    table = {}
    for code, name in _psgraph.error_code_names().items():
        if name in by_name:
            table[code] = by_name[name]
    _psgraph.register_errors(table)


_register()
