# sampling_params.py: vLLM's SamplingParams / StructuredOutputsParams over the C API's vllm_sampling_params.
"""SamplingParams with vLLM's field names and defaults (max_tokens=16, top_k=0).

Values are checked when the object is made, by vllm_sampling_params_validate
(the C API's checks, the engine's messages), and raise ValueError as vLLM's
SamplingParams does. Token ids are checked against the vocabulary when a
request is added.
"""

import copy
import ctypes
import json as _json
import math

from . import _lib
from .errors import VllmcValueError, error

_UNSET = object()


class StructuredOutputsParams:
    """vLLM's StructuredOutputsParams: at most one of json (a schema: dict or JSON text), regex, choice,
    grammar (EBNF) or json_object; disable_any_whitespace for JSON."""

    def __init__(self, json=None, regex=None, choice=None, grammar=None, json_object=None, disable_fallback=False,
                 disable_any_whitespace=False, disable_additional_properties=False, whitespace_pattern=None,
                 structural_tag=None, **kwargs):
        unknown = sorted(k for k in kwargs if k not in ("backend", "backend_was_auto", "_backend",
                                                        "_backend_was_auto"))
        if unknown:
            raise TypeError("StructuredOutputsParams() got unexpected keyword argument(s): %s" %
                            ", ".join(repr(k) for k in unknown))
        self.json = json
        self.regex = regex
        self.choice = list(choice) if choice is not None else None
        self.grammar = grammar
        self.json_object = json_object
        self.disable_fallback = disable_fallback
        self.disable_any_whitespace = disable_any_whitespace
        self.disable_additional_properties = disable_additional_properties
        self.whitespace_pattern = whitespace_pattern
        self.structural_tag = structural_tag
        given = [n for n in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
                 if getattr(self, n) not in (None, False)]
        if len(given) > 1:
            raise ValueError("You can only use one kind of structured outputs constraint but multiple are "
                             "specified: %s" % ", ".join(given))
        if whitespace_pattern is not None or structural_tag is not None or disable_additional_properties:
            raise NotImplementedError("vllmc: StructuredOutputsParams whitespace_pattern, structural_tag and "
                                      "disable_additional_properties are not supported")

    def __repr__(self):
        fields = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace")
        return "StructuredOutputsParams(%s)" % ", ".join("%s=%r" % (f, getattr(self, f)) for f in fields)


# vLLM's older name (guided_decoding=GuidedDecodingParams(...))
GuidedDecodingParams = StructuredOutputsParams


def _as_int(name, v, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise ValueError("%s must be an int, but is of type %s" % (name, type(v).__name__))
    return v


def _as_float(name, v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError("%s must be a float, but is of type %s" % (name, type(v).__name__))
    return float(v)


def _int_list(name, v):
    if v is None:
        return None
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ValueError("%s must be a list of ints" % name)
    return [_as_int("%s[%d]" % (name, i), x) for i, x in enumerate(v)]


def _str_list(name, v):
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    out = list(v)
    for i, s in enumerate(out):
        if not isinstance(s, str):
            raise ValueError("%s[%d] must be a string, but is of type %s" % (name, i, type(s).__name__))
    return out


class SamplingParams:
    """vLLM's SamplingParams (same names, defaults and meaning)."""

    _FIELDS = ("n", "best_of", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
               "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "bad_words", "include_stop_str_in_output",
               "ignore_eos", "max_tokens", "min_tokens", "logprobs", "prompt_logprobs", "detokenize",
               "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
               "structured_outputs", "logit_bias", "allowed_token_ids", "extra_args")

    def __init__(self, *, n=1, best_of=None, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0,
                 temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=None, stop_token_ids=None,
                 bad_words=None, include_stop_str_in_output=False, ignore_eos=False, max_tokens=16, min_tokens=0,
                 logprobs=None, prompt_logprobs=None, detokenize=True, skip_special_tokens=True,
                 spaces_between_special_tokens=True, logits_processors=None, truncate_prompt_tokens=None,
                 output_kind=None, structured_outputs=None, guided_decoding=None, logit_bias=None,
                 allowed_token_ids=None, extra_args=None):
        self.n = _as_int("n", n)
        self.best_of = _as_int("best_of", best_of, allow_none=True)
        if self.best_of is not None and self.best_of != self.n:
            raise NotImplementedError("vllmc: best_of (%d) other than n is not supported (vLLM V1 dropped it)"
                                      % self.best_of)
        self.presence_penalty = _as_float("presence_penalty", presence_penalty)
        self.frequency_penalty = _as_float("frequency_penalty", frequency_penalty)
        self.repetition_penalty = _as_float("repetition_penalty", repetition_penalty)
        self.temperature = _as_float("temperature", temperature)
        self.top_p = _as_float("top_p", top_p)
        self.top_k = _as_int("top_k", top_k)
        self.min_p = _as_float("min_p", min_p)
        self.seed = _as_int("seed", seed, allow_none=True)
        if self.seed == -1:
            self.seed = None
        self.stop = _str_list("stop", stop)
        self.stop_token_ids = _int_list("stop_token_ids", stop_token_ids) or []
        self.bad_words = _str_list("bad_words", bad_words)
        self.include_stop_str_in_output = bool(include_stop_str_in_output)
        self.ignore_eos = bool(ignore_eos)
        self.max_tokens = _as_int("max_tokens", max_tokens, allow_none=True)
        self.min_tokens = _as_int("min_tokens", min_tokens)
        self.logprobs = _as_int("logprobs", logprobs, allow_none=True)
        self.prompt_logprobs = _as_int("prompt_logprobs", prompt_logprobs, allow_none=True)
        if self.logprobs == -1 or self.prompt_logprobs == -1:
            raise NotImplementedError("vllmc: logprobs / prompt_logprobs = -1 (the whole vocabulary) is not "
                                      "supported; ask for at most 20")
        self.detokenize = bool(detokenize)
        self.skip_special_tokens = bool(skip_special_tokens)
        self.spaces_between_special_tokens = bool(spaces_between_special_tokens)
        if not self.spaces_between_special_tokens:
            raise NotImplementedError("vllmc: spaces_between_special_tokens=False is not supported")
        if logits_processors:
            raise NotImplementedError("vllmc: logits_processors (Python callables) are not supported")
        self.truncate_prompt_tokens = _as_int("truncate_prompt_tokens", truncate_prompt_tokens, allow_none=True)
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens < 1 and \
                self.truncate_prompt_tokens != -1:
            raise ValueError("truncate_prompt_tokens must be >= 1 or -1, got %d" % self.truncate_prompt_tokens)
        self.output_kind = output_kind
        if structured_outputs is not None and guided_decoding is not None:
            raise ValueError("give structured_outputs or guided_decoding, not both")
        so = structured_outputs if structured_outputs is not None else guided_decoding
        if isinstance(so, dict):
            so = StructuredOutputsParams(**so)
        if so is not None and not isinstance(so, StructuredOutputsParams):
            raise ValueError("structured_outputs must be a StructuredOutputsParams or a dict")
        self.structured_outputs = so
        if logit_bias is not None:
            logit_bias = {_as_int("logit_bias key", int(k) if isinstance(k, str) else k):
                          _as_float("logit_bias value", v) for k, v in dict(logit_bias).items()}
        self.logit_bias = logit_bias
        self.allowed_token_ids = _int_list("allowed_token_ids", allowed_token_ids)
        self.extra_args = extra_args
        # the C API's checks, with its messages
        c, _keep = self._to_c()
        st = _lib.lib.vllm_sampling_params_validate(ctypes.byref(c))
        if st != _lib.OK:
            raise error(st)

    # ------------------------------------------------------------ C struct

    def _to_c(self, max_tokens=None):
        """(vllm_sampling_params, objects that must outlive it). max_tokens: the value for max_tokens=None
        (the room left in the model's context)."""
        c = _lib.lib.vllm_sampling_default_params()
        keep = []
        mt = self.max_tokens
        if mt is None:
            mt = max_tokens if max_tokens is not None else max(1, self.min_tokens)
        c.max_tokens = mt
        c.temperature = self.temperature
        c.top_k = self.top_k
        c.top_p = self.top_p
        c.min_p = self.min_p
        c.has_seed = self.seed is not None
        c.seed = (self.seed or 0) & 0xFFFFFFFFFFFFFFFF
        c.ignore_eos = self.ignore_eos
        c.min_tokens = self.min_tokens
        c.skip_special_tokens = self.skip_special_tokens
        c.n = self.n
        c.presence_penalty = self.presence_penalty
        c.frequency_penalty = self.frequency_penalty
        c.repetition_penalty = self.repetition_penalty
        if self.logit_bias:
            ids, n = _lib.int_array(self.logit_bias.keys())
            vals = (ctypes.c_float * n)(*self.logit_bias.values())
            keep += [ids, vals]
            c.logit_bias_ids, c.logit_bias_values, c.num_logit_bias = ids, vals, n
        if self.allowed_token_ids is not None:
            ids, n = _lib.int_array(self.allowed_token_ids)
            if n == 0:  # not None and empty: an error (as vLLM), which the C API reports for a non-NULL empty list
                ids = (ctypes.c_int32 * 1)()
            keep.append(ids)
            c.allowed_token_ids, c.num_allowed_token_ids = ids, n
        arr, n = _lib.str_array(self.bad_words)
        keep.append(arr)
        c.bad_words, c.num_bad_words = arr, n
        arr, n = _lib.str_array(self.stop)
        keep.append(arr)
        c.stop, c.num_stop = arr, n
        c.include_stop_str_in_output = self.include_stop_str_in_output
        ids, n = _lib.int_array(self.stop_token_ids)
        keep.append(ids)
        c.stop_token_ids, c.num_stop_token_ids = ids, n
        c.logprobs = -1 if self.logprobs is None else self.logprobs
        c.prompt_logprobs = -1 if self.prompt_logprobs is None else self.prompt_logprobs
        so = self.structured_outputs
        if so is not None:
            s = c.structured_outputs
            if so.json is not None:
                text = so.json if isinstance(so.json, str) else _json.dumps(so.json)
                s.json = text.encode("utf-8")
            if so.json_object:
                s.json_object = True
            if so.regex is not None:
                s.regex = so.regex.encode("utf-8")
            if so.choice is not None:
                arr, n = _lib.str_array(so.choice)
                keep.append(arr)
                s.choice, s.num_choice = arr, n
            if so.grammar is not None:
                s.grammar = so.grammar.encode("utf-8")
            s.disable_any_whitespace = bool(so.disable_any_whitespace)
        return c, keep

    @classmethod
    def _from_c(cls, c):
        """A SamplingParams holding a C struct's scalar fields (the engine's defaults)."""
        return cls(n=c.n, temperature=float(c.temperature), top_k=c.top_k, top_p=float(c.top_p),
                   min_p=float(c.min_p), max_tokens=c.max_tokens, repetition_penalty=float(c.repetition_penalty),
                   presence_penalty=float(c.presence_penalty), frequency_penalty=float(c.frequency_penalty),
                   min_tokens=c.min_tokens, ignore_eos=bool(c.ignore_eos),
                   skip_special_tokens=bool(c.skip_special_tokens))

    # ------------------------------------------------------------ vLLM's helpers

    @property
    def sampling_type(self):
        return "greedy" if self.temperature < 1e-5 else ("random_seed" if self.seed is not None else "random")

    @property
    def all_stop_token_ids(self):
        return set(self.stop_token_ids)

    def clone(self):
        return copy.deepcopy(self)

    @classmethod
    def from_optional(cls, **kwargs):
        return cls(**{k: v for k, v in kwargs.items() if v is not None or k == "max_tokens"})

    def __eq__(self, other):
        return isinstance(other, SamplingParams) and all(
            getattr(self, f) == getattr(other, f) for f in self._FIELDS if f != "structured_outputs")

    def __repr__(self):
        def fmt(v):
            return repr(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
        return "SamplingParams(%s)" % ", ".join("%s=%s" % (f, fmt(getattr(self, f))) for f in self._FIELDS)


__all__ = ["SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams", "VllmcValueError"]
