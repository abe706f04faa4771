"""Truss Chains' ``RemoteErrorDetail`` fields of a failure, for the error bodies chains sends.

Code written against Truss reads ``body["error"]["exception_cls_name"]`` and
``user_stack_trace``; chains' own :class:`~chains.errors.ErrorDetail` names the same facts
``exc_type`` and ``traceback``. The server sends both, the Truss fields from here.
"""

from __future__ import annotations

from typing import Any

from chains.errors.detail import ErrorDetail
from chains.errors.tracebacks import FRAME

__all__ = ["error_body", "remote_error_detail"]


def remote_error_detail(detail: ErrorDetail) -> dict[str, Any]:
    """Truss's ``RemoteErrorDetail`` fields for ``detail``: the type, its module (None for a
    builtin, as Truss writes it), the message and the user's stack frames.

    >>> fields = remote_error_detail(ErrorDetail(exc_type="ValueError", exc_module="builtins",
    ...                                          message="bad"))
    >>> fields["exception_cls_name"], fields["exception_module_name"], fields["user_stack_trace"]
    ('ValueError', None, [])
    """
    return {
        "exception_cls_name": detail.exc_type,
        "exception_module_name": None if detail.exc_module == "builtins" else detail.exc_module,
        "exception_message": detail.message,
        "user_stack_trace": [
            {"filename": file, "lineno": int(line), "name": name, "line": code or None}
            for file, line, name, code in FRAME.findall(detail.traceback)
        ],
    }


def error_body(detail: ErrorDetail) -> dict[str, Any]:
    """The ``"error"`` object of an error response: chains' fields, then Truss's.

    >>> body = error_body(ErrorDetail(exc_type="KeyError", exc_module="builtins", message="x"))
    >>> body["exc_type"], body["exception_cls_name"]
    ('KeyError', 'KeyError')
    """
    return {**detail.model_dump(mode="json"), **remote_error_detail(detail)}
