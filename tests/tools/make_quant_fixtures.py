"""Golden dequantisation of every ggml block type by gguf-py (the reference llama.cpp's Python tools use):
random blocks with sane float16 scales (MXFP4: e8m0 exponents, the extremes 0, 1 and 250 among them),
and the float32 values gguf-py makes of them; and gguf-py's MXFP4 quantization of random floats.
Writes tests/data/quant/ggml_blocks.json. Run: python make_quant_fixtures.py (needs gguf, numpy)."""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# Byte offsets of each type's float16 fields: (scale offsets, signed-minimum offsets); MXFP4's e8m0 byte
# is set apart below.
LAYOUT = {
    "Q8_0": ([0], []), "Q4_0": ([0], []), "Q4_1": ([0], [2]), "Q5_0": ([0], []), "Q5_1": ([0], [2]),
    "Q2_K": ([80, 82], []), "Q3_K": ([108], []), "Q4_K": ([0, 2], []), "Q5_K": ([0, 2], []), "Q6_K": ([208], []),
    "MXFP4": ([], []),
}
BLOCKS = 4

rng = np.random.default_rng(7)
out = {}
for name, (scales, mins) in LAYOUT.items():
    qtype = T[name]
    block_values, block_bytes = quants.GGML_QUANT_SIZES[qtype]
    raw = bytearray(rng.integers(0, 256, size=BLOCKS * block_bytes, dtype=np.uint8).tobytes())
    for b in range(BLOCKS):
        for off in scales:
            raw[b * block_bytes + off:b * block_bytes + off + 2] = np.float16(rng.uniform(1e-3, 0.05)).tobytes()
        for off in mins:
            raw[b * block_bytes + off:b * block_bytes + off + 2] = np.float16(rng.uniform(-0.05, 0.05)).tobytes()
    if name == "MXFP4":
        for b, e in enumerate([0, 1, 250] + list(rng.integers(110, 135, size=BLOCKS))):
            if b < BLOCKS:
                raw[b * block_bytes] = int(e)
    values = quants.dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
    assert values.size == BLOCKS * block_values
    out[name] = {"bytes": bytes(raw).hex(), "values": [float(v) for v in values]}

# MXFP4 quantization: blocks of normal values at several magnitudes, a block of zeros, one outlier.
x = (rng.normal(0, 1, size=(8, 32)) * np.exp2(rng.integers(-12, 6, size=(8, 1)))).astype(np.float32)
x[3] = 0
x[5, 7] = 40.0
q = quants.quantize(x.reshape(1, -1), T.MXFP4)
out["MXFP4 quantized"] = {"input": [float(v) for v in x.reshape(-1)], "bytes": q.tobytes().hex()}

path = pathlib.Path(__file__).resolve().parents[1] / "data" / "quant" / "ggml_blocks.json"
path.write_text(json.dumps(out) + "\n")
print("wrote", path, {k: len(v.get("values", v.get("input"))) for k, v in out.items()})
