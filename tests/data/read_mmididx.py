#!/usr/bin/python3
"""An independent reader of Megatron's MMIDIDX indexed dataset, written from the published
layout (megatron/core/datasets/indexed_dataset.py): prints the documents as JSON lists of ids,
one per line, after checking every invariant of the index.
usage: read_mmididx.py PREFIX"""
import json, os, struct, sys

prefix = sys.argv[1]
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 6: ("d", 8), 7: ("f", 4), 8: ("H", 2)}
with open(prefix + ".idx", "rb") as f:
    idx = f.read()
assert idx[:9] == b"MMIDIDX\x00\x00", "bad magic"
(version,) = struct.unpack_from("<Q", idx, 9)
assert version == 1, version
(code,) = struct.unpack_from("<B", idx, 17)
seq_count, doc_count = struct.unpack_from("<QQ", idx, 18)
fmt, size = DTYPES[code]
off = 34
lengths = struct.unpack_from(f"<{seq_count}i", idx, off); off += 4 * seq_count
pointers = struct.unpack_from(f"<{seq_count}q", idx, off); off += 8 * seq_count
doc_idx = struct.unpack_from(f"<{doc_count}q", idx, off); off += 8 * doc_count
assert off == len(idx), f"{len(idx) - off} trailing bytes in the index"
assert doc_idx[0] == 0 and doc_idx[-1] == seq_count and list(doc_idx) == sorted(doc_idx)
expect = 0
for n, p in zip(lengths, pointers):
    assert p == expect, (p, expect)
    expect += n * size
assert os.path.getsize(prefix + ".bin") == expect, "bin size does not match the index"
with open(prefix + ".bin", "rb") as f:
    data = f.read()
print(json.dumps({"dtype_code": code, "sequences": seq_count, "documents": doc_count - 1}))
for d in range(doc_count - 1):
    ids = []
    for s in range(doc_idx[d], doc_idx[d + 1]):
        ids.extend(struct.unpack_from(f"<{lengths[s]}{fmt}", data, pointers[s]))
    print(json.dumps(ids))
