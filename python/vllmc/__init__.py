# vllmc: vLLM's offline Python API (LLM, SamplingParams, ...) over libvllmc.so, with ctypes and the standard library.
"""vLLM's offline API over vllm.c's C engine.

    from vllmc import LLM, SamplingParams      # instead of: from vllm import LLM, SamplingParams

    llm = LLM(model="models/stories260K")
    for out in llm.generate(["Once upon a time"], SamplingParams(temperature=0.8, top_p=0.95)):
        print(out.prompt, out.outputs[0].text)

libvllmc.so is found through $VLLMC_LIBRARY, then next to the installed package
(<prefix>/lib, <prefix>/lib/<multiarch>), then the build tree (<repo>/build),
then ctypes.util.find_library("vllmc").
"""

from . import _lib
from .errors import (VllmcError, VllmcMemoryError, VllmcNotImplementedError, VllmcOSError, VllmcRuntimeError,
                     VllmcValueError)
from .llm import LLM, PoolingParams, Tokenizer
from .outputs import (CompletionOutput, EmbeddingOutput, EmbeddingRequestOutput, Logprob, PoolingOutput,
                      PoolingRequestOutput, RequestOutput)
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams

__version__ = "0.1.0"
library_path = _lib.lib._name  # the libvllmc.so that was loaded


def TextPrompt(prompt, **kwargs):
    """vLLM's TextPrompt (a dict)."""
    return dict(prompt=prompt, **kwargs)


def TokensPrompt(prompt_token_ids, **kwargs):
    """vLLM's TokensPrompt (a dict)."""
    return dict(prompt_token_ids=list(prompt_token_ids), **kwargs)


__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams", "PoolingParams", "Tokenizer",
           "RequestOutput", "CompletionOutput", "Logprob", "EmbeddingOutput", "EmbeddingRequestOutput",
           "PoolingOutput", "PoolingRequestOutput", "TextPrompt", "TokensPrompt", "VllmcError", "VllmcValueError",
           "VllmcOSError", "VllmcNotImplementedError", "VllmcMemoryError", "VllmcRuntimeError", "__version__"]
