"""LLaMA's building blocks, under the module tinygrad 0.9's code imports them from (`from extra.models.llama import
RMSNorm`): the layers themselves live in tinygrad.nn."""
from tinygrad.nn import RMSNorm

__all__ = ["RMSNorm"]
