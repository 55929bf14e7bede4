"""The driver-level benchmark: `python -m tinygrad.benchmark [--device D ...] [--json] [--no-torch]`.

For each device (default: every compiled device that opens here), it measures launch latency (a one-element kernel:
host time per launch, and device time), host-to-device and device-to-host bandwidth (pageable memory, and pinned
where the device has pinned host buffers), device-to-device copies, the standard kernels (elementwise add, full sum,
fp32/fp16/bf16 matmuls, matrix-vector, conv2d, softmax, layernorm, causal attention), TinyJit replay per kernel and
the compile time of one kernel (`tinygrad_rows.py`). With PyTorch installed, the same rows run through it on the
matching device (`torch_rows.py`), its float32 matmuls and convolutions at tinygrad's precision (TF32 only where
ALLOW_TF32=1, for cuBLAS and cuDNN alike); on host devices, numpy runs the rows it can too (`numpy_rows.py`). Host
devices run smaller workloads than GPUs (`workloads.py`).

The table goes to the terminal, with a progress line on stderr while it runs; `--json` prints one JSON object
instead: {device: {row: {"unit": ..., "tinygrad": value or null, "torch": value or null, "numpy": value or null,
"error": text}}} (an "error" only where the row could not run, with the reason).
"""
