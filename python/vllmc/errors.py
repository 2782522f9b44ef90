# errors.py: Python exceptions for the C API's vllm_status codes, with vllm_last_error()'s message.
"""Exceptions raised for C API failures.

Every one is a VllmcError (with .status, the vllm_status code, and .status_name)
and also the built-in exception a Python caller expects: ValueError for bad
arguments, formats and too-long prompts, OSError for missing or unreadable
files, NotImplementedError for what the engine does not support, MemoryError,
and RuntimeError for backend failures and internal errors.
"""

from . import _lib


class VllmcError(Exception):
    """A libvllmc call failed; str() is vllm_last_error()'s message."""

    status = None       # the vllm_status code
    status_name = None  # its name ("invalid argument", ...)


class VllmcValueError(VllmcError, ValueError):
    pass


class VllmcOSError(VllmcError, OSError):
    pass


class VllmcNotImplementedError(VllmcError, NotImplementedError):
    pass


class VllmcMemoryError(VllmcError, MemoryError):
    pass


class VllmcRuntimeError(VllmcError, RuntimeError):
    pass


_BY_STATUS = {
    -1: VllmcValueError,           # invalid argument
    -2: VllmcOSError,              # io
    -3: VllmcValueError,           # format
    -4: VllmcNotImplementedError,  # unsupported
    -5: VllmcMemoryError,          # no memory
    -6: VllmcRuntimeError,         # backend
    -7: VllmcValueError,           # too long
    -8: VllmcOSError,              # not found
    -9: VllmcRuntimeError,         # internal
}


def error(status, context=None):
    """The exception for a failed call's status, carrying vllm_last_error()."""
    msg = _lib.last_error() or _lib.STATUS_NAMES.get(status, "error %d" % status)
    if context:
        msg = "%s: %s" % (context, msg)
    exc = _BY_STATUS.get(status, VllmcRuntimeError)(msg)  # one argument: OSError reads two as (errno, strerror)
    exc.status = status
    exc.status_name = _lib.STATUS_NAMES.get(status, "unknown")
    return exc


def check(status, context=None):
    if status != _lib.OK:
        raise error(status, context)
