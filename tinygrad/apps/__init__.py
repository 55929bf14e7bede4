"""Applications built on tinygrad that ship with the package: `tinygrad.apps.llm`, a GGUF language-model runtime."""
