"""Golden dequantisation of every ggml block type by gguf-py (the reference llama.cpp's Python tools use):
random blocks with sane float16 scales, and the float32 values gguf-py makes of them.
Writes tests/data/quant/ggml_blocks.json. Run: python make_quant_fixtures.py (needs gguf, numpy)."""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# Byte offsets of each type's float16 fields: (scale offsets, signed-minimum offsets).
LAYOUT = {
    "Q8_0": ([0], []), "Q4_0": ([0], []), "Q4_1": ([0], [2]), "Q5_0": ([0], []), "Q5_1": ([0], [2]),
    "Q2_K": ([80, 82], []), "Q3_K": ([108], []), "Q4_K": ([0, 2], []), "Q5_K": ([0, 2], []), "Q6_K": ([208], []),
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
    values = quants.dequantize(np.frombuffer(bytes(raw), dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
    assert values.size == BLOCKS * block_values
    out[name] = {"bytes": bytes(raw).hex(), "values": [float(v) for v in values]}

path = pathlib.Path(__file__).resolve().parents[1] / "data" / "quant" / "ggml_blocks.json"
path.write_text(json.dumps(out) + "\n")
print("wrote", path, {k: len(v["values"]) for k, v in out.items()})
