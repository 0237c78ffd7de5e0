"""GEMM step 4: the library kernel behind ``nbwgmma.matmul``.

``nbwgmma/kernels/gemm.py`` is step 3 made persistent (one CTA per SM walking tiles in
an L2-friendly order), with any M, N, K (TMA zero-fills the edges and clips the
stores), bf16/f16/fp8/tf32, operands in either layout, and an epilogue that writes C
through ``stmatrix`` into a swizzled shared tile and TMA stores that overlap the
next tile. Here it is called the way users call it, next to cuBLAS.

    python examples/gemm_4_library.py [size]
"""

import sys


def simulate():
    """In the CUDA simulator: ``matmul`` on one 128x256 tile of small integers, bf16 bits in
    Numba's arrays (``in_dtype``), bf16 out; no cuBLAS to compare with."""
    from numba import cuda

    from nbwgmma import matmul
    from nbwgmma.demo import sim_check, sim_operands

    a, b, a_bits, b_bits = sim_operands(128, 256, 64)  # |C| <= 256: exact in bf16
    c = cuda.device_array((128, 256), "uint16")  # bf16 bits: the TMA-store epilogue
    return sim_check("step 4, nbwgmma.matmul", lambda: matmul(a_bits, b_bits.T, out=c, in_dtype="bf16"), c, a, b)


def main(size=4096):
    from nbwgmma.demo import compile_report_instead, gemm_operands, gemm_report, gpu_available, simulated

    if simulated():
        return simulate()
    if not gpu_available():
        from numba import types

        from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel

        sig = (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32, types.float32)
        return compile_report_instead(gemm_kernel(GemmConfig(epilogue="tma")), sig, "the library kernel")
    import torch

    from nbwgmma import matmul

    a, b = gemm_operands(size, size, size)
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)  # bf16 out, like cuBLAS's
    err = gemm_report("step 4, nbwgmma.matmul", lambda: matmul(a, b.t(), out=c), c, a, b)
    gemm_report("cuBLAS (torch.matmul, same call)", lambda: torch.matmul(a, b.t(), out=c), c, a, b)
    return err


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
