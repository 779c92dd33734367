"""A model that does not fit says so, with the smallest TP degree that would make it fit."""

from models.gpus import get_gpu
from models.spec import load_spec
from sim.__main__ import main
from sim.memory.capacity import capacity_table, memory_budget, smallest_fitting_tp


def test_70b_on_one_h100_does_not_fit_and_tp2_is_suggested():
    spec, gpu = load_spec("llama-3-70b"), get_gpu("h100-sxm")
    table = capacity_table(spec, gpu, [8192])
    assert table["fits"] is False and table["rows"][0]["max_concurrent"] == 0
    # 70.6e9 params x 2 bytes = 131 GiB > 0.9 x 79.6 GiB on one GPU; halved by TP 2 it leaves KV room.
    assert not memory_budget(spec, gpu, tp=1).fits and memory_budget(spec, gpu, tp=2).fits
    assert smallest_fitting_tp(spec, gpu) == 2
    assert "try --tp 2" in table["hint"]


def test_fitting_model_has_no_hint_and_hopeless_case_says_so():
    assert capacity_table(load_spec("qwen2.5-7b"), get_gpu("h100-sxm"), [2048])["fits"] is True
    assert "hint" not in capacity_table(load_spec("qwen2.5-7b"), get_gpu("h100-sxm"), [2048])
    # 72B in fp32 weights (288 GB) does not fit on 8 L4s (8 x 22.5 GiB x 0.9 = 162 GiB).
    table = capacity_table(load_spec("qwen2.5-72b"), get_gpu("l4"), [2048], weight_dtype="fp32")
    assert table["fits"] is False and "no TP degree up to 8" in table["hint"]


def test_cli_prints_the_hint(capsys):
    assert main(["capacity", "--model", "llama-3-70b", "--gpu", "h100-sxm", "--contexts", "8192"]) == 0
    assert "does not fit" in capsys.readouterr().out
