"""custom_op's exception, in a module of its own so that the native extension
can raise it and it pickles by a stable name across processes."""


class JpegDecodeError(RuntimeError):
    """The bytes could not be decoded: not a JPEG, truncated, corrupt, unsupported
    (12-bit, lossless), or over a limit (max_pixels, max_scans).

    The message starts with the function's name and carries libjpeg's own text,
    e.g. ``decode_and_crop_jpeg(): Not a JPEG file: starts with 0x89 0x50``.
    """
