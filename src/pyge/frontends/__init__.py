"""Front ends: ONNX files/protos and PyTorch modules -> pyge IR."""
from .onnx_loader import load_onnx

__all__ = ["load_onnx"]
