"""A webdataset pipeline stage from shard URLs to samples, reading members with custom_op's tar reader.

webdataset keeps everything around it: the shard lists, node and worker
splitters, shuffles, its URL opener (files, ``pipe:`` commands, HTTP), the
grouping of members into samples, its error handlers. Only the step that
walks a tar stream is ours (see ``_tar_members``), because tarfile's header
parsing was the whole gap between reading prepared JPEGs from shards and
reading them from a folder.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

from ._tar_members import tar_members

Handler = Callable[[Exception], bool]


def _webdataset() -> Any:
    try:
        import webdataset
    except ImportError as error:
        raise ImportError("custom_op.datasets.TarSamples is a webdataset pipeline stage and needs "
                          "the webdataset package: pip install webdataset") from error
    return webdataset


class TarSamples:
    """In a ``webdataset.DataPipeline``, where ``wds.tarfile_to_samples()`` goes: URLs in, samples out.

    It yields what ``wds.tarfile_to_samples()`` yields, from the same input
    (``{"url": ...}`` dicts from ``wds.SimpleShardList`` or
    ``wds.ResampledShards`` and the splitters): one dict per sample with
    ``__key__``, ``__url__`` and the bytes of each member by suffix,
    lowercased. Members are grouped by webdataset's own ``group_by_keys``
    and URLs opened by its own opener; the tar stream is read by custom_op's
    reader, about ten times faster per member than the tarfile module, and
    strict where tarfile's stream mode stops silently: a damaged header in
    the middle of a shard raises ``tarfile.ReadError`` naming the shard and
    the byte offset.

    Args:
        handler: webdataset's error handler, called with any error a shard
            raises (it cannot be opened, it is truncated or damaged):
            ``wds.reraise_exception`` (the default) stops the iteration with
            the error; ``wds.warn_and_continue`` warns and goes on with the
            next shard. The samples a shard gave before its error are kept.

    Example:
        >>> import webdataset as wds
        >>> from custom_op.datasets import TarSamples
        >>> pipeline = wds.DataPipeline(
        ...     wds.SimpleShardList(urls), wds.split_by_node, wds.split_by_worker,
        ...     TarSamples(), wds.map(to_sample), wds.batched(64))
    """

    def __init__(self, handler: Optional[Handler] = None) -> None:
        if handler is not None and not callable(handler):
            raise TypeError(f"TarSamples: handler must be callable (e.g. webdataset.warn_and_continue), "
                            f"not {type(handler).__name__}")
        self.handler = handler

    def __call__(self, sources: Iterable[dict]) -> Iterator[dict]:
        tariterators = _webdataset().tariterators
        handler = self.handler or tariterators.reraise_exception
        streams = tariterators.url_opener(sources, handler=handler)
        return tariterators.group_by_keys(_member_files(streams, handler), handler=handler)

    def __repr__(self) -> str:
        return f"TarSamples(handler={getattr(self.handler, '__name__', self.handler)})"


def _member_files(streams: Iterable[dict], handler: Handler) -> Iterator[dict]:
    """webdataset's file dicts for the members of each opened shard, and ``{}`` after each shard
    (group_by_keys's end-of-shard mark: no sample spans two shards)."""
    for source in streams:
        url, stream = source["url"], source["stream"]
        try:
            for name, data in tar_members(stream, str(url)):
                yield {"fname": name, "data": data, "__url__": url}
        except Exception as error:  # a shard's error goes to the user's handler, as webdataset's
            if not handler(error):
                return
        finally:
            stream.close()
        yield {}
