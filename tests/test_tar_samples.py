"""custom_op.datasets.TarSamples and its tar member reader, against tarfile and webdataset.

The reader must give exactly what tarfile's stream mode (webdataset's reader)
gives for every archive tar writers produce, and for damaged or truncated
bytes raise tarfile.ReadError (never another error, never hang) after
yielding only members tarfile also yields.
"""

from __future__ import annotations

import io
import pickle
import random
import re
import tarfile
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from custom_op.datasets import TarSamples
from custom_op.datasets._tar_members import tar_members
from _sparse_tars import SPARSE_FORMATS, SPARSE_NAME, write_sparse_file, write_sparse_shard

# A hard import: webdataset is in requirements-dev.txt, and a missing one must fail the run, not
# skip every comparison with it silently.
import webdataset as wds  # noqa: E402

FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
#: Sizes around the 512-byte block, and one of several blocks.
SIZES = (0, 1, 511, 512, 513, 5000)
LONG = "d" * 120 + "/" + "n" * 150 + ".jpg"  # over ustar's 100 + 155: pax path or GNU long name


def _payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mtime: float = 1_700_000_000) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), mtime
    tar.addfile(info, io.BytesIO(data))


def _add_special(tar: tarfile.TarFile, name: str, kind: bytes, size: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    if kind == tarfile.SYMTYPE or kind == tarfile.LNKTYPE:
        info.linkname = "0000.jpg"
    info.size = size  # tarfile writes 0 for these types; the reader must not read data for them
    tar.addfile(info)


def _archive(format_name: str, *, long_names: bool = True, float_mtime: bool = False) -> bytes:
    """Members of every size, non-ASCII names, directories, links, metadata, as ``format_name``."""
    buffer = io.BytesIO()
    mtime = 1_700_000_000.25 if float_mtime else 1_700_000_000
    with tarfile.open(fileobj=buffer, mode="w", format=FORMATS[format_name]) as tar:
        _add_special(tar, "train", tarfile.DIRTYPE)
        for index, size in enumerate(SIZES):
            _add_file(tar, f"train/{index:04d}.jpg", _payload(size, index), mtime)
            _add_file(tar, f"train/{index:04d}.cls", str(index % 3).encode(), mtime)
        _add_file(tar, "__index__", b"not a sample", mtime)
        _add_special(tar, "train/link.jpg", tarfile.SYMTYPE)
        _add_special(tar, "train/hard.jpg", tarfile.LNKTYPE)
        if format_name != "ustar":
            _add_file(tar, "train/caf\u00e9-\u5199\u771f.jpg", b"utf-8 name", mtime)
        if long_names and format_name != "ustar":
            _add_file(tar, LONG, _payload(700, 99), mtime)
        _add_file(tar, "p" * 90 + "/" + "q" * 90 + ".jpg", b"ustar prefix", mtime)
    return buffer.getvalue()


def _tarfile_members(archive: bytes) -> tuple[list[tuple[str, bytes]], bool]:
    """What tarfile's stream mode (webdataset's reader) yields, and whether it got to the end
    without raising."""
    members = []
    skip = re.compile(r"__[^/]*__($|/)")
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r|") as tar:
            for info in tar:
                if info.isreg() and not skip.match(info.name):
                    members.append((info.name, tar.extractfile(info).read()))
    except (tarfile.TarError, EOFError):
        return members, False
    return members, True


def _ours(archive: bytes) -> tuple[list[tuple[str, bytes]], tarfile.ReadError | None]:
    members = []
    try:
        for member in tar_members(io.BytesIO(archive), "shard.tar"):
            members.append(member)
    except tarfile.ReadError as error:
        return members, error
    return members, None


@pytest.mark.parametrize("float_mtime", [False, True], ids=["int-mtime", "float-mtime"])
@pytest.mark.parametrize("format_name", sorted(FORMATS))
def test_members_equal_tarfiles(format_name, float_mtime) -> None:
    archive = _archive(format_name, float_mtime=float_mtime)
    ours, error = _ours(archive)
    theirs, complete = _tarfile_members(archive)
    assert error is None and complete
    assert ours == theirs
    names = [name for name, _ in ours]
    assert "__index__" not in names and "train/link.jpg" not in names and "train" not in names
    assert ("p" * 90 + "/" + "q" * 90 + ".jpg") in names
    if format_name != "ustar":
        assert LONG in names and "train/caf\u00e9-\u5199\u771f.jpg" in names


def test_members_of_webdatasets_writer(tmp_path) -> None:
    """TarWriter stamps members with time.time(): a pax header before each one."""
    path = tmp_path / "shard.tar"
    with wds.TarWriter(str(path)) as writer:
        for index, size in enumerate(SIZES):
            writer.write({"__key__": f"{index:06d}", "jpg": _payload(size, index), "cls": index})
    archive = path.read_bytes()
    assert b"mtime=" in archive  # the case this test is about: pax headers
    ours, error = _ours(archive)
    assert error is None and ours == _tarfile_members(archive)[0] and len(ours) == 2 * len(SIZES)


def test_an_archive_cut_between_members_is_truncated() -> None:
    """tarfile gives the members before the cut without a word; the end-of-archive block is
    what tells a whole archive from one cut short."""
    archive = _archive("ustar")
    end = archive.rindex(b"ustar prefix") + 512  # the last member's data block
    ours, error = _ours(archive[:end])
    theirs, complete = _tarfile_members(archive[:end])
    assert complete and ours == theirs == _ours(archive)[0]
    assert str(error) == (f"shard.tar: at byte {end}: the archive ends without its end-of-archive "
                          "block (a truncated shard?)")


@pytest.mark.parametrize("data, message", [
    (b"", "an empty file, not a tar archive"),
    (b"\xff\xd8\xff\xe0" + bytes(600), "checksum does not match"),
    (b"\xff\xd8\xff\xe0" + bytes(100), "ends inside a header"),
], ids=["empty", "a-jpeg", "short"])
def test_not_a_tar_archive(data, message) -> None:
    members, error = _ours(data)
    assert members == [] and error is not None
    assert str(error).startswith("shard.tar: at byte 0: ") and message in str(error)


@pytest.mark.parametrize("member, cut, message, before", [
    ("train/0002.jpg", 512 + 300, "bytes before the end of the member", 4),  # 511 bytes
    ("train/0001.jpg", 512 + 1 + 10, "ends inside the member's padding", 2),  # 1 byte
    ("train/0002.jpg", 200, "ends inside a header", 4),
], ids=["in-data", "in-padding", "in-header"])
def test_truncated_archive_names_the_member(member, cut, message, before) -> None:
    archive = _archive("ustar")
    start = archive.index(member.encode())
    ours, error = _ours(archive[:start + cut])
    assert ours == _tarfile_members(archive)[0][:before] and len(ours) == before
    named = f"member {member} " if cut >= 512 else ""
    assert str(error).startswith(f"shard.tar: {named}at byte {start}: ") and message in str(error)


def test_damaged_header_raises_where_tarfile_stops() -> None:
    """tarfile's stream mode ends the iteration at a bad header after the first; we raise."""
    archive = bytearray(_archive("ustar"))
    start = archive.index(b"train/0003.jpg")
    archive[start + 130] ^= 0x01  # inside the size field
    ours, error = _ours(bytes(archive))
    theirs, complete = _tarfile_members(bytes(archive))
    assert complete and ours == theirs and len(ours) == 6  # tarfile: no error, six members
    assert f"at byte {start}: a tar header whose checksum does not match" in str(error)


def test_sparse_member_is_refused() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _add_file(tar, "a.jpg", b"x")
        info = tarfile.TarInfo("b.jpg")
        info.type = tarfile.GNUTYPE_SPARSE
        tar.addfile(info)
    ours, error = _ours(buffer.getvalue())
    assert ours == [("a.jpg", b"x")] and "member b.jpg at byte 1024: a sparse member" in str(error)


def test_a_size_claiming_gigabytes_ends_at_the_stream() -> None:
    """A damaged size field is read in pieces: the truncation is found, nothing huge is allocated."""
    header = bytearray(tarfile.TarInfo("big.jpg").tobuf(tarfile.USTAR_FORMAT))
    header[124:136] = b"\x80" + (40 << 30).to_bytes(11, "big")  # base-256: 40 GiB
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    members, error = _ours(bytes(header) + bytes(4096))
    assert members == [] and f"ends {(40 << 30) - 4096} bytes before the end" in str(error)


@pytest.mark.parametrize("seed", range(400))
def test_damaged_bytes_raise_read_error_or_agree_with_tarfile(seed) -> None:
    """Random byte changes and truncations: only tarfile.ReadError, and never a member tarfile
    would not give."""
    generator = random.Random(seed)
    archive = bytearray(_archive(generator.choice(sorted(FORMATS)), float_mtime=seed % 2 == 1))
    for _ in range(generator.randint(1, 4)):
        archive[generator.randrange(len(archive))] = generator.randrange(256)
    if generator.random() < 0.3:
        del archive[generator.randrange(len(archive)):]
    ours, error = _ours(bytes(archive))
    theirs, complete = _tarfile_members(bytes(archive))
    assert ours == theirs[:len(ours)]
    if error is None:
        assert complete and ours == theirs
    else:
        assert str(error).startswith("shard.tar: ")


# --------------------------------------------------------------------------
# TarSamples: the webdataset stage
# --------------------------------------------------------------------------

def _write_shards(folder: Path, shards: int, per_shard: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    urls = []
    for shard in range(shards):
        path = folder / f"train-{shard:06d}.tar"
        with wds.TarWriter(str(path)) as writer:
            for index in range(per_shard):
                key = shard * per_shard + index
                writer.write({"__key__": f"{key:06d}", "JPG": _payload(100 + key, key), "cls": key % 3,
                              "json": {"key": key}})
        urls.append(str(path))
    return urls


def _samples(stage, urls: list[str]) -> list[dict]:
    return list(wds.DataPipeline(wds.SimpleShardList(urls), stage))


def test_samples_equal_webdatasets(tmp_path) -> None:
    urls = _write_shards(tmp_path, 3, 5)
    ours = _samples(TarSamples(), urls)
    assert ours == _samples(wds.tarfile_to_samples(), urls)
    assert [sample["__key__"] for sample in ours] == [f"{key:06d}" for key in range(15)]
    assert set(ours[0]) == {"__key__", "__url__", "jpg", "cls", "json"}  # suffixes lowercased


def test_duplicate_member_raises_as_webdataset(tmp_path) -> None:
    path = tmp_path / "dup.tar"
    with tarfile.open(path, "w") as tar:
        _add_file(tar, "000001.jpg", b"a")
        _add_file(tar, "000001.jpg", b"b")
    with pytest.raises(ValueError, match="duplicate file name"):
        _samples(TarSamples(), [str(path)])


def _with_truncated_second_shard(tmp_path: Path) -> list[str]:
    urls = _write_shards(tmp_path, 3, 4)
    data = Path(urls[1]).read_bytes()
    Path(urls[1]).write_bytes(data[:len(data) // 2 - 100])  # inside a member
    return urls


def test_damaged_shard_raises_naming_it(tmp_path) -> None:
    urls = _with_truncated_second_shard(tmp_path)
    with pytest.raises(tarfile.ReadError, match=re.escape(urls[1]) + r": (member \d+\.\w+ )?at byte \d+: the archive ends"):
        _samples(TarSamples(), urls)


def test_damaged_shard_is_skipped_with_warn_and_continue(tmp_path) -> None:
    urls = _with_truncated_second_shard(tmp_path)
    with pytest.warns(UserWarning, match="truncated shard"):
        samples = _samples(TarSamples(wds.warn_and_continue), urls)
    keys = [int(sample["__key__"]) for sample in samples]
    assert keys[:4] == [0, 1, 2, 3] and keys[-4:] == [8, 9, 10, 11]  # first and last shards whole
    assert all(4 <= key < 8 for key in keys[4:-4]) and len(keys) < 12  # the samples before the cut


def test_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match="handler must be callable.*not str"):
        TarSamples("warn")


class _KeyOf:
    def __call__(self, sample: dict) -> int:
        return int(sample["__key__"])


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_workers_split_shards(tmp_path, workers) -> None:
    """Pickled into workers (spawn), each shard read by one worker: every sample exactly once."""
    urls = _write_shards(tmp_path, 4, 3)
    pipeline = wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_worker,
                                TarSamples(wds.warn_and_continue), wds.map(_KeyOf()))
    assert pickle.loads(pickle.dumps(pipeline))  # what a spawn start method needs
    loader = DataLoader(pipeline, batch_size=None, num_workers=workers,
                        multiprocessing_context="spawn" if workers else None)
    assert sorted(int(key) for key in loader) == list(range(12))


@pytest.mark.parametrize("layout", sorted(SPARSE_FORMATS))
def test_sparse_members_of_gnu_tar_raise_naming_shard_and_member(tmp_path, layout) -> None:
    """Every sparse layout GNU tar writes is refused: the pax ones used to be yielded as pieces
    (the stored data without its holes, or with the map in front) as if they were the file."""
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "sample0000.jpg").write_bytes(b"first")
    write_sparse_file(folder / SPARSE_NAME, b"\xff\xd8\xff\xe0 a sparse JPEG")
    shard = tmp_path / f"{layout}.tar"
    write_sparse_shard(shard, folder, ["sample0000.jpg", SPARSE_NAME], layout)
    with pytest.raises(tarfile.ReadError) as error:
        list(TarSamples()([{"url": str(shard)}]))
    assert str(shard) in str(error.value)
    assert f"member {SPARSE_NAME} " in str(error.value) and "sparse member" in str(error.value)
    ours, error = _ours(shard.read_bytes())
    assert ours == [("sample0000.jpg", b"first")], "members before the sparse one are yielded"
