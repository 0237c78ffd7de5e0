"""Small helper kernels of the matmul front end: layout-changing copies and fills."""

from numba import cuda


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
def fill_zero_kernel(out):
    rows, cols = out.shape
    for idx in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        out[idx // cols, idx % cols] = 0
