# test_vllmc.py: the Python package vllmc (vLLM's offline API over libvllmc.so) against the C API and the CLI.
"""Run: VLLMC_LIBRARY=build/libvllmc.so PYTHONPATH=python python3 tests/python/test_vllmc.py

ctest sets VLLMC_LIBRARY, PYTHONPATH, VLLMC_BIN (the vllmc CLI) and VLLMC_STRUCT_SIZES (struct_sizes.c built);
without the last two, the CLI comparisons use the committed fixtures and the layout check compiles the helper
with cc when there is one.
"""

import ctypes
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
STORIES = os.path.join(REPO, "models", "stories260K")
JSON_TINY = os.path.join(REPO, "tests", "fixtures", "models", "json_tiny")
VLLMC_BIN = os.environ.get("VLLMC_BIN")
os.environ.setdefault("VLLM_LOG_LEVEL", "warn")

if sys.version_info < (3, 9):
    print("test_vllmc: skipped: Python %d.%d (vllmc needs 3.9+)" % sys.version_info[:2])
    sys.exit(77)
sys.path.insert(0, os.path.join(REPO, "python"))

import vllmc  # noqa: E402
from vllmc import LLM, SamplingParams  # noqa: E402
from vllmc import _lib  # noqa: E402


def cli(*args, stdin=None):
    """stdout of the vllmc CLI, or None without VLLMC_BIN."""
    if not VLLMC_BIN:
        return None
    r = subprocess.run([VLLMC_BIN] + list(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       check=True, env=dict(os.environ, VLLM_LOG_LEVEL="error"))
    return r.stdout.decode("utf-8")


_llms = {}


def stories():
    if "stories" not in _llms:
        _llms["stories"] = LLM(model=STORIES, max_model_len=256, num_threads=1)
    return _llms["stories"]


def json_tiny():
    if "json_tiny" not in _llms:
        _llms["json_tiny"] = LLM(model=JSON_TINY, max_model_len=256, num_threads=1)
    return _llms["json_tiny"]


def c_generate(llm, ids, **fields):
    """vllm_generate of one token prompt on the LLM's engine: (token ids, logprobs, top ids rows, top lp rows)."""
    L = _lib.lib
    sp = L.vllm_sampling_default_params()
    for k, v in fields.items():
        setattr(sp, k, v)
    arr, n = _lib.int_array(ids)
    prompt = _lib.Prompt(None, arr, n)
    out = ctypes.POINTER(_lib.Completion)()
    st = L.vllm_generate(llm._engine, ctypes.byref(prompt), 1, ctypes.byref(sp), False, ctypes.byref(out), None)
    if st != 0:
        raise AssertionError(_lib.last_error())
    try:
        c = out[0]
        k = c.num_top_logprobs
        toks = c.token_ids[:c.num_tokens]
        lps = c.logprobs[:c.num_tokens]
        tops = [[(c.top_logprob_ids[i * k + t], c.top_logprobs[i * k + t]) for t in range(k)]
                for i in range(c.num_tokens)]
        return toks, lps, tops
    finally:
        L.vllm_completions_free(out, 1)


class TestLayout(unittest.TestCase):
    def helper(self):
        path = os.environ.get("VLLMC_STRUCT_SIZES")
        if path:
            return subprocess.run([path], stdout=subprocess.PIPE, check=True).stdout.decode()
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if not cc:
            self.skipTest("no VLLMC_STRUCT_SIZES and no C compiler")
        with tempfile.TemporaryDirectory() as d:
            exe = os.path.join(d, "struct_sizes")
            subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), "-o", exe,
                            os.path.join(REPO, "tests", "python", "struct_sizes.c")], check=True)
            return subprocess.run([exe], stdout=subprocess.PIPE, check=True).stdout.decode()

    def test_structs_match_the_header(self):
        c = dict(line.split() for line in self.helper().splitlines())
        for name, cls in _lib.STRUCTS.items():
            self.assertIn(name, c, "struct_sizes.c does not print %s" % name)
            self.assertEqual(ctypes.sizeof(cls), int(c[name]), "sizeof(%s)" % name)
            printed = sorted(k.split(".", 1)[1] for k in c if k.startswith(name + "."))
            self.assertEqual(sorted(f for f, _ in cls._fields_), printed, "%s fields" % name)
            for f, _ in cls._fields_:
                self.assertEqual(getattr(cls, f).offset, int(c["%s.%s" % (name, f)]), "offsetof(%s, %s)" % (name, f))


class TestGenerate(unittest.TestCase):
    def test_greedy_equals_cli_and_c_api(self):
        llm = stories()
        out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=32, logprobs=0))
        self.assertEqual(len(out), 1)
        r = out[0]
        self.assertEqual(r.prompt, "Once upon a time")
        self.assertTrue(r.finished)
        self.assertEqual(r.prompt_token_ids, [1, 403, 407, 261, 378])
        c = r.outputs[0]
        self.assertEqual((c.index, c.finish_reason, c.stop_reason), (0, "length", None))
        self.assertEqual(len(c.token_ids), 32)
        got = cli("generate", "--model", STORIES, "--prompt", "Once upon a time", "--temperature", "0",
                  "--max-tokens", "32", "--json")
        if got is not None:
            want = json.loads(got)
            self.assertEqual(want["prompt_token_ids"], r.prompt_token_ids)
            self.assertEqual(want["token_ids"], c.token_ids)
            self.assertEqual(want["text"], c.text)
            for lp, d in zip(want["logprobs"], c.logprobs):
                self.assertAlmostEqual(lp, d[next(iter(d))].logprob, delta=1e-6 * max(1, abs(lp)))
        # the committed greedy story (from BOS) starts with the same words
        with open(os.path.join(REPO, "tests", "fixtures", "stories260K_greedy.txt"), encoding="utf-8") as f:
            card = f.read()
        self.assertTrue(card.startswith("Once upon a time" + c.text), c.text)
        # logprobs=0: one entry per token, the sampled one; values are the C API's (vllm_generate)
        toks, lps, _ = c_generate(llm, r.prompt_token_ids, temperature=0.0, max_tokens=32, logprobs=0)
        self.assertEqual(toks, c.token_ids)
        self.assertEqual(len(c.logprobs), 32)
        for t, lp, d in zip(toks, lps, c.logprobs):
            self.assertEqual(list(d), [t])
            self.assertEqual(d[t].logprob, lp)
        self.assertAlmostEqual(c.cumulative_logprob, sum(lps), places=5)

    def test_top_logprobs_shape_and_values(self):
        llm = stories()
        ids = llm.get_tokenizer().encode("Lily and Tom")
        r = llm.generate({"prompt_token_ids": ids}, SamplingParams(temperature=0, max_tokens=8, logprobs=3,
                                                                   prompt_logprobs=2))[0]
        self.assertIsNone(r.prompt)
        toks, lps, tops = c_generate(llm, ids, temperature=0.0, max_tokens=8, logprobs=3)
        c = r.outputs[0]
        self.assertEqual(c.token_ids, toks)
        for t, lp, top, d in zip(toks, lps, tops, c.logprobs):
            self.assertEqual(next(iter(d)), t)  # the sampled token first, as vLLM
            self.assertEqual(d[t].logprob, lp)
            self.assertEqual(d[t].rank, 1)  # greedy: the top token
            self.assertEqual(len(d), len(set([t] + [i for i, _ in top])))
            for rank, (tid, tlp) in enumerate(top, 1):
                self.assertEqual((d[tid].logprob, d[tid].rank), (tlp, rank))
                self.assertEqual(d[tid].decoded_token, llm.get_tokenizer().decode([tid]))
        # prompt logprobs: None first, then the prompt token and the top 2 per position
        self.assertEqual(len(r.prompt_logprobs), len(ids))
        self.assertIsNone(r.prompt_logprobs[0])
        for pos in range(1, len(ids)):
            d = r.prompt_logprobs[pos]
            self.assertEqual(next(iter(d)), ids[pos])
            self.assertTrue(2 <= len(d) <= 3)
            self.assertTrue(all(v.logprob <= 0 for v in d.values()))
        self.assertIsNone(llm.generate("Hi", SamplingParams(max_tokens=2))[0].outputs[0].logprobs)

    def test_defaults(self):
        sp = SamplingParams()
        self.assertEqual((sp.max_tokens, sp.temperature, sp.top_p, sp.top_k, sp.n, sp.min_p), (16, 1.0, 1.0, 0, 1, 0))
        self.assertEqual((sp.stop, sp.stop_token_ids, sp.seed, sp.logprobs), ([], [], None, None))
        llm = stories()
        r = llm.generate(["Once upon a time"], SamplingParams(temperature=0, ignore_eos=True))[0]
        self.assertEqual(len(r.outputs[0].token_ids), 16)
        r = llm.generate("Once upon a time")[0]  # sampling_params None: the model's defaults (16 tokens)
        self.assertLessEqual(len(r.outputs[0].token_ids), 16)
        self.assertEqual(llm.get_default_sampling_params().max_tokens, 16)
        # max_tokens=None: up to the context
        r = llm.generate({"prompt_token_ids": [1]}, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[0]
        self.assertEqual(len(r.outputs[0].token_ids), 255)
        self.assertEqual(r.outputs[0].finish_reason, "length")

    def test_n_and_seed(self):
        llm = stories()
        sp = SamplingParams(n=4, temperature=1.0, seed=1234, max_tokens=24)
        a = llm.generate("The little dog", sp)[0]
        b = llm.generate("The little dog", sp)[0]
        self.assertEqual([o.index for o in a.outputs], [0, 1, 2, 3])
        self.assertEqual([o.token_ids for o in a.outputs], [o.token_ids for o in b.outputs])
        self.assertEqual([o.text for o in a.outputs], [o.text for o in b.outputs])
        self.assertGreater(len(set(tuple(o.token_ids) for o in a.outputs)), 1)
        self.assertNotEqual(a.request_id, b.request_id)
        # each sample i is seed + i's single sample (vllm.h)
        one = llm.generate("The little dog", SamplingParams(temperature=1.0, seed=1234 + 2, max_tokens=24))[0]
        self.assertEqual(one.outputs[0].token_ids, a.outputs[2].token_ids)
        c = llm.generate("The little dog", SamplingParams(n=4, temperature=1.0, seed=99, max_tokens=24))[0]
        self.assertNotEqual([o.token_ids for o in a.outputs], [o.token_ids for o in c.outputs])

    def test_stop(self):
        llm = stories()
        full = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=40))[0].outputs[0]
        cut = full.text.index(".")
        r = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=40, stop=["."]))[0].outputs[0]
        self.assertEqual((r.text, r.finish_reason, r.stop_reason), (full.text[:cut], "stop", "."))
        r = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=40, stop=".",
                                                            include_stop_str_in_output=True))[0].outputs[0]
        self.assertEqual((r.text, r.stop_reason), (full.text[:cut + 1], "."))
        # a stop token id: stop_reason is the id, the token is kept
        tid = full.token_ids[3]
        r = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=40,
                                                            stop_token_ids=[tid]))[0].outputs[0]
        self.assertEqual((r.token_ids, r.finish_reason, r.stop_reason), (full.token_ids[:4], "stop", tid))

    def test_prompt_forms_and_params_list(self):
        llm = stories()
        tok = llm.get_tokenizer()
        g = SamplingParams(temperature=0, max_tokens=6)
        ids = tok.encode("The cat")
        outs = llm.generate(["The cat", {"prompt": "The cat"}, {"prompt_token_ids": ids},
                             vllmc.TokensPrompt(ids), vllmc.TextPrompt("The cat")], g)
        self.assertEqual(len(set(tuple(o.outputs[0].token_ids) for o in outs)), 1)
        self.assertEqual([o.prompt for o in outs], ["The cat", "The cat", None, None, "The cat"])
        self.assertTrue(all(o.prompt_token_ids == ids for o in outs))
        # one SamplingParams per prompt
        outs = llm.generate(["The cat", "The cat"], [g, SamplingParams(temperature=0, max_tokens=3)])
        self.assertEqual([len(o.outputs[0].token_ids) for o in outs], [6, 3])
        self.assertEqual(outs[1].outputs[0].token_ids, outs[0].outputs[0].token_ids[:3])
        with self.assertRaisesRegex(ValueError, "lengths of prompts and sampling_params"):
            llm.generate(["a", "b"], [g])
        with self.assertRaises(TypeError):
            llm.generate([3.5], g)
        # a progress callable (tqdm-like) sees every prompt
        seen = []

        class Bar:
            def __init__(self, total, desc):
                seen.append(total)

            def update(self, n):
                seen.append(n)

            def close(self):
                seen.append("closed")

        llm.generate(["a", "b"], g, use_tqdm=Bar)
        self.assertEqual(seen, [2, 1, 1, "closed"])

    def test_structured_outputs(self):
        llm = stories()
        for seed in range(3):
            so = vllmc.StructuredOutputsParams(choice=["happy", "sad"])
            r = llm.generate("Once upon a time", SamplingParams(structured_outputs=so, seed=seed))[0].outputs[0]
            self.assertIn(r.text, ("happy", "sad"))
            self.assertEqual(r.finish_reason, "stop")
        sp = SamplingParams(structured_outputs={"json": {"type": "object", "properties": {"a": {"type": "boolean"}},
                                                         "required": ["a"], "additionalProperties": False},
                                                "disable_any_whitespace": True}, temperature=0, max_tokens=40)
        r = llm.generate("Once upon a time", sp)[0].outputs[0]
        self.assertEqual(r.finish_reason, "stop", r.text)
        self.assertIn(json.loads(r.text)["a"], (True, False))
        with self.assertRaisesRegex(ValueError, "only use one kind"):
            SamplingParams(structured_outputs={"regex": "a", "choice": ["x"]})
        with self.assertRaises(ValueError):  # a bad regex, refused when the request is added
            llm.generate("x", SamplingParams(structured_outputs={"regex": "("}))

    def test_prefix_cache_counts(self):
        llm = stories()
        p = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
        llm.generate(p, SamplingParams(max_tokens=1))
        r = llm.generate(p, SamplingParams(max_tokens=1))[0]
        self.assertGreaterEqual(r.num_cached_tokens, 16)


class TestChat(unittest.TestCase):
    CONV = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]

    def test_chat_json_tiny(self):
        llm = json_tiny()
        g = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        r = llm.chat(self.CONV, g)[0]
        want = "<s>system: Be brief.\nuser: Hi\nassistant: "
        self.assertEqual(r.prompt, want)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(self.CONV, f)
        try:
            rendered = cli("chat-template", "--model", JSON_TINY, "--messages", f.name)
        finally:
            os.unlink(f.name)
        if rendered is not None:
            self.assertEqual(r.prompt, rendered)
        tok = llm.get_tokenizer()
        # the template wrote <s>: tokenized without special tokens (one BOS)
        self.assertEqual(r.prompt_token_ids, tok.encode(want, add_special_tokens=False))
        self.assertEqual(r.prompt_token_ids.count(tok.bos_token_id), 1)
        same = llm.generate({"prompt_token_ids": r.prompt_token_ids}, g)[0]
        self.assertEqual(r.outputs[0].token_ids, same.outputs[0].token_ids)
        self.assertEqual(len(r.outputs[0].token_ids), 8)
        # a batch of conversations; transformers' apply_chat_template
        rs = llm.chat([self.CONV, [{"role": "user", "content": "Yo"}]], g)
        self.assertEqual([x.prompt for x in rs], [want, "<s>user: Yo\nassistant: "])
        self.assertEqual(tok.apply_chat_template(self.CONV, tokenize=False, add_generation_prompt=True), want)
        self.assertEqual(tok.apply_chat_template(self.CONV, add_generation_prompt=True), r.prompt_token_ids)
        self.assertEqual(tok.apply_chat_template(self.CONV, tokenize=False), want[:-len("assistant: ")])
        # options: no generation prompt, continue_final_message, kwargs, tools, an override template
        r = llm.chat(self.CONV, g, add_generation_prompt=False)[0]
        self.assertEqual(r.prompt, "<s>system: Be brief.\nuser: Hi\n")
        conv = self.CONV + [{"role": "assistant", "content": "Hello"}]
        r = llm.chat(conv, g, add_generation_prompt=False, continue_final_message=True)[0]
        self.assertEqual(r.prompt, want + "Hello")
        r = llm.chat(self.CONV, g, chat_template="{{ who }}{% for t in tools %}/{{ t.function.name }}{% endfor %}|"
                                                 "{{ messages[-1].content }}",
                     chat_template_kwargs={"who": "me"}, tools=[{"type": "function", "function": {"name": "f"}}])[0]
        self.assertEqual(r.prompt, "me/f|Hi")

    def test_chat_errors(self):
        with self.assertRaisesRegex(ValueError, "chat template"):
            stories().chat(self.CONV)
        r = stories().chat(self.CONV, SamplingParams(max_tokens=2),
                           chat_template="{{ bos_token }}{{ messages[-1].content }}")[0]
        self.assertEqual(r.prompt, "<s>Hi")
        with self.assertRaisesRegex(ValueError, "content"):
            json_tiny().chat([{"role": "user"}])
        with self.assertRaisesRegex(ValueError, "nope"):
            json_tiny().chat(self.CONV, chat_template="{{ raise_exception('nope') }}")


class TestTokenizer(unittest.TestCase):
    def test_round_trip(self):
        tok = stories().get_tokenizer()
        self.assertEqual((tok.bos_token, tok.bos_token_id, tok.eos_token, tok.eos_token_id), ("<s>", 1, "</s>", 2))
        text = "Once upon a time, there was a little girl named Lily."
        ids = tok.encode(text)
        self.assertEqual(ids[0], 1)
        self.assertEqual(tok.encode(text, add_special_tokens=False), ids[1:])
        self.assertEqual(tok.decode(ids, skip_special_tokens=True), text)
        self.assertTrue(tok.decode(ids).startswith("<s>"))
        self.assertEqual(tok(text)["input_ids"], ids)
        got = cli("tokenize", "--model", STORIES, "--text", text, "--add-special-tokens")
        if got is not None:
            self.assertEqual(json.loads(got)["ids"], ids)


class TestEmbed(unittest.TestCase):
    def test_embed(self):
        llm = LLM(model=STORIES, runner="pooling", max_model_len=128, num_threads=1)
        outs = llm.embed(["Once upon a time", {"prompt": "The cat sat."}])
        self.assertEqual(len(outs), 2)
        e = outs[0].outputs.embedding
        self.assertEqual(len(e), 64)
        self.assertAlmostEqual(math.sqrt(sum(x * x for x in e)), 1.0, places=4)
        self.assertEqual(outs[0].prompt_token_ids, [1, 403, 407, 261, 378])
        self.assertEqual(llm.encode("Once upon a time")[0].outputs.data, e)
        raw = llm.embed("Once upon a time", pooling_params=vllmc.PoolingParams(normalize=False))[0].outputs.embedding
        self.assertNotAlmostEqual(math.sqrt(sum(x * x for x in raw)), 1.0, places=2)
        with self.assertRaisesRegex(ValueError, "generative models"):
            llm.generate("x")
        with self.assertRaisesRegex(ValueError, "pooling models"):
            stories().embed("x")
        llm.close()


class TestErrors(unittest.TestCase):
    def test_bad_model_path(self):
        with self.assertRaises(vllmc.VllmcError) as cm:
            LLM(model="/nonexistent/model/dir")
        self.assertIn("/nonexistent/model/dir", str(cm.exception))
        self.assertIsInstance(cm.exception, OSError)

    def test_bad_sampling_params(self):
        for kw, word in (({"temperature": -1.0}, "temperature"), ({"top_p": 0.0}, "top_p"), ({"n": 0}, "n must"),
                         ({"max_tokens": 0}, "max_tokens"), ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
                         ({"presence_penalty": 3.0}, "presence_penalty"), ({"stop": [""]}, "stop"),
                         ({"top_k": -2}, "top_k"), ({"logprobs": 1000}, "logprobs"),
                         ({"n": 2, "temperature": 0.0}, "greedy"), ({"allowed_token_ids": []}, "allowed_token_ids"),
                         ({"n": "2"}, "n must be an int")):
            with self.assertRaisesRegex(ValueError, word, msg=str(kw)):
                SamplingParams(**kw)
        with self.assertRaises(TypeError):
            SamplingParams(bogus=1)
        # checked against the vocabulary when added; the engine stays usable
        with self.assertRaisesRegex(ValueError, "stop_token_ids"):
            stories().generate(["a", "b"], [SamplingParams(), SamplingParams(stop_token_ids=[10 ** 6])])
        self.assertEqual(len(stories().generate("a", SamplingParams(max_tokens=2))), 1)
        with self.assertRaises(ValueError):  # longer than max_model_len
            stories().generate({"prompt_token_ids": [1] * 300})

    def test_engine_args(self):
        with self.assertRaisesRegex(TypeError, "not_an_arg"):
            LLM(model=STORIES, not_an_arg=1)
        # tensor parallelism: stories260K's 8 heads over 2 ranks give the unsplit tokens; 3 ranks do not divide them
        g = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        whole = LLM(model=STORIES, num_threads=1).generate("Once upon a time", g)[0].outputs[0].token_ids
        split = LLM(model=STORIES, num_threads=1, tensor_parallel_size=2).generate("Once upon a time", g)
        self.assertEqual(list(split[0].outputs[0].token_ids), list(whole))
        # several hosts: this LLM as node 0, `vllmc serve --node-rank 1` (headless) as node 1, on 127.0.0.1
        if VLLMC_BIN:
            port = 20000 + os.getpid() % 12000
            node = subprocess.Popen([VLLMC_BIN, "serve", STORIES, "-tp", "2", "--nnodes", "2", "--node-rank", "1",
                                     "--master-port", str(port), "--threads", "1"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env=dict(os.environ, VLLM_DIST_TIMEOUT="60"))
            try:
                two = LLM(model=STORIES, num_threads=1, tensor_parallel_size=2, nnodes=2, master_port=port)
                self.assertEqual(list(two.generate("Once upon a time", g)[0].outputs[0].token_ids), list(whole))
                two.close()
                self.assertEqual(node.wait(timeout=60), 0)  # node 0 ended the group: the node returns
            finally:
                if node.poll() is None:
                    node.kill()
        with self.assertRaisesRegex(ValueError, "vllm_node_run"):
            LLM(model=STORIES, tensor_parallel_size=2, nnodes=2, node_rank=1)
        with self.assertRaisesRegex(NotImplementedError, "tensor parallelism over 3 ranks"):
            LLM(model=STORIES, tensor_parallel_size=3)
        with self.assertRaisesRegex(NotImplementedError, "dtype"):
            LLM(model=STORIES, dtype="float16")
        with self.assertRaisesRegex(ValueError, "block_size"):
            LLM(model=STORIES, block_size=0)
        llm = LLM(model=STORIES, trust_remote_code=True, dtype="auto", max_model_len=64, block_size=8,
                  num_gpu_blocks_override=32, enable_prefix_caching=False, max_num_seqs=4, seed=7, swap_space=4)
        self.assertEqual((llm.max_model_len, llm._info.block_size, llm._info.num_kv_blocks, llm._info.max_num_seqs),
                         (64, 8, 32, 4))
        out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=8))[0]
        self.assertEqual(out.outputs[0].token_ids,
                         stories().generate("Once upon a time", SamplingParams(temperature=0, max_tokens=8))[0]
                         .outputs[0].token_ids)
        llm.close()
        with self.assertRaisesRegex(RuntimeError, "closed"):
            llm.generate("x")


class TestExample(unittest.TestCase):
    def test_offline_quickstart(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        r = subprocess.run([sys.executable, os.path.join(REPO, "examples", "offline.py")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env, cwd=tempfile.gettempdir())
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        out = r.stdout.decode()
        self.assertEqual(out.count("Prompt:"), 4)
        self.assertEqual(out.count("Output:"), 4)
        self.assertIn("'The capital of France is'", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
