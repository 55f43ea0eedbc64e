"""Packs a run folder as tar + zstd with a long window (run folders repeat the same haystack in many
prompts, far apart: a 128 MiB window finds them where gzip's 32 KiB cannot), split into 15 MiB
pieces (`device run` returns files of at most 16 MiB). Unpack: cat PIECES | zstd -d --long=27 | tar x,
or `python pack.py --unpack OUT.tar.zst.* DEST`."""

import sys
import tarfile
from pathlib import Path

import zstandard

PIECE = 15 * 1024 * 1024
WINDOW_LOG = 27


class _Pieces:
    def __init__(self, base: Path):
        self.base, self.n, self.fh, self.left = base, 0, None, 0

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self.left == 0:
                if self.fh:
                    self.fh.close()
                self.fh, self.left = open(f"{self.base}.{self.n}", "wb"), PIECE
                self.n += 1
            k = min(self.left, len(view))
            self.fh.write(view[:k])
            view, self.left = view[k:], self.left - k
        return len(data)

    def close(self):
        if self.fh:
            self.fh.close()


def pack(src: Path, dest: Path) -> None:
    params = zstandard.ZstdCompressionParameters.from_level(12, window_log=WINDOW_LOG, threads=8)
    pieces = _Pieces(dest)
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(pieces, closefd=False) as z:
        with tarfile.open(fileobj=z, mode="w|") as tar:
            tar.add(src, arcname=src.name)
    pieces.close()


def unpack(pieces: list[Path], dest: Path) -> None:
    import io

    data = b"".join(p.read_bytes() for p in sorted(pieces, key=lambda p: int(p.suffix[1:])))
    reader = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(io.BytesIO(data))
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        tar.extractall(dest, filter="data")


if __name__ == "__main__":
    if sys.argv[1] == "--unpack":
        unpack([Path(p) for p in sys.argv[2:-1]], Path(sys.argv[-1]))
    else:
        pack(Path(sys.argv[1]), Path(sys.argv[2]))
