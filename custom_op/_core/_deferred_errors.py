"""Argument errors of the public functions inside ``torch.compile``: raised when the graph runs.

Eager calls check their arguments in Python and raise TypeError or ValueError at once. Under
``torch.compile(fullgraph=True)`` the same checks run while Dynamo traces, and an exception
that Dynamo traces to the top of the compiled function is not raised: Dynamo reports it as
its own ``Unsupported`` error. So while tracing, :func:`checked_in_graph` catches the
argument error and puts the operator ``torch.ops.custom_op_jpeg._argument_error`` in the
graph instead; its kernel raises that error, with the eager type and message, when the
graph runs, as the kernels raise bad data's errors there. The operator is marked as having
side effects, so that no graph pass drops it when nothing reads its result.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import torch

from ._build_config import OPERATOR_NAMESPACE

_SCHEMA = "_argument_error(str error_type, str message, SymInt[] shape) -> Tensor"
#: The error types a traced argument check may raise, by name.
_TYPES = {"TypeError": TypeError, "ValueError": ValueError}

_Result = TypeVar("_Result")


def _kernel(error_type: str, message: str, shape: Sequence[int]) -> torch.Tensor:
    """Raises ``error_type(message)``; without an error type, zeros of ``shape`` (uint8)."""
    if error_type:
        raise _TYPES[error_type](message)
    return torch.zeros(list(shape), dtype=torch.uint8)


def _fake(error_type: str, message: str, shape: Sequence[int]) -> torch.Tensor:
    return torch.empty(list(shape), dtype=torch.uint8)


def _define() -> torch.library.Library:
    library = torch.library.Library(OPERATOR_NAMESPACE, "FRAGMENT")
    library.define(_SCHEMA)
    # No tensor argument to dispatch on: the kernel serves every backend.
    library.impl("_argument_error", _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{OPERATOR_NAMESPACE}::_argument_error", _fake, lib=library)
    return library


#: Kept alive for the process: dropping it would unregister the operator.
_LIBRARY = _define()
ARGUMENT_ERROR = getattr(torch.ops, OPERATOR_NAMESPACE)._argument_error.default
torch.fx.node.has_side_effect(ARGUMENT_ERROR)


def checked_in_graph(call: Callable[[], _Result],
                     placeholder: Sequence[int]) -> _Result | torch.Tensor:
    """``call()`` while Dynamo traces; if its argument checks raise TypeError or ValueError,
    the traced operator that raises it when run, whose uint8 result of shape ``placeholder``
    stands in for what ``call`` would have returned."""
    try:
        return call()
    except (TypeError, ValueError) as error:
        error_type = "TypeError" if isinstance(error, TypeError) else "ValueError"
        return ARGUMENT_ERROR(error_type, str(error), list(placeholder))
