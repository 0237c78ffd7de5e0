"""The authoring kit's device functions on the GPU: the simulator's kit cases
(tests/sim_kit_cases.py: acc_map's coordinates, packing and vectors, the scheduler's walk,
the turn barriers, the row and column reductions, the random draws) run as compiled kernels, and the activations against float64."""

import math

import numpy as np
import pytest
from numba import cuda

from nbwgmma.kit import ACTIVATIONS, TmaPipeline, gelu_tanh_approx
from nbwgmma.launch import launch

from .sim_kit_cases import (  # noqa: F401  collected here as GPU tests
    test_acc_map_gives_each_value_its_row_and_column, test_acc_map_packs_pairs_like_the_conversion_helpers,
    test_acc_map_reads_column_and_row_vectors_once_and_zero_past_their_end,
    test_clusters_take_adjacent_tiles_along_their_direction, test_the_scheduler_walks_every_tile_once_in_grouped_order,
    test_two_warpgroups_taking_turns_alternate, test_warpgroup_index_and_thread_name_every_thread_of_three_warpgroups,
    test_a_ring_filled_by_threads_with_plain_stores, test_amax_blocks_take_the_largest_value_inside_the_output,
    test_an_s32_accumulator_mapped_as_f32_dequantizes,
    test_a_kit_block_called_with_arguments_its_signature_cannot_bind_is_refused_at_the_kernels_line,
    test_stream_k_on_more_ctas_than_shared_k_blocks_is_exact,
    test_row_reductions_give_every_lane_of_the_quad_its_rows, test_column_reductions_give_each_warp_its_sixteen_rows,
    test_acc_map_takes_row_pairs_a_softmax_of_the_rows, test_pair_store_writes_each_row_once_up_to_the_vectors_end,
    test_a_walk_of_ones_own_fills_the_ring_with_fill_stages, test_argmax_and_argmin_take_the_first_column_of_the_best_value,
    test_random_draws_are_the_host_models_bit_for_bit, test_dropout_in_acc_map_keeps_the_host_models_mask,
    test_acc_map4_gives_each_group_its_four_values_and_corner,
    test_a_batched_gemm_on_3d_maps_is_exact_and_stays_in_each_matrix, test_pair_atomic_combines_the_tiles_row_results,
    test_a_block_below_the_bounds_of_a_kernel_with_warpgroup_roles_is_refused,
    test_a_timeline_records_each_ctas_sm_and_its_events_in_order,
    test_the_library_gemm_traced_is_exact_and_records_its_events_in_causal_order,
    test_tail_maps_are_exact_whoever_zeroes_the_rows_past_them,
)

pytestmark = pytest.mark.gpu


def _reference(name, x):
    x = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
    erf = np.vectorize(math.erf)
    return {"relu": np.maximum(x, 0), "gelu": 0.5 * x * (1 + erf(x / math.sqrt(2))),
            "gelu_tanh": 0.5 * x * (1 + np.tanh(u)), "silu": x / (1 + np.exp(-x)),
            "sigmoid": 1 / (1 + np.exp(-x))}[name]


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_float64(name):
    f = ACTIVATIONS[name]

    @cuda.jit
    def kernel(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = f(x[i])

    x = np.concatenate([np.linspace(-12, 12, 4097), np.random.default_rng(0).normal(0, 3, 1 << 14)]).astype(np.float32)
    y = cuda.to_device(np.full(x.size, np.nan, np.float32))
    launch(kernel, (x.size + 255) // 256, 256, (cuda.to_device(x), y))
    ref = _reference(name, x)
    got = y.copy_to_host().astype(np.float64)
    # relative where the result is not tiny, absolute near zero (a few f32 ulps either way)
    np.testing.assert_allclose(got, ref, rtol=4e-6, atol=1e-30 if name == "relu" else 2e-7, err_msg=name)


def test_gelu_tanh_approx_is_within_its_documented_error():
    """tanh.approx's gelu_tanh: at most 6e-6 absolute everywhere, 1e-5 relative for x > 0."""
    @cuda.jit
    def kernel(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = gelu_tanh_approx(x[i])

    x = np.concatenate([np.linspace(-12, 12, 1 << 16), np.random.default_rng(0).normal(0, 3, 1 << 14)]).astype(np.float32)
    y = cuda.to_device(np.full(x.size, np.nan, np.float32))
    launch(kernel, (x.size + 255) // 256, 256, (cuda.to_device(x), y))
    ref = _reference("gelu_tanh", x)
    err = np.abs(y.copy_to_host().astype(np.float64) - ref)
    assert err.max() <= 6e-6, err.max()
    pos = x > 0.1
    assert (err[pos] / ref[pos]).max() <= 1e-5, (err[pos] / ref[pos]).max()


def test_advance_by_matches_repeated_advances_on_the_gpu():
    pipe = TmaPipeline(5, consumers=1)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        s, ph = pipe.advance_by(t % 5, (t // 5) % 2, t)
        out[t, 0], out[t, 1] = s, ph
        s, ph = t % 5, (t // 5) % 2
        for _ in range(t):
            s, ph = pipe.advance(s, ph)
        out[t, 2], out[t, 3] = s, ph

    out = cuda.to_device(np.full((64, 4), -1, np.int64))
    launch(kernel, 1, 64, (out,))
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:, :2], got[:, 2:])
