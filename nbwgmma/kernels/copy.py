"""Small helper kernels of the matmul front end: layout-changing copies, fills, and a busy wait
for timing (autotuning)."""

import contextlib
import warnings

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


@cuda.jit
def pad_transpose_kernel(src, dst, transpose):
    """dst[r, c] = (src[c, r] if transpose else src[r, c]) inside src, 0 in the padding."""
    rows, kpad = dst.shape
    cols = src.shape[0] if transpose else src.shape[1]
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for idx in range(start, rows * kpad, step):
        r = idx // kpad
        c = idx % kpad
        if c < cols:
            dst[r, c] = src[c, r] if transpose else src[r, c]
        else:
            dst[r, c] = 0


@cuda.jit
def pad_transpose_batch_kernel(src, dst, transpose):
    """pad_transpose_kernel over a batch: dst[b, r, c] from matrix (b // src.shape[1], b % src.shape[1])
    of src (two batch dimensions of any strides: a batch whose dimensions do not merge into one)."""
    nb, rows, kpad = dst.shape
    inner = src.shape[1]
    cols = src.shape[2] if transpose else src.shape[3]
    for idx in range(cuda.grid(1), nb * rows * kpad, cuda.gridsize(1)):
        b = idx // (rows * kpad)
        r = idx // kpad % rows
        c = idx % kpad
        if c < cols:
            dst[b, r, c] = src[b // inner, b % inner, c, r] if transpose else src[b // inner, b % inner, r, c]
        else:
            dst[b, r, c] = 0


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
