"""Models from GGUF files: reading the file (`read_gguf`, `GGUFFile`, `ModelConfig`), the
tokenizer of its vocabulary (`Tokenizer`) and `fetch` for named models."""

from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.fetch import KNOWN_MODELS, fetch
from rlx_mlir.models.gguf_file import GGUFFile, ModelConfig, TensorInfo, read_gguf
from rlx_mlir.models.tokenizer import Tokenizer, TokenStream

__all__ = ["KNOWN_MODELS", "GGUFFile", "ModelConfig", "ModelError", "TensorInfo", "TokenStream",
           "Tokenizer", "fetch", "read_gguf"]
