#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, written from the format's documentation
(TFRecord framing: uint64 length, masked CRC-32C of the length, data, masked CRC-32C of the
data; Event / Summary / TensorProto protobufs with TensorFlow's field numbers), checked
against a training run's metrics JSONL.

usage: read_events.py TB_DIR METRICS_JSONL [--recipes N]
Fails unless TB_DIR holds exactly one event file whose every record passes both CRCs, whose
first event is the file_version, whose scalars equal the JSONL's numbers (as float32) step by
step with no step of any tag logged twice, and which holds N "recipe" text summaries."""
import json
import math
import os
import struct
import sys


def make_crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # 0x1EDC6F41 reflected
        table.append(c)
    return table


TABLE = make_crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# The standard CRC-32C check values (RFC 3720 B.4 and the "123456789" check).
assert crc32c(b"123456789") == 0xE3069283
assert crc32c(bytes(32)) == 0x8A9136AA
assert crc32c(b"\xff" * 32) == 0x62A8AB43
assert crc32c(bytes(range(32))) == 0x46DD794E


def records(blob):
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise ValueError(f"{len(blob) - pos} stray bytes at offset {pos}")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if len_crc != masked(header):
            raise ValueError(f"length CRC mismatch at offset {pos}")
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or len(blob) < pos + 16 + length:
            raise ValueError(f"truncated record at offset {pos}")
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if data_crc != masked(data):
            raise ValueError(f"data CRC mismatch at offset {pos}")
        yield data
        pos += 16 + length


def fields(msg):
    """Yields (field number, wire type, value) of one protobuf message."""
    pos = 0

    def varint():
        nonlocal pos
        v, shift = 0, 0
        while True:
            b = msg[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while pos < len(msg):
        key = varint()
        num, wt = key >> 3, key & 7
        if wt == 0:
            yield num, wt, varint()
        elif wt == 1:
            yield num, wt, msg[pos:pos + 8]
            pos += 8
        elif wt == 5:
            yield num, wt, msg[pos:pos + 4]
            pos += 4
        elif wt == 2:
            n = varint()
            yield num, wt, msg[pos:pos + n]
            pos += n
        else:
            raise ValueError(f"wire type {wt}")
    if pos != len(msg):
        raise ValueError("message overruns its length")


def decode_event(data):
    ev = {"values": []}
    for num, wt, v in fields(data):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v if v < 1 << 63 else v - (1 << 64)
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            for snum, swt, sv in fields(v):
                assert snum == 1 and swt == 2, "Summary holds only values"
                val = {}
                for vnum, vwt, vv in fields(sv):
                    if vnum == 1:
                        val["tag"] = vv.decode()
                    elif vnum == 2 and vwt == 5:
                        val["simple_value"] = struct.unpack("<f", vv)[0]
                    elif vnum == 8:
                        tensor = {k: x for k, _, x in fields(vv)}
                        assert tensor.get(1) == 7, "text tensors are DT_STRING"
                        val["text"] = tensor[8].decode()
                    elif vnum == 9:
                        meta = {k: x for k, _, x in fields(vv)}
                        plugin = {k: x for k, _, x in fields(meta[1])}
                        val["plugin"] = plugin[1].decode()
                ev["values"].append(val)
    return ev


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_scalars(rec):
    out = {}
    for k, v in rec.items():
        if k == "step":
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool) or v is None:
            out[k] = v
        if k == "stages":
            for s in v:
                for sk, sv in s.items():
                    if sk != "stage":
                        out[f"stages/{s['stage']}/{sk}"] = sv
    return out


def main():
    tb_dir, metrics = sys.argv[1], sys.argv[2]
    want_recipes = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--recipes" else None
    files = [f for f in os.listdir(tb_dir) if "tfevents" in f]
    assert len(files) == 1, f"expected one event file in {tb_dir}, found {files}"
    events = [decode_event(r) for r in records(open(os.path.join(tb_dir, files[0]), "rb").read())]
    assert events and events[0].get("file_version") == "brain.Event:2", "the first event is not the file_version"
    assert all("file_version" not in e for e in events[1:]), "a second file_version event"
    recipes = [v for e in events for v in e["values"] if v.get("plugin") == "text"]
    assert all(r["tag"] == "recipe" and "logging:" in r["text"] for r in recipes), recipes
    if want_recipes is not None:
        assert len(recipes) == want_recipes, f"{len(recipes)} recipe texts, expected {want_recipes}"
    scalar_events = [e for e in events if any("simple_value" in v for v in e["values"])]
    lines = [json.loads(l) for l in open(metrics) if l.strip()]
    assert len(scalar_events) == len(lines), f"{len(scalar_events)} scalar events, {len(lines)} JSONL lines"
    seen = set()
    for ev, rec in zip(scalar_events, lines):
        assert ev["step"] == rec["step"], f"event step {ev['step']} vs JSONL step {rec['step']}"
        got = {v["tag"]: v["simple_value"] for v in ev["values"]}
        want = expected_scalars(rec)
        assert set(got) == set(want), f"step {rec['step']}: tags {sorted(got)} vs keys {sorted(want)}"
        for tag, w in want.items():
            g = got[tag]
            ok = math.isnan(g) if w is None else g == f32(w)
            assert ok, f"step {rec['step']} {tag}: event {g!r}, JSONL {w!r}"
            assert (tag, ev["step"]) not in seen, f"{tag} logged twice at step {ev['step']}"
            seen.add((tag, ev["step"]))
    print(f"{files[0]}: {len(events)} events, {len(seen)} scalars match {metrics}, {len(recipes)} recipe texts")


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, ValueError, KeyError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
