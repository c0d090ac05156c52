__version__ = "0.1.0"

# The public names, imported on first use: `metainfer.engine.sampling_params` (or the server's
# request parser in a worker process) must not pay for torch and transformers to import.
_PUBLIC = {
    "SamplingParams": "metainfer.engine.sampling_params",
    "StructuredOutputsParams": "metainfer.engine.structured_outputs",
    "RequestOutputKind": "metainfer.engine.sampling_params",
    "TextPrompt": "metainfer.inputs",
    "TokensPrompt": "metainfer.inputs",
    "RequestOutput": "metainfer.engine.outputs",
    "CompletionOutput": "metainfer.engine.outputs",
    "Logprob": "metainfer.engine.outputs",
    "LLMEngine": "metainfer.engine.llm_engine",
    "LLM": "metainfer.engine.llm",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'metainfer' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value
