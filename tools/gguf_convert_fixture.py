#!/usr/bin/env python3
"""
gguf_convert_fixture.py: a parity fixture folder (tests/fixtures/models/<name>: config.json + model.safetensors,
no tokenizer) converted to GGUF by llama.cpp's own convert_hf_to_gguf.py, so that the GGUF mapping of
src/loader/gguf_config.c is checked against the real converter as well as against test_gguf_families_more.c's
reading of it (tools/device/check_gguf_converter.sh runs this on the GPU machine, which has torch and
transformers, then the test with VLLM_TEST_GGUF_CONVERTED pointing at the files).

The fixtures hold no tokenizer (their prompts are token ids), so every model class's set_vocab is replaced by one
that writes no vocabulary; nothing else of the converter is touched. llama.cpp's tree is not part of this project:
it is fetched (.peer/llama.cpp: git archive of e8e6c7af = b10095: convert_hf_to_gguf.py, conversion/, gguf-py/).

Usage: python3 tools/gguf_convert_fixture.py LLAMA_CPP_DIR FIXTURE_DIR OUT.gguf [--outtype bf16]
"""
import os
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    llama, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    outtype = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--outtype" else "bf16"
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    sys.path.insert(0, llama)
    import convert_hf_to_gguf as conv  # noqa: E402  (llama.cpp's)
    import conversion  # noqa: E402
    from conversion import base  # noqa: E402

    conversion.load_all_models()  # the model modules load lazily: their classes must exist to be patched

    def no_vocab(self):
        return None

    seen, todo = set(), [base.ModelBase]
    while todo:  # every model class, whichever overrides set_vocab
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
        if "set_vocab" in cls.__dict__:
            cls.set_vocab = no_vocab
    sys.argv = [sys.argv[0], src, "--outfile", out, "--outtype", outtype]
    conv.main()


if __name__ == "__main__":
    main()
