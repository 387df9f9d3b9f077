"""The pins file (atomic, locked, stable, refuses corruption), lookups, convtune.conv2d and convtune.nn.Conv2d."""

import os
import re
import subprocess
import sys

import pytest
import torch
import yaml
import torch.nn.functional as F

import convtune
from convtune.errors import ConfigError
from convtune import kernels
from convtune.library import dispatch, functional
from convtune.kernels import Meta
from convtune import pins
from convtune.kernels.variants import implicit_gemm as ig
from convtune.kernels.variants import nhwc_igemm as nhwc
from convtune.measure.occupancy import HOPPER, occupancy, warps_to_try

def tf32_conv(x, w, b, stride, padding, ties="away"):
    """What convtune.conv2d computes at torch's default (TF32 on): operands rounded to nearest TF32 with ties broken as
    the kernel breaks them (its TF32_TIES: away for implicit_gemm and fold_igemm, even for the nhwc kernels), exact
    sums."""
    from convtune.kernels.precision import host_rounding

    r = host_rounding(ties)
    return F.conv2d(r(x).double(), r(w).double(), None if b is None else b.double(), stride, padding).float()


KEY = "n2-c3-h19-w17-k20-r5x5-s2x1-p2x1-d1x1-g1-bias-nchw-float32/tf32"


def key(n: int) -> str:
    """A valid problem key (pins_schema.KEY_PATTERN) for a batch of n."""
    return f"n{n}-c3-h8-w8-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32"


def test_write_read_keeps_other_entries_and_stable_order(tmp_path):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA B", "implicit_gemm", key(2), Meta(64, 64, 32, 4, 3), {"run_id": "r2"})
    first = f.read_text()
    before, after = pins.write_pin(f, "NVIDIA A", "implicit_gemm", key(1), Meta(32, 64, 32, 4, 2), {"run_id": "r1"})
    assert before == first and after == f.read_text()
    data = pins.load(f)
    assert data["pins"]["NVIDIA B"]["implicit_gemm"][key(2)]["meta"]["BLOCK_M"] == 64  # untouched
    assert after.index("NVIDIA A") < after.index("NVIDIA B")  # sorted, so a diff shows one change
    # rewriting the same entry with the same content leaves the text identical
    assert pins.write_pin(f, "NVIDIA A", "implicit_gemm", key(1), Meta(32, 64, 32, 4, 2), {"run_id": "r1"})[1] == after


META_TEXT = "{BLOCK_M: 32, BLOCK_N: 32, BLOCK_K: 32, num_warps: 4, num_stages: 2}"
K1 = key(1)


@pytest.mark.parametrize("text,words", [
    ("pins: [1, 2\n", "not valid YAML"),
    ("- a\n- b\n", "top level"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1}: {{meta: {{BLOCK_M: 1}}}}\n",
     r"unknown meta key|meta lacks BLOCK_N, BLOCK_K, num_warps, num_stages"),
    ("pins:\n  NVIDIA G: [a, b]\n", "pins / NVIDIA G must map kernel names"),
    ("pins:\n  NVIDIA G:\n    implicit_gemm: 3\n", "pins / NVIDIA G / implicit_gemm must map problem keys"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1}: {{meta: {{BLOCK_M: abc, BLOCK_N: 32, BLOCK_K: 32, "
     "num_warps: 4, num_stages: 2}}\n", f"entry NVIDIA G / implicit_gemm / {re.escape(K1)}: meta BLOCK_M='abc' is not "
     "an integer"),
    # a misspelt section, GPU, field or key is refused with the closest valid name, never read as "no pins"
    (f"pins:\n  NVIDIA G:\n    implicit_gemmm:\n      {K1}: {{meta: {META_TEXT}}}\n",
     r"'implicit_gemmm' is not a kernel variant or 'torch' \(did you mean 'implicit_gemm'\?\)"),
    (f"pins:\n  interpeter:\n    implicit_gemm:\n      {K1}: {{meta: {META_TEXT}}}\n",
     r"pins / 'interpeter' is not a GPU: .* \(did you mean 'interpreter'\?\)"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1}: {{meta: {META_TEXT}, provenence: {{}}}}\n",
     r"unknown field 'provenence' \(did you mean 'provenance'\?\)"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1}: {{meta: {{BLOCK_M: 32, BLOCK_N: 32, BLOCK_K: 32, "
     "num_warp: 4, num_stages: 2}}\n", r"unknown meta key 'num_warp' \(did you mean 'num_warps'\?\)"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      n2-c3/tf32: {{meta: {META_TEXT}}}\n",
     r"'n2-c3/tf32' is not a problem key"),
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1.replace('tf32', 'tf23')}: {{meta: {META_TEXT}}}\n",
     r"unknown precision 'tf23' \(did you mean 'tf32'\?\)"),
    ("pinz:\n  NVIDIA G: {}\n", r"unknown top-level key 'pinz' \(did you mean 'pins'\?\)"),
    # a bool is not an int: `num_stages: true` was taken as 1, logged as True, and broke every later promote
    (f"pins:\n  NVIDIA G:\n    implicit_gemm:\n      {K1}: {{meta: {{BLOCK_M: 32, BLOCK_N: 32, BLOCK_K: 32, "
     "num_warps: 4, num_stages: true}}\n", r"meta num_stages=True is not an integer"),
])
def test_a_broken_pins_file_is_refused_and_never_overwritten(tmp_path, text, words):
    f = tmp_path / "pins.yaml"
    f.write_text(text)
    with pytest.raises(pins.PinsError, match=words) as e:
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(9), Meta(32, 32, 32, 4, 2), {})
    assert str(f) in str(e.value) and f.read_text() == text
    assert "\n" not in str(e.value)  # one line


def _pin_block(gpu: str, n: int, block_m: int) -> str:
    return (f"  {gpu}:\n    implicit_gemm:\n      {key(n)}:\n        meta:\n          BLOCK_M: {block_m}\n"
            "          BLOCK_N: 32\n          BLOCK_K: 32\n          num_warps: 4\n          num_stages: 2\n")


def test_a_repeated_block_or_key_is_refused_naming_file_line_and_key(tmp_path):
    """PyYAML keeps the last of duplicate keys, so a second `interpreter:` block appended by hand or by a
    merge dropped the first block's pins silently, and the next promote wrote the file without them."""
    f = tmp_path / "pins.yaml"
    f.write_text("pins:\n" + _pin_block("interpreter", 1, 64) + _pin_block("interpreter", 2, 32))
    with pytest.raises(pins.PinsError, match=r"pins file .*pins.yaml: line 11: key 'interpreter' repeated under pins "
                                             r"\(first at line 2\)"):
        pins.load(f)
    text = "pins:\n" + _pin_block("interpreter", 1, 256).replace("          BLOCK_N", "          BLOCK_M: 16\n          BLOCK_N")
    f.write_text(text)
    with pytest.raises(pins.PinsError, match=rf"line 7: key 'BLOCK_M' repeated under pins / interpreter / "
                                             rf"implicit_gemm / {re.escape(key(1))} / meta \(first at line 6\)"):
        pins.write_pin(f, "interpreter", "implicit_gemm", key(3), Meta(32, 32, 32, 4, 2), {})
    assert f.read_text() == text


def test_a_self_referencing_alias_is_refused_in_one_line_by_the_file_the_overlay_and_promote(tmp_path, monkeypatch):
    """`pins: &a {x: *a}` was a RecursionError in the library and in promote."""
    from convtune.pins import overlay

    text = "pins: &a\n  interpreter: *a\n"
    f = tmp_path / "pins.yaml"
    f.write_text(text)
    words = r"pins file .*pins.yaml: line 1: an alias under pins / interpreter refers to a node that contains it"
    with pytest.raises(pins.PinsError, match=words):
        pins.load(f)
    with pytest.raises(pins.PinsError, match=words):
        pins.write_pin(f, "interpreter", "implicit_gemm", key(1), pins.TORCH, {})
    assert f.read_text() == text
    monkeypatch.setenv(overlay.ENV, str(tmp_path / "overlay"))
    mine = overlay.path_for("NVIDIA H100 80GB HBM3")
    mine.parent.mkdir()
    mine.write_text(text)
    assert overlay.read("NVIDIA H100 80GB HBM3") == ({"pins": {}}, mine)  # refused whole, in one warning line


def test_what_cannot_be_read_back_is_never_written(tmp_path):
    """The round trip before the rename: a pin the schema refuses (here a bool for an int) is not written, and the
    file on disk stays as it was."""
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(1), Meta(32, 32, 32, 4, 2), {})
    before = f.read_text()
    with pytest.raises(pins.PinsError, match=r"\(as it would be written\): .*num_stages=True is not an integer; "
                                             r"nothing written"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(2), Meta(32, 32, 32, 4, True), {})
    with pytest.raises(pins.PinsError, match=r"'implicit_gemmm' is not a kernel variant.*nothing written"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemmm", key(2), Meta(32, 32, 32, 4, 2), {})
    assert f.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pins.yaml", "pins.yaml.lock"]


def test_promote_keeps_the_files_mode_and_refuses_a_read_only_file_or_folder(tmp_path):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(1), Meta(32, 32, 32, 4, 2), {})
    assert f.stat().st_mode & 0o777 == 0o644 & ~_umask()  # a new file: not mkstemp's 0600
    f.chmod(0o664)
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(2), Meta(32, 32, 32, 4, 2), {})
    assert f.stat().st_mode & 0o777 == 0o664
    f.chmod(0o444)
    before = f.read_text()
    with pytest.raises(pins.PinsError, match=r"read-only \(mode 444\); promote keeps such a file as it is"):
        pins.check_writable(f)
    with pytest.raises(pins.PinsError, match=r"read-only"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(3), Meta(32, 32, 32, 4, 2), {})
    assert f.read_text() == before and f.stat().st_mode & 0o777 == 0o444
    blocked = tmp_path / "a-file" / "pins.yaml"  # its folder cannot exist: a file stands in its way
    (tmp_path / "a-file").write_text("")
    with pytest.raises(pins.PinsError, match=r"its folder .*a-file takes no new file"):
        pins.check_writable(blocked)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_pins_file_cut_short_is_refused_even_where_what_is_left_is_valid_yaml(tmp_path):
    f = tmp_path / "pins.yaml"
    for n in (1, 2, 3):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(n), Meta(32, 32, 32, 4, 2), {"run_id": str(n)})
    whole = f.read_text()
    assert whole.endswith(pins.END) and len(pins.load(f)["pins"]["NVIDIA G"]["implicit_gemm"]) == 3
    cut = whole[:whole.index(f"      {key(3)}:")]  # entry 3 gone; the rest parses, with two pins
    assert yaml.safe_load(cut)["pins"]["NVIDIA G"]["implicit_gemm"].keys() == {key(1), key(2)}
    for text in (cut, whole[:-1], whole[: -len(pins.END)]):
        f.write_text(text)
        with pytest.raises(pins.PinsError, match=r"written by promote but its last line is not '# end of pins': cut "
                                                 r"short \(a copy or a full disk\?\), so pins may be missing"):
            pins.load(f)
    f.write_text("")
    with pytest.raises(pins.PinsError, match=r"pins file .*pins.yaml: empty \(cut short\? delete it"):
        pins.load(f)


def test_a_pin_replaced_meanwhile_is_not_written_over(tmp_path):
    f = tmp_path / "pins.yaml"
    first, second, mine = Meta(32, 32, 32, 4, 2), Meta(64, 64, 32, 4, 2), Meta(128, 64, 32, 4, 3)
    k = key(1)
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", k, first, {"run_id": "r1"}, expect=None)  # none pinned: as expected
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", k, second, {"run_id": "r2"}, expect=first)
    before = f.read_text()
    with pytest.raises(pins.PinChanged, match=rf"the pin for NVIDIA G / {re.escape(k)} changed while this ran "
                                              r"\(implicit_gemm M32-N32-K32-w4-s2 → implicit_gemm M64-N64-K32-w4-s2 by "
                                              r"run r2\); nothing written"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", k, mine, {"run_id": "r3"}, expect=first)  # decided against `first`
    with pytest.raises(pins.PinChanged, match=r"\(none → implicit_gemm M64-N64-K32-w4-s2 by run r2\)"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", k, mine, {"run_id": "r3"}, expect=None)
    assert f.read_text() == before


def test_an_unreadable_pins_file_is_named_in_one_line(tmp_path):
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"pins:\n  \xff\xfe: 1\n")
    with pytest.raises(pins.PinsError, match=r"pins file .*binary.yaml: not UTF-8 text \(byte 8\)"):
        pins.load(binary)
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    with pytest.raises(pins.PinsError, match=r"pins file .*folder.yaml: cannot be read \(Is a directory\)"):
        pins.load(folder)


def test_a_crash_mid_write_leaves_the_old_file_intact(tmp_path, monkeypatch):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(1), Meta(32, 32, 32, 4, 2), {})
    old = f.read_text()

    def crash(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(pins.PinsError, match=r"not written \(No space left on device\); the file is as it was"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", key(2), Meta(64, 64, 32, 4, 2), {})
    assert f.read_text() == old
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []


def test_two_concurrent_promotes_both_land(tmp_path):
    f = tmp_path / "pins.yaml"
    code = ("import sys; from convtune.pins import write_pin; from convtune.kernels.meta import Meta\n"
            "for i in range(15): write_pin(__import__('pathlib').Path(sys.argv[1]), 'NVIDIA G', 'implicit_gemm', "
            "f'n{sys.argv[2]}{i}-c3-h8-w8-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32', Meta(32, 32, 32, 4, 2), "
            "{'i': i})\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(f), tag]) for tag in ("1", "2")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    got = set(pins.load(f)["pins"]["NVIDIA G"]["implicit_gemm"])
    assert got == {f"n{t}{i}-c3-h8-w8-k4-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/tf32" for t in "12" for i in range(15)}


def test_a_symlinked_pins_file_is_written_through_and_locked_at_its_target(tmp_path):
    """A link to the pins file (a dotfiles repository, a shared folder) was replaced by a regular file: the target
    never got the pin, and the lock was taken beside the link."""
    real, links = tmp_path / "real" / "pins.yaml", tmp_path / "links"
    real.parent.mkdir()
    links.mkdir()
    pins.write_pin(real, "NVIDIA G", "implicit_gemm", key(1), Meta(32, 32, 32, 4, 2), {})
    link = links / "pins.yaml"
    link.symlink_to(real)
    pins.write_pin(link, "NVIDIA G", "implicit_gemm", key(2), Meta(64, 64, 32, 4, 2), {})
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert set(pins.load(real)["pins"]["NVIDIA G"]["implicit_gemm"]) == {key(1), key(2)}
    assert sorted(p.name for p in links.iterdir()) == ["pins.yaml"]  # no lock, no temporary file beside the link
    assert (real.parent / "pins.yaml.lock").exists()
    dangling = links / "new.yaml"  # a link whose target does not exist yet: the target is created
    dangling.symlink_to(real.parent / "new.yaml")
    pins.write_pin(dangling, "NVIDIA G", "implicit_gemm", key(3), pins.TORCH, {})
    assert dangling.is_symlink() and key(3) in pins.load(real.parent / "new.yaml")["pins"]["NVIDIA G"][pins.TORCH]


def test_a_convtune_pins_that_names_no_file_is_refused_alike_on_every_call(tmp_path, monkeypatch):
    """A missing file once meant "no pins" silently, while /dev/null or a folder made every call raise."""
    from convtune.library import dispatch

    monkeypatch.setenv(dispatch.UNPINNED_ENV, "torch")
    dispatch.forget()
    x, w = torch.rand(1, 3, 8, 8), torch.rand(4, 3, 3, 3)
    for value, why in ((tmp_path / "missing.yaml", "no such file"), (tmp_path, "a folder"),
                       (os.devnull, "not a regular file")):
        monkeypatch.setenv(pins.ENV_VAR, str(value))
        for attempt in (pins.default_path, lambda: convtune.conv2d(x, w)):
            with pytest.raises(pins.PinsError) as e:
                attempt()
            assert str(e.value) == (f"CONVTUNE_PINS={str(value)!r} names no pins file ({why}): point it at a pins "
                                    f"file, or unset it for the packaged pins ({pins.PACKAGE_PINS})")
        dispatch.forget()
    f = tmp_path / "made.yaml"
    pins.create_empty(f)  # what tune_model.py makes before it points the library at a new pins_file
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    assert pins.load(pins.default_path()) == {"pins": {}}
    assert dispatch.decide(kernels_problem(), "interpreter", None, "tf32", False, "cpu").value == pins.TORCH
    dispatch.forget()


def kernels_problem():
    from convtune.problem import ConvProblem

    return ConvProblem("p", 1, 3, 8, 8, 4, 3, 3, (1, 1), (0, 0), (1, 1), 1, False)


def test_the_sections_a_pins_file_may_have_are_the_registrys_variants():
    sections, named = pins.kernel_names()
    assert set(sections) == set(kernels.VARIANTS) and set(named) == set(kernels.LIBRARY_KERNELS) == set(sections) - {"seed"}


def test_lookup_exact_then_nearest_same_geometry_then_default():
    data = {"pins": {"NVIDIA G": {"implicit_gemm": {
        "n64-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/tf32": {"meta": Meta(64, 128, 16, 4, 3).as_dict()},
        "n256-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/tf32": {"meta": Meta(256, 128, 16, 8, 4).as_dict()},
    }}}}
    default = lambda: Meta(16, 16, 16, 4, 1)  # noqa: E731
    exact, src = pins.lookup(data, "NVIDIA G", "implicit_gemm", "n256-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/tf32", default)
    assert exact == Meta(256, 128, 16, 8, 4) and src.startswith("pin")
    near, src = pins.lookup(data, "NVIDIA G", "implicit_gemm", "n200-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/tf32", default)
    assert near == Meta(256, 128, 16, 8, 4) and src.startswith("nearest pin")  # 200 is nearer 256 than 64
    other, src = pins.lookup(data, "NVIDIA G", "implicit_gemm", "n256-c3-h224-w224-k96-r11x11-s4x4-p2x2-d1x1-g1-bias-nchw-float32/ieee", default)
    assert other == Meta(16, 16, 16, 4, 1) and "default" in src  # another precision is another geometry
    assert pins.lookup(data, "NVIDIA H", "implicit_gemm", "x/tf32", default)[0] == Meta(16, 16, 16, 4, 1)


def test_conv2d_runs_a_kernel_only_where_this_gpu_has_an_exact_pin_and_torch_elsewhere(tmp_path, monkeypatch, caplog):
    """The library runs a kernel only where a measurement on this GPU pinned it; another batch of a pinned
    shape, another geometry, or another GPU's pin is no such measurement, and torch runs there."""
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY, Meta(16, 32, 16, 2, 2), {})
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY.replace("n2-", "n1-"), Meta(16, 32, 16, 2, 2), {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.delenv(dispatch.UNPINNED_ENV, raising=False)
    dispatch.forget()
    x, w, b = torch.rand(2, 3, 19, 17), torch.rand(20, 3, 5, 5) - 0.5, torch.rand(20)
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        y = convtune.conv2d(x, w, b, stride=(2, 1), padding=(2, 1))
    assert "M16-N32-K16-w2-s2 from pin interpreter" in caplog.text
    torch.testing.assert_close(y, tf32_conv(x, w, b, (2, 1), (2, 1)), rtol=1e-4, atol=1e-4)
    caplog.clear()
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        one = convtune.conv2d(x[:1], w, b, stride=(2, 1), padding=(2, 1))  # batch 1: pinned on NVIDIA G only
        nobias = convtune.conv2d(x, w, None, stride=(2, 1), padding=(2, 1))  # another geometry: no pin anywhere
    assert caplog.text.count("torch from no pin for") == 2, caplog.text
    assert ("on interpreter: the library runs a kernel only where a measurement on this GPU (or its family) pinned it"
            in caplog.text)
    torch.testing.assert_close(one, F.conv2d(x[:1], w, b, (2, 1), (2, 1)), rtol=0, atol=0)
    torch.testing.assert_close(nobias, F.conv2d(x, w, None, (2, 1), (2, 1)), rtol=0, atol=0)
    dispatch.forget()


def test_convtune_unpinned_kernel_runs_the_rules_kernel_at_the_nearest_pin_or_its_default(tmp_path, monkeypatch,
                                                                                          caplog):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY, Meta(16, 32, 16, 2, 2), {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")
    dispatch.forget()
    x, w, b = torch.rand(2, 3, 19, 17), torch.rand(20, 3, 5, 5) - 0.5, torch.rand(20)
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        convtune.conv2d(x[:1], w, b, stride=(2, 1), padding=(2, 1))  # batch 1: nearest pinned shape
        convtune.conv2d(x, w, None, stride=(2, 1), padding=(2, 1))  # no bias: another geometry → default
    assert "from nearest pin interpreter" in caplog.text and "implicit_gemm default" in caplog.text
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "fastest")
    dispatch.forget()
    with pytest.raises(ConfigError, match=r"CONVTUNE_UNPINNED='fastest' is not allowed: one of \['torch', 'kernel'\]"):
        convtune.conv2d(x, w, None, stride=(2, 1), padding=(2, 1))
    dispatch.forget()


def test_a_torch_pin_is_filed_under_torch_read_written_and_replaced_like_any_pin(tmp_path):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, pins.TORCH, {"run_id": None})
    assert pins.load(f)["pins"]["NVIDIA G"] == {pins.TORCH: {KEY: {"provenance": {"run_id": None}}}}
    default = lambda: Meta(16, 16, 16, 4, 1)  # noqa: E731
    assert pins.lookup(pins.load(f), "NVIDIA G", "implicit_gemm", KEY, default) == (pins.TORCH, f"pin NVIDIA G / torch / {KEY}")
    # another batch of the same geometry: the kernel's own nearest configuration, else its default (never torch's)
    value, src = pins.lookup(pins.load(f), "NVIDIA G", "implicit_gemm", KEY.replace("n2-", "n8-"), default)
    assert value == Meta(16, 16, 16, 4, 1) and src == "implicit_gemm default (no pin for NVIDIA G)"
    # replacing it is a compare-and-swap like any pin: expecting a configuration where torch is pinned fails
    with pytest.raises(pins.PinChanged, match=r"implicit_gemm M16-N16-K16-w4-s1 → torch"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, Meta(32, 32, 32, 4, 2), {}, expect=Meta(16, 16, 16, 4, 1))
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, Meta(32, 32, 32, 4, 2), {}, expect=pins.TORCH)
    assert pins.load(f)["pins"]["NVIDIA G"] == {"implicit_gemm": {KEY: {"meta": Meta(32, 32, 32, 4, 2).as_dict(),
                                                                       "provenance": {}}}}  # moved, not copied


def test_a_run_for_a_key_pinned_to_torch_measures_the_kernels_default(tmp_path):
    from convtune.kernels import get_variant
    from convtune.library import dispatch
    from convtune.problem import ConvProblem
    from convtune.resolve import measured_config

    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, pins.TORCH, {})
    p, v = ConvProblem("tiny", 2, 3, 19, 17, 20, 5, 5, (2, 1), (2, 1)), get_variant("implicit_gemm")
    assert dispatch.decide(p, "NVIDIA G", None, "tf32", files=[f], first_use_on=False).value == pins.TORCH
    meta, source, runs = measured_config(v, False, [f], "NVIDIA G", None, p, "tf32")  # what a sweep's run measures
    assert meta == v.default_meta(20, 1, 17, "tf32") and source == f"implicit_gemm default (pin NVIDIA G / torch / {KEY} runs torch)"


@pytest.mark.parametrize("entry", [{"backend": "cudnn"}, {"backend": "torch", "meta": Meta(32, 32, 32, 4, 2).as_dict()}])
def test_a_pin_naming_another_backend_or_both_is_refused(tmp_path, entry):
    f = tmp_path / "pins.yaml"
    f.write_text(yaml.safe_dump({"pins": {"NVIDIA G": {"implicit_gemm": {KEY: entry}}}}))
    with pytest.raises(pins.PinsError, match=r"'backend' may only be 'torch'.*and then without 'meta'"):
        pins.load(f)


def test_a_pin_is_filed_under_the_kernel_it_names_and_an_older_files_entries_are_read_as_theirs(tmp_path):
    """A promote of kernel=library may find another kernel faster for a key: its pin is filed under that kernel's own
    section. A file written before (an entry under the default variant's section naming its kernel, or saying
    `backend: torch`) is read as that kernel's or torch's, and its next write files every entry under its own."""
    f, m = tmp_path / "pins.yaml", Meta(64, 64, 32, 4, 3)
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, pins.KernelPin("nhwc_igemm", m), {"run_id": "r1"})
    assert pins.load(f)["pins"]["NVIDIA G"] == {"nhwc_igemm": {KEY: {"meta": m.as_dict(), "provenance": {"run_id": "r1"}}}}
    default = lambda: Meta(16, 16, 16, 4, 1)  # noqa: E731
    assert pins.lookup(pins.load(f), "NVIDIA G", "implicit_gemm", KEY, default) == (
        pins.KernelPin("nhwc_igemm", m), f"pin NVIDIA G / nhwc_igemm / {KEY}")  # what implicit_gemm's run is told
    assert pins.lookup(pins.load(f), "NVIDIA G", "nhwc_igemm", KEY.replace("n2-", "n8-"), default) == (
        m, f"nearest pin NVIDIA G / nhwc_igemm / {KEY}")  # nhwc_igemm's own configuration of a nearby shape
    assert pins.describe(pins.pinned_value(pins.load(f), "NVIDIA G", KEY)) == "nhwc_igemm M64-N64-K32-w4-s3"
    with pytest.raises(pins.PinChanged, match=r"implicit_gemm M64-N64-K32-w4-s3 → nhwc_igemm M64-N64-K32-w4-s3"):
        pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, pins.TORCH, {}, expect=m)  # the same meta, another kernel
    pins.write_pin(f, "NVIDIA G", "implicit_gemm", KEY, m, {}, expect=pins.KernelPin("nhwc_igemm", m))
    assert pins.load(f)["pins"]["NVIDIA G"] == {"implicit_gemm": {KEY: {"meta": m.as_dict(), "provenance": {}}}}
    older = tmp_path / "older.yaml"  # as a promote wrote it before pins were filed under the kernel they name
    older.write_text(yaml.safe_dump({"pins": {"NVIDIA G": {"implicit_gemm": {
        KEY: {"kernel": "nhwc_igemm", "meta": m.as_dict()}, key(1): {"backend": "torch"},
        key(2): {"meta": Meta(32, 32, 32, 4, 2).as_dict()}}}}}))
    data = pins.load(older)
    assert (pins.pinned_value(data, "NVIDIA G", KEY), pins.pinned_value(data, "NVIDIA G", key(1)),
            pins.pinned_value(data, "NVIDIA G", key(2))) == (pins.KernelPin("nhwc_igemm", m), pins.TORCH,
                                                              pins.KernelPin("implicit_gemm", Meta(32, 32, 32, 4, 2)))
    pins.write_pin(older, "NVIDIA G", "implicit_gemm", key(3), pins.TORCH, {})
    assert {s: sorted(k) for s, k in yaml.safe_load(older.read_text())["pins"]["NVIDIA G"].items()} == {
        "nhwc_igemm": [KEY], pins.TORCH: sorted([key(1), key(3)]), "implicit_gemm": [key(2)]}


@pytest.mark.parametrize("entry,words", [
    ({"kernel": "cudnn", "meta": Meta(32, 32, 32, 4, 2).as_dict()},
     r"'kernel' names another of the library's kernels than the section's \('implicit_gemm'\); got 'cudnn'"),
    ({"kernel": "implicit_gemm", "meta": Meta(32, 32, 32, 4, 2).as_dict()},  # its own section
     r"'kernel' names another of the library's kernels than the section's \('implicit_gemm'\); got 'implicit_gemm'"),
    ({"kernel": "nhwc_igemm", "backend": "torch"},
     r"'backend' may only be 'torch' \(torch's convolution runs\), and then without 'meta' or 'kernel'"),
])
def test_a_pin_naming_an_unknown_kernel_its_own_or_a_backend_too_is_refused(tmp_path, entry, words):
    f = tmp_path / "pins.yaml"
    f.write_text(yaml.safe_dump({"pins": {"NVIDIA G": {"implicit_gemm": {KEY: entry}}}}))
    with pytest.raises(pins.PinsError, match=r"entry NVIDIA G / implicit_gemm / .*: " + words):
        pins.load(f)


NCHW16_KEY = "n2-c16-h9-w7-k20-r3x3-s1x1-p1x1-d1x1-g1-bias-nchw-float32/ieee"


def test_a_pin_naming_the_other_kernel_routes_the_call_there_in_either_layout(tmp_path, monkeypatch, caplog):
    """An NCHW call whose pin names nhwc_igemm runs it on a channels_last copy, writing the NCHW output itself; a
    channels_last call whose pin names implicit_gemm runs that on an NCHW copy. Values and gradients are torch's,
    each output in its call's layout; the cached plan shows which kernel ran."""
    x_cl, w, b = _cl_call()
    x = x_cl.contiguous()
    m = Meta(16, 32, 16, 2, 2)
    f = tmp_path / "pins.yaml"
    for train in ("", pins.TRAIN):  # the calls below record gradients: their "+train" pins decide them
        pins.write_pin(f, "interpreter", "implicit_gemm", NCHW16_KEY + train, pins.KernelPin("nhwc_igemm", m), {})
        pins.write_pin(f, "interpreter", "nhwc_igemm", CL_KEY + train, pins.KernelPin("implicit_gemm", m), {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    for inp, kernel, plan_type, layout in ((x, "nhwc_igemm", nhwc.LaunchPlan, torch.contiguous_format),
                                           (x_cl, "implicit_gemm", ig.LaunchPlan, torch.channels_last)):
        dispatch.forget()
        caplog.clear()
        xr, wr = inp.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        wg = w.clone().requires_grad_()
        with caplog.at_level("DEBUG", logger="convtune.library.functional"):
            y = convtune.conv2d(inp, wg, b, padding=1, precision="ieee")
        assert f"{kernel} M16-N32-K16-w2-s2 from pin interpreter / " in caplog.text, caplog.text
        assert [type(p) for p in functional.cached_plans()] == [plan_type]
        assert y.is_contiguous(memory_format=layout)
        ref = F.conv2d(xr, wr, b.double(), 1, 1)
        torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
        y.square().sum().backward()
        ref.square().sum().backward()
        torch.testing.assert_close(wg.grad.double(), wr.grad, rtol=1e-4, atol=1e-4)
    dispatch.forget()


def test_a_pin_naming_nhwc_preround_runs_it_on_a_rounded_copy_in_either_layout(tmp_path, monkeypatch):
    """nhwc_preround (tf32): the input is rounded to nearest TF32 before the kernel (in the copy an NCHW call makes
    anyway, by a pass of its own for a channels_last call), the kernel does not round its tiles, and the output has
    nhwc_igemm's bits. The caller's input is left as it was."""
    x_cl, w, b = _cl_call()
    x = x_cl.contiguous()
    m = Meta(16, 32, 16, 2, 2)
    nchw_key, cl_key = NCHW16_KEY.replace("/ieee", "/tf32"), CL_KEY.replace("/ieee", "/tf32")
    f = tmp_path / "pins.yaml"
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    for inp, section, key, layout in ((x, "implicit_gemm", nchw_key, torch.contiguous_format),
                                      (x_cl, "nhwc_igemm", cl_key, torch.channels_last)):
        before = inp.clone()
        outs = {}
        for kernel in ("nhwc_igemm", "nhwc_preround"):
            value = m if kernel == section else pins.KernelPin(kernel, m)
            pins.write_pin(f, "interpreter", section, key, value, {})
            dispatch.forget()
            outs[kernel] = convtune.conv2d(inp, w, b, padding=1, precision="tf32")
            [plan] = functional.cached_plans()
            assert isinstance(plan, nhwc.LaunchPlan) and plan.input_rounded is (kernel == "nhwc_preround")
            assert plan.constexprs["ROUND_A"] is (kernel == "nhwc_igemm")  # who rounds: the kernel, or the copy
        assert torch.equal(outs["nhwc_preround"], outs["nhwc_igemm"]) and outs["nhwc_preround"].is_contiguous(
            memory_format=layout)
        torch.testing.assert_close(outs["nhwc_preround"], tf32_conv(inp, w, b, 1, 1, nhwc.TF32_TIES), rtol=1e-5,
                                   atol=1e-5)
        assert torch.equal(inp, before) and inp.stride() == before.stride()
    dispatch.forget()


def test_kernel_library_runs_measure_the_kernel_the_pin_names(tmp_path):
    """The tracker's kernel=library measures what the library runs: the pinned kernel with its configuration
    (recorded as that kernel's run); a torch pin leaves the rule's kernel at its default."""
    from convtune.resolve import resolve
    from tests.conftest import compose

    f = tmp_path / "pins.yaml"
    m = Meta(16, 32, 16, 2, 2)
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY, pins.KernelPin("nhwc_igemm", m), {})
    s = resolve(compose("problem=tiny", "kernel=library", f"pins_file={f}"))
    s.raise_error()
    assert (s.variant.name, s.pin_variant.name, s.meta) == ("nhwc_igemm", "implicit_gemm", m)
    assert s.meta_source == f"pin interpreter / nhwc_igemm / {KEY}" and s.kernel_name == "nhwc_igemm"
    s = resolve(compose("problem=tiny", "kernel=implicit_gemm", f"pins_file={f}"))  # the kernel named: its default
    assert s.variant.name == "implicit_gemm" and s.meta == s.variant.default_meta(20, 1, 17, "tf32")
    assert s.meta_source == f"implicit_gemm default (pin interpreter / nhwc_igemm / {KEY} runs nhwc_igemm M16-N32-K16-w2-s2)"
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY, pins.TORCH, {})
    s = resolve(compose("problem=tiny", "kernel=library", f"pins_file={f}"))
    assert s.variant.name == "implicit_gemm" and s.meta_source.endswith("runs torch)")


def test_where_the_pin_says_torch_the_library_runs_torch(tmp_path, monkeypatch, caplog):
    """ieee, so torch's CPU convolution is what torch itself computes: the output is bitwise F.conv2d's with the
    torch pin, and our kernel's (equal within 1e-5, not bitwise) without it."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # what an unpinned call runs is not the subject here
    f = tmp_path / "pins.yaml"
    ieee_key = KEY.replace("/tf32", "/ieee")
    pins.write_pin(f, "interpreter", "implicit_gemm", ieee_key, pins.TORCH, {})
    x, w, b = torch.rand(2, 3, 19, 17), torch.rand(20, 3, 5, 5) - 0.5, torch.rand(20)
    expected = F.conv2d(x, w, b, (2, 1), (2, 1))
    dispatch.forget()
    ours = convtune.conv2d(x, w, b, stride=(2, 1), padding=(2, 1), precision="ieee")
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    assert not torch.equal(ours, expected)  # so the bitwise equality below tells the two paths apart
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    dispatch.forget()
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        assert torch.equal(convtune.conv2d(x, w, b, stride=(2, 1), padding=(2, 1), precision="ieee"), expected)
    assert f"torch from pin interpreter / torch / {ieee_key}" in caplog.text
    # gradients are torch's own (no convtune operator in the graph)
    xg = x.clone().requires_grad_()
    y = convtune.conv2d(xg, w, b, stride=(2, 1), padding=(2, 1), precision="ieee")
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    dispatch.forget()


def test_under_torch_compile_the_pin_is_read_when_the_call_runs(tmp_path, monkeypatch):
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "interpreter", "implicit_gemm", KEY.replace("/tf32", "/ieee"), pins.TORCH, {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    dispatch.forget()
    x, w, b = torch.rand(2, 3, 19, 17), torch.rand(20, 3, 5, 5) - 0.5, torch.rand(20)
    compiled = torch.compile(lambda x: convtune.conv2d(x, w, b, stride=(2, 1), padding=(2, 1), precision="ieee"),
                             fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), F.conv2d(x, w, b, (2, 1), (2, 1)))
    dispatch.forget()


def test_an_in_place_weight_update_is_seen_by_the_next_call(monkeypatch):
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # what an unpinned call runs is not the subject here
    dispatch.forget()
    x, w = torch.rand(1, 3, 12, 16), torch.rand(8, 3, 3, 5)  # stride 2 on an even width: a packed weight
    first = convtune.conv2d(x, w, None, stride=2, padding=1)
    torch.testing.assert_close(first, tf32_conv(x, w, None, 2, 1), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        w.mul_(-2.0)  # bumps w._version: the cached packed copy must not be reused
    torch.testing.assert_close(convtune.conv2d(x, w, None, stride=2, padding=1), -2 * first, rtol=1e-4, atol=1e-4)
    dispatch.forget()


def test_nn_conv2d_is_a_drop_in(monkeypatch):
    """Same constructor and state_dict as torch.nn.Conv2d, and torch's values from convtune's kernel (run here
    through CONVTUNE_UNPINNED=kernel: unpinned, the layer would run torch's own convolution)."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # fp32 as torch's reference computes it here
    dispatch.forget()
    ref = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    ours = convtune.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    ours.load_state_dict(ref.state_dict())
    assert ours.state_dict().keys() == ref.state_dict().keys()
    x = torch.rand(2, 3, 9, 9)
    with torch.no_grad():
        got = ours(x)
    assert len(functional.cached_plans()) == 1  # the kernel ran
    torch.testing.assert_close(got, ref(x), rtol=1e-5, atol=1e-5)
    dispatch.forget()


def test_occupancy_arithmetic_on_known_figures():
    # L1 #50's M128-N128-K16-w4-s3 on an H200: 237 registers, 49152 B shared memory (probe, 2026-11-22)
    occ = occupancy(237, 49152, 4, HOPPER)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (2, 8, "registers")
    assert warps_to_try(4, occ) == [8]
    # 64 regs × 32 lanes × 4 warps = 8192 per block → 8 blocks = 32 warps (50 %): halve num_warps
    small = occupancy(64, 16384, 4, HOPPER)
    assert (small.blocks_per_sm, small.warps_per_sm, small.limiter) == (8, 32, "registers") and warps_to_try(4, small) == [2]
    # 65536 + 1024 B per block → 233472 // 66560 = 3 blocks: shared memory limits, num_warps is left alone
    smem = occupancy(32, 65536, 4, HOPPER)
    assert (smem.blocks_per_sm, smem.limiter) == (3, "shared_memory") and warps_to_try(4, smem) == []
    assert occupancy(16, 0, 32, HOPPER).limiter == "warps"  # 4 blocks fit by registers, 2 by warps


def test_a_train_pin_is_found_only_for_training_keys_and_nearest_among_train_pins():
    train = pins.pin_key(KEY.rpartition("/")[0], "tf32", training=True)
    assert train == KEY + "+train"
    other_train = train.replace("n2-", "n4-")
    data = {"pins": {"NVIDIA G": {"implicit_gemm": {KEY: {"meta": Meta(32, 32, 32, 4, 2).as_dict()},
                                                    other_train: {"meta": Meta(64, 32, 32, 4, 2).as_dict()}},
                                  pins.TORCH: {train: {}}}}}
    default = lambda: Meta(16, 16, 16, 4, 1)  # noqa: E731
    assert pins.lookup(data, "NVIDIA G", "implicit_gemm", KEY, default)[0] == Meta(32, 32, 32, 4, 2)  # forward: its own pin
    assert pins.find(data, "NVIDIA G", "implicit_gemm", train) == (pins.TORCH, f"pin NVIDIA G / torch / {train}")
    value, source = pins.find(data, "NVIDIA G", "implicit_gemm", train.replace("n2-", "n8-"))
    assert value == Meta(64, 32, 32, 4, 2) and source == f"nearest pin NVIDIA G / implicit_gemm / {other_train}"
    del data["pins"]["NVIDIA G"][pins.TORCH], data["pins"]["NVIDIA G"]["implicit_gemm"][other_train]
    assert pins.find(data, "NVIDIA G", "implicit_gemm", train) is None  # a forward pin never answers a training key


def test_where_a_train_pin_says_torch_calls_recording_gradients_run_torch_and_others_the_kernel(tmp_path, monkeypatch):
    """ieee, so torch's CPU convolution is bitwise F.conv2d's and the kernel's output is not (as above)."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # what an unpinned call runs is not the subject here
    f = tmp_path / "pins.yaml"
    ieee_key = KEY.replace("/tf32", "/ieee")
    pins.write_pin(f, "interpreter", "implicit_gemm", ieee_key + pins.TRAIN, pins.TORCH, {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    dispatch.forget()
    x, w, b = torch.rand(2, 3, 19, 17), torch.rand(20, 3, 5, 5) - 0.5, torch.rand(20)
    expected = F.conv2d(x, w, b, (2, 1), (2, 1))

    def call(weight):
        return convtune.conv2d(x, weight, b, stride=(2, 1), padding=(2, 1), precision="ieee")

    plain = call(w)  # records no gradients: the forward pin (none: the kernel's default)
    assert not torch.equal(plain, expected) and plain.grad_fn is None
    trained = w.clone().requires_grad_()
    y = call(trained)  # records gradients: the train pin says torch
    assert torch.equal(y, expected) and type(y.grad_fn).__name__ == "ConvolutionBackward0"
    with torch.no_grad():
        assert not torch.equal(call(trained), expected)  # the same weight, no gradients: the kernel again
    pins.write_pin(f, "interpreter", "implicit_gemm", ieee_key + pins.TRAIN, Meta(16, 32, 16, 2, 2), {},
                   expect=pins.TORCH)
    dispatch.forget()
    y = call(trained)  # a train pin that names a configuration: the kernel, with gradients through ours
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    assert not torch.equal(y, expected) and type(y.grad_fn).__name__ != "ConvolutionBackward0"
    dispatch.forget()


CL_KEY = "n2-c16-h9-w7-k20-r3x3-s1x1-p1x1-d1x1-g1-bias-channels_last-float32/ieee"


def _cl_call():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(2, 16, 9, 7, generator=g).to(memory_format=torch.channels_last)
    return x, torch.rand(20, 16, 3, 3, generator=g) - 0.5, torch.rand(20, generator=g)


def test_a_channels_last_call_runs_nhwc_igemm_under_its_own_pins_and_an_nchw_call_implicit_gemm(tmp_path, monkeypatch,
                                                                                                 caplog):
    """The pins of each layout are their own: a torch pin for the channels_last key sends the channels_last call
    to torch (bitwise F.conv2d at ieee) and leaves the NCHW call of the same shape on implicit_gemm; a meta pin
    under nhwc_igemm configures the channels_last call."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # what an unpinned call runs is not the subject here
    x, w, b = _cl_call()
    expected = F.conv2d(x, w, b, 1, 1)
    f = tmp_path / "pins.yaml"
    pins.write_pin(f, "interpreter", "nhwc_igemm", CL_KEY, pins.TORCH, {})
    monkeypatch.setenv(pins.ENV_VAR, str(f))
    dispatch.forget()
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        assert torch.equal(convtune.conv2d(x, w, b, padding=1, precision="ieee"), expected)
        nchw = convtune.conv2d(x.contiguous(), w, b, padding=1, precision="ieee")
    assert f"torch from pin interpreter / torch / {CL_KEY}" in caplog.text
    assert "implicit_gemm default" in caplog.text and nchw.is_contiguous() and not torch.equal(nchw, expected)
    pins.write_pin(f, "interpreter", "nhwc_igemm", CL_KEY, Meta(16, 32, 16, 2, 2), {})
    dispatch.forget()
    caplog.clear()
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        y = convtune.conv2d(x, w, b, padding=1, precision="ieee")
    assert f"M16-N32-K16-w2-s2 from pin interpreter / nhwc_igemm / {CL_KEY}" in caplog.text
    assert y.is_contiguous(memory_format=torch.channels_last) and not torch.equal(y, expected)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    dispatch.forget()


@pytest.mark.parametrize("channels,kernel", [(16, "nhwc_igemm"), (12, "implicit_gemm"), (18, "implicit_gemm")])
def test_a_channels_last_call_runs_nhwc_igemm_only_with_enough_channels(channels, kernel, caplog, monkeypatch):
    """library_variant: 16 or more input channels, a multiple of 4 (nhwc_igemm's 16-byte loads and TMA); else
    implicit_gemm on an NCHW copy, which writes the channels_last output itself. Values, layout and gradients
    are torch's either way."""
    monkeypatch.setenv(dispatch.UNPINNED_ENV, "kernel")  # what an unpinned call runs is not the subject here
    assert kernels.library_variant("channels_last", channels) == kernel
    assert kernels.library_variant("nchw", channels) == "implicit_gemm"
    g = torch.Generator().manual_seed(channels)
    x = torch.rand(2, channels, 6, 5, generator=g).to(memory_format=torch.channels_last).requires_grad_()
    w = (torch.rand(7, channels, 3, 2, generator=g) - 0.5).requires_grad_()
    xr, wr = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    dispatch.forget()
    with caplog.at_level("DEBUG", logger="convtune.library.functional"):
        y = convtune.conv2d(x, w, None, stride=(1, 2), padding=(1, 0), precision="ieee")
    assert f"from {kernel} default" in caplog.text, caplog.text
    assert y.is_contiguous(memory_format=torch.channels_last)
    ref = F.conv2d(xr, wr, None, (1, 2), (1, 0))
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    ref.square().sum().backward()
    torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w.grad.double(), wr.grad, rtol=1e-4, atol=1e-4)
    dispatch.forget()
