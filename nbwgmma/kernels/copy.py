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


#: The padded copies' tiles: 64 x 64 elements of the destination per block of 32 x 8 threads, 16
#: elements a thread (8 rows, 2 columns 32 apart), all 16 read before any is written, so that a
#: thread keeps 16 reads in flight; a transposed source goes through shared memory (a 64 x 65
#: tile: its columns in distinct banks). At 4 elements a thread, 32 x 32 tiles and Numba's
#: indexing (64-bit multiplies and wrap-around checks an element), the copy was bound by its
#: instructions: 70 us for a bf16 4096 x 4097 matrix (an H200), against 29.5 us now and 18.6 us
#: for a plain contiguous copy of the same bytes.
COPY_TILE = 64
COPY_BLOCK = (32, 8)


def copy_grid(rows: int, kpad: int, count: int = 1) -> tuple:
    """The grid of the padded copy kernels for a [count,] rows x kpad destination: row tiles in x,
    column tiles in y, the batch in z (y and z at most 65535 blocks: the kernel strides over the
    rest)."""
    t = COPY_TILE
    return -(-rows // t), max(1, min(-(-kpad // t), 65535)), max(1, min(count, 65535))


def _padded_copy(off):
    """The padded copy kernel whose offsets inside one matrix are of the integer type ``off``:
    ``numba.uint32`` (32-bit index math; each matrix spans fewer than 2**32 elements and its
    strides are not negative) or ``numba.int64`` (any)."""

    @cuda.jit(launch_bounds=(COPY_BLOCK[0] * COPY_BLOCK[1], 4))
    def kernel(src, dst, rows, kpad, count, cols, base, s_row, s_col, d1, s_b0, s_b1, transpose):
        # dst (flat) = count matrices of rows x kpad; matrix b's element (r, c) is
        #   src[m + r s_row + c s_col]  (or, transposed, src[m + c s_row + r s_col])  for c < cols,
        #   0 for cols <= c < kpad,  with m = base + (b // d1) s_b0 + (b % d1) s_b1  (all in elements).
        tile = cuda.shared.array((64, 65), dtype=numba.uint32)
        v = cuda.local.array(16, dtype=numba.uint32)
        tx = off(cuda.threadIdx.x)
        ty = off(cuda.threadIdx.y)
        r0 = off(cuda.blockIdx.x * 64)
        rows_ = off(rows)
        kpad_ = off(kpad)
        # the source's slow and fast dimensions: the destination's rows and columns, or (transposed)
        # its columns and rows; a thread reads along the fast one, 32 apart, and 8 apart along the slow
        lim_p, lim_q = (off(cols), rows_) if transpose else (rows_, off(cols))
        step_i = off(8 * s_row)
        step_h = off(32 * s_col)
        for b in range(cuda.blockIdx.z, count, cuda.gridDim.z):
            m = base + (b // d1) * s_b0 + (b % d1) * s_b1
            mdst = b * rows * kpad
            for cy in range(cuda.blockIdx.y, (kpad + 63) // 64, cuda.gridDim.y):
                c0 = off(cy * 64)
                p0, q0 = (c0, r0) if transpose else (r0, c0)
                p = off(p0 + ty)
                o = off(p * off(s_row) + off(q0 + tx) * off(s_col))
                for i in range(8):
                    q = off(q0 + tx)
                    oh = o
                    for h in range(2):
                        v[2 * i + h] = src[numba.uint64(m + oh)] if p < lim_p and q < lim_q else 0
                        oh = off(oh + step_h)
                        q = off(q + 32)
                    o = off(o + step_i)
                    p = off(p + 8)
                if transpose:  # (v[2 i + h] holds column ty + 8 i, row tx + 32 h of the tile)
                    cuda.syncthreads()  # (the tile before: read by every thread)
                    for i in range(8):
                        for h in range(2):
                            tile[ty + 8 * i, tx + 32 * h] = v[2 * i + h]
                    cuda.syncthreads()
                    for i in range(8):
                        for h in range(2):
                            v[2 * i + h] = tile[tx + 32 * h, ty + 8 * i]
                d = off(off(r0 + ty) * kpad_ + c0 + tx)
                r = off(r0 + ty)
                for i in range(8):
                    c = off(c0 + tx)
                    for h in range(2):
                        if r < rows_ and c < kpad_:
                            dst[numba.uint64(mdst + off(d + 32 * h))] = v[2 * i + h]
                        c = off(c + 32)
                    d = off(d + off(8 * kpad_))
                    r = off(r + 8)

    return kernel


#: The padded copy with 32-bit index math: for matrices of fewer than 2**32 elements, strides not
#: negative (:func:`nbwgmma.frontend.views.copy_params` picks).
pad_copy_kernel = _padded_copy(numba.uint32)
#: The padded copy for any strides and sizes (64-bit index math).
pad_copy_wide_kernel = _padded_copy(numba.int64)


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
