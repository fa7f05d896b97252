#!/usr/bin/env python3
"""dtype_switches.py BUILD_DIR SOURCE_DIR — every switch over mp_dtype is
exhaustive, so that a new dtype cannot fall into a `default:` that treats
it as f32 or bf16:
  1. every C source of the build (compile_commands.json) compiled with
     -fsyntax-only -Wswitch-enum: no warning about an MP_DTYPE_ value;
  2. the sources the host compiler never sees switch over (CUDA device code
     in .cu/.cuh) scanned: a switch with an MP_DTYPE_ case names every
     enumerator of mp_dtype and has no default.
Prints each offending place and exits 1; exits 0 when there is none."""
import json, os, re, shlex, subprocess, sys

build, source = sys.argv[1], sys.argv[2]
bad = []

header = open(os.path.join(source, "include/mixprec/core.h")).read()
enum = re.search(r"typedef enum \{(.*?)\} mp_dtype;", header, re.S).group(1)
names = re.findall(r"\b(MP_DTYPE_[A-Z0-9_]+)\b", enum)
if "MP_DTYPE_F32" not in names or "MP_DTYPE_COUNT" not in names:
    sys.exit(f"dtype_switches: cannot read mp_dtype from core.h ({names})")

# 1. the compiler, on every C file it builds
commands = json.load(open(os.path.join(build, "compile_commands.json")))
checked = 0
for c in commands:
    if not c["file"].endswith(".c"):
        continue
    args = shlex.split(c["command"]) if "command" in c else c["arguments"]
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in ("-c", "-Werror"):
            out.append(a)
    r = subprocess.run(out + ["-fsyntax-only", "-Wswitch-enum"], cwd=c["directory"], capture_output=True, text=True)
    checked += 1
    for line in r.stderr.splitlines():
        if "-Wswitch-enum" in line and "MP_DTYPE_" in line:
            bad.append(line)

# 2. CUDA sources, as text: switch (...) { ... } blocks with dtype cases
def blocks(text):
    for m in re.finditer(r"\bswitch\s*\(", text):
        i = text.find("{", m.end())
        depth, j = 0, i
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield text.count("\n", 0, m.start()) + 1, text[i : j + 1]

scanned = 0
for root, _, files in os.walk(os.path.join(source, "src")):
    for f in files:
        if not f.endswith((".cu", ".cuh")):
            continue
        path = os.path.join(root, f)
        text = open(path).read()
        scanned += 1
        for line, block in blocks(text):
            cases = set(re.findall(r"case\s+(MP_DTYPE_[A-Z0-9_]+)", block))
            if not cases:
                continue
            missing = [n for n in names if n not in cases]
            if missing or re.search(r"\bdefault\s*:", block):
                bad.append(f"{path}:{line}: switch over mp_dtype " +
                           (f"misses {', '.join(missing)}" if missing else "has a default"))

for b in bad:
    print(b)
print(f"dtype_switches: {checked} C files compiled with -Wswitch-enum, {scanned} CUDA files scanned, "
      f"{len(bad)} non-exhaustive dtype switches")
sys.exit(1 if bad else 0)
