__version__ = "0.1.0"

from metainfer.engine.sequence import SamplingParams
from metainfer.engine.llm_engine import LLM, LLMEngine, RequestOutput, CompletionOutput, Logprob
