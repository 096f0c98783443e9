#!/usr/bin/python3
"""check_hf.py: checks an `lwopt export` against the checkpoint it was made from, reading both
safetensors files with numpy from their raw bytes (an 8-byte little-endian header length, the
JSON header, the data), independently of lwopt's reader:

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
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("check_hf.py: numpy is not importable (Debian's python3-numpy): skipped")
    sys.exit(77)

failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED: " + what)


def read_safetensors(path):
    """(metadata, {name: float32 array}, names in header order), checking the file's layout."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    tensors, spans = {}, []
    for name, t in header.items():
        expect(t["dtype"] == "F32", "%s: %s is %s, not F32" % (path, name, t["dtype"]))
        a, b = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        expect(b - a == 4 * count, "%s: %s spans %d bytes for shape %s" % (path, name, b - a,
                                                                           t["shape"]))
        spans.append((a, b))
        tensors[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"])
    spans.sort()
    at = 0
    for a, b in spans:
        expect(a == at, "%s: the data section has a gap or overlap at byte %d" % (path, a))
        at = b
    expect(at == len(data), "%s: the tensors cover %d of %d data bytes" % (path, at, len(data)))
    if meta is not None:
        expect(all(isinstance(v, str) for v in meta.values()),
               "%s: a metadata value is not a string" % path)
    return meta, tensors, list(header.keys())


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
    logits = x @ head.T
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-logp[np.arange(t), np.array(ids[1:])].mean())


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    ckpt, out_dir, fmt, lwopt = sys.argv[1:]
    manifest = json.load(open(ckpt + "/manifest.json"))
    extra = manifest["extra"]
    _, ours, _ = read_safetensors(ckpt + "/model.safetensors")
    meta, theirs, order = read_safetensors(out_dir + "/model.safetensors")
    config = json.load(open(out_dir + "/config.json"))
    hf = fmt == "hf-gpt2"
    rows = ours["wte.weight"].shape[0]
    vocab = extra.get("vocab", 256)
    cfg = {"n_embd": extra["n_embd"], "n_layer": extra["n_layer"], "vocab": vocab}

    expect(meta is not None and meta.get("format") == "pt",
           "the metadata says format pt (transformers refuses a file without it): %r" % meta)
    expect(meta is not None and json.loads(meta.get("config", "null")) == config,
           "the metadata's config is config.json's")
    want = expected_tensors(ours, cfg, fmt)
    expect(sorted(want) == sorted(theirs),
           "the export's names are the mapping's: missing %s, extra %s" % (
               sorted(set(want) - set(theirs)), sorted(set(theirs) - set(want))))
    for name in sorted(set(want) & set(theirs)):
        a, b = theirs[name], want[name]
        expect(a.shape == b.shape and np.array_equal(a, b),
               "%s equals the checkpoint's under the mapping (shape %s, want %s)" % (
                   name, a.shape, b.shape))
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
    said = subprocess.run([lwopt, "run", "tests/export/lwopt_loss.lua", ckpt, str(V)] +
                          [str(i) for i in ids], capture_output=True, text=True)
    expect(said.returncode == 0, "lwopt_loss.lua ran: " + said.stdout + said.stderr)
    if said.returncode == 0:
        theirs_loss = float(said.stdout.split()[-1])
        expect(abs(mine - theirs_loss) < 1e-4,
               "the export's loss %.7f (numpy GPT-2) is lwopt's %.7f within 1e-4" % (
                   mine, theirs_loss))
        print("%s: %d tensors equal the checkpoint's; loss %.6f (numpy) vs %.6f (lwopt)" % (
            fmt, len(theirs), mine, theirs_loss))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
