"""One run (app.run_job) in this process on the config `python run.py ...` composes, against a temp SQLite
store: what a run records and says. The command line itself (exit codes, stderr, sweeps, signals) is
test_cli.py's and test_interrupts.py's."""

from tests.test_cli import runs_of


def test_profile_ncu_without_a_gpu_still_succeeds_and_says_why(run_here, store):
    status, said = run_here("problem=tiny", "bench=fast", "profile=ncu")
    assert status == 0, said
    assert "ncu needs a GPU: no NCU counters under the interpreter" in said
    _, (run,) = runs_of(store)
    assert run.info.status == "FINISHED" and run.data.tags["ncu_status"].startswith("ncu needs a GPU")
    assert not any(k.startswith("ncu.") for k in run.data.metrics)


def test_a_large_problem_named_explicitly_is_refused_under_the_interpreter(run_here, store):
    status, said = run_here("problem=kernelbench_l1_50", "bench=fast")
    assert status == 1 and "problem=tiny" in said and "GFLOP" in said


def test_the_default_problem_falls_back_to_tiny_without_a_gpu(run_here, store):
    status, said = run_here("bench=fast")
    assert status == 0, said
    assert "no CUDA device: running problem=tiny through the Triton interpreter" in said
    _, runs = runs_of(store)
    assert runs[0].data.params["problem"] == "tiny"


def test_a_setup_failure_is_recorded_against_the_problem_that_would_have_run(run_here, store):
    status, said = run_here("bench=fast", "kernel.name=nope")  # default problem → tiny on the interpreter; bad kernel
    from convtune.kernels import VARIANTS

    assert status == 1 and f"kernel.name='nope' is not allowed: one of {sorted(VARIANTS) + ['library']}" in said
    _, (run,) = runs_of(store)
    assert run.info.status == "FAILED" and run.data.params["problem"] == "tiny"
    assert run.data.tags["error.type"] == "ConfigError"


def test_kernel_library_measures_the_variant_the_library_runs_and_records_it(run_here, store):
    """kernel=library resolves per problem (kernels.library_variant): a channels_last input with 16 channels runs
    nhwc_igemm; with 3 channels implicit_gemm, on an NCHW copy made inside the call, writing the channels_last
    output. Each run records the variant it measured, and is correct."""
    for channels, variant in ((16, "nhwc_igemm"), (3, "implicit_gemm")):
        status, said = run_here("problem=tiny", "bench=fast", "kernel=library", "problem.layout=channels_last",
                                f"problem.in_channels={channels}")
        assert status == 0, said
    _, runs = runs_of(store)
    got = sorted((int(r.data.params["problem.in_channels"]), r.data.params["kernel"], r.data.tags["kernel"], r.info.status)
                 for r in runs)
    assert got == [(3, "implicit_gemm", "implicit_gemm", "FINISHED"), (16, "nhwc_igemm", "nhwc_igemm", "FINISHED")]
    assert all(r.data.metrics["rel_err"] < 2e-3 and r.data.params["problem.layout"] == "channels_last" for r in runs)
