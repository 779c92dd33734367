"""kvsim's parameter count against transformers' own models, over many architectures at once.

Two sweeps: every causal-LM model_type this transformers knows, at its default config (`--defaults`),
and every config.json aiconfigurator-core caches (`--cached`, real checkpoints' configs). Each config
is read by models/spec.py and built by transformers on the meta device (no memory), and the counts
are compared: OK (equal), DIFF (kvsim's minus transformers'), REFUSED (kvsim's one-line refusal), or
hf-fail (transformers cannot build it). A multimodal wrapper's decoder is not compared (kvsim counts
the tower apart). This is how models/llama_variants.py, ernie_moe.py and the indexer weights were
found; a DIFF is a model kvsim reads wrong without saying so.

Run: .venv/bin/python bench/param_sweep.py --defaults [model_type ...] | --cached [name substring ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.spec import SpecError, spec_from_config  # noqa: E402


def _hf_count(transformers, torch, config) -> int:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def _compare(name: str, cfg: dict, make_config) -> str:
    try:
        spec = spec_from_config(cfg)
    except SpecError as exc:
        return f"{name:50s} REFUSED {str(exc)[:100]}"
    if "text_config" in cfg and "num_hidden_layers" not in cfg:
        return f"{name:50s} multimodal, not compared (kvsim {spec.num_params:,})"
    try:
        real = make_config()
    except Exception as exc:  # transformers cannot build every config it can name
        return f"{name:50s} hf-fail {type(exc).__name__}: {str(exc)[:60]}"
    diff = spec.num_params - real
    verdict = "OK  " if diff == 0 else "DIFF"
    return f"{name:50s} {verdict} kvsim={spec.num_params:,} hf={real:,} d={diff:+,} ({100 * diff / max(real, 1):+.3f}%)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--defaults", action="store_true", help="transformers' default config of each model_type")
    mode.add_argument("--cached", action="store_true", help="aiconfigurator-core's cached checkpoint configs")
    ap.add_argument("only", nargs="*", help="model_types (--defaults) or name substrings (--cached)")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if args.defaults:
        for model_type in args.only or sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
            try:
                config = transformers.AutoConfig.for_model(model_type)
            except Exception:  # a model_type this transformers cannot configure is skipped
                continue
            cfg = {**{k: v for k, v in config.to_dict().items() if not k.startswith("_")}, "model_type": model_type}
            print(_compare(model_type, cfg, lambda c=config: _hf_count(transformers, torch, c)), flush=True)
        return 0
    import aiconfigurator_core

    folder = Path(aiconfigurator_core.__file__).parent / "model_configs"
    for path in sorted(folder.glob("*_config.json")):
        name = path.name.removesuffix("_config.json")
        if name.endswith("_hf_quant"):  # a quantisation config beside a checkpoint's config
            continue
        if args.only and not any(o in name for o in args.only):
            continue
        cfg = json.loads(path.read_text())
        hf = {k: v for k, v in cfg.items() if k != "quantization_config"}
        print(_compare(name, cfg, lambda h=hf: _hf_count(transformers, torch, transformers.AutoConfig.for_model(**h))),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
