#!/usr/bin/python3
"""check_hf_llama.py: checks an `lwopt export --format hf-llama` against the --arch llama
checkpoint it was made from, reading both safetensors files with numpy from their raw bytes
(export_check.py's reader), independently of lwopt's:

- every tensor is the checkpoint's under the documented mapping (docs/checkpoints.md,
  "hf-llama"): q_proj, k_proj and v_proj the Q, K and V rows of the fused qkv weight, gate_proj
  and up_proj the two halves of the fused fc weight, the vocabulary cut to the real one,
  lm_head left out when tied; for a model trained with the interleaved rotary pairing, each
  head's Q and K rows reordered to the halves pairing; no other tensor;
- config.json (and the copy in the metadata) says the checkpoint's model as transformers'
  LlamaConfig spells it;
- a LlamaForCausalLM forward pass written here in float64 numpy from the published architecture
  as transformers implements it (RMSNorm, rotate_half rotary embeddings, repeated KV heads,
  SiLU-gated MLP), from the export alone, gives the loss lwopt's own model gives the checkpoint
  on the same tokens (tests/export/lwopt_loss.lua), within 1e-5.

Usage: check_hf_llama.py CKPT_STEP_DIR OUT_DIR LWOPT_BIN
Exit 0 when every check passes, 1 otherwise, 77 when numpy cannot be imported.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_check  # noqa: E402  (exits 77 itself where numpy is missing)
from export_check import np, expect  # noqa: E402


def to_halves(w, hd):
    """Rows of heads of hd rows, each head's (2i, 2i+1) pairs made (i, i + hd/2): the even rows
    first, then the odd ones."""
    heads = w.reshape(-1, hd // 2, 2, w.shape[1])
    return heads.transpose(0, 2, 1, 3).reshape(w.shape)


def expected_tensors(ours, model, vocab):
    c, nh, nkv = model["n_embd"], model["n_head"], model["n_kv_head"]
    hd = c // nh
    interleaved = model["rope_pairing"] == "interleaved"
    out = {"model.embed_tokens.weight": ours["wte.weight"][:vocab]}
    for i in range(model["n_layer"]):
        p, q = "model.layers.%d." % i, "h.%d." % i
        qkv = ours[q + "attn.qkv.weight"]
        wq, wk, wv = np.split(qkv, [nh * hd, (nh + nkv) * hd])
        if interleaved:
            wq, wk = to_halves(wq, hd), to_halves(wk, hd)
        fc = ours[q + "mlp.fc.weight"]
        gate, up = np.split(fc, 2)
        out.update({
            p + "input_layernorm.weight": ours[q + "ln_1.weight"],
            p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
            p + "self_attn.v_proj.weight": wv,
            p + "self_attn.o_proj.weight": ours[q + "attn.proj.weight"],
            p + "post_attention_layernorm.weight": ours[q + "ln_2.weight"],
            p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
            p + "mlp.down_proj.weight": ours[q + "mlp.proj.weight"],
        })
    out["model.norm.weight"] = ours["ln_f.weight"]
    if "lm_head.weight" in ours:
        out["lm_head.weight"] = ours["lm_head.weight"][:vocab]
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def llama_loss(T, config, ids):
    """Mean next-token cross-entropy over ids: LlamaForCausalLM's forward pass in float64 from
    the export's tensors and config.json alone."""
    g = {k: v.astype(np.float64) for k, v in T.items()}
    c, nh = config["hidden_size"], config["num_attention_heads"]
    nkv, eps = config["num_key_value_heads"], config["rms_norm_eps"]
    hd = c // nh
    t = len(ids) - 1
    inv_freq = 1.0 / config["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.arange(t, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    x = g["model.embed_tokens.weight"][np.array(ids[:-1])]
    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, g[p + "input_layernorm.weight"], eps)
        q = (h @ g[p + "self_attn.q_proj.weight"].T).reshape(t, nh, hd).transpose(1, 0, 2)
        k = (h @ g[p + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        v = (h @ g[p + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # repeat_kv: query head j reads KV head j // (nh / nkv)
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        att[:, mask] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(t, nh * hd)
        x = x + y @ g[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, g[p + "post_attention_layernorm.weight"], eps)
        gate = h @ g[p + "mlp.gate_proj.weight"].T
        silu = gate / (1.0 + np.exp(-gate))
        x = x + (silu * (h @ g[p + "mlp.up_proj.weight"].T)) @ g[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, g["model.norm.weight"], eps)
    tied = config["tie_word_embeddings"]
    head = g["model.embed_tokens.weight"] if tied else g["lm_head.weight"]
    return export_check.mean_cross_entropy(x @ head.T, ids)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    ckpt, out_dir, lwopt = sys.argv[1:]
    extra = json.load(open(ckpt + "/manifest.json"))["extra"]
    model = extra["model"]
    _, ours, _ = export_check.read_safetensors(ckpt + "/model.safetensors")
    meta, theirs, order = export_check.read_safetensors(out_dir + "/model.safetensors")
    config = json.load(open(out_dir + "/config.json"))
    vocab = extra.get("vocab", 256)

    export_check.check_metadata(meta, config, "config.json",
                                " (transformers refuses a file without it)")
    export_check.check_tensors(expected_tensors(ours, model, vocab), theirs)
    expect(order[0] == "model.embed_tokens.weight", "the token embedding comes first")

    c, nh = model["n_embd"], model["n_head"]
    want_config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": c, "intermediate_size": ours["h.0.mlp.fc.weight"].shape[0] // 2,
        "num_hidden_layers": model["n_layer"], "num_attention_heads": nh,
        "num_key_value_heads": model["n_kv_head"], "head_dim": c // nh,
        "max_position_embeddings": model["seq_len"], "rms_norm_eps": model["norm_eps"],
        "rope_theta": model["rope_base"], "rope_scaling": None, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": "lm_head.weight" not in ours, "torch_dtype": "float32",
    }
    for key, value in want_config.items():
        expect(config.get(key) == value,
               "config.json %s is %r, want %r" % (key, config.get(key), value))

    # the same loss from the export (numpy) and from the checkpoint (lwopt's model)
    ids = [(i * 37 + 11) % vocab for i in range(min(model["seq_len"], 32) + 1)]
    mine = llama_loss(theirs, config, ids)
    lwopt_loss = export_check.lwopt_loss(lwopt, ckpt, vocab, ids)
    if lwopt_loss is not None:
        expect(abs(mine - lwopt_loss) < 1e-5,
               "the export's loss %.8f (numpy LLaMA) is lwopt's %.8f within 1e-5" % (
                   mine, lwopt_loss))
        print("hf-llama (%s pairing, %d KV of %d heads): %d tensors equal the checkpoint's; "
              "loss %.7f (numpy) vs %.7f (lwopt)" % (model["rope_pairing"], model["n_kv_head"],
                                                    nh, len(theirs), mine, lwopt_loss))
    return 1 if export_check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
