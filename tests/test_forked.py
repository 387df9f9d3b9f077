"""convtune.forked: a script run from the preloaded server as `python <script> <args>` would run it, and a handle
that waits for it and stops it as subprocess.Popen's does."""

import os
import signal
import subprocess

import pytest

from convtune import forked

SCRIPT = """import os, sys
print(__name__, sys.argv[1:], os.getcwd(), os.environ.get("FORKED_TEST"), sys.path[0] == os.path.dirname(__file__))
print("to stderr", file=sys.stderr)
if sys.argv[1] == "wait":
    import time
    time.sleep(120)
sys.exit(int(sys.argv[2]))
"""


def test_a_script_runs_as_python_would_run_it_with_its_environment_folder_and_output(tmp_path):
    script = tmp_path / "s" / "script.py"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "FORKED_TEST"}
    out, err = tmp_path / "out", tmp_path / "err"
    proc = forked.start(forked.run_script, (str(script), ["exit", "3"], {**env, "FORKED_TEST": "yes"}, str(tmp_path),
                                            str(out), str(err)), "script.py")
    assert proc.wait(120) == 3 and proc.returncode == 3
    assert out.read_text() == f"__main__ ['exit', '3'] {tmp_path} yes True\n"
    assert err.read_text() == "to stderr\n"
    assert "FORKED_TEST" not in os.environ and os.getcwd() != str(tmp_path)  # this process is left as it was


def test_the_handle_times_out_signals_and_kills_as_popens_does(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    proc = forked.start(forked.run_script, (str(script), ["wait", "0"], dict(os.environ), str(tmp_path), str(out),
                                            str(tmp_path / "err")), "script.py")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.5)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == -signal.SIGTERM
    proc.kill()  # an ended process: nothing to do
    proc = forked.start(forked.run_script, (str(script), ["wait", "0"], dict(os.environ), str(tmp_path), str(out),
                                            str(tmp_path / "err")), "script.py")
    proc.kill()
    assert proc.wait(60) == -signal.SIGKILL
