__version__ = "0.1.0"

from metainfer.sequence import SamplingParams
from metainfer.engine import LLM, LLMEngine, RequestOutput, CompletionOutput, Logprob
