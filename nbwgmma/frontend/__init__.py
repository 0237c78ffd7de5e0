"""The front end of :func:`nbwgmma.matmul` (the function itself is ``nbwgmma.matmul``), in
its parts:

* :mod:`~nbwgmma.frontend.arrays`: pointer, shape, strides and element type read off any CUDA
  array (CuPy, PyTorch, Numba, ``__cuda_array_interface__``; the simulator's arrays);
* :mod:`~nbwgmma.frontend.args`: the checks of a call's arguments, output allocation, streams;
* :mod:`~nbwgmma.frontend.tiles`: the tile model (which CTA tile suits a problem);
* :mod:`~nbwgmma.frontend.plan`: plans and launches (operand paths, staging copies, tensor
  maps, the kernel configuration, the prepared launch);
* :mod:`~nbwgmma.frontend.autotune`: ``config="auto"``, timed choices kept on disk;
* :mod:`~nbwgmma.frontend.matmul`: the call itself, with its plan cache and fast path.
"""
