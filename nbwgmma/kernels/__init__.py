"""Kernels written with nbwgmma intrinsics."""
