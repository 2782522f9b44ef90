#!/usr/bin/env python3
"""jinja2_oracle.py: second oracle for the chat-template tests. Renders every template x
conversation (as node/compare.mjs does) with Python jinja2 set up like transformers'
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now at SOURCE_DATE_EPOCH)
and compares with `vllmc chat-template`. Used where @huggingface/jinja cannot render a
template (see README.md): with --write it writes expected/ for the conversations marked
"reference": "jinja2" (node/compare.mjs --write writes all the others).
Usage: python3 tests/template/jinja2_oracle.py path/to/vllmc [--write]"""
import datetime, json, os, shutil, subprocess, sys, tempfile

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

EPOCH = 1735689600  # 2025-01-01T00:00:00Z, as node/compare.mjs
root = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))


def raise_exception(msg):
    raise TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(EPOCH, datetime.timezone.utc).strftime(fmt)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now


def token(t):
    return t.get("content") if isinstance(t, dict) else t


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: jinja2_oracle.py path/to/vllmc")
    binary = sys.argv[1]
    write = "--write" in sys.argv[2:]
    exp_dir = os.path.join(root, "tests/template/expected")
    sources = []  # (name, model dir, template, bos, eos)
    npm = os.path.join(root, ".cache/npm/template")
    for name in sorted(os.listdir(npm)) if os.path.isdir(npm) else []:
        cfg = json.load(open(os.path.join(npm, name, "tokenizer_config.json"), encoding="utf-8"))
        if isinstance(cfg.get("chat_template"), str):
            sources.append((name, os.path.join(npm, name), cfg["chat_template"], token(cfg.get("bos_token")), token(cfg.get("eos_token"))))
    tmp = tempfile.mkdtemp(prefix="vllmc-j2-")
    jdir = os.path.join(root, "tests/template/templates")
    tokens = json.load(open(os.path.join(jdir, "tokens.json"), encoding="utf-8"))
    for f in sorted(os.listdir(jdir)):
        if not f.endswith(".jinja"):
            continue
        name = f[: -len(".jinja")]
        src = open(os.path.join(jdir, f), encoding="utf-8", newline="").read()
        d = os.path.join(tmp, "model-" + name)
        os.mkdir(d)
        open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8", newline="").write(src)
        json.dump(tokens.get(name, {}), open(os.path.join(d, "tokenizer_config.json"), "w"))
        sources.append((name, d, src, tokens.get(name, {}).get("bos_token"), tokens.get(name, {}).get("eos_token")))
    convs = json.load(open(os.path.join(root, "tests/template/conversations.json"), encoding="utf-8"))
    total = same = 0
    for name, d, src, bos, eos in sources:
        tpl = env.from_string(src)
        n_ok = n = 0
        for c in convs:
            if "templates" in c and name not in c["templates"]:
                continue
            agp = c.get("add_generation_prompt", True)
            ctx = dict(messages=c["messages"], add_generation_prompt=agp, bos_token=bos, eos_token=eos, **c.get("vars", {}))
            if "tools" in c:
                ctx["tools"] = c["tools"]
            want = err = None
            try:
                want = tpl.render(**ctx)
            except Exception as e:  # noqa: BLE001 - any template error is an expected failure
                err = str(e)
            if write and c.get("reference") == "jinja2":
                base = os.path.join(exp_dir, f"{name}__{c['name']}")
                for ext in (".txt", ".err"):
                    if os.path.exists(base + ext):
                        os.remove(base + ext)
                if err is not None:
                    open(base + ".err", "w", encoding="utf-8").write(err + "\n")
                else:
                    open(base + ".txt", "w", encoding="utf-8", newline="").write(want)
            mfile = os.path.join(tmp, "messages.json")
            json.dump(c["messages"], open(mfile, "w", encoding="utf-8"), ensure_ascii=False)
            args = [binary, "chat-template", "--model", d, "--messages", mfile]
            if not agp:
                args.append("--no-generation-prompt")
            if "tools" in c:
                tfile = os.path.join(tmp, "tools.json")
                json.dump(c["tools"], open(tfile, "w", encoding="utf-8"), ensure_ascii=False)
                args += ["--tools", tfile]
            for k, v in c.get("vars", {}).items():
                args += ["--var", f"{k}={json.dumps(v, ensure_ascii=False)}"]
            p = subprocess.run(args, capture_output=True, env=dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH)))
            got = p.stdout.decode("utf-8") if p.returncode == 0 else None
            ok = (got is None) if err is not None else (got == want)
            n += 1
            n_ok += ok
            if not ok:
                print(f"MISMATCH {name} / {c['name']}")
                print(f"  jinja2: {err if err is not None else repr(want)}")
                print(f"  vllmc:  {p.stderr.decode().strip() if got is None else repr(got)}")
        print(f"{name}: {n_ok}/{n} identical")
        total += n
        same += n_ok
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"total: {same}/{total} identical")
    sys.exit(0 if same == total and total else 1)


if __name__ == "__main__":
    main()
