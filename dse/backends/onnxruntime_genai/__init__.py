"""ONNX Runtime GenAI: generative language models built by its model builder into ONNX with a KV
cache (fp32, int8 or int4 weights) and decoded by its generator loop, on the CPU.

Importing this package registers its backend; the runtime itself is imported on first use.
"""

from dse.backends.onnxruntime_genai.backend import OrtGenAIBackend

__all__ = ["OrtGenAIBackend"]
