"""EncodedJpeg: a JPEG file that torchvision's v2 transforms decode only as far as they need.

An EncodedJpeg holds the encoded bytes (a 1-D uint8 tensor), the image's size read from the
header, and the options its decodes use. It is a subclass of
``torchvision.tv_tensors.Image``, because that is how torchvision's v2 transforms recognise
the image of a sample: ``query_size`` and ``query_chw`` look for ``tv_tensors.Image``
instances and then ask the ``get_size`` / ``get_dimensions`` kernels, which are looked up
along the class's MRO. The kernels registered for EncodedJpeg
(custom_op/_torchvision/_tv_kernels.py, registered by the package's __init__, which Python
runs before this module, so importing this module or unpickling an EncodedJpeg always
registers them) answer from the header and decode only the window for crops and resizes;
every other functional gets the full decode first. Without a kernel of its own, a subclass
of Image would reach torchvision's Image kernels with a 1-D byte tensor.

Only what holds the bytes and the options lives here; what each functional does with them
is in _tv_kernels.py.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import torch
from torchvision import tv_tensors

from .._decode import _orientation
from .._decode._arguments import JpegData, _as_encoded
from .._core import _native
from .._decode._single import decode_and_crop_jpeg
from .._index._cache import IndexKey, index_for
from .._decode._options import _DEFAULT_OPTIONS, DecodeOptions  # noqa: F401 (re-exported)
from .._core._errors import JpegDecodeError
from ._fused_resize import PendingResize, resized_rect, resized_whole


def _byte_tensor(data: JpegData) -> torch.Tensor:
    """``data`` as a 1-D uint8 tensor: shared with writable inputs, copied from read-only ones.

    torch.frombuffer warns about read-only buffers such as bytes, since the
    tensor would be writable; copying an encoded file costs microseconds.
    """
    encoded = _as_encoded(data, "EncodedJpeg")
    if isinstance(encoded, torch.Tensor):
        return torch.Tensor.as_subclass(encoded, torch.Tensor)
    if encoded.readonly:
        encoded = bytearray(encoded)
    if len(encoded) == 0:
        return torch.empty(0, dtype=torch.uint8)  # frombuffer refuses an empty buffer
    return torch.frombuffer(encoded, dtype=torch.uint8)


#: Tensor operations that treat an EncodedJpeg as the bytes it is: copies, moves, pickling,
#: metadata and reads; also (not listed) every property but .shape and .ndim. Anything else
#: (reshape, arithmetic, float conversion) would compute on the encoded bytes as if they were
#: pixels, so it raises instead; see __torch_function__.
_BYTE_OPERATIONS = frozenset({
    "__reduce_ex__", "__setstate__", "__deepcopy__", "__getitem__",
    "__repr__", "__format__", "clone", "to", "cpu", "detach", "detach_", "requires_grad_",
    "pin_memory", "is_pinned", "share_memory_", "is_shared", "stride",
    "storage_offset", "is_contiguous", "contiguous", "data_ptr", "numpy", "tolist",
    "element_size", "untyped_storage", "_typed_storage", "storage", "equal",
})

#: What an EncodedJpeg with a pending resize (an image not yet computed) lets through as it is:
#: copies and moves keep the resize pending. Every other operation gets the resized image
#: (decoded and resized in full), as if the resize had happened. Pickling is one of them: a
#: sample leaving a DataLoader worker (a detection pipeline's list of images, collated by
#: the main process) carries its image, so the decode stays in the worker.
_KEEPS_PENDING = frozenset({
    "__setstate__", "__deepcopy__", "__get__", "__repr__", "__format__",
    "clone", "to", "cpu", "detach", "detach_", "requires_grad_", "pin_memory", "is_pinned",
    "share_memory_", "is_shared",
})


def _has_pending_resize(value: Any) -> bool:
    return isinstance(value, EncodedJpeg) and value.pending_resize is not None


def _materialised(value: Any) -> Any:
    """``value`` with every pending resize in it (also in lists and tuples) computed."""
    if _has_pending_resize(value):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return type(value)(_materialised(item) for item in value)
    return value


#: What asks an image tensor for its size. An EncodedJpeg would answer with its byte count (its
#: tensor is the 1-D file), which third-party code reads as a 1-D image and fails far from here,
#: or worse, goes on; so each of these raises at once (see __torch_function__). Properties reach
#: __torch_function__ as their getter, named by the descriptor it belongs to.
_SIZE_QUERIES = frozenset({"shape", "ndim", "size", "dim", "__len__", "numel"})


def _operation_name(func: Any) -> str:
    """The name of what ``func`` does: a method's name, or a property's for its getter."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        return getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _refusal(name: str) -> TypeError:
    """The TypeError for using an EncodedJpeg as a tensor of pixels in ``name``."""
    if _dynamo_is_tracing():  # Dynamo probes its inputs (_is_view, size, ...): say what matters
        return TypeError("torch.compile cannot take an EncodedJpeg (it holds a JPEG's encoded "
                         "bytes, not pixels, and its decode happens outside a graph): decode it "
                         "before the compiled function, or pass its bytes as a plain uint8 tensor "
                         "(.encoded_bytes()) to custom_op.decode_and_crop_jpeg or "
                         "decode_and_resized_crop_jpeg inside it")
    if name in _SIZE_QUERIES:
        what = {"shape": ".shape", "ndim": ".ndim", "__len__": "len()"}.get(name, f"{name}()")
        return TypeError(f"{what} cannot run on an EncodedJpeg: it holds a JPEG's encoded "
                         "bytes, not pixels. Decode it first (a crop or resize of torchvision's "
                         "v2 transforms, custom_op.transforms.DecodeJPEG(), or .decode()). The "
                         "image's size without decoding: .canvas_size, .num_channels or "
                         "torchvision's F.get_dimensions(); the file's: .nbytes")
    return TypeError(f"{name}() cannot run on an EncodedJpeg: it holds a JPEG's encoded "
                     "bytes, not pixels. Decode it first: a crop or resize of torchvision's v2 "
                     "transforms, custom_op.transforms.DecodeJPEG(), or .decode()")


def _converts(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether ``func`` is a ``.to`` that changes the dtype: ``to(dtype)``, ``to(device,
    dtype)``, ``to(other_tensor)`` or ``dtype=`` (bytes as floats would be garbage pixels)."""
    if _operation_name(func) != "to":
        return False
    dtypes = [kwargs.get("dtype")] + [arg.dtype if isinstance(arg, torch.Tensor) else arg
                                      for arg in args[1:]]
    return any(isinstance(dtype, torch.dtype) and dtype != torch.uint8 for dtype in dtypes)


def _dynamo_is_tracing() -> bool:
    """True while torch.compile's Dynamo traces a frame (it probes its inputs' tensors then)."""
    from torch._guards import TracingContext  # private: only consulted on the way to an error

    return TracingContext.try_get() is not None


def _channels_of(mode: str, stored_channels: int) -> int:
    """How many channels a decode in ``mode`` gives for a file with ``stored_channels``."""
    return {"rgb": 3, "gray": 1}.get(mode, stored_channels)


@contextlib.contextmanager
def _named_errors(source: Optional[str]) -> Iterator[None]:
    """Re-raises JpegDecodeError with ``source`` in front of its message, when there is one."""
    try:
        yield
    except JpegDecodeError as error:
        if source is None:
            raise
        raise JpegDecodeError(f"{source}: {error}") from error


class EncodedJpeg(tv_tensors.Image):
    """A JPEG file, not yet decoded, that torchvision's v2 transforms decode only where they look.

    Put it where a pipeline has its image, and torchvision's own transforms
    decode only the window they keep:

    - ``v2.RandomResizedCrop``, ``v2.RandomCrop``, ``v2.CenterCrop``,
      ``v2.RandomIoUCrop`` and the functionals ``crop``, ``center_crop`` and
      ``resized_crop`` decode the window alone (resizes at a reduced DCT
      scale where the output is at most half the window, with bilinear
      interpolation, unless ``exact=True``) and return a ``tv_tensors.Image``.
    - ``v2.Resize`` (``F.resize``) decodes nothing: it returns the
      EncodedJpeg with the resize pending (``pending_resize``; ``canvas_size``
      becomes the resized size). A crop after it decodes only the window its
      rectangle of the resized image reads (the evaluation recipe
      ``Resize(256)`` + ``CenterCrop(224)``); any other operation, tensor
      operations included, gets the resized image, computed in full once.
    - Every other v2 transform that reaches it (a flip before the crop,
      ColorJitter, ToDtype, padding) decodes the whole image first and then
      does what it does to an Image.
    - The size torchvision's transforms ask for (``F.get_size``,
      ``F.get_dimensions``) comes from the header; nothing is decoded to
      answer it. Bounding boxes, masks, keypoints and labels in the same
      sample are transformed by torchvision as for the decoded image.

    It pickles (to DataLoader workers, by either start method) with its
    options. It is not a tensor of pixels: ``.shape``, ``.ndim``, ``size()``,
    ``dim()``, ``len()``, ``numel()`` and every computation on it raise
    TypeError, saying to decode first (docs/torchvision.md says why). The
    image's size without decoding: ``canvas_size``, ``num_channels``,
    ``torchvision.transforms.v2.functional.get_dimensions``; the file's:
    ``nbytes``.

    Args:
        data: The encoded file: a 1-D uint8 CPU tensor, bytes, bytearray,
            memoryview or 1-D uint8 numpy array, or another EncodedJpeg (to
            change its options). Tensors and writable buffers are shared, not
            copied; bytes are copied once.
        decode_options: By keyword, the fields of :class:`DecodeOptions`:
        mode: ``"rgb"`` (default), ``"gray"`` or ``"unchanged"`` (any case), or
            ``torchvision.io.ImageReadMode.RGB``, ``GRAY`` or ``UNCHANGED``:
            see :func:`custom_op.decode_and_crop_jpeg`.
        strict: As for :func:`custom_op.decode_and_crop_jpeg`; True by default: damaged data raises
            JpegDecodeError naming ``source``. Pillow (ImageFolder, timm) also raises on a truncated
            file, but decodes other corrupt entropy data silently, as ``strict=False`` does (damaged
            blocks gray). In a dataset, ``on_error="substitute"`` keeps an epoch going instead,
            logging each file replaced (docs/torchvision.md, Decode options).
        seek, max_pixels, max_scans, max_memory: As for
            :func:`custom_op.decode_and_crop_jpeg`.
        contiguous: If False (the default, as for the decode functions), decoded images have the
            memory layout torchvision's pipeline on ``torchvision.io.decode_jpeg``'s output has (CHW
            views of HWC memory): operations that follow the layout (``randn_like``,
            ``v2.GaussianNoise``) then draw the same numbers for the same seed, and ATen's uint8
            resizes take their channels-last path (contiguous CHW uint8 to 1 x 1 hits an ATen
            internal assert). If True, contiguous CHW planes: the DataLoader's collate stacks them
            with plain copies, faster end to end (docs/design.md, Output layout), but a
            layout-following random op then draws different pixels than the decoded pipeline.
        exact: If True, resizes never use DCT scaling: the window is decoded at full scale and
            resized by torchvision's own kernel, so the pixels equal torchvision's on a full decode
            at every size. If False (default), antialiased bilinear resizes to at most half the
            window decode at 1/2, 1/4 or 1/8 scale: faster, but not torchvision's pixels
            (bench/worst_error.py measures the worst difference). For evaluation, use exact
            (``evaluation_transform`` does by default).
        apply_exif_orientation: If True, the image is the displayed one: the file's EXIF orientation
            (1 to 8) turns it, ``canvas_size`` is the displayed size, and every window and random
            draw of the transforms is in displayed coordinates; only the matching window of the
            stored image is decoded, and crops equal decode-then-turn bit for bit. False (the
            default, as torchvision's ``decode_jpeg`` and Pillow's ``Image.open``, which ImageFolder
            uses): the image as stored. The Hugging Face helpers turn it on, as ``datasets``'
            ``Image()`` applies ``exif_transpose``. A resize still pending when a crop comes
            (``Resize`` + ``CenterCrop``) of a turned file is computed on the whole image.
        source: Where the bytes came from (a path, a tar member), or None.
            Decode errors then start with it, so a bad file deep in a
            DataLoader names itself.

    Attributes:
        canvas_size: ``(height, width)`` from the header, or the resized size
            while a resize is pending.
        file_size: ``(height, width)`` from the header (displayed: swapped
            when ``apply_exif_orientation`` and the orientation transposes).
        orientation: The EXIF orientation applied, 1 (none) to 8.
        pending_resize: The :class:`custom_op._torchvision._fused_resize.PendingResize`
            waiting for a crop, or None.
        num_channels: The channels a decode gives (3 for "rgb", 1 for
            "gray", the file's own count for "unchanged").
        options: The :class:`DecodeOptions` above.
        source: As given.
        index_key: What names the file's bytes for the MCU-row index cache (set by
            custom_op's datasets), the index itself, or None: crops use no index.

    Raises:
        TypeError, ValueError: ``data`` or an option is of the wrong type or
            value.
        JpegDecodeError: The header cannot be read (not a JPEG, truncated or
            unsupported), or the image is over ``max_pixels``.

    Example:
        >>> from torchvision.transforms import v2
        >>> data = custom_op.EncodedJpeg(open("cat.jpg", "rb").read())
        >>> data.canvas_size
        (533, 800)
        >>> v2.RandomResizedCrop(224)(data).shape  # only the window was decoded
        torch.Size([3, 224, 224])
    """

    canvas_size: tuple[int, int]
    file_size: tuple[int, int]
    pending_resize: Optional[PendingResize]
    num_channels: int
    stored_channels: int
    options: DecodeOptions
    source: Optional[str]
    orientation: int
    index_key: Union[IndexKey, bytes, None]

    def __new__(cls, data: JpegData, *, source: Optional[str] = None,
                **decode_options: Any) -> "EncodedJpeg":
        return cls.with_options(data, DecodeOptions.checked("EncodedJpeg", **decode_options),
                                source=source)

    @classmethod
    def with_options(cls, data: JpegData, options: DecodeOptions, *,
                     source: Optional[str] = None) -> "EncodedJpeg":
        """An EncodedJpeg of ``data`` with ``options`` as they are, already validated.

        What the transforms and datasets use per sample: their options were
        checked once, when they were built.
        """
        if isinstance(data, EncodedJpeg):
            source = data.source if source is None else source
            if options.apply_exif_orientation == data.options.apply_exif_orientation:
                if options.max_pixels != data.options.max_pixels:  # refused by the new limit
                    with _named_errors(source):
                        _native.jpeg_size(data.encoded_bytes(), options.max_pixels)
                return cls.wrap(data.encoded_bytes(), data, options=options, source=source)
            data = data.encoded_bytes()  # the displayed size changes: read it again
        tensor = _byte_tensor(data)
        with _named_errors(source):  # refused here by the limit the decodes will have
            height, width, stored_channels = _native.jpeg_size(tensor, options.max_pixels)
        orientation = _orientation.exif_orientation(tensor) if options.apply_exif_orientation \
            else 1
        return cls._wrap(tensor, canvas_size=_orientation.displayed_size(orientation, height, width),
                         stored_channels=stored_channels, options=options, source=source,
                         orientation=orientation)

    @classmethod
    def from_header(cls, tensor: torch.Tensor, header: tuple[int, int, int],
                    options: DecodeOptions, *, source: Optional[str] = None,
                    index_key: Union[IndexKey, bytes, None] = None) -> "EncodedJpeg":
        """An EncodedJpeg of the 1-D uint8 ``tensor`` whose header (height, width,
        channels) was already read with ``options.max_pixels``, as :meth:`with_options`
        would make it, for loaders that read a batch's headers in one call. Not for
        ``options.apply_exif_orientation``, whose displayed size needs the file's EXIF."""
        if options.apply_exif_orientation:
            raise ValueError("EncodedJpeg.from_header: apply_exif_orientation needs the EXIF: "
                             "use with_options")
        height, width, stored_channels = header
        return cls._wrap(tensor, canvas_size=(height, width), stored_channels=stored_channels,
                         options=options, source=source, index_key=index_key)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Everything happens in __new__; torch.Tensor.__init__ takes no options.
        super().__init__()

    @classmethod
    def _wrap(cls, tensor: torch.Tensor, *, canvas_size: tuple[int, int], stored_channels: int,
              options: DecodeOptions, source: Optional[str],
              pending_resize: Optional[PendingResize] = None, orientation: int = 1,
              index_key: Union[IndexKey, bytes, None] = None) -> "EncodedJpeg":
        encoded = tensor.as_subclass(cls)
        encoded.orientation, encoded.index_key = orientation, index_key
        # canvas_size is the size torchvision sees: the resized one while a resize is pending.
        encoded.file_size = canvas_size
        encoded.pending_resize = pending_resize
        encoded.canvas_size = canvas_size if pending_resize is None else pending_resize.size
        encoded.stored_channels = stored_channels
        encoded.num_channels = _channels_of(options.mode, stored_channels)
        encoded.options = options
        encoded.source = source
        return encoded

    @classmethod
    def wrap(cls, tensor: torch.Tensor, like: "EncodedJpeg", **kwargs: Any) -> "EncodedJpeg":
        """torchvision's tv_tensors.wrap: ``tensor`` (the same bytes) with ``like``'s metadata."""
        return cls._wrap(tensor, canvas_size=like.file_size,
                         stored_channels=kwargs.get("stored_channels", like.stored_channels),
                         options=kwargs.get("options", like.options),
                         source=kwargs.get("source", like.source),
                         pending_resize=kwargs.get("pending_resize", like.pending_resize),
                         orientation=like.orientation, index_key=like.index_key)

    def encoded_bytes(self) -> torch.Tensor:
        """The file's bytes: a plain 1-D uint8 tensor sharing this one's memory.

        What to pass to custom_op's decode functions (inside ``torch.compile``
        too). Unlike ``.as_subclass(torch.Tensor)``, it gives the bytes also
        while a resize is pending.
        """
        return torch.Tensor.as_subclass(self, torch.Tensor)

    def as_subclass(self, cls: type) -> torch.Tensor:  # type: ignore[override]
        # Unwrapping is how tensor subclasses are usually turned into plain tensors (a collate
        # function stacking images, torchvision's own code). Unwrapping an image whose resize is
        # pending gives that image, as every other operation on it does, never the file's bytes
        # (Tensor.as_subclass bypasses __torch_function__, hence this override).
        if getattr(self, "pending_resize", None) is not None:
            return self.decode().as_subclass(cls)
        return torch.Tensor.as_subclass(self, cls)

    def with_pending_resize(self, pending: Optional[PendingResize]) -> "EncodedJpeg":
        """The same file (bytes shared) with ``pending`` as its resize still to be computed."""
        return self.wrap(self.encoded_bytes(), self, pending_resize=pending)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: Optional[Mapping[str, Any]] = None) -> Any:
        # A transform that computes on the tensor directly instead of through a v2 functional
        # (AugMix, ToPILImage) would otherwise treat the encoded bytes as a one-row image and
        # return garbage that looks valid. Refusing is the only way to never give wrong pixels.
        # Code that reads .shape (or size(), dim(), len()) to learn the image's size would get
        # the byte count; that raises too. torch's own code inside the operations allowed here
        # (pickling, copies) runs with __torch_function__ off, so it still sees the bytes.
        kwargs = kwargs or {}
        converts = _converts(func, args, kwargs)
        if (converts or getattr(func, "__name__", "") not in _KEEPS_PENDING) and (
                any(map(_has_pending_resize, args)) or any(
                    isinstance(arg, (list, tuple)) and any(map(_has_pending_resize, arg))
                    for arg in args)):
            # An image a resize is still pending on: give the operation that image.
            return func(*_materialised(tuple(args)), **{key: _materialised(value)
                                                         for key, value in kwargs.items()})
        name = _operation_name(func)
        is_property = getattr(func, "__name__", "") == "__get__"
        if converts or name in _SIZE_QUERIES or (name not in _BYTE_OPERATIONS and not is_property):
            raise _refusal(name)
        return super().__torch_function__(func, types, args, kwargs)

    # tv_tensors.TVTensor answers .shape and .ndim itself, without __torch_function__, so they
    # need properties of their own to be refused like size() and dim(). torch's own code that
    # runs inside an allowed operation (torch function handling off) still gets the bytes' shape.
    @property
    def shape(self) -> torch.Size:  # type: ignore[override]
        if torch._C._is_torch_function_enabled():
            if self.pending_resize is not None:  # the resized image's, as numel() or size() give
                return torch.Size((self.num_channels, *self.canvas_size))
            raise _refusal("shape")
        return self.encoded_bytes().shape

    @property
    def ndim(self) -> int:  # type: ignore[override]
        if torch._C._is_torch_function_enabled():
            if self.pending_resize is not None:
                return 3
            raise _refusal("ndim")
        return self.encoded_bytes().ndim

    @classmethod
    def _wrap_output(cls, output: Any, args: Sequence[Any] = (),
                     kwargs: Optional[Mapping[str, Any]] = None) -> Any:
        # torchvision keeps the subclass for clone, to, detach, pin_memory and requires_grad_.
        # Those give the same bytes, so they keep the header's metadata; anything that is no
        # longer a 1-D uint8 tensor is not an encoded file any more and becomes a plain tensor.
        like = next((arg for arg in args if isinstance(arg, EncodedJpeg)), None)
        if isinstance(output, (tuple, list)):
            return type(output)(cls._wrap_output(part, args, kwargs) for part in output)
        if not isinstance(output, torch.Tensor) or like is None:
            return output
        plain = torch.Tensor.as_subclass(output, torch.Tensor)
        if plain.dtype != torch.uint8 or plain.dim() != 1:
            return plain
        return cls.wrap(plain, like)

    def errors_named(self) -> contextlib.AbstractContextManager[None]:
        """A context in which JpegDecodeError messages start with ``source`` (when set)."""
        return _named_errors(self.source)

    def decode(self) -> tv_tensors.Image:
        """Decodes the whole image with this file's options, and its pending resize if any.

        Returns:
            A ``tv_tensors.Image`` of shape ``[num_channels, height, width]``
            (``canvas_size``: the resized size when a resize is pending).

        Raises:
            JpegDecodeError: The data cannot be decoded.
        """
        if self.pending_resize is None:
            return self.decode_file_window(0, 0, *self.file_size)
        # Computed once: collating a batch asks a pending image for its numel, size, storage
        # and pixels, each of which would otherwise decode and resize it again.
        resized = self.__dict__.get("_resized")
        if resized is None:
            resized = self.__dict__["_resized"] = resized_whole(self)
        return resized

    def __getstate__(self) -> dict[str, Any]:
        # Copies carry the bytes and the pending resize, never the resized image computed
        # from them (a pickle of a pending resize is the resized image itself, see above).
        return {key: value for key, value in self.__dict__.items() if key != "_resized"}

    def decode_window(self, crop_y: int, crop_x: int, crop_height: int,
                      crop_width: int) -> tv_tensors.Image:
        """Decodes only the window of ``canvas_size``; it must lie inside (ValueError otherwise).

        The window's arguments are named as in :func:`custom_op.decode_and_crop_jpeg`
        (torchvision's functionals call them top, left, height, width). With a pending
        resize, the window is a rectangle of the resized image, and only the part of the file
        its resampling reads is decoded.
        """
        if self.pending_resize is not None:
            return resized_rect(self, crop_y, crop_x, crop_height, crop_width)
        return self.decode_file_window(crop_y, crop_x, crop_height, crop_width)

    def decode_file_window(self, crop_y: int, crop_x: int, crop_height: int, crop_width: int,
                           *, contiguous: Optional[bool] = None) -> tv_tensors.Image:
        """Decodes only the window of the file's own image (``file_size``), ignoring any resize.

        ``contiguous`` overrides the options' layout (torchvision's resizes are given HWC).
        """
        arguments = self.options.decode_arguments()
        if contiguous is not None:
            arguments["contiguous"] = contiguous
        with self.errors_named():
            pixels = decode_and_crop_jpeg(self.encoded_bytes(), crop_y, crop_x, crop_height,
                                          crop_width, index=self.window_index(crop_height),
                                          **arguments)
        return tv_tensors.Image(pixels)

    def window_index(self, crop_height: int) -> Optional[bytes]:
        """The MCU-row index for a window of ``crop_height`` file rows (custom_op/_index/_cache.py), or None."""
        return index_for(self.index_key, self.encoded_bytes(), crop_height, self.file_size[0])

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        source = "" if self.source is None else f"source={self.source!r}, "
        pending = "" if self.pending_resize is None else f"pending_resize={self.pending_resize}, "
        return (f"EncodedJpeg({source}nbytes={self.nbytes}, canvas_size={self.canvas_size}, "
                f"{pending}num_channels={self.num_channels}, options={self.options})")

