"""The head of a v2 pipeline on an EncodedJpeg, run without torchvision's transform machinery.

A training recipe starts ``v2.Compose([v2.RandomResizedCrop(size), v2.RandomHorizontalFlip(),
...])``. On one small image, v2's machinery around those two steps (flattening the sample,
querying its size, looking each kernel up, wrapping every result) costs a large share of
what the window's decode does. :class:`FusedHead` runs that head itself on an EncodedJpeg:
the crop's parameters from the crop's own ``make_params``, the flip's draw as
``RandomHorizontalFlip`` makes it, both from the process-wide generators in the same order,
then the very kernels v2 would dispatch to. The pixels, their memory layout and every
generator's state afterwards are the pipeline's own; tests/test_fused_head.py compares them.

Anything else takes the transform as it is: an input that is not an EncodedJpeg (a decoded
PNG), a pipeline that does not start with exactly ``v2.RandomResizedCrop`` (a subclass may
draw otherwise), and steps with forward hooks, which only the module call runs.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as torch_module
from torchvision import tv_tensors
from torchvision.transforms import v2

from ._encoded_jpeg import EncodedJpeg
from ._tv_kernels import resized_crop

__all__ = ["FusedHead", "fused_transform", "split_head"]


def split_head(transform: Any) -> tuple[Optional[v2.RandomResizedCrop],
                                        Optional[v2.RandomHorizontalFlip],
                                        Optional[Callable[[Any], Any]]]:
    """``transform`` as (its leading v2.RandomResizedCrop, the flip right after it, the rest).

    The crop and the flip are what the batch lane and :class:`FusedHead` run themselves; the
    rest (None when there is none) runs as the user's transform. A transform that does not
    start with exactly ``v2.RandomResizedCrop`` is all rest.
    """
    steps = list(transform.transforms) if isinstance(transform, v2.Compose) else [transform]
    if not steps or type(steps[0]) is not v2.RandomResizedCrop:
        return None, None, transform
    crop, rest = steps[0], steps[1:]
    flip = None
    if rest and type(rest[0]) is v2.RandomHorizontalFlip:
        flip, rest = rest[0], rest[1:]
    tail = None if not rest else rest[0] if len(rest) == 1 else v2.Compose(rest)
    return crop, flip, tail


#: torch's registries of hooks that every module call runs (torch.nn.modules.module).
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks",
                 "_global_forward_hooks_always_called")


def _hooked(*modules: Optional[torch.nn.Module]) -> bool:
    """Whether calling any of ``modules`` would run hooks (its own or every module's)."""
    if any(getattr(torch_module, name, None) for name in _GLOBAL_HOOKS):
        return True
    return any(module is not None and (module._forward_hooks or module._forward_pre_hooks)
               for module in modules)


class FusedHead:
    """``transform(image)``, its RandomResizedCrop and flip run directly on an EncodedJpeg.

    Args:
        transform: A transform of one image; only a ``v2.Compose`` (or a lone
            ``v2.RandomResizedCrop``) whose first step is exactly
            ``v2.RandomResizedCrop`` is run by parts, everything else is called
            as it is.

    Example:
        >>> head = FusedHead(v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip()]))
        >>> head(custom_op.EncodedJpeg(data)).shape
        torch.Size([3, 224, 224])
    """

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform
        self.crop, self.flip, self.tail = split_head(transform)
        self.fusable = self.crop is not None and hasattr(self.crop, "make_params")

    def __call__(self, image: Any) -> Any:
        if (not self.fusable or type(image) is not EncodedJpeg
                or _hooked(self.transform, self.crop, self.flip)):
            return self.transform(image)
        crop = self.crop
        params = crop.make_params([image])
        output = resized_crop(image, **params, size=crop.size, interpolation=crop.interpolation,
                              antialias=crop.antialias)
        # RandomHorizontalFlip's own draw and test (v2's _RandomApplyTransform.forward), then
        # what its Image kernel does (horizontal_flip_image on the plain tensor, rewrapped).
        if self.flip is not None and not torch.rand(1) >= self.flip.p:
            output = output.as_subclass(torch.Tensor).flip(-1).as_subclass(tv_tensors.Image)
        return output if self.tail is None else self.tail(output)


def fused_transform(holder: Any) -> FusedHead:
    """``holder.transform`` (a dataset's or a row transform's) as a :class:`FusedHead`, kept on
    ``holder`` and made again when the transform has been replaced since."""
    fused = holder.__dict__.get("_fused_head")
    if fused is None or fused.transform is not holder.transform:
        fused = holder.__dict__["_fused_head"] = FusedHead(holder.transform)
    return fused
