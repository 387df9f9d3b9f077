"""Config composition with real Hydra, and every semantic check's message."""

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ValidationError

from convtune.config import register_configs
from convtune.errors import ConfigError, UnsupportedProblem
from convtune.kernels import Meta, validate_meta, validate_precision
from convtune.problem import ConvProblem

CONF = Path(__file__).resolve().parents[1] / "conf"
PROBLEMS = sorted(p.stem for p in (CONF / "problem").glob("*.yaml"))


def cfg_with(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_defaults_compose_to_the_seed_problem():
    cfg = cfg_with()
    assert cfg.problem.name == "kernelbench_l1_50"
    assert (cfg.problem.batch, cfg.problem.in_channels, cfg.problem.height, cfg.problem.out_channels) == (256, 3, 224, 96)
    assert list(cfg.problem.stride) == [4, 4] and list(cfg.problem.padding) == [2, 2] and cfg.problem.bias
    assert cfg.kernel.name == "implicit_gemm" and cfg.precision.value == "tf32" and cfg.device.value == "auto"
    assert cfg.BLOCK_M is None and cfg.num_warps is None  # null = the kernel's default configuration


def test_meta_parameters_are_top_level_keys():
    cfg = cfg_with("BLOCK_M=64", "num_warps=8", "num_stages=3", "precision=ieee")
    assert (cfg.BLOCK_M, cfg.num_warps, cfg.num_stages, cfg.precision.value) == (64, 8, 3, "ieee")


@pytest.mark.parametrize("name", PROBLEMS)
def test_every_problem_composes_and_is_valid(name):
    p = ConvProblem.from_mapping(cfg_with(f"problem={name}").problem)
    assert p.name == name and p.flops > 0 and p.out_h >= 1 and p.out_w >= 1


def test_at_least_six_real_layers_besides_the_seed_and_tiny():
    assert len(set(PROBLEMS) - {"kernelbench_l1_50", "tiny"}) >= 6


@pytest.mark.parametrize("override", ["num_warps=abc", "BLOCK_M=1.5", "precision=fp8", "device=tpu", "problem.batch=x"])
def test_wrong_types_fail_at_compose_time(override):
    with pytest.raises((ConfigCompositionException, ValidationError)):
        cfg_with(override)


def test_unknown_key_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="BLOCK_Q"):
        cfg_with("BLOCK_Q=32")


GOOD = Meta(32, 64, 32, 4, 2)


@pytest.mark.parametrize("key,value,words", [
    ("BLOCK_M", 48, "power of two"), ("BLOCK_M", 8, "16"), ("BLOCK_N", 512, "256"), ("BLOCK_K", 256, "128"),
    ("num_warps", 3, "[1, 2, 4, 8, 16, 32]"), ("num_stages", 0, ">= 1"),
])
def test_meta_checks_name_key_value_and_what_is_allowed(key, value, words):
    bad = Meta(**{**GOOD.as_dict(), key: value})
    with pytest.raises(ConfigError) as e:
        validate_meta(bad)
    msg = str(e.value)
    assert msg.startswith(f"{key}={value!r} is not allowed") and words in msg and "\n" not in msg


def test_good_meta_and_precisions_pass():
    validate_meta(GOOD)
    validate_precision("tf32")
    validate_precision("ieee")
    with pytest.raises(ConfigError, match="precision='bf16'"):
        validate_precision("bf16")


def problem(**kw):
    base = dict(name="p", batch=1, in_channels=3, height=8, width=8, out_channels=4, kernel_h=3, kernel_w=3)
    return ConvProblem.from_mapping({**base, **kw})


@pytest.mark.parametrize("kw,match", [
    ({"batch": 0}, "problem.batch=0"), ({"height": -1}, "problem.height=-1"),
    ({"stride": [0, 1]}, "problem.stride"), ({"padding": [-1, 0]}, "problem.padding"),
    ({"stride": [1, 1, 1]}, "a pair"), ({"kernel_h": 20}, "output of at least 1x1"),
    ({"dtype": "float64"}, "problem.dtype"), ({"init": "zeros"}, "problem.init"),
    ({"layout": "nhwc"}, r"problem.layout='nhwc' is not allowed: one of \['nchw', 'channels_last'\]"),
])
def test_problem_checks(kw, match):
    with pytest.raises(ConfigError, match=match):
        problem(**kw)


def test_groups_are_refused_clearly():
    with pytest.raises(UnsupportedProblem, match="groups=2"):
        problem(groups=2)


def test_the_input_layout_is_part_of_the_problems_identity():
    assert problem().key().endswith("-bias-nchw-float32")  # the pins written before layouts keep their keys
    assert problem(layout="channels_last").key().endswith("-bias-channels_last-float32")


def test_asymmetric_stride_and_padding():
    p = problem(height=19, width=17, kernel_h=5, kernel_w=5, stride=[2, 1], padding=[2, 1])
    assert (p.out_h, p.out_w) == (10, 15)
    assert "s2x1-p2x1" in p.key()


@pytest.mark.parametrize("overrides,message", [
    (["+num_warp=4"], "num_warp=4 is not allowed: not a convtune key (did you mean num_warps?)"),
    (["+bench.foo=1"], "bench.foo=1 is not allowed: not a convtune key"),
    (["+problem.chanels=3"], "problem.chanels=3 is not allowed: not a convtune key"),
])
def test_keys_the_schema_does_not_have_are_refused_even_with_plus(overrides, message):
    from convtune.resolve import refuse_early, resolve
    from tests.conftest import compose

    cfg = compose("problem=tiny", *overrides)
    with pytest.raises(ConfigError, match=re.escape(message)):
        refuse_early(cfg)
    assert isinstance(resolve(cfg).error, ConfigError)  # a job refuses it too (a failed run, one line)


def test_a_gpu_preset_is_refused_without_a_gpu_and_known_keys_pass():
    from convtune.resolve import refuse_early
    from tests.conftest import compose

    refuse_early(compose("problem=tiny", "num_warps=4", "problem.batch=1", "+experiment=seed_configs"))
    with pytest.raises(ConfigError) as e:  # the sweep's callback prints it as `error: ...` and exits 2
        refuse_early(compose("problem=tiny", "+experiment=vs_cudnn"))
    assert str(e.value) == ("requires_gpu=True is not allowed: a CUDA device: this preset compares with cuDNN or "
                            "times the GPU itself, and none is visible here")


def test_calibrate_without_a_gpu_is_one_line():
    from convtune.commands import calibrate

    with pytest.raises(SystemExit, match="no CUDA device is visible here"):
        calibrate.main()


def test_a_malformed_preset_is_one_line_naming_its_file_and_line(tmp_path):
    from convtune.config import check_yaml_files
    from convtune.errors import ConfigFileError

    check_yaml_files(Path(__file__).resolve().parents[1] / "conf", Path(__file__).resolve().parents[1] / "experiments")
    (tmp_path / "good.yaml").write_text("a: 1\n")
    (tmp_path / "bad.yaml").write_text("# @package _global_\nhydra:\n  sweeper: [1, 2\n")
    with pytest.raises(ConfigFileError, match=r"bad.yaml: line 4, column 1: not valid YAML \(expected ',' or ']'"):
        check_yaml_files(tmp_path)
    (tmp_path / "bad.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ConfigFileError, match=r"bad.yaml: not UTF-8 text \(byte 3\)"):
        check_yaml_files(tmp_path)


@pytest.mark.parametrize("argv,line", [
    (["num_warp=4", "problem=tiny"], "error: num_warp='4' is not allowed: not a convtune key (did you mean num_warps?)"),
    (["-m", "num_warp=2,4"], "error: num_warp='2,4' is not allowed: not a convtune key (did you mean num_warps?)"),
    (["promote.top=3"], "error: promote.top='3' is not allowed: not a convtune key (did you mean promote.top_k?)"),
])
def test_an_unknown_key_without_plus_is_one_line_with_the_closest_key(capsys, argv, line):
    """Hydra answered `num_warp=4` with "To append to your config use +num_warp=4", the wrong fix; the entry
    points now check the command line's keys before Hydra composes, as they check `+key=value`."""
    from convtune.config_keys import exit_on_unknown_keys

    with pytest.raises(SystemExit) as e:
        exit_on_unknown_keys(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == line + "; see the configuration keys in docs/CONFIGURATION.md"
    exit_on_unknown_keys(["num_warps=4", "problem=tiny", "hydra.run.dir=x", "+experiment=seed_configs", "-m",
                          "hydra/launcher=gpus", "hydra/sweeper=search", "hydra.launcher.gpus=[0,1]"])


@pytest.mark.parametrize("argv,root,line", [
    # tune_model.py's own keys: Hydra printed 6 lines; now one, with the closest key
    (["model=x", "batchh=3"], "tune_model", "error: batchh='3' is not allowed: not a convtune key (did you mean batch?)"
                                           "; see the configuration keys in docs/CONFIGURATION.md"),
    # the documented form, unquoted: a Hydra grammar error of 5 lines
    (["sweep=[promote.rounds=7]"], "tune_model", "error: sweep='[promote.rounds=7]' is not allowed: a value Hydra's "
     "override grammar reads (no viable alternative at input '[promote.rounds='); a value that holds '=' needs quotes, "
     "as in 'sweep=[\"promote.rounds=7\"]'"),
    (["-m", "num_warps=choice()"], "run", "error: num_warps='choice()' is not allowed: a value Hydra's override grammar "
     "reads (ValueError while evaluating 'choice()': empty choice is not legal)"),
])
def test_an_override_hydra_cannot_read_or_use_is_one_line_in_every_entry_point(capsys, argv, root, line):
    from convtune.config import TuneModelConfig
    from convtune.config_keys import exit_on_unknown_keys

    schema, groups = (TuneModelConfig, ("tracking",)) if root == "tune_model" else (None, ("problem", "kernel"))
    with pytest.raises(SystemExit) as e:
        exit_on_unknown_keys(argv, schema, groups)
    assert e.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [line]
    exit_on_unknown_keys(["model=resnet50", 'sweep=["promote.rounds=7"]', "batch=8"], TuneModelConfig, ("tracking",))


def test_a_seed_torch_cannot_take_and_an_experiment_name_mlflow_cannot_keep_are_named_in_one_line():
    """A huge seed failed every job as "Overflow when unpacking long long"; a name over 500 characters was blamed on
    the store ("tracking.uri=... cannot be used: 'name' exceeds the maximum length")."""
    from convtune.config_keys import check_values
    from convtune.resolve import experiment_name

    with pytest.raises(ConfigError, match=r"^seed=99999999999999999999 is not allowed: an integer from 0 to "
                                          r"2\*\*63 - 1$"):
        check_values(cfg_with("seed=99999999999999999999"))
    check_values(cfg_with(f"seed={2**63 - 1}"))
    long = cfg_with("tracking.experiment=" + "x" * 490)
    with pytest.raises(ConfigError, match=r"^tracking.experiment='x{40}\.\.\. \(504 characters\)' is not allowed: an "
                                          r"experiment name of at most 500 characters"):
        experiment_name(long, "p", "interpreter")
    assert experiment_name(long, "p", "cuda") == "x" * 490  # 490 fits without " [interpreter]"
