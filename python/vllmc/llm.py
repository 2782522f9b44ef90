# llm.py: vLLM's offline entry point (LLM: generate, chat, embed, encode, get_tokenizer) over libvllmc.
"""vLLM's `LLM` class over the C engine.

LLM(model=...) creates a vllm_engine with vLLM's engine-argument names mapped
onto vllm_engine_options; generate() runs its prompts through the request-level
engine (vllm_engine_add_request / vllm_engine_step: continuous batching, the
step outputs give tokens, text, logprobs, stop reasons and cached prompt
tokens), chat() renders the model's chat template with vllm_chat_apply_template
and generates from the prompt's tokens, embed() / encode() run vllm_embed on a
pooling model.
"""

import ctypes
import itertools
import json
import math
import os
import sys
import threading

from . import _lib
from .errors import VllmcValueError, check, error
from .outputs import (CompletionOutput, EmbeddingOutput, EmbeddingRequestOutput, Logprob, PoolingOutput,
                      PoolingRequestOutput, RequestOutput)
from .sampling_params import SamplingParams

L = _lib.lib

# vLLM engine arguments accepted and ignored: they tune things this engine does not have (or does on its own)
_IGNORED_ARGS = frozenset((
    "trust_remote_code", "swap_space", "disable_log_stats", "max_logprobs", "compilation_config", "hf_token",
    "enable_chunked_prefill", "disable_custom_all_reduce", "max_seq_len_to_capture", "allowed_local_media_path",
    "allowed_media_domains", "served_model_name", "enable_log_requests", "disable_log_requests", "use_tqdm_on_load",
    "async_scheduling", "config_format", "download_dir", "max_parallel_loading_workers", "cuda_graph_sizes",
    "max_cudagraph_capture_size", "preemption_mode", "scheduling_policy", "code_revision", "disable_sliding_window",
    "enable_prompt_embeds", "calculate_kv_scales", "kv_cache_memory", "logits_processors"))

# vLLM engine arguments this engine cannot honour beyond their default: name -> the values that are fine
_DEFAULT_ONLY = {
    "pipeline_parallel_size": (1,), "data_parallel_size": (1,),
    "cpu_offload_gb": (0, 0.0), "quantization": (None,), "hf_overrides": (None, {}), "mm_processor_kwargs": (None,),
    "limit_mm_per_prompt": (None, {}), "enable_lora": (False, None), "max_loras": (1, None),
    "speculative_config": (None,), "skip_tokenizer_init": (False,), "tokenizer_mode": ("auto", "hf", "slow"),
    "logprobs_mode": ("raw_logprobs",), "distributed_executor_backend": (None, "uni", "mp"),
    "kv_transfer_config": (None,), "kv_events_config": (None,), "structured_outputs_config": (None,),
    "reasoning_parser": (None, ""), "enable_expert_parallel": (False,), "enable_sleep_mode": (False,),
    "worker_cls": ("auto",), "chat_template_content_format": ("auto", "string"),
}

_DTYPES = {"cpu": ("auto", "float32", "float"), "cuda": ("auto", "bfloat16", "bf16")}


def _b(s):
    return None if s is None else os.fspath(s).encode("utf-8") if not isinstance(s, bytes) else s


class PoolingParams:
    """vLLM's PoolingParams for embeddings: dimensions (Matryoshka models), normalize (None: the model's)."""

    def __init__(self, dimensions=None, normalize=None, use_activation=None, truncate_prompt_tokens=None,
                 task=None, **kwargs):
        if kwargs:
            raise TypeError("PoolingParams() got unexpected keyword argument(s): %s" %
                            ", ".join(repr(k) for k in sorted(kwargs)))
        if normalize is not None and use_activation is not None and bool(normalize) != bool(use_activation):
            raise ValueError("normalize and use_activation disagree")
        self.dimensions = dimensions
        self.normalize = normalize if normalize is not None else use_activation
        self.truncate_prompt_tokens = truncate_prompt_tokens
        self.task = task

    def _to_c(self):
        c = L.vllm_pooling_default_params()
        c.dimensions = int(self.dimensions or 0)
        c.normalize = 0 if self.normalize is None else (1 if self.normalize else -1)
        return c

    def __repr__(self):
        return "PoolingParams(dimensions=%r, normalize=%r)" % (self.dimensions, self.normalize)


class _Progress:
    """use_tqdm: a tqdm-like callable is used as vLLM does; True draws a plain line on a terminal's stderr."""

    def __init__(self, use_tqdm, total, desc):
        self.bar = None
        self.line = False
        self.total, self.done, self.desc = total, 0, desc
        if callable(use_tqdm):
            self.bar = use_tqdm(total=total, desc=desc)
        elif use_tqdm and getattr(sys.stderr, "isatty", lambda: False)():
            self.line = True
            self._draw()

    def _draw(self):
        sys.stderr.write("\r%s: %d/%d" % (self.desc, self.done, self.total))
        sys.stderr.flush()

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.line:
            self._draw()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.line:
            sys.stderr.write("\n")
            sys.stderr.flush()


class _Sample:
    __slots__ = ("token_ids", "text", "logprobs", "tops", "finish", "stop_reason")

    def __init__(self):
        self.token_ids, self.text, self.logprobs, self.tops = [], [], [], []
        self.finish, self.stop_reason = None, None


class _Request:
    __slots__ = ("rid", "prompt", "prompt_ids", "params", "samples", "prompt_lps", "cached", "left")

    def __init__(self, rid, prompt, prompt_ids, params):
        self.rid, self.prompt, self.prompt_ids, self.params = rid, prompt, prompt_ids, params
        self.samples = [_Sample() for _ in range(params.n)]
        self.prompt_lps = None  # (logprobs, top ids rows, top logprob rows)
        self.cached = 0
        self.left = params.n


class Tokenizer:
    """The engine's tokenizer with the transformers-style subset vLLM programs use."""

    def __init__(self, llm):
        self._llm = llm
        self.bos_token = llm._special_token("bos_token")
        self.eos_token = llm._special_token("eos_token")
        self.bos_token_id = self._single_id(self.bos_token)
        self.eos_token_id = self._single_id(self.eos_token)

    def _single_id(self, tok):
        if not tok:
            return None
        ids = self.encode(tok, add_special_tokens=False)
        return ids[0] if len(ids) == 1 else None

    @property
    def all_special_ids(self):
        return [i for i in (self.bos_token_id, self.eos_token_id) if i is not None]

    def encode(self, text, add_special_tokens=True, **kwargs):
        return self._llm._tokenize(text, add_special_tokens)

    def decode(self, token_ids, skip_special_tokens=False, **kwargs):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self._llm._detokenize(token_ids, skip_special_tokens)

    def __call__(self, text, add_special_tokens=True, **kwargs):
        if isinstance(text, (list, tuple)):
            ids = [self.encode(t, add_special_tokens) for t in text]
            return {"input_ids": ids, "attention_mask": [[1] * len(i) for i in ids]}
        ids = self.encode(text, add_special_tokens)
        return {"input_ids": ids, "attention_mask": [1] * len(ids)}

    def apply_chat_template(self, conversation, tools=None, documents=None, chat_template=None,
                            add_generation_prompt=False, continue_final_message=False, tokenize=True, **kwargs):
        """transformers' defaults (add_generation_prompt=False, tokenize=True); extra keyword arguments are
        template variables (enable_thinking=...)."""
        for k in ("padding", "truncation", "max_length", "return_tensors", "return_dict", "tokenizer_kwargs",
                  "return_assistant_tokens_mask"):
            if kwargs.pop(k, None):
                raise NotImplementedError("vllmc: apply_chat_template(%s=...) is not supported" % k)
        if documents is not None:
            kwargs["documents"] = documents
        text = self._llm._render_chat(conversation, chat_template, add_generation_prompt, continue_final_message,
                                      tools, kwargs or None)
        return self.encode(text, add_special_tokens=False) if tokenize else text


class LLM:
    """vLLM's offline engine: LLM(model=...).generate(prompts, sampling_params)."""

    def __init__(self, model, *, tokenizer=None, tokenizer_mode="auto", skip_tokenizer_init=False,
                 trust_remote_code=False, tensor_parallel_size=1, dtype="auto", quantization=None, revision=None,
                 tokenizer_revision=None, seed=0, gpu_memory_utilization=0.9, enforce_eager=False,
                 max_model_len=None, max_num_seqs=None, max_num_batched_tokens=None, enable_prefix_caching=None,
                 kv_cache_dtype="auto", load_format="auto", device=None, block_size=None,
                 num_gpu_blocks_override=None, kv_cache_memory_bytes=None, num_kv_blocks=None, num_threads=None,
                 runner="auto", convert="auto", task=None, pooler_config=None, override_pooler_config=None,
                 generation_config="auto", mamba_cache_dtype="auto", mamba_ssm_cache_dtype="auto", nnodes=1,
                 node_rank=0, master_addr="127.0.0.1", master_port=29501, **kwargs):
        self._engine = None
        self._lock = threading.RLock()
        self._counter = itertools.count()
        self._decoded = {}
        given = dict(kwargs, tokenizer_mode=tokenizer_mode, skip_tokenizer_init=skip_tokenizer_init,
                     quantization=quantization)
        unknown = sorted(k for k in kwargs if k not in _IGNORED_ARGS and k not in _DEFAULT_ONLY)
        if unknown:
            raise TypeError("LLM() got unexpected keyword argument(s): %s" % ", ".join(repr(k) for k in unknown))
        for k, ok in _DEFAULT_ONLY.items():
            if k in given and given[k] not in ok:
                raise NotImplementedError("vllmc: %s=%r is not supported (only %s)" %
                                          (k, given[k], " or ".join(repr(v) for v in ok)))

        o = L.vllm_engine_default_options()
        self._keep = []  # the option strings must outlive the engine (its `tokenizer` is read by chat)

        def setstr(field, value):
            b = _b(value)
            self._keep.append(b)
            setattr(o, field, b)

        if device not in (None, "auto"):
            if device not in ("cpu", "cuda"):
                raise ValueError("device must be 'cpu' or 'cuda', got %r" % (device,))
            setstr("device", device)
        dev = (o.device or b"cpu").decode()
        if dtype is not None and str(dtype).replace("torch.", "") not in _DTYPES.get(dev, ("auto",)):
            raise NotImplementedError("vllmc: dtype=%r: the engine computes in float32 on the CPU and bfloat16 on "
                                      "CUDA (the weights are used in their own dtype); use dtype='auto'" % (dtype,))
        if tokenizer is not None:
            setstr("tokenizer", tokenizer)
        if revision is not None:
            setstr("revision", revision)
        if tokenizer_revision is not None:
            setstr("tokenizer_revision", tokenizer_revision)
        o.seed = (0 if seed is None else int(seed)) & 0xFFFFFFFFFFFFFFFF
        o.gpu_memory_utilization = float(gpu_memory_utilization)
        o.enforce_eager = bool(enforce_eager)
        if max_model_len is not None:
            o.max_model_len = int(max_model_len)
        if max_num_seqs is not None:
            o.max_num_seqs = int(max_num_seqs)
        if max_num_batched_tokens is not None:
            o.max_num_batched_tokens = int(max_num_batched_tokens)
        if enable_prefix_caching is not None:
            o.enable_prefix_caching = bool(enable_prefix_caching)
        if kv_cache_dtype not in (None, "auto"):
            setstr("kv_cache_dtype", kv_cache_dtype)
        if mamba_cache_dtype not in (None, "auto"):
            setstr("mamba_cache_dtype", mamba_cache_dtype)
        if mamba_ssm_cache_dtype not in (None, "auto"):
            setstr("mamba_ssm_cache_dtype", mamba_ssm_cache_dtype)
        if load_format in ("auto", "safetensors", "gguf", None):
            o.load_format = _lib.LOAD_AUTO
        elif load_format == "dummy":
            o.load_format = _lib.LOAD_DUMMY
        else:
            raise NotImplementedError("vllmc: load_format=%r is not supported (auto, safetensors, gguf or dummy)"
                                      % (load_format,))
        if block_size is not None:
            o.block_size = int(block_size)
        blocks = num_kv_blocks if num_kv_blocks is not None else num_gpu_blocks_override
        if blocks is not None:
            o.num_kv_blocks = int(blocks)
        if kv_cache_memory_bytes is not None:
            o.kv_cache_memory = int(kv_cache_memory_bytes)
        if num_threads is not None:
            o.num_threads = int(num_threads)
        o.tensor_parallel_size = int(tensor_parallel_size or 1)  # the engine refuses models it cannot split
        # several hosts (vLLM's nnodes / node_rank / master_addr / master_port): this LLM is node 0; the other
        # hosts run `vllmc serve MODEL ... --node-rank N` (the engine refuses node_rank > 0 here, saying so)
        o.nnodes = int(nnodes or 1)
        o.node_rank = int(node_rank or 0)
        o.master_port = int(master_port or 0)
        if master_addr is not None:
            setstr("master_addr", master_addr)
        # the runner: vLLM's runner / convert (and the older task)
        pooling = runner == "pooling" or convert == "embed" or task in ("embed", "embedding")
        if runner not in ("auto", "generate", "pooling") or convert not in ("auto", "none", "embed", None) or \
                task not in (None, "auto", "generate", "embed", "embedding"):
            raise NotImplementedError("vllmc: runner=%r convert=%r task=%r: the runners are generate and pooling "
                                      "(embed)" % (runner, convert, task))
        o.runner = _lib.RUNNER_POOLING if pooling else (
            _lib.RUNNER_GENERATE if runner == "generate" or task == "generate" else _lib.RUNNER_AUTO)
        pc = pooler_config if pooler_config is not None else override_pooler_config
        if pc is not None:
            get = pc.get if isinstance(pc, dict) else (lambda k, d=None: getattr(pc, k, d))
            pt = get("pooling_type")
            types = {None: _lib.POOLING_AUTO, "LAST": _lib.POOLING_LAST, "MEAN": _lib.POOLING_MEAN,
                     "CLS": _lib.POOLING_CLS}
            if (pt.upper() if isinstance(pt, str) else pt) not in types:
                raise NotImplementedError("vllmc: pooling_type %r (LAST, MEAN or CLS)" % (pt,))
            o.pooling_type = types[pt.upper() if isinstance(pt, str) else pt]
            norm = get("normalize", get("use_activation"))
            o.pooler_normalize = 0 if norm is None else (1 if norm else -1)
        if generation_config not in ("auto", "vllm"):
            raise NotImplementedError("vllmc: generation_config=%r (auto or vllm)" % (generation_config,))
        self._use_generation_config = generation_config == "auto"

        self.model = os.fspath(model)
        eng = ctypes.c_void_p()
        st = L.vllm_engine_create(_b(model), ctypes.byref(o), ctypes.byref(eng))
        if st != _lib.OK:
            raise error(st)
        self._engine = eng
        self._info = _lib.EngineInfo()
        L.vllm_engine_get_info(eng, ctypes.byref(self._info))
        self._tokenizer = None

    # ------------------------------------------------------------ lifetime

    def close(self):
        """Frees the engine (also done when the object is collected)."""
        with self._lock:
            if self._engine:
                L.vllm_engine_free(self._engine)
                self._engine = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _eng(self):
        if not self._engine:
            raise RuntimeError("vllmc: the LLM was closed")
        return self._engine

    # ------------------------------------------------------------ information

    @property
    def max_model_len(self):
        return self._info.max_model_len

    @property
    def vocab_size(self):
        return self._info.vocab_size

    @property
    def is_pooling(self):
        return self._info.runner == _lib.RUNNER_POOLING

    def get_default_sampling_params(self):
        """vLLM's: SamplingParams() with the model's generation_config.json applied (generation_config='auto')."""
        if not self._use_generation_config:
            return SamplingParams()
        return SamplingParams._from_c(L.vllm_engine_default_sampling(self._eng()))

    def get_tokenizer(self):
        if not L.vllm_engine_has_tokenizer(self._eng()):
            raise ValueError("%s has no tokenizer (tokenizer.json): prompts must be token ids" % self.model)
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self)
        return self._tokenizer

    # ------------------------------------------------------------ tokenizer access

    def _tokenize(self, text, add_special_tokens):
        if not isinstance(text, str):
            raise TypeError("text must be a str, got %s" % type(text).__name__)
        ids = _lib.c_int32_p()
        n = ctypes.c_size_t()
        with self._lock:
            check(L.vllm_tokenize(self._eng(), text.encode("utf-8"), bool(add_special_tokens), ctypes.byref(ids),
                                  ctypes.byref(n)))
        try:
            return ids[:n.value]
        finally:
            L.vllm_free(ids)

    def _detokenize(self, ids, skip_special_tokens):
        arr, n = _lib.int_array(ids)
        out = ctypes.c_void_p()
        with self._lock:
            check(L.vllm_detokenize(self._eng(), arr, n, bool(skip_special_tokens), ctypes.byref(out)))
        return _lib.take_string(out) or ""

    def _decoded_token(self, tid):
        s = self._decoded.get(tid)
        if s is None and L.vllm_engine_has_tokenizer(self._eng()):
            try:
                s = self._detokenize([tid], False)
            except ValueError:
                s = None
            self._decoded[tid] = s
        return s

    def _render_chat(self, conversation, chat_template, add_generation_prompt, continue_final_message, tools,
                     kwargs):
        o = L.vllm_chat_template_default_options()
        o.chat_template = _b(chat_template)
        o.add_generation_prompt = bool(add_generation_prompt)
        o.continue_final_message = bool(continue_final_message)
        o.tools_json = None if tools is None else json.dumps(list(tools)).encode("utf-8")
        o.chat_template_kwargs_json = None if not kwargs else json.dumps(dict(kwargs)).encode("utf-8")
        out = ctypes.c_void_p()
        with self._lock:
            st = L.vllm_chat_apply_template(self._eng(), json.dumps(list(conversation)).encode("utf-8"),
                                            ctypes.byref(o), ctypes.byref(out))
        if st == -8 and not chat_template:  # no template: vLLM's ValueError, not a missing file
            raise VllmcValueError(_lib.last_error())
        check(st)
        return _lib.take_string(out)

    def _special_token(self, name):
        """bos_token / eos_token as the chat template sees them (tokenizer_config.json), or None."""
        try:
            return self._render_chat([{"role": "user", "content": ""}], "{{ %s }}" % name, False, False, None,
                                     None) or None
        except Exception:
            return None

    # ------------------------------------------------------------ generation

    def _prompts(self, prompts):
        """[(prompt text or None, token ids, truncate)] of vLLM's PromptType or a sequence of them."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        out = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                out.append((p, None))
            elif isinstance(p, dict):
                if "multi_modal_data" in p or "prompt_embeds" in p:
                    raise NotImplementedError("vllmc: multi-modal and embedding prompts are not supported")
                if "prompt_token_ids" in p:
                    ids = [int(t) for t in p["prompt_token_ids"]]
                    out.append((p.get("prompt"), ids))
                elif "prompt" in p:
                    out.append((p["prompt"], None))
                else:
                    raise ValueError("prompts[%d]: a dict prompt needs 'prompt' or 'prompt_token_ids'" % i)
            else:
                raise TypeError("prompts[%d]: expected a str or a dict ({'prompt': ...} / {'prompt_token_ids': "
                                "[...]}), got %s" % (i, type(p).__name__))
        return [(text, ids if ids is not None else self._tokenize(text, True)) for text, ids in out]

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None, priority=None, **kwargs):
        """vLLM's LLM.generate: one RequestOutput per prompt, in input order."""
        if kwargs:
            raise TypeError("generate() got unexpected keyword argument(s): %s" %
                            ", ".join(repr(k) for k in sorted(kwargs)))
        if lora_request is not None:
            raise NotImplementedError("vllmc: LoRA adapters are not supported")
        if self.is_pooling:
            raise ValueError("LLM.generate() is only supported for generative models; %s runs as a pooling "
                             "model (use LLM.embed)" % self.model)
        return self._run(self._prompts(prompts), sampling_params, use_tqdm)

    def _run(self, items, sampling_params, use_tqdm):
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(items)
        else:
            params = list(sampling_params)
            if len(params) != len(items):
                raise ValueError("The lengths of prompts and sampling_params must be the same.")
            for sp in params:
                if not isinstance(sp, SamplingParams):
                    raise TypeError("sampling_params must be SamplingParams or a list of them")
        with self._lock:
            eng = self._eng()
            reqs, by_id = [], {}
            progress = None
            try:
                for (text, ids), sp in zip(items, params):
                    t = sp.truncate_prompt_tokens
                    if t is not None:
                        ids = ids[-(self.max_model_len if t == -1 else t):]
                    rid = str(next(self._counter))
                    arr, n = _lib.int_array(ids)
                    prompt = _lib.Prompt(None, arr, n)
                    c, keep = sp._to_c(max_tokens=max(1, self.max_model_len - n))
                    st = L.vllm_engine_add_request(eng, rid.encode(), ctypes.byref(prompt), ctypes.byref(c))
                    del keep
                    if st != _lib.OK:
                        raise error(st, "prompt %d" % len(reqs) if len(items) > 1 else None)
                    r = _Request(rid, text, list(ids), sp)
                    reqs.append(r)
                    by_id[rid] = r
                progress = _Progress(use_tqdm, len(reqs), "Processed prompts")
                unfinished = len(reqs)
                outs = ctypes.POINTER(_lib.RequestOutputC)()
                nout = ctypes.c_size_t()
                while unfinished:
                    check(L.vllm_engine_step(eng, ctypes.byref(outs), ctypes.byref(nout)))
                    for k in range(nout.value):
                        o = outs[k]
                        r = by_id.get(o.request_id.decode())
                        if r is not None and self._collect(r, o):
                            unfinished -= 1
                            progress.update(1)
            except BaseException:
                for r in reqs:
                    if r.left:
                        L.vllm_engine_abort_request(eng, r.rid.encode())
                while L.vllm_engine_has_unfinished(eng):  # the aborts are reported by a step: drain them
                    if L.vllm_engine_step(eng, ctypes.byref(ctypes.POINTER(_lib.RequestOutputC)()),
                                          ctypes.byref(ctypes.c_size_t())) != _lib.OK:
                        break
                raise
            finally:
                if progress is not None:
                    progress.close()
        return [self._request_output(r) for r in reqs]

    def _collect(self, r, o):
        """Adds one step output to its request; True when the request has finished (every sample)."""
        s = r.samples[o.index]
        k = o.num_top_logprobs
        want_lp = r.params.logprobs is not None
        for j in range(o.num_new_tokens):
            s.token_ids.append(o.new_token_ids[j])
            if want_lp:
                s.logprobs.append(o.new_logprobs[j])
                s.tops.append([(o.top_logprob_ids[j * k + t], o.top_logprobs[j * k + t]) for t in range(k)]
                              if k > 0 else [])
        if o.new_text_len:
            s.text.append(ctypes.string_at(o.new_text, o.new_text_len))
        if o.prompt_logprobs:
            np_, pk = o.prompt_tokens, o.num_prompt_top_logprobs
            lps = o.prompt_logprobs[:np_]
            tops = [[(o.prompt_top_logprob_ids[i * pk + t], o.prompt_top_logprobs[i * pk + t]) for t in range(pk)]
                    for i in range(np_)] if pk > 0 else [[] for _ in range(np_)]
            r.prompt_lps = (lps, tops)
        if o.index == 0:
            r.cached = o.cached_prompt_tokens
        if o.finish_reason != _lib.FINISH_NONE and s.finish is None:
            s.finish = _lib.FINISH_NAMES.get(o.finish_reason, "abort")
            s.stop_reason = o.stop_reason.decode("utf-8", "replace") if o.stop_reason else None
            if s.stop_reason is None and s.finish == "stop" and s.token_ids and \
                    s.token_ids[-1] in r.params.stop_token_ids:
                s.stop_reason = s.token_ids[-1]  # vLLM: the stop token id that ended it
            r.left -= 1
            return r.left == 0
        return False

    def _logprob_dict(self, chosen, lp, tops):
        d = {}
        rank = next((t + 1 for t, (tid, _) in enumerate(tops) if tid == chosen), None)
        d[chosen] = Logprob(lp, rank, self._decoded_token(chosen))
        for t, (tid, tlp) in enumerate(tops):
            d[tid] = Logprob(tlp, t + 1, self._decoded_token(tid))
        return d

    def _request_output(self, r):
        sp = r.params
        outputs = []
        for idx, s in enumerate(r.samples):
            logprobs, cum = None, None
            if sp.logprobs is not None:
                logprobs = [self._logprob_dict(t, lp, tops) for t, lp, tops in zip(s.token_ids, s.logprobs, s.tops)]
                cum = float(sum(s.logprobs))
            text = b"".join(s.text).decode("utf-8", "replace") if sp.detokenize else ""
            outputs.append(CompletionOutput(idx, text, list(s.token_ids), cum, logprobs, s.finish, s.stop_reason))
        prompt_logprobs = None
        if sp.prompt_logprobs is not None and r.prompt_lps is not None:
            lps, tops = r.prompt_lps
            prompt_logprobs = [None] + [
                self._logprob_dict(r.prompt_ids[i], lps[i], tops[i]) if not math.isnan(lps[i]) else None
                for i in range(1, len(lps))]
        return RequestOutput(r.rid, r.prompt, r.prompt_ids, prompt_logprobs, outputs, True,
                             num_cached_tokens=r.cached)

    # ------------------------------------------------------------ chat

    def chat(self, messages, sampling_params=None, use_tqdm=True, lora_request=None, chat_template=None,
             chat_template_content_format="auto", add_generation_prompt=True, continue_final_message=False,
             tools=None, chat_template_kwargs=None, mm_processor_kwargs=None, **kwargs):
        """vLLM's LLM.chat: one conversation (a list of {"role", "content"} dicts) or a list of them, rendered
        with the model's chat template (or chat_template: the text or a file) and generated from."""
        if kwargs:
            raise TypeError("chat() got unexpected keyword argument(s): %s" %
                            ", ".join(repr(k) for k in sorted(kwargs)))
        if lora_request is not None or mm_processor_kwargs:
            raise NotImplementedError("vllmc: LoRA adapters and multi-modal inputs are not supported")
        if chat_template_content_format not in ("auto", "string"):
            raise NotImplementedError("vllmc: chat_template_content_format=%r (text parts are joined as 'string')"
                                      % (chat_template_content_format,))
        if self.is_pooling:
            raise ValueError("LLM.chat() is only supported for generative models")
        convs = messages if messages and isinstance(messages[0], (list, tuple)) else [messages]
        items = []
        for conv in convs:
            text = self._render_chat(conv, chat_template, add_generation_prompt, continue_final_message, tools,
                                     chat_template_kwargs)
            # the template wrote the special tokens: none added (vLLM's LLM.chat)
            items.append((text, self._tokenize(text, False)))
        return self._run(items, sampling_params, use_tqdm)

    # ------------------------------------------------------------ pooling

    def _pool(self, prompts, pooling_params, truncate_prompt_tokens, use_tqdm, cls, out_cls):
        if not self.is_pooling:
            raise ValueError("LLM.embed() / encode() are only supported for pooling models; %s runs as a "
                             "generative model (LLM(..., runner='pooling'))" % self.model)
        items = self._prompts(prompts)
        if pooling_params is None or isinstance(pooling_params, PoolingParams):
            pps = [pooling_params or PoolingParams()] * len(items)
        else:
            pps = list(pooling_params)
            if len(pps) != len(items):
                raise ValueError("The lengths of prompts and pooling_params must be the same.")
        results = []
        progress = _Progress(use_tqdm, len(items), "Processed prompts")
        try:
            # one vllm_embed per run of prompts with the same parameters
            i = 0
            while i < len(items):
                j = i + 1
                while j < len(items) and pps[j] is pps[i]:
                    j += 1
                group = []
                for text, ids in items[i:j]:
                    t = truncate_prompt_tokens if truncate_prompt_tokens is not None else pps[i].truncate_prompt_tokens
                    if t is not None:
                        ids = ids[-(self.max_model_len if t == -1 else t):]
                    group.append(list(ids))
                arrs = [_lib.int_array(ids) for ids in group]
                cprompts = (_lib.Prompt * len(group))(*[_lib.Prompt(None, a, n) for a, n in arrs])
                c = pps[i]._to_c()
                out = ctypes.POINTER(_lib.Embedding)()
                with self._lock:
                    check(L.vllm_embed(self._eng(), cprompts, len(group), ctypes.byref(c), ctypes.byref(out)))
                try:
                    for g, ids in enumerate(group):
                        vec = out[g].data[:out[g].dim]
                        rid = str(next(self._counter))
                        results.append(out_cls(rid, cls(vec), ids, True))
                        progress.update(1)
                finally:
                    L.vllm_embeddings_free(out, len(group))
                i = j
        finally:
            progress.close()
        return results

    def embed(self, prompts, truncate_prompt_tokens=None, use_tqdm=True, pooling_params=None, lora_request=None):
        """vLLM's LLM.embed: EmbeddingRequestOutput per prompt, .outputs.embedding a list of floats."""
        if lora_request is not None:
            raise NotImplementedError("vllmc: LoRA adapters are not supported")
        return self._pool(prompts, pooling_params, truncate_prompt_tokens, use_tqdm, EmbeddingOutput,
                          EmbeddingRequestOutput)

    def encode(self, prompts, pooling_params=None, truncate_prompt_tokens=None, use_tqdm=True, lora_request=None,
               pooling_task=None):
        """vLLM's LLM.encode for the embed task: PoolingRequestOutput per prompt, .outputs.data a list."""
        if pooling_task not in (None, "embed"):
            raise NotImplementedError("vllmc: pooling_task=%r (only 'embed')" % (pooling_task,))
        if lora_request is not None:
            raise NotImplementedError("vllmc: LoRA adapters are not supported")
        return self._pool(prompts, pooling_params, truncate_prompt_tokens, use_tqdm, PoolingOutput,
                          PoolingRequestOutput)
