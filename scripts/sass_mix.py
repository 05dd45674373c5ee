#!/usr/bin/env python3
"""The instruction mix of compiled kernels, without a GPU: what a kernel's main loop issues per
tensor-core MMA (HMMA), read from the SASS that cuobjdump disassembles.

A static count is no timing, but it says how much integer work a decode does per weight before a
GPU round times it (docs/measurement.md, "Instruction mix"). Usage:

    scripts/sass_mix.py build-gpu/CMakeFiles/sl_model_cuda.dir/model/cuda/cuda_moe.cu.o \\
        --kernel 'moe_fp4_mma_kernel' [--sass FILE.sass]

cuobjdump and nvdisasm come from PATH, /usr/local/cuda/bin, or (the CUDA packages here have
neither) PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, installed on first use into
.tools/sass (git-ignored).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, ".tools", "sass")

# Opcode classes by the unit that executes them on Hopper, as Nsight Compute names the pipes:
# integer / logic ("alu"), multiply-add ("fma": IMAD, including the shifts and moves the compiler
# writes as IMAD, and the float and bf16x2 arithmetic), tensor cores, memory. Anything else is
# "other" (branches, predicates, uniform datapath, special registers).
CLASSES = {
    "alu": {"LOP3", "PRMT", "SHF", "ISETP", "SEL", "IADD3", "LEA", "VIMNMX", "IMNMX", "FMNMX", "FSEL", "PLOP3",
            "MOV", "FSETP", "LOP", "IABS", "POPC", "FLO", "BMSK", "SGXT", "VIADD"},
    "fma": {"IMAD", "FFMA", "FADD", "FMUL", "HFMA2", "HMUL2", "HADD2", "IDP", "I2F", "F2I", "F2F"},
    "tensor": {"HMMA", "IMMA", "HGMMA", "QGMMA"},  # QGMMA: wgmma on FP8
    "memory": {"LDG", "LDS", "LDC", "STG", "STS", "LD", "ST", "LDSM", "LDGSTS", "ATOMG", "RED", "ULDC"},
}

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?([^;]*);")
BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")


def find_tool(name, package):
    # Each package in its own folder: pip --target does not merge the two wheels' nvidia/ trees.
    mine = os.path.join(TOOLS, name, "nvidia", "cu13", "bin", name)
    for path in [shutil.which(name), os.path.join("/usr/local/cuda/bin", name), mine]:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    print(f"sass_mix: {name} not found; installing {package} from PyPI into {TOOLS}", file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        os.path.join(TOOLS, name), package], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isfile(mine):
        sys.exit(f"sass_mix: could not install {package}: {r.stderr.strip()[-500:]}")
    os.chmod(mine, 0o755)
    return mine


def disassemble(binary):
    cuobjdump = find_tool("cuobjdump", "nvidia-cuda-cuobjdump==13.*")
    nvdisasm = find_tool("nvdisasm", "nvidia-cuda-nvdisasm==13.*")
    env = dict(os.environ, PATH=os.path.dirname(nvdisasm) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([cuobjdump, "-sass", binary], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"sass_mix: cuobjdump -sass {binary} failed: {r.stderr.strip()}")
    return r.stdout


def kernels(sass):
    """(mangled name, [(address, opcode, modifiers, operands)]) per function."""
    out = []
    for chunk in re.split(r"\n\s*Function : ", sass)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        insns = [(int(m[1], 16), m[2], m[3] or "", m[4]) for m in INSN.finditer(chunk)]
        out.append((name, insns))
    return out


def innermost_loop(insns):
    """The instructions of the backward branch's range with the most MMAs per instruction (the
    main loop; a branch back from a divergent fallback can span the whole kernel and hold more
    MMAs, but far fewer per instruction), or all of them when no loop holds one."""
    best, best_density = insns, 0.0
    for addr, op, _, operands in insns:
        if op != "BRA":
            continue
        t = BRANCH_TARGET.search(operands)
        if not t or int(t[1], 16) >= addr:
            continue
        body = [i for i in insns if int(t[1], 16) <= i[0] <= addr]
        mmas = sum(1 for i in body if i[1] in CLASSES["tensor"])
        if mmas and mmas / len(body) > best_density:
            best, best_density = body, mmas / len(body)
    return best


def mix(insns):
    by_op = collections.Counter(op for _, op, _, _ in insns)
    by_class = collections.Counter()
    for op, n in by_op.items():
        by_class[next((c for c, ops in CLASSES.items() if op in ops), "other")] += n
    return by_op, by_class


def readable(name):
    """The demangled name without its namespaces' clutter (c++filt where there is one)."""
    try:
        name = subprocess.run(["c++filt", name], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return name
    name = re.sub(r"\(anonymous namespace\)::|sl::|^void ", "", name)
    return re.sub(r"\([^()]*\)$", "", name)  # the parameter list


def report(name, insns, out, weights_per_mma=0):
    loop = innermost_loop(insns)
    by_op, by_class = mix(loop)
    mmas = by_class["tensor"]
    per = (lambda n: f"{n / mmas:.2f}") if mmas else (lambda n: "-")
    out.write(f"{readable(name)}\n  main loop: {len(loop)} instructions, {mmas} tensor-core MMAs\n")
    out.write("  per MMA: " + ", ".join(f"{c} {per(by_class[c])}" for c in ["alu", "fma", "tensor", "memory", "other"])
              + f", all {per(len(loop))}\n")
    if weights_per_mma and mmas:
        w = mmas * weights_per_mma
        out.write(f"  per weight ({weights_per_mma} a lane per MMA): " +
                  ", ".join(f"{c} {by_class[c] / w:.2f}" for c in ["alu", "fma"]) + f", all {len(loop) / w:.2f}\n")
    out.write("  opcodes: " + ", ".join(f"{op} {n}" for op, n in by_op.most_common(14)) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary", nargs="?", help="object file, cubin or executable with sm_90 code")
    ap.add_argument("--sass", help="read this cuobjdump -sass text instead of disassembling")
    ap.add_argument("--kernel", default="", help="regular expression on the (mangled) kernel name")
    ap.add_argument("--weights-per-mma", type=int, default=0, metavar="N",
                    help="also print the counts per weight, for a kernel whose lanes each decode N weights "
                         "per MMA (moe_fp4_mma_kernel: 4, moe_fp4_swap_kernel: 8)")
    a = ap.parse_args()
    if not a.binary and not a.sass:
        ap.error("give a binary or --sass FILE")
    if a.weights_per_mma < 0:
        ap.error("--weights-per-mma: expected a positive count")
    if a.sass:
        try:
            sass = open(a.sass).read()
        except OSError as e:
            sys.exit(f"sass_mix: {a.sass}: {e.strerror}")
    else:
        if not os.path.isfile(a.binary):
            sys.exit(f"sass_mix: {a.binary}: no such file")
        sass = disassemble(a.binary)
    found = [(n, i) for n, i in kernels(sass) if re.search(a.kernel, n)]
    if not found:
        sys.exit(f"sass_mix: no kernel matches '{a.kernel}'")
    for name, insns in found:
        report(name, insns, sys.stdout, a.weights_per_mma)


if __name__ == "__main__":
    main()
