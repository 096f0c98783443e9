"""export_check.py: what check_hf.py, check_hf_llama.py and check_nanochat.py share: numpy (exit
77 where Debian's python3 cannot import it), the failures list, a safetensors reader working
from the raw bytes (an 8-byte little-endian header length, the JSON header, the data) apart from
lwopt's, the export's tensors and metadata compared with what the mapping wants, the mean
cross-entropy of logits, and lwopt's own loss for the checkpoint (tests/export/lwopt_loss.lua).
Each model's forward pass stays in its own script: those are the independent references."""
import json
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("%s: numpy is not importable (Debian's python3-numpy): skipped" % sys.argv[0])
    sys.exit(77)

failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED: " + what)


def read_safetensors(path):
    """(metadata, {name: float32 array}, names in header order), checking the file's layout:
    F32 tensors whose byte ranges tile the data section, metadata of strings."""
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


def check_metadata(meta, config, config_file, why_pt=""):
    """The export's metadata says format pt and holds config_file's contents, config."""
    expect(meta is not None and meta.get("format") == "pt",
           "the metadata says format pt%s: %r" % (why_pt, meta))
    expect(meta is not None and json.loads(meta.get("config", "null")) == config,
           "the metadata's config is %s's" % config_file)


def check_tensors(want, theirs):
    """The export's tensors are exactly want's names, each equal in shape and bits."""
    expect(sorted(want) == sorted(theirs),
           "the export's names are the mapping's: missing %s, extra %s" % (
               sorted(set(want) - set(theirs)), sorted(set(theirs) - set(want))))
    for name in sorted(set(want) & set(theirs)):
        a, b = theirs[name], want[name]
        expect(a.shape == b.shape and np.array_equal(a, b),
               "%s equals the checkpoint's under the mapping (shape %s, want %s)" % (
                   name, a.shape, b.shape))


def mean_cross_entropy(logits, ids):
    """Mean next-token cross-entropy of logits [t, V] (row r predicts ids[r + 1])."""
    t = len(ids) - 1
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return float(-logp[np.arange(t), np.array(ids[1:])].mean())


def lwopt_loss(lwopt, ckpt, vocab, ids):
    """lwopt's own model's loss for the checkpoint on ids, its softmax over vocab rows; None
    (a failure recorded) when lwopt_loss.lua does not run."""
    said = subprocess.run([lwopt, "run", "tests/export/lwopt_loss.lua", ckpt, str(vocab)] +
                          [str(i) for i in ids], capture_output=True, text=True)
    expect(said.returncode == 0, "lwopt_loss.lua ran: " + said.stdout + said.stderr)
    return float(said.stdout.split()[-1]) if said.returncode == 0 else None
