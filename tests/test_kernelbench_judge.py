"""benchmarks/kernelbench_judge.py's verdict line, from a real result of KernelBench's eval_kernel_against_ref (the
fused_gluon export of L1 #50 on an NVIDIA H200, 2026-11-27, commit f0d926a), on the CPU."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = Path(__file__).parent / "data" / "kernelbench_judge_h200.json"


def _judge():
    spec = importlib.util.spec_from_file_location("kernelbench_judge", ROOT / "benchmarks" / "kernelbench_judge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_verdict_of_a_captured_result_names_correctness_trials_times_and_gpu():
    data = json.loads(CAPTURE.read_text())
    assert _judge().verdict(data) == ("KernelBench's judge: correct (5 / 5), ModelNew 0.269 ms against the reference's "
                                      "2.11 ms (7.84x), NVIDIA H200")


def test_a_wrong_or_uncompiled_file_says_so():
    data = json.loads(CAPTURE.read_text())
    judge = _judge()
    wrong = {**data, "correctness": False, "metadata": {**data["metadata"], "correctness_trials": "(2 / 5)"}}
    assert judge.verdict(wrong).startswith("KernelBench's judge: NOT correct (2 / 5), ModelNew 0.269 ms")
    broken = {"compiled": False, "correctness": False, "metadata": {"compilation_error": "SyntaxError: bad"}}
    assert judge.verdict(broken) == "KernelBench's judge: did not compile (SyntaxError: bad)"
