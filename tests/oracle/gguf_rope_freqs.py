#!/usr/bin/python3
"""GGUF rope_freqs checks for e2e.gguf_rope_freqs, independent of llmrun (a minimal GGUF
reader/writer written from the GGUF v3 spec).

  factors FILE.gguf CONFIG.json    rope_freqs.weight equals llama.cpp's convert_hf_to_gguf
                                   llama3 factors for the config's rope_scaling (rel 1e-6)
  strip IN.gguf OUT.gguf PREFIX    copy without the metadata keys starting with PREFIX
"""
import json
import math
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Buf:
    def __init__(self, b):
        self.b, self.i = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.i)[0]
        self.i += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.b[self.i:self.i + n].decode()
        self.i += n
        return s

    def value(self, t):
        if t in SCALAR:
            return self.take(SCALAR[t])
        if t == 8:
            return self.string()
        assert t == 9, t
        et, n = self.take("<I"), self.take("<Q")
        return [self.value(et) for _ in range(n)]


def parse(path):
    b = open(path, "rb").read()
    r = Buf(b)
    assert b[:4] == b"GGUF"
    r.i = 4
    version, nt, nkv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kv = []
    for _ in range(nkv):
        start = r.i
        key = r.string()
        t = r.take("<I")
        val = r.value(t)
        kv.append((key, val, b[start:r.i]))
    tensors = []
    tstart = r.i
    for _ in range(nt):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        tensors.append((name, ne, r.take("<I"), r.take("<Q")))
    tinfo = b[tstart:r.i]
    align = dict((k, v) for k, v, _ in kv).get("general.alignment", 32)
    data_start = r.i + (-r.i % align)
    return version, kv, tensors, tinfo, b[data_start:], align


def factors(path, config):
    _, kv, tensors, _, data, _ = parse(path)
    c = json.load(open(config))
    rs = c["rope_scaling"]
    hd = c["hidden_size"] // c["num_attention_heads"]
    base = c["rope_theta"]
    # convert_hf_to_gguf.py, LlamaModel: rope_freqs for rope_type llama3
    factor, low, high, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    want = []
    for i in range(0, hd, 2):
        freq = 1.0 / (base ** (i / hd))
        wl = 2 * math.pi / freq
        if wl < high_wl:
            want.append(1.0)
        elif wl > low_wl:
            want.append(factor)
        else:
            smooth = (old / wl - low) / (high - low)
            want.append(1 / ((1 - smooth) / factor + smooth))
    (t,) = [t for t in tensors if t[0] == "rope_freqs.weight"]
    assert t[1] == [hd // 2] and t[2] == 0, t
    got = struct.unpack_from("<%df" % (hd // 2), data, t[3])
    for g, w in zip(got, want):
        assert abs(g - w) <= 1e-6 * abs(w), (got, want)
    print("rope_freqs", " ".join("%.6g" % g for g in got))


def strip(src, dst, prefix):
    version, kv, tensors, tinfo, data, align = parse(src)
    keep = [raw for k, _, raw in kv if not k.startswith(prefix)]
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(keep)) + b"".join(keep) + tinfo
    head += b"\0" * (-len(head) % align)
    open(dst, "wb").write(head + data)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "factors":
        factors(*args)
    elif cmd == "strip":
        strip(*args)
    else:
        sys.exit(__doc__)
