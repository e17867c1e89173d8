"""The FLOPs of each counted operator, decoded as the trace is read, from the shapes
``record_shapes`` keeps (``Input Dims``), counted as ``torch.utils.flop_counter.FlopCounterMode``
counts them (multiplications and additions: 2 a multiply-add; bias and elementwise work not
counted):

- matmul: ``aten::mm`` 2·M·K·N, ``aten::addmm`` the same (its bias aside), ``aten::bmm`` and
  ``aten::baddbmm`` 2·B·M·K·N. ``aten::matmul`` and ``aten::linear`` are counted through the
  mm, addmm or bmm they call, so once;
- convolution: ``aten::convolution`` 2 × output elements × input channels per group × kernel
  area (the output's size from the input's, the stride, padding and dilation);
  ``aten::convolution_backward`` the gradient of the input and of the weight, each where the
  op's output mask (its last ``Concrete Inputs``) asks for it, both where the trace does not say;
- scaled-dot-product attention (flash, efficient and cuDNN kernels, and flash on the CPU; the
  math path runs as bmm, counted there): forward 2 batched products, backward 5.

Only these operators are counted: a model whose work is elsewhere (compiled kernels, custom
ops) is undercounted, and the count says which ops it holds (``ops``).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import msgspec

_MATMUL = frozenset(("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"))
_CONVOLUTION = "aten::convolution"
_CONVOLUTION_BACKWARD = "aten::convolution_backward"
_ATTENTION = frozenset(
    (
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    )
)
_ATTENTION_BACKWARD = frozenset(f"{name}_backward" for name in _ATTENTION)
COUNTED = _MATMUL | _ATTENTION | _ATTENTION_BACKWARD | {_CONVOLUTION, _CONVOLUTION_BACKWARD}
# "Input type" as torch names the element types, as the peaks table names them
DTYPES = {
    "float": "fp32",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


class OpArgs(msgspec.Struct, frozen=True):
    """What an operator's args say of its inputs (the rest of them is skipped unread)."""

    dims: Any = msgspec.field(default=None, name="Input Dims")
    types: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")


OP_ARGS = msgspec.json.Decoder(OpArgs)
_OPS_ARGS = msgspec.json.Decoder(list[OpArgs])


class CountedOp(NamedTuple):
    start: float  # µs, the trace's clock
    name: str
    flops: int
    dtype: str  # fp32, bf16, ... or the trace's name for it


def counted_ops(found: list[tuple[str, float, bytes]]) -> list[CountedOp]:
    """The FLOPs of the counted operators a chunk holds, ``(name, start, raw args)`` each: their
    args decoded in one call (one at a time where one of them is of another form)."""
    try:
        decoded: list[OpArgs | None] = list(
            _OPS_ARGS.decode(b"[" + b",".join(raw or b"{}" for _, _, raw in found) + b"]")
        )
    except msgspec.DecodeError:
        decoded = [_decoded(raw) for _, _, raw in found]
    ops = (_counted(name, start, args) for (name, start, _), args in zip(found, decoded, strict=True))
    return [op for op in ops if op is not None]


def _decoded(raw: bytes) -> OpArgs | None:
    try:
        return OP_ARGS.decode(raw or b"{}")
    except msgspec.DecodeError:
        return None


def _counted(name: str, start: float, args: OpArgs | None) -> CountedOp | None:
    """The op's FLOPs; flops -1 where its shapes are no tensor's (a dimension beyond 2^40, or
    not a whole number: left out, and said, by :mod:`.plausible`); None where it has none."""
    if args is None or args.dims is None:
        return None
    if not _tensor_shapes(args.dims):
        return CountedOp(start, name, -1, "unknown")
    try:
        flops = op_flops(name, args.dims, args.concrete)
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError):
        return None  # shapes of another form than torch writes: not counted, never guessed
    if not isinstance(flops, int) or isinstance(flops, bool) or flops < 0:
        return None
    if flops > _MAX_OP_FLOPS:
        return CountedOp(start, name, -1, "unknown")
    types = args.types if isinstance(args.types, list) else []
    first = next((t for t in types if isinstance(t, str) and t and t not in ("Scalar", "ScalarList")), "")
    return CountedOp(start, name, flops, DTYPES.get(first, first or "unknown"))


_MAX_DIMENSION = 1 << 40
_MAX_OP_FLOPS = 1 << 62  # 4.6e18: an hour of a B200's dense FP8 in one call


def _tensor_shapes(dims: Any) -> bool:
    """Whether ``Input Dims`` are shapes a tensor can have: lists of whole numbers up to 2^40
    (scalars' empty lists too)."""
    return isinstance(dims, list) and all(
        isinstance(shape, list)
        and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= _MAX_DIMENSION for d in shape)
        for shape in dims
    )


def op_flops(name: str, dims: list[Any], concrete: list[Any] | None) -> int | None:
    """The FLOPs of one call of ``name`` with inputs of shapes ``dims``."""
    if name in ("aten::mm", "aten::bmm"):
        return _matmul(dims[0], dims[1])
    if name in ("aten::addmm", "aten::baddbmm"):  # after the bias
        return _matmul(dims[1], dims[2])
    if name == _CONVOLUTION:
        x, w = dims[0], dims[1]
        stride, padding, dilation = (_ints(concrete, i, len(x) - 2) for i in (3, 4, 5))
        transposed = _flag(concrete, 6)
        if transposed:
            return _conv(x, w, x[2:])
        out = [
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, s, p, d in zip(x[2:], w[2:], stride, padding, dilation, strict=True)
        ]
        return _conv(x, w, out)
    if name == _CONVOLUTION_BACKWARD:
        grad_out, x, w = dims[0], dims[1], dims[2]
        transposed = _flag(concrete, 7)
        mask = _mask(concrete)
        flops = 0
        if mask[0]:  # the input's gradient: a transposed convolution of grad_out by the weight
            flops += _conv(grad_out, w, grad_out[2:] if not transposed else x[2:])
        if mask[1]:  # the weight's: the input convolved with grad_out, batch and channels swapped
            a, b = (grad_out, x) if transposed else (x, grad_out)
            flops += _conv(_swapped(a), _swapped(b), w[2:])
        return flops
    if name in _ATTENTION:
        return _attention(dims[0], dims[1], dims[2], backward=False)
    if name in _ATTENTION_BACKWARD:
        return _attention(dims[1], dims[2], dims[3], backward=True)  # after grad_out
    return None


def _matmul(a: list[int], b: list[int]) -> int:
    """2·(batch)·M·K·N of ``a`` (…, M, K) by ``b`` (…, K, N)."""
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


def _conv(x: list[int], w: list[int], spatial: list[int]) -> int:
    """FlopCounterMode's ``conv_flop_count``: 2 × batch × each point of ``spatial`` × the
    kernel's area × the weight's two channel counts."""
    return 2 * x[0] * math.prod(spatial) * math.prod(w[2:]) * w[0] * w[1]


def _attention(q: list[int], k: list[int], v: list[int], *, backward: bool) -> int:
    """FlopCounterMode's sdpa formulas: batched products of (batch · query heads) matrices,
    each (M, K, N): forward the scores and the output; backward the scores again, then the
    gradients of the scores, of V, of Q and of K."""
    b, h, s_q, d = q
    s_k, d_v = k[2], v[3]
    products = [(s_q, d, s_k), (s_q, s_k, d_v)]
    if backward:
        products = [(s_q, d, s_k), (s_q, d_v, s_k), (s_k, s_q, d_v), (s_q, s_k, d), (s_k, s_q, d)]
    return sum(2 * b * h * m * inner * n for m, inner, n in products)


def _swapped(shape: list[int]) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def _ints(concrete: list[Any] | None, index: int, count: int) -> list[int]:
    """A list argument of ``Concrete Inputs`` ("[2, 2]"); ones (padding: zeros) where absent."""
    text = concrete[index] if concrete and index < len(concrete) else ""
    if not text:
        return [0 if index == 4 else 1] * count
    values = [int(v) for v in str(text).strip("[]").split(",") if v.strip()]
    return values * count if len(values) == 1 else values


def _flag(concrete: list[Any] | None, index: int) -> bool:
    return bool(concrete and index < len(concrete) and str(concrete[index]) == "True")


def _mask(concrete: list[Any] | None) -> list[bool]:
    """convolution_backward's output mask (input, weight, bias); input and weight where unknown."""
    text = str(concrete[10]) if concrete and len(concrete) > 10 and concrete[10] else ""
    if not text:
        return [True, True, False]
    return [v.strip() == "True" for v in text.strip("[]").split(",")]
