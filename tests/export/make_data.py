#!/usr/bin/python3
"""make_data.py DIR: the corpora the export tests train on: DIR/text.txt (read as bytes) and
token shards in llm.c's format (a 1024-byte header, uint16 ids below 300),
DIR/t_train_000.bin and DIR/t_val_000.bin."""
import sys

import numpy as np

d = sys.argv[1]
open(d + "/text.txt", "w").write("In the beginning was the word, and the word was lwopt. " * 400)
for name, n, seed in (("t_train_000.bin", 20000, 1), ("t_val_000.bin", 4000, 2)):
    ids = np.random.default_rng(seed).integers(0, 300, n).astype("<u2")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, n)
    open(d + "/" + name, "wb").write(header.tobytes() + ids.tobytes())
