#!/usr/bin/python3
"""check_hf.py: checks an `lwopt export` against the checkpoint it was made from, reading both
safetensors files with numpy from their raw bytes (export_check.py's reader), independently of
lwopt's:

- the export is a file the safetensors library and transformers accept: F32 tensors whose byte
  ranges tile the data section, metadata of strings with "format": "pt";
- every tensor equals the checkpoint's under the documented mapping (docs/checkpoints.md,
  "Exporting"): Conv1D weights transposed for hf-gpt2, the vocabulary cut to the real one,
  zero biases where lwopt has none, lm_head left out when tied (nanogpt: nn.Linear layout, the
  padded vocabulary, lm_head a copy of the token embedding), and no other tensor;
- config.json (and the copy in the metadata) says the checkpoint's model;
- a GPT-2 forward pass written here in numpy from the export alone (transformers' GPT2LMHeadModel
  for hf-gpt2: Conv1D x @ W + b, gelu_new, LayerNorm eps 1e-5) gives the loss that lwopt's own
  model gives the checkpoint on the same tokens (tests/export/lwopt_loss.lua), within 1e-4.

Usage: check_hf.py CKPT_STEP_DIR OUT_DIR FORMAT LWOPT_BIN
Exit 0 when every check passes, 1 otherwise, 77 when numpy cannot be imported.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_check  # noqa: E402  (exits 77 itself where numpy is missing)
from export_check import np, expect  # noqa: E402


def expected_tensors(ours, cfg, fmt):
    """The export's tensors by name, made from the checkpoint's under the mapping."""
    c, layers, vocab = cfg["n_embd"], cfg["n_layer"], cfg["vocab"]
    hf = fmt == "hf-gpt2"
    out = {}

    def weight(theirs, mine):
        w = ours[mine]  # nn.Linear's [out, in]
        out[theirs] = w.T if hf else w  # Conv1D stores [in, out]

    def bias(theirs, mine, n):
        if mine in ours:
            out[theirs] = ours[mine]
        elif hf:
            out[theirs] = np.zeros(n, dtype=np.float32)

    rows = vocab if hf else ours["wte.weight"].shape[0]
    out["transformer.wte.weight"] = ours["wte.weight"][:rows]
    out["transformer.wpe.weight"] = ours["wpe.weight"]
    for i in range(layers):
        p, q = "transformer.h.%d." % i, "h.%d." % i
        hidden = ours[q + "mlp.fc.weight"].shape[0]
        for ln in ("ln_1", "ln_2"):
            out[p + ln + ".weight"] = ours[q + ln + ".weight"]
            bias(p + ln + ".bias", q + ln + ".bias", c)
        weight(p + "attn.c_attn.weight", q + "attn.qkv.weight")
        bias(p + "attn.c_attn.bias", q + "attn.qkv.bias", 3 * c)
        weight(p + "attn.c_proj.weight", q + "attn.proj.weight")
        bias(p + "attn.c_proj.bias", q + "attn.proj.bias", c)
        weight(p + "mlp.c_fc.weight", q + "mlp.fc.weight")
        bias(p + "mlp.c_fc.bias", q + "mlp.fc.bias", hidden)
        weight(p + "mlp.c_proj.weight", q + "mlp.proj.weight")
        bias(p + "mlp.c_proj.bias", q + "mlp.proj.bias", c)
    out["transformer.ln_f.weight"] = ours["ln_f.weight"]
    bias("transformer.ln_f.bias", "ln_f.bias", c)
    if "lm_head.weight" in ours:
        out["lm_head.weight"] = ours["lm_head.weight"][:rows]
    elif not hf:
        out["lm_head.weight"] = out["transformer.wte.weight"]  # nanoGPT's tied state dict
    return out


def layer_norm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def gpt2_loss(T, config, fmt, ids):
    """Mean next-token cross-entropy over ids, GPT-2's forward pass in float64 from the export's
    tensors and config alone, as transformers (hf-gpt2) or nanoGPT (nanogpt) computes it."""
    hf = fmt == "hf-gpt2"
    g = {k: v.astype(np.float64) for k, v in T.items()}
    c = config["n_embd"]
    nh = config["n_head"]
    layers = config["n_layer"]
    eps = config.get("layer_norm_epsilon", 1e-5)
    hd = c // nh
    t = len(ids) - 1
    tok = np.array(ids[:-1])

    def zeros_or(name, n):
        return g[name] if name in g else np.zeros(n)

    def linear(x, name, n_out):
        w = g[name + ".weight"]
        y = x @ w if hf else x @ w.T  # Conv1D [in, out]; nn.Linear [out, in]
        return y + zeros_or(name + ".bias", n_out)

    def ln(x, name):
        return layer_norm(x, g[name + ".weight"], zeros_or(name + ".bias", c), eps)

    x = g["transformer.wte.weight"][tok] + g["transformer.wpe.weight"][:t]
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    for i in range(layers):
        p = "transformer.h.%d." % i
        qkv = linear(ln(x, p + "ln_1"), p + "attn.c_attn", 3 * c)
        q, k, v = (qkv[:, j * c:(j + 1) * c].reshape(t, nh, hd).transpose(1, 0, 2)
                   for j in range(3))
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        att[:, mask] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(t, c)
        x = x + linear(y, p + "attn.c_proj", c)
        hidden = g[p + "mlp.c_fc.weight"].shape[1 if hf else 0]
        h = gelu_new(linear(ln(x, p + "ln_2"), p + "mlp.c_fc", hidden))
        x = x + linear(h, p + "mlp.c_proj", c)
    x = ln(x, "transformer.ln_f")
    head = g["lm_head.weight"] if "lm_head.weight" in g else g["transformer.wte.weight"]
    return export_check.mean_cross_entropy(x @ head.T, ids)


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    ckpt, out_dir, fmt, lwopt = sys.argv[1:]
    manifest = json.load(open(ckpt + "/manifest.json"))
    extra = manifest["extra"]
    _, ours, _ = export_check.read_safetensors(ckpt + "/model.safetensors")
    meta, theirs, order = export_check.read_safetensors(out_dir + "/model.safetensors")
    config = json.load(open(out_dir + "/config.json"))
    hf = fmt == "hf-gpt2"
    rows = ours["wte.weight"].shape[0]
    vocab = extra.get("vocab", 256)
    cfg = {"n_embd": extra["n_embd"], "n_layer": extra["n_layer"], "vocab": vocab}

    export_check.check_metadata(meta, config, "config.json",
                                " (transformers refuses a file without it)")
    export_check.check_tensors(expected_tensors(ours, cfg, fmt), theirs)
    expect(order[0] == "transformer.wte.weight", "the token embedding comes first")

    if hf:
        want_config = {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": vocab,
            "n_positions": extra["seq"], "n_embd": extra["n_embd"], "n_layer": extra["n_layer"],
            "n_head": extra["n_head"], "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "tie_word_embeddings": "lm_head.weight" not in ours,
            "n_inner": None, "scale_attn_weights": True, "torch_dtype": "float32",
        }
    else:
        want_config = {"block_size": extra["seq"], "vocab_size": rows, "n_layer": extra["n_layer"],
                       "n_head": extra["n_head"], "n_embd": extra["n_embd"], "bias": False,
                       "dropout": 0}
    for key, value in want_config.items():
        expect(config.get(key) == value,
               "config.json %s is %r, want %r" % (key, config.get(key), value))

    # the same loss from the export (numpy) and from the checkpoint (lwopt's model)
    V = config["vocab_size"]
    ids = [(i * 37 + 11) % vocab for i in range(min(extra["seq"], 32) + 1)]
    mine = gpt2_loss(theirs, config, fmt, ids)
    theirs_loss = export_check.lwopt_loss(lwopt, ckpt, V, ids)
    if theirs_loss is not None:
        expect(abs(mine - theirs_loss) < 1e-4,
               "the export's loss %.7f (numpy GPT-2) is lwopt's %.7f within 1e-4" % (
                   mine, theirs_loss))
        print("%s: %d tensors equal the checkpoint's; loss %.6f (numpy) vs %.6f (lwopt)" % (
            fmt, len(theirs), mine, theirs_loss))
    return 1 if export_check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
