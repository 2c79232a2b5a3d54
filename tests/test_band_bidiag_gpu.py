"""The `band_bidiag` seed on the GPU (``gpu``-marked: skipped without a CUDA device): its driver
against the reference check at a few sizes, kinds and dtypes, through the captured graph and
launch by launch with identical bits, for several tunable combinations; the launch geometry
the schedule predicts; a planted fault (the last sweep skipped) refused by name.

Not yet run on a GPU (written without one): the next GPU session runs it first.
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.compile import compile_cubin
from seeds.band_bidiag import inputs, schedule
from seeds.band_bidiag.reference import CHECK_NAME, check_bidiagonal
from seeds.band_bidiag.spec import BAND_BIDIAG
from seeds.hardware import arch_for_compute_capability

pytestmark = pytest.mark.gpu

SEED = BAND_BIDIAG.seed_source()


def device_arch() -> str:
    import cupy

    major, minor = divmod(int(cupy.cuda.Device().compute_capability), 10)
    return arch_for_compute_capability(major, minor)


def driver_for(source: str, dtype: str):  # noqa: ANN201  (a BandBidiagDriver)
    arch = device_arch()
    result = compile_cubin(source, BAND_BIDIAG.compile_options(dtype, arch), arch)
    assert result.ok, result.log
    return BAND_BIDIAG.driver(result.cubin, dtype)


def tuned(tw: int, threads: int, max_blocks: int) -> str:
    return (
        SEED.replace("#define BB_TW 32 ", f"#define BB_TW {tw} ")
        .replace("#define BB_THREADS 128 ", f"#define BB_THREADS {threads} ")
        .replace("#define BB_MAX_BLOCKS 192 ", f"#define BB_MAX_BLOCKS {max_blocks} ")
    )


def reduce_on_device(driver, band: np.ndarray, use_graph: bool = True):  # noqa: ANN201
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    device_band = cupy.asfortranarray(cupy.asarray(band))
    before = device_band.copy()
    cupy.cuda.Device().synchronize()  # made on the legacy stream, which `stream` does not wait for
    d, e = driver.reduce(device_band, stream, use_graph=use_graph)
    stream.synchronize()
    assert cupy.array_equal(device_band, before)  # the input band is never written
    return d.get(), e.get()


@pytest.mark.parametrize("dtype", BAND_BIDIAG.dtypes)
@pytest.mark.parametrize(
    ("n", "bw", "kind"),
    [(1, 0, "random"), (2, 1, "random"), (100, 7, "arithmetic"), (150, 40, "quarter_circle"),
     (257, 32, "random"), (300, 64, "zero_rows"), (1000, 128, "log_decay"),
     (1000, 64, "repeated"), (2049, 32, "random"), (4100, 17, "repeated_blocks")],
)  # fmt: skip
def test_the_seed_reduces_as_lapack_does(dtype, n, bw, kind):
    driver = driver_for(SEED, dtype)
    problem = inputs.make_band(kind, n, bw, np.dtype(dtype).type, np.random.default_rng(n + bw))
    d, e = reduce_on_device(driver, problem.band)
    assert d.dtype == np.dtype(dtype) and d.shape == (n,) and e.shape == (n - 1,)
    assert check_bidiagonal(problem.band, d, e) is None


@pytest.mark.parametrize("dtype", BAND_BIDIAG.dtypes)
@pytest.mark.parametrize(
    ("tw", "threads", "max_blocks"), [(4, 32, 48), (16, 256, 96), (64, 512, 768), (32, 64, 1)]
)
def test_every_tunable_combination_gives_the_same_answer_with_and_without_a_graph(
    dtype, tw, threads, max_blocks
):
    driver = driver_for(tuned(tw, threads, max_blocks), dtype)
    assert driver.tw == tw
    n, bw = 300, 64
    geometry = driver.geometry(n, bw)
    assert geometry.grid == (min(schedule.max_active(n, bw, tw), max_blocks), 1, 1)
    assert geometry.block == (threads, 1, 1) and geometry.shared_bytes == 0
    problem = inputs.make_band("arithmetic", n, bw, np.dtype(dtype).type, np.random.default_rng(1))
    graph_d, graph_e = reduce_on_device(driver, problem.band, use_graph=True)
    assert check_bidiagonal(problem.band, graph_d, graph_e) is None
    launched_d, launched_e = reduce_on_device(driver, problem.band, use_graph=False)
    np.testing.assert_array_equal(graph_d, launched_d)  # blocks of a launch touch disjoint rows
    np.testing.assert_array_equal(graph_e, launched_e)
    again_d, _ = reduce_on_device(driver, problem.band, use_graph=True)
    np.testing.assert_array_equal(graph_d, again_d)  # the workspace is reset on every call


def test_solve_is_the_loaders_entry_and_refuses_what_it_cannot_take():
    import cupy

    driver = driver_for(SEED, "float32")
    band = inputs.random_band(64, 8, np.float32, np.random.default_rng(0))
    d, e = driver.solve(cupy.asfortranarray(cupy.asarray(band)))
    assert check_bidiagonal(band, d.get(), e.get()) is None
    with pytest.raises(ValueError, match="float32"):
        driver.solve(cupy.asarray(band, dtype=cupy.float64))
    with pytest.raises(ValueError, match="bandwidth"):
        driver.solve(cupy.zeros((130, 200), dtype=cupy.float32))  # bandwidth 129 > 128


@pytest.mark.parametrize("dtype", BAND_BIDIAG.dtypes)
def test_a_kernel_that_skips_the_last_sweep_is_refused(dtype):
    marker = "past their last step too\n"  # the end of the line that stops a block's sweeps
    assert marker in SEED
    faulty = SEED.replace(marker, marker + "    if (R == last && b - t == 1) continue;\n")
    driver = driver_for(faulty, dtype)
    rng = np.random.default_rng(2)
    problem = inputs.make_band("arithmetic", 150, 40, np.dtype(dtype).type, rng)
    d, e = reduce_on_device(driver, problem.band)
    failure = check_bidiagonal(problem.band, d, e)
    assert failure is not None and failure.check == CHECK_NAME
