# outputs.py: vLLM's output classes (RequestOutput, CompletionOutput, Logprob, the embedding outputs).
"""Output objects with vLLM's attribute names (vllm/outputs.py, vllm/logprobs.py)."""


class Logprob:
    """vLLM's Logprob: the log probability of a token, its rank in the distribution (1 = most likely; None
    when the engine did not report it: a sampled token outside the requested top-k), its text."""

    __slots__ = ("logprob", "rank", "decoded_token")

    def __init__(self, logprob, rank=None, decoded_token=None):
        self.logprob = logprob
        self.rank = rank
        self.decoded_token = decoded_token

    def __eq__(self, other):
        return (isinstance(other, Logprob) and self.logprob == other.logprob and self.rank == other.rank and
                self.decoded_token == other.decoded_token)

    def __repr__(self):
        return "Logprob(logprob=%r, rank=%r, decoded_token=%r)" % (self.logprob, self.rank, self.decoded_token)


class CompletionOutput:
    """One sample of a request (vLLM's CompletionOutput)."""

    def __init__(self, index, text, token_ids, cumulative_logprob, logprobs, finish_reason=None, stop_reason=None,
                 lora_request=None):
        self.index = index
        self.text = text
        self.token_ids = token_ids
        self.cumulative_logprob = cumulative_logprob
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.lora_request = lora_request

    def finished(self):
        return self.finish_reason is not None

    def __repr__(self):
        return ("CompletionOutput(index=%d, text=%r, token_ids=%r, cumulative_logprob=%r, logprobs=%r, "
                "finish_reason=%s, stop_reason=%r)" % (self.index, self.text, self.token_ids,
                                                       self.cumulative_logprob, self.logprobs, self.finish_reason,
                                                       self.stop_reason))


class RequestOutput:
    """One prompt's result (vLLM's RequestOutput)."""

    def __init__(self, request_id, prompt, prompt_token_ids, prompt_logprobs, outputs, finished, metrics=None,
                 lora_request=None, encoder_prompt=None, encoder_prompt_token_ids=None, num_cached_tokens=None,
                 kv_transfer_params=None):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.metrics = metrics
        self.lora_request = lora_request
        self.encoder_prompt = encoder_prompt
        self.encoder_prompt_token_ids = encoder_prompt_token_ids
        self.num_cached_tokens = num_cached_tokens
        self.kv_transfer_params = kv_transfer_params
        self.multi_modal_placeholders = {}

    def __repr__(self):
        return ("RequestOutput(request_id=%s, prompt=%r, prompt_token_ids=%r, encoder_prompt=%r, "
                "encoder_prompt_token_ids=%r, prompt_logprobs=%r, outputs=%r, finished=%r, metrics=%r, "
                "lora_request=%r, num_cached_tokens=%r, multi_modal_placeholders=%r)" % (
                    self.request_id, self.prompt, self.prompt_token_ids, self.encoder_prompt,
                    self.encoder_prompt_token_ids, self.prompt_logprobs, self.outputs, self.finished, self.metrics,
                    self.lora_request, self.num_cached_tokens, self.multi_modal_placeholders))


class PoolingOutput:
    """vLLM's PoolingOutput: data is the pooled vector (a list of floats here, a tensor in vLLM)."""

    def __init__(self, data):
        self.data = data

    def __repr__(self):
        return "PoolingOutput(data=%r)" % (self.data,)


class EmbeddingOutput:
    """vLLM's EmbeddingOutput: embedding is a list of floats."""

    def __init__(self, embedding):
        self.embedding = embedding

    @property
    def hidden_size(self):
        return len(self.embedding)

    def __repr__(self):
        return "EmbeddingOutput(hidden_size=%d)" % self.hidden_size


class PoolingRequestOutput:
    """vLLM's PoolingRequestOutput (LLM.encode)."""

    def __init__(self, request_id, outputs, prompt_token_ids, finished, num_cached_tokens=0):
        self.request_id = request_id
        self.outputs = outputs
        self.prompt_token_ids = prompt_token_ids
        self.finished = finished
        self.num_cached_tokens = num_cached_tokens

    def __repr__(self):
        return "%s(request_id=%r, outputs=%r, prompt_token_ids=%r, finished=%r)" % (
            type(self).__name__, self.request_id, self.outputs, self.prompt_token_ids, self.finished)


class EmbeddingRequestOutput(PoolingRequestOutput):
    """vLLM's EmbeddingRequestOutput (LLM.embed): outputs.embedding."""
