# _lib.py: finds and loads libvllmc.so with ctypes; the structs and functions of include/vllm.h, field for field.
"""ctypes bindings of include/vllm.h (the subset the Python API uses).

Every Structure below declares the C struct's fields in the header's order with
the header's types (bool = c_bool, size_t = c_size_t, enums = c_int); the test
suite compares their sizes and offsets with a C program's (tests/python).
"""

import ctypes
import ctypes.util
import glob
import os
import sysconfig

# ---------------------------------------------------------------- library lookup

_SONAME = "libvllmc.so.0"


def _candidates():
    """(path, why) pairs in lookup order (VLLMC_LIBRARY is handled by load())."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # installed: <prefix>/lib/python3/dist-packages/vllmc (or .../python3.X/site-packages/vllmc)
    libdir = os.path.normpath(os.path.join(here, os.pardir, os.pardir, os.pardir))
    out.append(os.path.join(libdir, _SONAME))
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        out.append(os.path.join(libdir, multiarch, _SONAME))
    out.extend(sorted(p for p in glob.glob(os.path.join(libdir, "*", _SONAME)) if p not in out))
    # the build tree: <repo>/python/vllmc -> <repo>/build
    repo = os.path.normpath(os.path.join(here, os.pardir, os.pardir))
    out.append(os.path.join(repo, "build", "libvllmc.so"))
    out.append(os.path.join(repo, "build", _SONAME))
    return out


def load():
    """The loaded library (ctypes.CDLL) or ImportError naming every path tried."""
    tried = []
    env = os.environ.get("VLLMC_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env)
        except OSError as e:
            raise ImportError("vllmc: VLLMC_LIBRARY=%s cannot be loaded: %s" % (env, e)) from None
    for path in _candidates():
        if not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    name = ctypes.util.find_library("vllmc")
    if name:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append("find_library: %s (%s)" % (name, e))
    else:
        tried.append("ctypes.util.find_library('vllmc') (not found)")
    raise ImportError("vllmc: cannot find libvllmc.so (build it: cmake --build build, or set VLLMC_LIBRARY "
                      "to its path); tried:\n  " + "\n  ".join(tried))


# ---------------------------------------------------------------- types

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_float_p = ctypes.POINTER(ctypes.c_float)
c_char_pp = ctypes.POINTER(ctypes.c_char_p)

# vllm_status
OK = 0
STATUS_NAMES = {1: "stream timeout", 0: "ok", -1: "invalid argument", -2: "io", -3: "format", -4: "unsupported",
                -5: "no memory", -6: "backend", -7: "too long", -8: "not found", -9: "internal"}
# vllm_load_format, vllm_runner, vllm_pooling_type, vllm_finish_reason
LOAD_AUTO, LOAD_DUMMY = 0, 1
RUNNER_AUTO, RUNNER_GENERATE, RUNNER_POOLING = 0, 1, 2
POOLING_AUTO, POOLING_LAST, POOLING_MEAN, POOLING_CLS = 0, 1, 2, 3
FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ABORT = 0, 1, 2, 3
FINISH_NAMES = {FINISH_STOP: "stop", FINISH_LENGTH: "length", FINISH_ABORT: "abort"}


class EngineOptions(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_char_p),
        ("num_threads", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("num_kv_blocks", ctypes.c_int),
        ("kv_cache_memory", ctypes.c_size_t),
        ("enforce_eager", ctypes.c_bool),
        ("gpu_memory_utilization", ctypes.c_float),
        ("max_model_len", ctypes.c_int),
        ("max_num_seqs", ctypes.c_int),
        ("max_num_batched_tokens", ctypes.c_int),
        ("enable_prefix_caching", ctypes.c_bool),
        ("load_format", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("tokenizer", ctypes.c_char_p),
        ("mamba_cache_dtype", ctypes.c_char_p),
        ("mamba_ssm_cache_dtype", ctypes.c_char_p),
        ("kv_cache_dtype", ctypes.c_char_p),
        ("runner", ctypes.c_int),
        ("pooling_type", ctypes.c_int),
        ("pooler_normalize", ctypes.c_int),
        ("revision", ctypes.c_char_p),
        ("tokenizer_revision", ctypes.c_char_p),
        ("tensor_parallel_size", ctypes.c_int),
        ("data_parallel_size", ctypes.c_int),
        ("nnodes", ctypes.c_int),
        ("node_rank", ctypes.c_int),
        ("master_addr", ctypes.c_char_p),
        ("master_port", ctypes.c_int),
    ]


class EngineInfo(ctypes.Structure):
    _fields_ = [
        ("architecture", ctypes.c_char_p),
        ("vocab_size", ctypes.c_int),
        ("max_model_len", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("num_kv_blocks", ctypes.c_int),
        ("max_num_seqs", ctypes.c_int),
        ("max_num_batched_tokens", ctypes.c_int),
        ("runner", ctypes.c_int),
        ("embedding_size", ctypes.c_int),
        ("pooling_type", ctypes.c_int),
        ("pooling_normalize", ctypes.c_bool),
        ("is_matryoshka", ctypes.c_bool),
        ("matryoshka_dimensions", ctypes.POINTER(ctypes.c_int)),
        ("num_matryoshka_dimensions", ctypes.c_size_t),
    ]


class EngineStats(ctypes.Structure):
    _fields_ = [
        ("num_running", ctypes.c_int),
        ("num_waiting", ctypes.c_int),
        ("num_free_kv_blocks", ctypes.c_int),
        ("kv_cache_usage", ctypes.c_double),
        ("prefix_cache_queries", ctypes.c_uint64),
        ("prefix_cache_hits", ctypes.c_uint64),
        ("num_preemptions", ctypes.c_uint64),
        ("prompt_tokens", ctypes.c_uint64),
        ("generation_tokens", ctypes.c_uint64),
        ("steps", ctypes.c_uint64),
    ]


class StructuredOutputs(ctypes.Structure):
    _fields_ = [
        ("json", ctypes.c_char_p),
        ("json_object", ctypes.c_bool),
        ("regex", ctypes.c_char_p),
        ("choice", c_char_pp),
        ("num_choice", ctypes.c_size_t),
        ("grammar", ctypes.c_char_p),
        ("disable_any_whitespace", ctypes.c_bool),
        ("reasoning_start", ctypes.c_char_p),
        ("reasoning_end", ctypes.c_char_p),
    ]


class SamplingParamsC(ctypes.Structure):
    _fields_ = [
        ("max_tokens", ctypes.c_int),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("has_seed", ctypes.c_bool),
        ("seed", ctypes.c_uint64),
        ("ignore_eos", ctypes.c_bool),
        ("min_tokens", ctypes.c_int),
        ("skip_special_tokens", ctypes.c_bool),
        ("n", ctypes.c_int),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("logit_bias_ids", c_int32_p),
        ("logit_bias_values", c_float_p),
        ("num_logit_bias", ctypes.c_size_t),
        ("allowed_token_ids", c_int32_p),
        ("num_allowed_token_ids", ctypes.c_size_t),
        ("bad_words", c_char_pp),
        ("num_bad_words", ctypes.c_size_t),
        ("stop", c_char_pp),
        ("num_stop", ctypes.c_size_t),
        ("include_stop_str_in_output", ctypes.c_bool),
        ("stop_token_ids", c_int32_p),
        ("num_stop_token_ids", ctypes.c_size_t),
        ("logprobs", ctypes.c_int),
        ("prompt_logprobs", ctypes.c_int),
        ("structured_outputs", StructuredOutputs),
    ]


class Prompt(ctypes.Structure):
    _fields_ = [
        ("text", ctypes.c_char_p),
        ("token_ids", c_int32_p),
        ("num_token_ids", ctypes.c_size_t),
    ]


class Completion(ctypes.Structure):
    pass


Completion._fields_ = [
    ("prompt_token_ids", c_int32_p),
    ("num_prompt_tokens", ctypes.c_size_t),
    ("token_ids", c_int32_p),
    ("logprobs", c_float_p),
    ("num_tokens", ctypes.c_size_t),
    ("top_logprob_ids", c_int32_p),
    ("top_logprobs", c_float_p),
    ("num_top_logprobs", ctypes.c_int),
    ("text", ctypes.c_char_p),
    ("stop_reason", ctypes.c_char_p),
    ("finish_reason", ctypes.c_int),
    ("prompt_logprobs", c_float_p),
    ("prompt_top_logprob_ids", c_int32_p),
    ("prompt_top_logprobs", c_float_p),
    ("num_prompt_top_logprobs", ctypes.c_int),
    ("index", ctypes.c_size_t),
    ("siblings", ctypes.POINTER(Completion)),
    ("num_siblings", ctypes.c_size_t),
]


class GenerateStats(ctypes.Structure):
    _fields_ = [
        ("prompt_tokens", ctypes.c_size_t),
        ("generated_tokens", ctypes.c_size_t),
        ("prefill_seconds", ctypes.c_double),
        ("decode_seconds", ctypes.c_double),
        ("steps", ctypes.c_size_t),
        ("preemptions", ctypes.c_size_t),
        ("structured_masks", ctypes.c_size_t),
        ("structured_mask_seconds", ctypes.c_double),
        ("structured_mask_p50_us", ctypes.c_double),
        ("structured_mask_p99_us", ctypes.c_double),
        ("structured_advance_seconds", ctypes.c_double),
    ]


class PoolingParamsC(ctypes.Structure):
    _fields_ = [
        ("dimensions", ctypes.c_int),
        ("normalize", ctypes.c_int),
    ]


class Embedding(ctypes.Structure):
    _fields_ = [
        ("data", c_float_p),
        ("dim", ctypes.c_size_t),
        ("num_prompt_tokens", ctypes.c_size_t),
    ]


class RequestOutputC(ctypes.Structure):
    _fields_ = [
        ("request_id", ctypes.c_char_p),
        ("index", ctypes.c_size_t),
        ("new_token_ids", c_int32_p),
        ("new_logprobs", c_float_p),
        ("top_logprob_ids", c_int32_p),
        ("top_logprobs", c_float_p),
        ("num_top_logprobs", ctypes.c_int),
        ("num_new_tokens", ctypes.c_size_t),
        ("new_text", ctypes.c_void_p),
        ("new_text_len", ctypes.c_size_t),
        ("finish_reason", ctypes.c_int),
        ("stop_reason", ctypes.c_char_p),
        ("prompt_tokens", ctypes.c_size_t),
        ("completion_tokens", ctypes.c_size_t),
        ("cached_prompt_tokens", ctypes.c_size_t),
        ("prompt_logprobs", c_float_p),
        ("prompt_top_logprob_ids", c_int32_p),
        ("prompt_top_logprobs", c_float_p),
        ("num_prompt_top_logprobs", ctypes.c_int),
        ("embedding", c_float_p),
        ("embedding_dim", ctypes.c_size_t),
    ]


class ChatTemplateOptions(ctypes.Structure):
    _fields_ = [
        ("chat_template", ctypes.c_char_p),
        ("add_generation_prompt", ctypes.c_bool),
        ("continue_final_message", ctypes.c_bool),
        ("tools_json", ctypes.c_char_p),
        ("chat_template_kwargs_json", ctypes.c_char_p),
    ]


# every public struct the bindings declare, by its C name (the layout test walks this)
STRUCTS = {
    "vllm_engine_options": EngineOptions,
    "vllm_engine_info": EngineInfo,
    "vllm_engine_stats": EngineStats,
    "vllm_structured_outputs": StructuredOutputs,
    "vllm_sampling_params": SamplingParamsC,
    "vllm_prompt": Prompt,
    "vllm_completion": Completion,
    "vllm_generate_stats": GenerateStats,
    "vllm_pooling_params": PoolingParamsC,
    "vllm_embedding": Embedding,
    "vllm_request_output": RequestOutputC,
    "vllm_chat_template_options": ChatTemplateOptions,
}

# ---------------------------------------------------------------- functions

_engine_p = ctypes.c_void_p
_status = ctypes.c_int

_PROTOTYPES = {
    "vllm_last_error": (ctypes.c_char_p, []),
    "vllm_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "vllm_engine_default_options": (EngineOptions, []),
    "vllm_engine_create": (_status, [ctypes.c_char_p, ctypes.POINTER(EngineOptions), ctypes.POINTER(_engine_p)]),
    "vllm_engine_free": (None, [_engine_p]),
    "vllm_engine_has_tokenizer": (ctypes.c_bool, [_engine_p]),
    "vllm_engine_get_info": (None, [_engine_p, ctypes.POINTER(EngineInfo)]),
    "vllm_engine_get_stats": (None, [_engine_p, ctypes.POINTER(EngineStats)]),
    "vllm_sampling_default_params": (SamplingParamsC, []),
    "vllm_engine_default_sampling": (SamplingParamsC, [_engine_p]),
    "vllm_sampling_params_validate": (_status, [ctypes.POINTER(SamplingParamsC)]),
    "vllm_generate": (_status, [_engine_p, ctypes.POINTER(Prompt), ctypes.c_size_t, ctypes.POINTER(SamplingParamsC),
                                ctypes.c_bool, ctypes.POINTER(ctypes.POINTER(Completion)),
                                ctypes.POINTER(GenerateStats)]),
    "vllm_completions_free": (None, [ctypes.POINTER(Completion), ctypes.c_size_t]),
    "vllm_pooling_default_params": (PoolingParamsC, []),
    "vllm_embed": (_status, [_engine_p, ctypes.POINTER(Prompt), ctypes.c_size_t, ctypes.POINTER(PoolingParamsC),
                             ctypes.POINTER(ctypes.POINTER(Embedding))]),
    "vllm_embeddings_free": (None, [ctypes.POINTER(Embedding), ctypes.c_size_t]),
    "vllm_engine_add_request": (_status, [_engine_p, ctypes.c_char_p, ctypes.POINTER(Prompt),
                                          ctypes.POINTER(SamplingParamsC)]),
    "vllm_engine_abort_request": (_status, [_engine_p, ctypes.c_char_p]),
    "vllm_engine_step": (_status, [_engine_p, ctypes.POINTER(ctypes.POINTER(RequestOutputC)),
                                   ctypes.POINTER(ctypes.c_size_t)]),
    "vllm_engine_has_unfinished": (ctypes.c_bool, [_engine_p]),
    "vllm_tokenize": (_status, [_engine_p, ctypes.c_char_p, ctypes.c_bool, ctypes.POINTER(c_int32_p),
                                ctypes.POINTER(ctypes.c_size_t)]),
    "vllm_detokenize": (_status, [_engine_p, c_int32_p, ctypes.c_size_t, ctypes.c_bool,
                                  ctypes.POINTER(ctypes.c_void_p)]),
    "vllm_chat_template_default_options": (ChatTemplateOptions, []),
    "vllm_chat_apply_template": (_status, [_engine_p, ctypes.c_char_p, ctypes.POINTER(ChatTemplateOptions),
                                           ctypes.POINTER(ctypes.c_void_p)]),
    "vllm_free": (None, [ctypes.c_void_p]),
}

lib = load()
for _name, (_res, _args) in _PROTOTYPES.items():
    _f = getattr(lib, _name)  # AttributeError here: a library older than these bindings
    _f.restype = _res
    _f.argtypes = _args


def last_error():
    msg = lib.vllm_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def take_string(ptr):
    """A malloc'd C string (c_void_p) as str, freed."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.vllm_free(ptr)


def int_array(values):
    """(ctypes array of int32, n) of a sequence of ints (None for an empty or absent list)."""
    vals = list(values)
    if not vals:
        return None, 0
    return (ctypes.c_int32 * len(vals))(*vals), len(vals)


def str_array(values):
    vals = [v.encode("utf-8") for v in values]
    if not vals:
        return None, 0
    return (ctypes.c_char_p * len(vals))(*vals), len(vals)
