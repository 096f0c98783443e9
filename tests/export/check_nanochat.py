#!/usr/bin/python3
"""check_nanochat.py: checks an `lwopt export --format nanochat` against the --arch nanochat
checkpoint it was made from, reading both safetensors files with numpy from their raw bytes
(export_check.py's reader), independently of lwopt's:

- every tensor is the checkpoint's under the documented mapping (docs/checkpoints.md,
  "nanochat"): c_q, c_k and c_v the Q, K and V rows of the fused qkv weight, value_embeds.<i>
  layer i's value embedding, the token embedding, the head and the value embeddings cut to
  nanochat's padded vocabulary (a multiple of 64), the smear gate and backout scalar zero; no
  other tensor;
- meta.json (and the copy in the metadata) holds nanochat's model_config for the checkpoint;
- nanochat's GPT forward pass written here in float64 numpy from the published architecture
  (nanochat/gpt.py: normed embedding, smear, residual scalars, value embeddings through their
  gate, rotary by halves turning nanochat's way, QK norm, sliding windows by the pattern with
  the last layer full, ReLU^2, backout, the logits cropped to the vocabulary and capped at 15),
  from the export alone, gives the loss lwopt's own model gives the checkpoint on the same
  tokens (tests/export/lwopt_loss.lua), within 1e-5. nanochat multiplies Q and K by 1.2 after
  the QK norm, which lwopt's model does not: the forward takes that factor as a parameter and
  compares at 1 (docs/checkpoints.md says what that means for a model loaded into nanochat).

Usage: check_nanochat.py CKPT_STEP_DIR OUT_DIR LWOPT_BIN
Exit 0 when every check passes, 1 otherwise, 77 when numpy cannot be imported.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_check  # noqa: E402  (exits 77 itself where numpy is missing)
from export_check import np, expect  # noqa: E402

EPS = 2.0 ** -23  # F.rms_norm's default eps for fp32 tensors: the dtype's machine epsilon


def has_ve(i, n_layer):
    return i % 2 == (n_layer - 1) % 2


def padded(vocab):
    return (vocab + 63) // 64 * 64


def expected_tensors(ours, model, vocab):
    c, nh, nkv, L = model["n_embd"], model["n_head"], model["n_kv_head"], model["n_layer"]
    hd, rows = c // nh, padded(vocab)
    out = {"transformer.wte.weight": ours["wte.weight"][:rows],
           "lm_head.weight": ours["lm_head.weight"][:rows],
           "resid_lambdas": ours["resid_lambdas"], "x0_lambdas": ours["x0_lambdas"],
           "smear_gate.weight": np.zeros((1, 24), np.float32),
           "smear_lambda": np.zeros(1, np.float32), "backout_lambda": np.zeros(1, np.float32)}
    for i in range(L):
        p, q = "transformer.h.%d." % i, "h.%d." % i
        wq, wk, wv = np.split(ours[q + "attn.qkv.weight"], [nh * hd, (nh + nkv) * hd])
        out.update({p + "attn.c_q.weight": wq, p + "attn.c_k.weight": wk,
                    p + "attn.c_v.weight": wv,
                    p + "attn.c_proj.weight": ours[q + "attn.proj.weight"],
                    p + "mlp.c_fc.weight": ours[q + "mlp.fc.weight"],
                    p + "mlp.c_proj.weight": ours[q + "mlp.proj.weight"]})
        if has_ve(i, L):
            out[p + "attn.ve_gate.weight"] = ours[q + "attn.ve_gate.weight"]
            out["value_embeds.%d.weight" % i] = ours[q + "attn.ve.weight"][:rows]
    return out


def norm(x):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def windows(mc):
    """Each layer's left window (keys i - w .. i), as nanochat's _compute_window_sizes."""
    long_w = mc["sequence_len"]
    short_w = -(-long_w // 4 // 128) * 128
    pattern = mc["window_pattern"].upper()
    out = [short_w if pattern[i % len(pattern)] == "S" else long_w for i in range(mc["n_layer"])]
    out[-1] = long_w
    return out


def rotate(x, cos, sin):
    """nanochat's apply_rotary_emb: halves, turning by -theta."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return np.concatenate([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], axis=-1)


def nanochat_loss(T, mc, ids, qk_scale):
    """Mean next-token cross-entropy over ids: nanochat's GPT forward in float64 from the
    export's tensors and meta.json's model_config alone."""
    g = {k: v.astype(np.float64) for k, v in T.items()}
    c, nh, nkv, L = mc["n_embd"], mc["n_head"], mc["n_kv_head"], mc["n_layer"]
    hd, vocab = c // nh, mc["vocab_size"]
    idx = np.array(ids[:-1])
    t = len(idx)
    inv_freq = 1.0 / 100000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    angles = np.arange(t, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles)[None], np.sin(angles)[None]  # [1, t, hd/2], heads first
    x = norm(g["transformer.wte.weight"][idx])
    gate = g["smear_lambda"][0] * sigmoid(x[1:, :24] @ g["smear_gate.weight"].T)
    x = np.concatenate([x[:1], x[1:] + gate * x[:-1]], axis=0)
    x0, backout = x, None
    i_q, j_k = np.arange(t)[:, None], np.arange(t)[None, :]
    for i, w in enumerate(windows(mc)):
        p = "transformer.h.%d." % i
        x = g["resid_lambdas"][i] * x + g["x0_lambdas"][i] * x0
        h = norm(x)
        q = (h @ g[p + "attn.c_q.weight"].T).reshape(t, nh, hd).transpose(1, 0, 2)
        k = (h @ g[p + "attn.c_k.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        v = (h @ g[p + "attn.c_v.weight"].T).reshape(t, nkv, hd).transpose(1, 0, 2)
        if has_ve(i, L):
            ve = g["value_embeds.%d.weight" % i][idx].reshape(t, nkv, hd).transpose(1, 0, 2)
            gv = 3.0 * sigmoid(h[:, :12] @ g[p + "attn.ve_gate.weight"].T)  # [t, nkv]
            v = v + gv.T[:, :, None] * ve
        q, k = norm(rotate(q, cos, sin)) * qk_scale, norm(rotate(k, cos, sin)) * qk_scale
        # query head j reads KV head j // (nh / nkv)
        k, v = np.repeat(k, nh // nkv, axis=0), np.repeat(v, nh // nkv, axis=0)
        att = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
        att[:, (j_k > i_q) | (i_q - j_k > w)] = -np.inf
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        y = (att @ v).transpose(1, 0, 2).reshape(t, c)
        x = x + y @ g[p + "attn.c_proj.weight"].T
        a = np.maximum(norm(x) @ g[p + "mlp.c_fc.weight"].T, 0.0)
        x = x + (a * a) @ g[p + "mlp.c_proj.weight"].T
        if i == L // 2:
            backout = x
    x = norm(x - g["backout_lambda"][0] * backout)
    logits = (x @ g["lm_head.weight"].T)[:, :vocab]
    return export_check.mean_cross_entropy(15.0 * np.tanh(logits / 15.0), ids)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    ckpt, out_dir, lwopt = sys.argv[1:]
    manifest = json.load(open(ckpt + "/manifest.json"))
    extra = manifest["extra"]
    model = extra["model"]
    _, ours, _ = export_check.read_safetensors(ckpt + "/model.safetensors")
    meta, theirs, order = export_check.read_safetensors(out_dir + "/model.safetensors")
    meta_json = json.load(open(out_dir + "/meta.json"))
    vocab = extra.get("vocab", 256)

    export_check.check_metadata(meta, meta_json, "meta.json")
    export_check.check_tensors(expected_tensors(ours, model, vocab), theirs)

    mc = meta_json.get("model_config", {})
    want_config = {"sequence_len": model["seq_len"], "vocab_size": vocab,
                   "n_layer": model["n_layer"], "n_head": model["n_head"],
                   "n_kv_head": model["n_kv_head"], "n_embd": model["n_embd"],
                   "window_pattern": model.get("window_pattern") or "L"}
    expect(mc == want_config, "meta.json's model_config is %r, want %r" % (mc, want_config))
    expect(meta_json.get("step") == manifest["step"], "meta.json's step is the checkpoint's")

    # the same loss from the export (numpy) and from the checkpoint (lwopt's model), over a
    # whole sequence: the short windows cut where it is longer than they are
    ids = [(i * 37 + 11) % vocab for i in range(model["seq_len"] + 1)]
    mine = nanochat_loss(theirs, want_config, ids, 1.0)
    lwopt_loss = export_check.lwopt_loss(lwopt, ckpt, vocab, ids)
    if lwopt_loss is not None:
        expect(abs(mine - lwopt_loss) < 1e-5,
               "the export's loss %.8f (numpy nanochat) is lwopt's %.8f within 1e-5" % (
                   mine, lwopt_loss))
        # the windows must matter at this length, or the comparison would not check them
        full = dict(want_config, window_pattern="L")
        cut = abs(nanochat_loss(theirs, full, ids, 1.0) - mine)
        expect(want_config["window_pattern"] == "L" or cut > 1e-7,
               "the short windows change the loss at %d tokens (by %.2e)" % (len(ids) - 1, cut))
        print("nanochat (%d layers, %d KV of %d heads, windows %s, vocabulary %d in %d rows): "
              "%d tensors equal the checkpoint's; loss %.7f (numpy) vs %.7f (lwopt); "
              "windows move it by %.2e" % (model["n_layer"], model["n_kv_head"],
                                           model["n_head"], want_config["window_pattern"],
                                           vocab, padded(vocab), len(theirs), mine,
                                           lwopt_loss, cut))
    return 1 if export_check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
