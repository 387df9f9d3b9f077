"""The run record: every tag, param and metric name a convtune run writes, and a typed view for reading runs back.

Writers (the job, measure, the sweep's parent, promote) take the names from here; readers (promote's candidate
search, the summary, the plots) read runs through `RunView`. Renaming a metric is then one edit here, and
`tests/test_cli.py` (assert_declared) fails if a run writes a name this module does not declare. Plain data: every room
may import it (it imports nothing of convtune).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

META_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


class Status:
    """The `status` tag: what became of a configuration (MLflow's own run status says less: FAILED for both
    a compile error and a wrong result)."""
    RUNNING, OK, INCORRECT, FAILED, KILLED = "running", "ok", "incorrect", "failed", "killed"
    ORDER = {OK: 0, INCORRECT: 1, FAILED: 2, KILLED: 3}  # the summary's order after latency
    MLFLOW = {OK: "FINISHED", KILLED: "KILLED"}  # anything else ends FAILED

    @classmethod
    def mlflow(cls, status: str) -> str:
        return cls.MLFLOW.get(status, "FAILED")


class Tag:
    # a configuration's run: identity (what promote and the pins select on)
    STATUS = "status"
    PROBLEM = "problem"
    PROBLEM_KEY = "problem_key"
    KERNEL = "kernel"
    KERNEL_SOURCE_HASH = "kernel_source_hash"
    PRECISION = "precision"
    DEVICE = "device"  # the GPU's name, or "interpreter"
    # provenance
    COMPUTE_CAPABILITY = "compute_capability"
    TORCH_VERSION = "torch_version"
    TRITON_VERSION = "triton_version"
    HOST = "host"  # the machine and process that recorded the run (track.store reaps runs of dead processes)
    PROCESS = "process"  # pid:start ticks
    GPU_SLOT = "gpu_slot"  # the CUDA_VISIBLE_DEVICES the gpus launcher gave the job's process
    JOB = "job"  # a sweep job's number (hydra.job.num): how a launcher finds the run of a job it lost
    BATCH_JOB = "batch_job"  # the scheduler's id of a sweep job (SLURM: <array job>_<task>), where its logs are
    SLURM_STATE = "slurm_state"  # what SLURM says became of a task that left no result (CANCELLED by 0, TIMEOUT, ...)
    GIT_COMMIT = "git_commit"
    GIT_DIRTY = "git_dirty"
    META_SOURCE = "meta_source"  # explicit | pin | pin (nearest ...) | default
    LLVM_OPT = "llvm_opt"  # O3, or O0 when Triton's O3 binary failed its one-time check
    TORCH_REFERENCE = "torch_reference"
    FLOAT64_REFERENCE = "float64_reference"
    FLOOR_SOURCE = "floor_source"
    OCCUPANCY_LIMITER = "occupancy_limiter"
    NCU_STATUS = "ncu_status"
    ERROR_TYPE = "error.type"
    ERROR_MESSAGE = "error.message"
    PROMOTED = "convtune.promoted"  # set on the run whose configuration became the pin
    WINNER = "convtune.winner"  # "true" on a sweep's fastest correct run (track/dashboard.py)
    NOTE = "mlflow.note.content"  # MLflow's run description (markdown): a sweep parent's dashboard
    RESUMED_FROM = "resumed_from"  # a sweep's child that repeats an earlier run's record instead of measuring
    # a sweep's parent run
    SWEEP_DIR = "sweep_dir"
    OVERRIDES = "overrides"
    TOTAL_JOBS = "total_jobs"
    SUMMARY_ROWS = "summary_rows"
    BEST_RUN_ID = "best_run_id"
    BEST_CONFIG = "best_config"
    # a promote decision's run
    KIND = "kind"  # "promote"
    DECISION = "decision"  # promoted | kept
    REASON = "reason"
    # a model's run (tune_model.py, kind "tune_model")
    MODEL_KEY = "convtune.model_key"  # model, batch, layout, mode, precision and GPU: what a rerun resumes by
    DONE_PREFIX = "done/"  # done/<pin key>: promote's decision for that shape
    PINNED_PREFIX = "pinned/"  # pinned/<pin key>: what the pins file held for the key once it was decided
    SHAPES_FAILED = "shapes_failed"
    SHAPES_DROPPED = "shapes_dropped"  # promoted shapes the model was not faster with: torch pinned


class Param:
    KERNEL = "kernel"
    PRECISION = "precision"
    CHECK = "check"
    DEVICE_CHOICE = "device_choice"
    SEED = "seed"
    PROBLEM = "problem"
    PROBLEM_KEY = "problem_key"  # promote's decision run
    PROBLEM_PREFIX = "problem."  # problem.batch, problem.stride, ... (ConvProblem.params)
    BENCH_PREFIX = "bench."  # the timing settings as used (reduced under the interpreter)
    PROMOTE_PREFIX = "promote."
    TARGET_DEVICE = "target_device"
    # a model's run (tune_model.py)
    MODEL = "model"
    BATCH = "batch"
    LAYOUT = "layout"
    TRAIN = "train"
    COMPILE = "compile"
    DTYPE = "dtype"  # the dtype its convolutions compute in
    AUTOCAST = "autocast"
    FOLD_BN = "fold_bn"  # its batch norms folded, and the ReLUs after them fused (convert's fold_bn_layers)
    SHAPES = "shapes"
    TURNS = "turns"
    PINS_FILE = "pins_file"


class Metric:
    LATENCY_MS = "latency_ms"
    LATENCY_P20_MS = "latency_p20_ms"
    LATENCY_P80_MS = "latency_p80_ms"
    LATENCY_CV = "latency_cv"
    TFLOPS = "tflops"
    GBPS = "gbps"
    ARITHMETIC_INTENSITY = "arithmetic_intensity"
    # logged first (track.store.Tracker.log): MLflow lists a run's metrics in the order they were logged, and its
    # compare view colours the parallel-coordinates plot by the first (rel_err, before this order was set)
    SHOWN_FIRST = (LATENCY_MS, TFLOPS, GBPS)
    PCT_PEAK_TFLOPS = "pct_peak_tflops"
    PCT_PEAK_GBPS = "pct_peak_gbps"
    PEAK_TFLOPS = "peak_tflops"
    PEAK_GBPS = "peak_gbps"
    MEASURED_PEAK_TFLOPS = "measured_peak_tflops"
    MEASURED_PEAK_GBPS = "measured_peak_gbps"
    FLOOR_MS = "floor_ms"
    PCT_OF_FLOOR = "pct_of_floor"
    CUDNN_MS = "cudnn_ms"
    CUDNN_NCHW_MS = "cudnn_nchw_ms"
    CUDNN_CHANNELS_LAST_MS = "cudnn_channels_last_ms"
    SPEEDUP_VS_CUDNN = "speedup_vs_cudnn"
    REL_ERR = "rel_err"
    MAX_ABS_ERR_VS_TORCH = "max_abs_err_vs_torch"
    MATCHES_TORCH = "matches_torch"
    TORCH_REL_ERR = "torch_rel_err"
    UNWRITTEN_OUTPUTS = "unwritten_outputs"
    COMPILE_S = "compile_s"
    REGISTERS = "registers"
    SPILLS = "spills"
    SHARED_MEM_BYTES = "shared_mem_bytes"
    OCCUPANCY_PCT = "occupancy_pct"
    BLOCKS_PER_SM = "blocks_per_sm"
    WARPS_PER_SM = "warps_per_sm"
    NCU_PREFIX = "ncu."  # Nsight Compute counters: measure.ncu.metric_name(counter)
    NCU_ARITHMETIC_INTENSITY = "ncu_arithmetic_intensity"
    NCU_DRAM_BYTES_OVER_MIN = "ncu_dram_bytes_over_min"
    # a sweep's parent run
    N_PREFIX = "n_"  # n_ok, n_incorrect, n_failed, n_killed, n_resumed
    BEST_LATENCY_MS = "best_latency_ms"
    # a promote decision's run
    GAIN = "gain"
    RATIO_LOWER_BOUND = "ratio_lower_bound"
    RATIO_UPPER_BOUND = "ratio_upper_bound"
    # a model's run (tune_model.py): the model as tuned against torch, end to end
    SPEEDUP_VS_TORCH = "speedup_vs_torch"
    TIME_RATIO = "time_ratio"
    TIME_RATIO_LOW = "time_ratio_low"
    TIME_RATIO_HIGH = "time_ratio_high"
    STEP_MS_TORCH = "step_ms_torch"
    STEP_MS_TUNED = "step_ms_tuned"


def _names(cls: type) -> set[str]:
    return {v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str) and not k.endswith("_PREFIX")}


def _prefixes(cls: type) -> tuple[str, ...]:
    return tuple(v for k, v in vars(cls).items() if k.endswith("_PREFIX"))


MLFLOW_TAG = re.compile(r"^mlflow\.")  # MLflow's own (run name, parent run id, ...)


def undeclared(kind: str, names: Any) -> list[str]:
    """The names of `kind` ('tags', 'params', 'metrics') that this module does not declare."""
    cls = {"tags": Tag, "params": Param, "metrics": Metric}[kind]
    known, prefixes = _names(cls) | (set(META_KEYS) if kind == "params" else set()), _prefixes(cls)
    return sorted(n for n in names if n not in known and not n.startswith(prefixes)
                  and not (kind == "tags" and MLFLOW_TAG.match(n)))


@dataclass(frozen=True)
class RunView:
    """A run read back from the store (tracking's plain dict), with the fields readers need by name."""
    raw: dict[str, Any]

    @property
    def run_id(self) -> str:
        return self.raw["run_id"]

    @property
    def status(self) -> str:
        return self.raw["tags"].get(Tag.STATUS, Status.RUNNING)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def tag(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.raw["tags"].get(name, default)

    def param(self, name: str, default: Optional[str] = None) -> Optional[str]:
        return self.raw["params"].get(name, default)

    def metric(self, name: str) -> Optional[float]:
        return self.raw["metrics"].get(name)

    @property
    def latency_ms(self) -> Optional[float]:
        return self.metric(Metric.LATENCY_MS)

    @property
    def problem(self) -> Optional[str]:
        return self.param(Param.PROBLEM)

    @property
    def meta(self) -> dict[str, int]:
        """The launch configuration as run (every key resolved: defaults and pins filled in)."""
        return {k: int(self.raw["params"][k]) for k in META_KEYS}

    def config_label(self) -> str:
        """The launch keys as run; the run's name for a run whose job never recorded them (a launcher closed it)."""
        label = " ".join(f"{k}={self.raw['params'][k]}" for k in META_KEYS if k in self.raw["params"])
        return label or str(self.raw.get("run_name") or "")


@dataclass(frozen=True)
class Identity:
    """What makes two runs comparable: same GPU, kernel source, problem and precision. The tags a run writes,
    the filter promote searches with and the key the pins use all derive from it."""
    device: str
    kernel: str
    kernel_source_hash: str
    problem_key: str
    precision: str
    # the hashes this kernel's runs recorded before its identity became its jit code: the same kernel
    previous_hashes: tuple[str, ...] = ()

    def tags(self) -> dict[str, str]:
        return {Tag.DEVICE: self.device, Tag.KERNEL: self.kernel, Tag.KERNEL_SOURCE_HASH: self.kernel_source_hash,
                Tag.PROBLEM_KEY: self.problem_key, Tag.PRECISION: self.precision}

    def same_measurement_filters(self, params: dict[str, Any]) -> list[str]:
        """Finished, correct runs of this identity and this kernel (its source hash, or one it recorded before) with
        these params (launch keys, check, seed, timing settings): what a resumed sweep need not measure again. One
        filter a hash: MLflow's filters have AND only."""
        return [" AND ".join([self.candidates_filter(), f"tags.{Tag.KERNEL_SOURCE_HASH} = '{h}'"]
                             + [f"params.`{k}` = '{v}'" for k, v in sorted(params.items())])
                for h in (self.kernel_source_hash, *self.previous_hashes)]

    def candidates_filter(self) -> str:
        """MLflow filter for finished, correct runs of this identity, any kernel source (promote tells stale
        ones apart by their hash, so it can say how many it ignored)."""
        return (f"tags.{Tag.PROBLEM_KEY} = '{self.problem_key}' AND tags.{Tag.KERNEL} = '{self.kernel}' AND "
                f"tags.{Tag.PRECISION} = '{self.precision}' AND tags.{Tag.DEVICE} = '{self.device}' AND "
                f"tags.{Tag.STATUS} = '{Status.OK}' AND attributes.status = 'FINISHED'")

    def is_stale(self, run: RunView) -> bool:
        return run.tag(Tag.KERNEL_SOURCE_HASH) not in (self.kernel_source_hash, *self.previous_hashes)
