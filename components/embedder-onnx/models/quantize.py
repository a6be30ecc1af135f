#!/usr/bin/env python3
"""Quantise an fp32 ONNX model's matrix products to int8 with onnxruntime's quantize_dynamic.

Weights int8 per output channel (symmetric), each MatMul's input quantised to uint8 as it runs
(DynamicQuantizeLinear, MatMulInteger): onnxruntime fuses them into its int8 kernels (VNNI,
AMX where the CPU has them). Only MatMul: the word table (a Gather) stays fp32, which keeps
the embeddings within 0.99 cosine of fp32 on the reference sentences.

Usage: quantize.py FP32_MODEL OUT_MODEL
"""

import logging
import sys

from onnxruntime.quantization import QuantType, quantize_dynamic


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, out = sys.argv[1:]
    # It suggests shape inference first; the graph's shapes are dynamic, and the output is checked.
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(src, out, weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"])


if __name__ == "__main__":
    main()
