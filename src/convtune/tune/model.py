"""`python tune_model.py`: a whole model's convolutions tuned in one command, kept only where the model gains.

1. The model: a torchvision.models name (`model=resnet50`), or `package.module:factory` (a class or function called
   with no arguments) with `input=[C,H,W]`; random weights, nothing is downloaded.
2. Its distinct convolution calls at `batch` and `layout` (convtune.nn.problems), most FLOPs per model call first;
   `shapes=N` tunes the first N. With `fold_bn=true` (eager eval), the calls of the model converted with
   fold_bn_layers: each convolution with the batch norm after it folded in, and with the ReLU after that where the
   model lets the kernel apply it (a fused problem, `...-then-relu`).
3. Each shape through the tracker: `run.py +experiment=candidates` (forked from a server that has imported torch,
   MLflow and Hydra once for every shape, convtune.forked; its output in the sweep folder as <shape>.stdout and
   .stderr) sweeps the library's kernels that take it (their defaults and neighbours), then promote contests the runs
   against torch, which the library runs for a key with no pin, and writes the winner into `pins_file` (default: this
   GPU's per-user overlay, which the library reads before the packaged pins). Every sweep and decision nests under one
   MLflow run of the model. A rerun for the same model, batch, layout, mode (train, compile, fold_bn) and precision on
   the same GPU goes on in that run: shapes decided before are not tuned again (resume=false tunes them again).
4. The model end to end: torch, the converted model, and the converted model without each shape that runs our
   kernel, in interleaved turns (eval forwards, or SGD train steps with train=true; measure/ab.py). A shape keeps its
   kernel pin only if the model is faster with it: the upper end of the 95 % bootstrap interval of the per-turn ratio
   (with / without) is below 1. Otherwise torch is pinned for it (for train=true, its "+train" key, which decides
   the calls that record gradients). `measure_only=true` runs this step alone and writes nothing.
5. The end-to-end table, torch against the model as now converted, goes on the model's run (its description, the
   MLflow run page's Overview) and is printed.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from convtune import forked, interrupts
from convtune.errors import ConfigError
from convtune.problem import ConvProblem, for_dtype
from convtune.record import Param, Status, Tag
from convtune.config import enum_value
from convtune.tune.end_to_end import Shape, autocasting, end_to_end, model_dtype

KIND = "tune_model"  # the model run's Tag.KIND
TORCHVISION_INPUT = (3, 224, 224)
STOP_GRACE_S = 60  # after an interrupt, how long a shape's run.py has to close its runs before it is killed


def validate(cfg: DictConfig) -> None:
    checks = (("batch", cfg.batch >= 1, "an integer >= 1"), ("turns", cfg.turns >= 2, "an integer >= 2 (the "
              "bootstrap needs turns)"), ("warmup", cfg.warmup >= 0, "an integer >= 0"),
              ("shapes", cfg.shapes is None or cfg.shapes >= 1, "null (all) or an integer >= 1"),
              ("input", cfg.input is None or (len(cfg.input) == 3 and min(cfg.input) >= 1),
               "null or one sample's shape [C, H, W]"),
              ("compile", not (cfg.compile and cfg.train), "false with train=true (compiled training calls run torch: "
               "no pin is measured there)"),
              ("fold_bn", not (cfg.fold_bn and (cfg.train or cfg.compile)), "false with train=true or compile=true "
               "(training and compiled calls fold nothing: convert's fold_bn_layers)"),
              ("dtype", not (cfg.autocast and enum_value(cfg.dtype) == "float32"), "bfloat16 or float16 with "
               "autocast=true (autocast computes convolutions in one of those), or null (bfloat16)"))
    for key, ok, allowed in checks:
        if not ok:
            raise ConfigError(key, enum_value(cfg[key]), allowed)


def load_model(spec: str) -> tuple[Any, Optional[tuple[int, ...]]]:
    """(the model, its default sample shape or None): a torchvision.models name, or package.module:factory."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError("model", spec, f"package.module:factory, importable from here ({e})") from None
        except Exception as e:  # noqa: BLE001 - the user's module failed as it was imported: one line, not a traceback
            raise ConfigError("model", spec, f"package.module:factory whose module imports ({_said(e)})") from None
        try:
            model = factory()
        except Exception as e:  # noqa: BLE001 - the user's factory: whatever it raises is one line
            raise ConfigError("model", spec, f"a factory that builds the model when called with no arguments; it "
                                             f"raised {_said(e)}") from None
        import torch

        if not isinstance(model, torch.nn.Module):
            raise ConfigError("model", spec, f"a factory that returns a torch.nn.Module; it returned a "
                                             f"{type(model).__name__}")
        return model, None
    try:
        import torchvision
    except Exception as e:  # noqa: BLE001 - missing (ImportError), or built for another torch (RuntimeError)
        why = "not installed" if isinstance(e, ImportError) else f"it does not import: {_said(e)}"
        raise ConfigError("model", spec, f"package.module:factory; a torchvision name needs torchvision built for this "
                                         f"torch ({why}; README: Install)") from None
    names = sorted(n for n in torchvision.models.list_models(module=torchvision.models))
    if spec not in names:
        near = [n for n in names if n.startswith(spec[:3])][:6]
        raise ConfigError("model", spec, "a torchvision classification model (" + ", ".join(near or names[:6]) +
                          ", ...) or package.module:factory")
    return torchvision.models.get_model(spec, weights=None), TORCHVISION_INPUT


def _said(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its message."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def distinct_shapes(model: Any, x: Any, autocast: Any = None, fold_bn: bool = False) -> list[Shape]:
    """The model's distinct convolution calls on `x` (within `autocast`, a context) that convtune's kernels can take,
    most FLOPs first; with `fold_bn`, the calls its convolutions make with their batch norms folded in, and the ReLU
    after them fused where the model allows (convtune.nn.problems). A model that cannot run `x` (an input= that does
    not fit it) is a ConfigError in one line."""
    import contextlib

    from convtune.library.nn import problems

    try:
        with autocast or contextlib.nullcontext():
            found = [Shape(p, layers) for p, layers in problems(model, x, fold_bn_layers=fold_bn).values()]
    except Exception as e:  # noqa: BLE001 - the user's model on the user's input shape
        raise ConfigError("input", list(x.shape[1:]), f"one sample's shape [C, H, W] that the model takes; a batch "
                                                      f"of {list(x.shape)} raised {_said(e)}") from None
    return sorted(found, key=lambda s: -s.flops)


def shape_overrides(p: ConvProblem, name: str) -> list[str]:
    """run.py's overrides that give `p` as the problem (problem=tiny supplies nothing that is not overridden)."""
    pair = lambda v: f"[{v[0]},{v[1]}]"  # noqa: E731
    return [f"problem.name={name}", f"problem.description={name}: {p.key()}", f"problem.batch={p.batch}",
            f"problem.in_channels={p.in_channels}", f"problem.height={p.height}", f"problem.width={p.width}",
            f"problem.out_channels={p.out_channels}", f"problem.kernel_h={p.kernel_h}",
            f"problem.kernel_w={p.kernel_w}",
            f"problem.stride={pair(p.stride)}", f"problem.padding={pair(p.padding)}",
            f"problem.dilation={pair(p.dilation)}", f"problem.bias={str(p.bias).lower()}", f"problem.init={p.init}",
            f"problem.layout={p.layout}", f"problem.dtype={p.dtype}", f"problem.epilogue=[{','.join(p.epilogue)}]"]


def run_tune_model(cfg: DictConfig, root: Path, out_dir: Path) -> int:
    """Returns the exit status: 0 when every shape was decided, 1 when one could not be."""
    import torch

    from convtune.device import INTERPRETER, activate, resolve_device
    from convtune.resolve import experiment_name
    from convtune.track.store import Tracker, resolve_uri, say_reaped

    validate(cfg)
    choice = enum_value(cfg.device)
    device = resolve_device(choice)
    if device != "cuda" and choice != "interpreter":
        raise ConfigError("device", choice, "cuda, on a CUDA GPU (pins are per GPU); device=interpreter is a dry run "
                                            "of the pipeline on the CPU, with CPU times")
    activate(device)  # before the kernels load: under the interpreter they run on the CPU
    from convtune import pins
    from convtune.pins import overlay

    interpreted = device == INTERPRETER
    gpu = INTERPRETER if interpreted else torch.cuda.get_device_name()
    dtype, layout = model_dtype(cfg), enum_value(cfg.layout)
    precision = for_dtype(enum_value(cfg.precision), dtype)  # what the pins of its calls are keyed by
    target = Path(cfg.pins_file).expanduser().resolve() if cfg.pins_file else overlay.path_for(gpu)
    if target is None:
        raise ConfigError("pins_file", None, f"a path: the per-user overlay is off ({overlay.ENV}=off)")
    pins.check_writable(target)

    model, sample = load_model(cfg.model)
    sample = tuple(cfg.input) if cfg.input is not None else sample
    if sample is None:
        raise ConfigError("input", None, f"one sample's shape [C, H, W]: {cfg.model} is not a torchvision model")
    dev = torch.device("cpu" if interpreted else "cuda")
    torch.manual_seed(0)
    model = model.to(dev)
    x = torch.randn(cfg.batch, *sample, device=dev)
    if dtype != "float32" and not cfg.autocast:  # the model in half precision, weights and input
        from convtune.kernels.conv_args import TORCH_DTYPES

        model, x = model.to(TORCH_DTYPES[dtype]), x.to(TORCH_DTYPES[dtype])
    if layout == "channels_last":
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    shapes = distinct_shapes(model, x, autocasting(cfg, x), cfg.fold_bn)
    chosen = [] if cfg.measure_only else shapes[: cfg.shapes] if cfg.shapes else shapes
    if target != overlay.path_for(gpu):  # the library in this process reads what promote writes
        pins.create_empty(target)  # the library refuses a CONVTUNE_PINS that names no file
        os.environ[pins.ENV_VAR] = str(target)

    uri = resolve_uri(cfg.tracking.uri, Path.cwd())
    tracker = Tracker(uri)
    say_reaped(tracker.reap_orphans())
    experiment = cfg.tracking.experiment or f"{KIND} {cfg.model}"
    mode = "train" if cfg.train else "eval compiled" if cfg.compile else "eval bn-folded" if cfg.fold_bn else "eval"
    numbers = precision if dtype == "float32" else f"{dtype}{' autocast' if cfg.autocast else ''}"
    identity = f"{cfg.model} b{cfg.batch} {layout} {mode} {numbers} · {gpu}" + (" · measured" if cfg.measure_only
                                                                                else "")
    with interrupts.deferred():  # the run is never open without the cleanup that closes it on an interrupt
        run_id, done = _model_run(tracker, experiment_name(cfg, experiment, device), identity, cfg, target)
        on_kill = interrupts.on_interrupt(lambda sig: _close(tracker, run_id, sig))
    exp_id = tracker.get(run_id)["experiment_id"]
    print(f"tune_model: {identity}: {len(shapes)} distinct convolution(s)"
          + (": measured as the library runs it, nothing tuned or written" if cfg.measure_only else
             f", the {len(chosen)} with the most FLOPs tuned" if len(chosen) < len(shapes) else "")
          + f"; pins into {target}; MLflow run {run_id} ({uri})", flush=True)
    failed = 0
    try:
        for i, s in enumerate(chosen, 1):
            key = pins.pin_key(s.problem.key(), precision)
            label = f"[{i}/{len(chosen)}] {key} ({len(s.layers)} layer(s): {', '.join(s.layers[:3])}" \
                    f"{', ...' if len(s.layers) > 3 else ''})"
            if cfg.resume and key in done:
                held = _held(target, gpu, s.problem, key)
                if held == done[key][1]:
                    print(f"{label}: decided before for this model, not tuned again: {done[key][0]}", flush=True)
                    continue
                print(f"{label}: decided before for this model, but {target} does not hold that decision (it pins "
                      f"{held}, the decision left {done[key][1]}): decided again", flush=True)
            t0 = time.monotonic()
            decision = _tune_shape(s, cfg, root, out_dir / f"shape{i:02d}", uri, experiment, run_id, target, device)
            if decision is None:
                failed += 1
                continue
            tracker.log(run_id, tags={f"{Tag.DONE_PREFIX}{key}": decision,
                                      f"{Tag.PINNED_PREFIX}{key}": _held(target, gpu, s.problem, key)})
            print(f"{label}: {decision} ({time.monotonic() - t0:.0f} s)", flush=True)
        from convtune.library import dispatch

        dispatch.forget()
        table, numbers, dropped = end_to_end(model, x, cfg, shapes, precision, gpu, target)
        # a shape the model was not faster with now holds torch: what a resume compares the pins file with
        now_held = {f"{Tag.PINNED_PREFIX}{k}": _held(target, gpu, s.problem, k) for s in chosen
                    if (k := pins.pin_key(s.problem.key(), precision)) in dropped}
        if now_held:
            tracker.log(run_id, tags=now_held)
    except Exception as e:  # an error, recorded with its message (a signal goes on to on_kill, through guard)
        with interrupts.deferred():
            on_kill.cancel()
            tracker.log(run_id, tags={Tag.ERROR_TYPE: type(e).__name__, Tag.ERROR_MESSAGE: str(e)[:500]})
            _close(tracker, run_id, interrupts.ABNORMAL_EXIT)
        raise
    note = (f"## {identity}\n\n{len(shapes)} distinct convolutions; pins in `{target}`.\n\n{table}\n"
            + ("\n(interpreter) CPU times of the pipeline's dry run: meaningless for a GPU; the library runs torch "
               "for CPU tensors.\n" if interpreted else ""))
    with interrupts.deferred():  # the outcome is written whole
        tracker.log_text(run_id, note, "end_to_end.md")
        status = Status.FAILED if failed else Status.OK
        tracker.log(run_id, metrics=numbers, tags={Tag.NOTE: note, Tag.STATUS: status, Tag.SHAPES_FAILED: failed,
                                                    Tag.SHAPES_DROPPED: len(dropped)})
        tracker.end(run_id, Status.mlflow(status))
        on_kill.cancel()
    print(table, flush=True)
    if interpreted:
        print("(interpreter) CPU times of a dry run of the pipeline: meaningless for a GPU", flush=True)
    print(f"browse: mlflow ui --backend-store-uri {uri}   then "
          f"http://127.0.0.1:5000/#/experiments/{exp_id}/runs/{run_id}", flush=True)
    return 1 if failed else 0


def _held(target: Path, gpu: str, problem: ConvProblem, key: str) -> str:
    """What the pins file `target` holds for `key` (wherever it is filed), in words: a
    shape counts as decided on resume only where the file still holds what its decision left there (the overlay
    deleted, or another pins_file=, and it is decided again)."""
    from convtune import pins

    try:
        value = pins.pinned_value(pins.load(target), gpu, key)
    except pins.PinsError:
        return "an unreadable file"
    return pins.describe(value) if value is not None else "none"


def _close(tracker: Any, run_id: str, why: str) -> None:
    """End the model's run KILLED after a signal (`why` its name), FAILED after an error (interrupts.ABNORMAL_EXIT)."""
    status = Status.FAILED if why == interrupts.ABNORMAL_EXIT else Status.KILLED
    tracker.log(run_id, tags={Tag.STATUS: status})
    tracker.end(run_id, Status.mlflow(status))


def _model_run(tracker: Any, experiment: str, identity: str, cfg: DictConfig, target: Path) -> tuple[str, dict]:
    """The model's run: the latest one for `identity` when resuming (reopened), else a new one; with the shapes it
    decided (pin key → decision line)."""
    from convtune.device import git_tags
    from convtune.track.store import this_process

    exp_id = tracker.experiment_id(experiment)

    def latest(who: str) -> Optional[dict]:
        runs = [r for r in tracker.search(f"tags.`{Tag.MODEL_KEY}` = '{who}'") if r["experiment_id"] == exp_id]
        return max(runs, key=lambda r: r["start_time"]) if runs else None

    def decided(run: Optional[dict]) -> dict:
        """pin key → (promote's decision line, what the pins file held for the key once it was decided)"""
        tags = run["tags"] if run else {}
        return {k[len(Tag.DONE_PREFIX):]: (v, tags.get(Tag.PINNED_PREFIX + k[len(Tag.DONE_PREFIX):]))
                for k, v in tags.items() if k.startswith(Tag.DONE_PREFIX)}

    run = latest(identity)
    # compile=true: a shape's contest alone is the same as in the eager run of the model, whose shapes count as
    # decided too (the pins file must still hold what that run left)
    done = decided(latest(identity.replace(" eval compiled ", " eval "))) if cfg.compile and cfg.resume else {}
    if cfg.resume and run and not cfg.measure_only:
        tracker.reopen(run["run_id"], this_process())
        done.update(decided(run))
        print(f"tune_model: resuming run {run['run_id']}: {len(done)} shape(s) decided before", flush=True)
        return run["run_id"], done
    if done:
        print(f"tune_model: {len(done)} shape(s) decided before by the eager run of this model", flush=True)
    run_id = tracker.start_run(exp_id, f"{identity}", {Tag.KIND: KIND, Tag.MODEL_KEY: identity,
                                                       Tag.STATUS: Status.RUNNING, **git_tags()})
    tracker.log(run_id, params={Param.MODEL: cfg.model, Param.BATCH: cfg.batch, Param.LAYOUT: enum_value(cfg.layout),
                                Param.TRAIN: cfg.train, Param.COMPILE: cfg.compile, Param.PRECISION: enum_value(cfg.precision),
                                Param.DTYPE: model_dtype(cfg), Param.AUTOCAST: cfg.autocast,
                                Param.FOLD_BN: cfg.fold_bn,
                                Param.SHAPES: cfg.shapes, Param.TURNS: cfg.turns, Param.PINS_FILE: str(target)})
    return run_id, done if not cfg.measure_only else {}


def _tune_shape(s: Shape, cfg: DictConfig, root: Path, out_dir: Path, uri: str, experiment: str, run_id: str,
                target: Path, device: str) -> Optional[str]:
    """One shape's sweep and promote through `run.py +experiment=candidates`; promote's decision line, or None."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", f"{cfg.model.rpartition(':')[2] or cfg.model}_{s.layers[0]}")
    argv = ["+experiment=candidates", "problem=tiny", *shape_overrides(s.problem, name),
            f"precision={enum_value(cfg.precision)}", f"device={device}", f"tracking.uri={uri}",
            f"tracking.experiment={experiment}", f"tracking.parent_run={run_id}", f"pins_file={target}",
            f"hydra.sweep.dir={out_dir}", *cfg.sweep]
    out, err = out_dir / f"{name}.stdout", out_dir / f"{name}.stderr"
    out_dir.mkdir(parents=True, exist_ok=True)
    proc = forked.start(forked.run_script, (str(root / "run.py"), argv, dict(os.environ), str(root), str(out),
                                            str(err)), "run.py")
    try:
        proc.wait()
    except BaseException:  # interrupted: the shape's sweep must close its runs KILLED before this process ends
        _stop(proc)
        raise
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
    decision = re.search(r"^decision: .*$", stdout, re.M)
    if proc.returncode == 0 and not decision and re.search(r"^promote: no finished, correct runs", stdout, re.M):
        # every candidate failed the judge's check or could not run here: nothing to promote, torch runs the shape
        return "TORCH: no candidate ran and matched torch here (the sweep's table says why); the library runs torch"
    if proc.returncode != 0 or not decision:
        print(f"{s.problem.key()}: the sweep or promote failed (exit {proc.returncode}); its last lines:\n"
              + "\n".join((stdout + stderr).strip().splitlines()[-8:]), flush=True)
        return None
    return decision[0][len("decision: "):]


def _stop(proc: forked.Forked) -> None:
    """A shape's run.py when this process is interrupted: a Ctrl-C at a terminal reached it too, so it gets time to
    record its runs KILLED; a signal sent to this process alone is passed on; one that will not end is killed (its
    runs are then reaped KILLED by the next process that opens the store)."""
    for give, then in ((5, lambda: proc.send_signal(signal.SIGINT)), (STOP_GRACE_S, proc.kill)):
        try:
            proc.wait(give)
            return
        except subprocess.TimeoutExpired:
            then()
    proc.wait()
