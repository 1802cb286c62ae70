"""Models from GGUF files: `load_gguf` (a compiled language model with generation and chat),
reading the file (`read_gguf`, `GGUFFile`, `ModelConfig`), the tokenizer of its vocabulary
(`Tokenizer`), sampling (`Sampler`) and `fetch` for named models."""

# The arch_* modules register their architectures when imported.
from rlx_mlir.models import arch_gemma3, arch_mamba, arch_qwen35  # noqa: F401
from rlx_mlir.models.errors import ModelError
from rlx_mlir.models.fetch import KNOWN_MODELS, fetch
from rlx_mlir.models.gguf_file import GGUFFile, ModelConfig, TensorInfo, read_gguf
from rlx_mlir.models.model import GenerationStats, LanguageModel, load_gguf
from rlx_mlir.models.sampling import Sampler, SamplingParams
from rlx_mlir.models.tokenizer import Tokenizer, TokenStream

__all__ = ["KNOWN_MODELS", "GGUFFile", "GenerationStats", "LanguageModel", "ModelConfig",
           "ModelError", "Sampler", "SamplingParams", "TensorInfo", "TokenStream", "Tokenizer",
           "fetch", "load_gguf", "read_gguf"]
