"""Small helper kernels of the matmul front end: layout-changing copies, fills, and a busy wait
for timing (autotuning)."""

import contextlib
import warnings

import numba
from numba import cuda


@contextlib.contextmanager
def sized_to_data():
    """Silence Numba's small-grid warning around the launch of one of these kernels: their grids
    (:func:`grid_for`) are sized to the data, so a small one is no under-use."""
    with warnings.catch_warnings():
        # (.* first: the filter matches the message's start, which Numba may wrap in terminal highlighting)
        warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
        yield


def grid_for(count: int, threads: int = 256) -> int:
    """Blocks of ``threads`` for these grid-stride kernels over ``count`` items: one per
    ``threads`` items, at least 1 and at most 65535 (the rest taken by the stride)."""
    return max(1, min(65535, -(-count // threads)))


#: The padded copies' tiles: 32 x 32 elements of the destination per block of 32 x 8 threads
#: (each thread 4 rows), so the rows are read and written 32 elements at a time and a transposed
#: source goes through shared memory (a 32 x 33 tile: its columns in distinct banks).
COPY_TILE = 32
COPY_BLOCK = (32, 8)


def copy_grid(rows: int, kpad: int, count: int = 1) -> tuple:
    """The grid of :func:`pad_transpose_kernel` (``count`` 1) or :func:`pad_transpose_batch_kernel`
    for a [count,] rows x kpad destination: row tiles in x, column tiles in y, the batch in z (y and
    z at most 65535 blocks: the kernel strides over the rest)."""
    return -(-rows // COPY_TILE), max(1, min(-(-kpad // COPY_TILE), 65535)), max(1, min(count, 65535))


@cuda.jit(device=True, inline=True)
def _at(src, r, c, rows, cols):
    """src[r, c] inside its rows x cols, else 0 (the padding)."""
    return src[r, c] if r < rows and c < cols else 0


@cuda.jit(device=True, inline=True)
def _copy_tile(src, dst, transpose, tile):
    """Tiles (blockIdx.x, blockIdx.y + j gridDim.y) of dst = (src.T if transpose else src), padded
    with zeros. ``transpose`` reads src along its last dimension (give the front end's copies the
    view whose last dimension is contiguous). Each thread issues its four reads before any write:
    written as read-then-write per element, a thread had one read in flight at a time (the
    compiler cannot move a read past a write that may alias it), about 0.6 TB/s on an H200."""
    rows, kpad = dst.shape
    cols = src.shape[0] if transpose else src.shape[1]
    r0 = cuda.blockIdx.x * 32
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    for cy in range(cuda.blockIdx.y, (kpad + 31) // 32, cuda.gridDim.y):
        c0 = cy * 32
        if transpose:  # read src's rows (dst's columns) along src's last dimension, write dst's rows
            v0 = _at(src, c0 + ty, r0 + tx, cols, rows)
            v1 = _at(src, c0 + ty + 8, r0 + tx, cols, rows)
            v2 = _at(src, c0 + ty + 16, r0 + tx, cols, rows)
            v3 = _at(src, c0 + ty + 24, r0 + tx, cols, rows)
            cuda.syncthreads()  # (the tile before: read by every thread)
            tile[ty, tx] = v0
            tile[ty + 8, tx] = v1
            tile[ty + 16, tx] = v2
            tile[ty + 24, tx] = v3
            cuda.syncthreads()
            for j in range(4):
                i = ty + 8 * j
                if r0 + i < rows and c0 + tx < kpad:
                    dst[r0 + i, c0 + tx] = tile[tx, i]
        else:
            c = c0 + tx
            v0 = _at(src, r0 + ty, c, rows, cols)
            v1 = _at(src, r0 + ty + 8, c, rows, cols)
            v2 = _at(src, r0 + ty + 16, c, rows, cols)
            v3 = _at(src, r0 + ty + 24, c, rows, cols)
            if c < kpad:
                if r0 + ty < rows:
                    dst[r0 + ty, c] = v0
                if r0 + ty + 8 < rows:
                    dst[r0 + ty + 8, c] = v1
                if r0 + ty + 16 < rows:
                    dst[r0 + ty + 16, c] = v2
                if r0 + ty + 24 < rows:
                    dst[r0 + ty + 24, c] = v3


@cuda.jit
def pad_transpose_kernel(src, dst, transpose):
    """dst[r, c] = (src[c, r] if transpose else src[r, c]) inside src, 0 in the padding; on
    :func:`copy_grid`'s grid in blocks of :data:`COPY_BLOCK`."""
    tile = cuda.shared.array((32, 33), dtype=numba.uint32)
    _copy_tile(src, dst, transpose, tile)


@cuda.jit
def pad_transpose_batch_kernel(src, dst, transpose):
    """pad_transpose_kernel over a batch: dst[b] from matrix (b // src.shape[1], b % src.shape[1])
    of src (two batch dimensions of any strides: a batch whose dimensions do not merge into one)."""
    tile = cuda.shared.array((32, 33), dtype=numba.uint32)
    inner = src.shape[1]
    for b in range(cuda.blockIdx.z, dst.shape[0], cuda.gridDim.z):
        _copy_tile(src[b // inner, b % inner], dst[b], transpose, tile)


@cuda.jit
def fill_zero_kernel(out):
    rows, cols = out.shape
    for idx in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        out[idx // cols, idx % cols] = 0


@cuda.jit
def vector_f32_kernel(src, dst):
    """dst[i] = src[i] as f32 (a strided or f16 vector made a contiguous f32 one)."""
    for i in range(cuda.grid(1), dst.shape[0], cuda.gridsize(1)):
        dst[i] = src[i]


@cuda.jit
def busy_wait_kernel(sleeps):
    """Keeps the GPU busy for about ``sleeps`` microseconds (``nanosleep`` of 1 us each, which
    the hardware may cut short or stretch up to twice): the host can enqueue a batch of
    launches behind it, so events around the batch time the kernels, not the host."""
    for _ in range(sleeps):
        cuda.nanosleep(1000)
