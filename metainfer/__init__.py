__version__ = "0.1.0"

from metainfer.engine.sequence import SamplingParams
from metainfer.engine.outputs import RequestOutput, CompletionOutput, Logprob
from metainfer.engine.llm_engine import LLMEngine
from metainfer.engine.llm import LLM
