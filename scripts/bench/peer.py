"""The peer path for `scripts/bench/peer.sh`: what a user would do without kiln.

Runs inside the bench venv (CPU PyTorch, transformers, gguf, accelerate,
iree-turbine, pinned IREE 3.13.0). Subcommands, each one process so that
`/usr/bin/time -v` measures it alone:

  hf GGUF DIR            transformers loads the GGUF (dequantizing it) and the
                         state dict is copied into a plain f32 LlamaForCausalLM
                         saved to DIR (config.json + model.safetensors): the
                         peer's input, the same weights kiln reads.
  export DIR SEQ OUT     iree-turbine: `aot.externalize_module_parameters` +
                         `aot.export` of ids[1,SEQ] i32 -> argmax ids[SEQ] i32,
                         written as OUT (torch-dialect MLIR, weights external).
  params DIR OUT         iree-turbine's `aot.save_module_parameters`: the .irpa
                         the exported module reads (scope "model").
  eager DIR SEQ RUNS     PyTorch eager f32 forward on the same model; prints
                         the median ms of RUNS timed calls (after 3 warm-ups)
                         with all cores, then with one thread.
  chart JSON PNG         draws the kiln/peer ratios of a results file.

Nothing here is part of kiln; kiln itself never runs Python.
"""

import json
import statistics
import sys
import time


def _patch_transformers():
    # Stock transformers 5.x computes packed-sequence indices with aten.diff,
    # which reaches IREE and fails to legalize; a user exporting with turbine
    # has to stub it out (shared/reference/checkpoints.md).
    try:
        import transformers.masking_utils as mu

        mu.find_packed_sequence_indices = lambda *a, **k: None
    except Exception:
        pass


def _load(hf_dir):
    import torch
    from transformers import LlamaForCausalLM

    m = LlamaForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
    m.eval()
    return m


class _Argmax:
    """ids[1,SEQ] i32 -> next-token ids[SEQ] i32 (kiln's exported contract)."""

    @staticmethod
    def wrap(model):
        import torch

        class W(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, ids):
                logits = self.m(input_ids=ids.to(torch.int64), use_cache=False).logits
                return torch.argmax(logits[0], dim=-1).to(torch.int32)

        return W(model)


def cmd_hf(gguf, out):
    import os

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d, f = os.path.split(os.path.abspath(gguf))
    q = LlamaForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32)
    d_cfg = q.config.to_dict()
    d_cfg.pop("quantization_config", None)
    cfg = LlamaConfig.from_dict(d_cfg)
    plain = LlamaForCausalLM(cfg).to(torch.float32)
    missing, unexpected = plain.load_state_dict(q.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        sys.exit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    plain.tie_weights()
    plain.save_pretrained(out)
    print(f"wrote {out}")


def cmd_export(hf_dir, seq, out):
    import torch
    from iree.turbine import aot

    _patch_transformers()
    model = _Argmax.wrap(_load(hf_dir))
    aot.externalize_module_parameters(model.m)
    ids = torch.zeros((1, int(seq)), dtype=torch.int32)
    exported = aot.export(model, args=(ids,))
    exported.save_mlir(out)
    print(f"wrote {out}")


def cmd_params(hf_dir, out):
    from iree.turbine import aot

    model = _load(hf_dir)
    # The same parameter names the export references (turbine prefixes none:
    # the wrapper's `m.` is stripped by externalizing `model.m`).
    aot.save_module_parameters(out, model)
    print(f"wrote {out}")


def cmd_eager(hf_dir, seq, runs):
    """Prints the median ms of RUNS forwards with all cores, then with one."""
    import os

    import torch

    model = _Argmax.wrap(_load(hf_dir))
    ids = torch.zeros((1, int(seq)), dtype=torch.int32)
    ids[0, 0] = 1
    out = []
    for threads in [os.cpu_count() or 1, 1]:
        torch.set_num_threads(threads)
        times = []
        with torch.inference_mode():
            for _ in range(3):  # thread pool and oneDNN warm-up: the first calls are slow
                model(ids)
            for _ in range(int(runs)):
                t = time.perf_counter()
                model(ids)
                times.append((time.perf_counter() - t) * 1e3)
        out.append(f"{statistics.median(times):.1f}")
    print(" ".join(out))


def cmd_chart(results, png):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in json.load(open(results))["ratios"] if r.get("ratio")]
    labels = [r["name"] for r in rows]
    vals = [r["ratio"] for r in rows]
    fig, ax = plt.subplots(figsize=(12, 0.3 * len(rows) + 1.5))
    colors = ["#2a9d8f" if v <= 1.0 else "#e76f51" for v in vals]
    ax.barh(range(len(rows)), vals, color=colors)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.3g}×", va="center", fontsize=7)
    ax.set_xlabel("kiln / peer (log scale; < 1 means kiln is better)")
    ax.set_title("kiln / peer (iree-turbine, iree-convert-parameters, PyTorch eager), SmolLM2-135M, one run", fontsize=10)
    ax.set_xlim(min(vals) / 2, max(vals) * 3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def main():
    cmds = {
        "hf": cmd_hf,
        "export": cmd_export,
        "params": cmd_params,
        "eager": cmd_eager,
        "chart": cmd_chart,
    }
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])


if __name__ == "__main__":
    main()
