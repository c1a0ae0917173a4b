"""Sample messages built from the protocol schema: every field present, with non-default values.

Used by the codec tests (``tests/unit/test_codec.py``) and as the fuzzer's corpus
(``bench/fuzz_bench.py``).
"""

from __future__ import annotations

import random

from samsa.protocol import codec


def sample(fields: list[dict], structs: dict, version: int, flexible: bool, rng: random.Random, depth=0) -> dict:
    out = {}
    for f in fields:
        if not codec._in(f.get("versions"), version):
            continue
        t = f["type"]
        if t.startswith("[]"):
            elem = t[2:]
            n = rng.randint(1, 2) if depth < 3 else 0
            if elem in codec._PRIMITIVES or elem in ("string", "bytes", "uuid"):
                out[codec.snake(f["name"])] = [_scalar(elem, rng) for _ in range(n)]
            else:
                sub = f.get("fields") or structs[elem]["fields"]
                out[codec.snake(f["name"])] = [sample(sub, structs, version, flexible, rng, depth + 1) for _ in range(n)]
        elif t in codec._PRIMITIVES or t in ("string", "bytes", "uuid", "records"):
            out[codec.snake(f["name"])] = _scalar(t, rng)
        else:
            sub = f.get("fields") or structs[t]["fields"]
            out[codec.snake(f["name"])] = sample(sub, structs, version, flexible, rng, depth + 1)
    return out


def _scalar(t: str, rng: random.Random):
    return {
        "bool": lambda: True,
        "int8": lambda: rng.randint(1, 100),
        "int16": lambda: rng.randint(1, 30000),
        "uint16": lambda: rng.randint(1, 60000),
        "int32": lambda: rng.randint(1, 2**31 - 1),
        "uint32": lambda: rng.randint(1, 2**32 - 1),
        "int64": lambda: rng.randint(1, 2**62),
        "float64": lambda: 1.5,
        "string": lambda: "s%d-é" % rng.randint(0, 999),
        "bytes": lambda: bytes(rng.randint(0, 255) for _ in range(5)),
        "records": lambda: bytes(range(7)),
        "uuid": lambda: bytes(rng.randint(0, 255) for _ in range(16)),
    }[t]()
