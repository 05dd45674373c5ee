#!/usr/bin/env python3
"""scripts/sass_mix.py on a hand-written cuobjdump listing: the main loop is the backward branch's
range holding the MMAs, and its counts per MMA are the ones counted by hand below."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Two functions. In `loopy`, 0x0040-0x00b0 is the loop (BRA back to 0x0040): 2 HMMA, 2 PRMT +
# 1 LOP3 + 1 SHF (alu 4), 2 IMAD + 1 HMUL2 (fma 3), 1 LDG (memory), 1 BRA (other) = 11 instructions.
# A second, shorter loop (0x00d0-0x00e0) has no MMA and must not be picked.
# In `wg` (FP8 wgmma, QGMMA) the main loop is 0x0040-0x0080: 2 QGMMA, 1 LOP3 (alu), 1 LDS
# (memory), 1 BRA (other) = 5 instructions. A divergent fallback path branches back from 0x00c0
# to 0x0010: its range holds 4 QGMMA in 12 instructions, more MMAs but fewer per instruction, and
# must not be picked.
LISTING = """
	code for sm_90
		Function : _Z5loopyv
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                         /* 0x0000000000007919 */
        /*0040*/                   LDG.E.128 R4, desc[UR4][R2.64] ;          /* 0x0000000402047981 */
        /*0050*/                   PRMT R8, R4, 0xf4f0, R5 ;                 /* 0x0000f4f004087816 */
        /*0060*/                   IMAD.SHL.U32 R9, R8, 0x40, RZ ;           /* 0x0000004008097824 */
        /*0070*/                   IMAD.SHL.U32 R10, R8, 0x1000, RZ ;        /* 0x00001000080a7824 */
        /*0075*/                   LOP3.LUT R11, R9, 0x81c081c0, R10, 0xc8, !PT ; /* 0x81c081c0090b7812 */
        /*0080*/                   PRMT R12, R4, 0xf5f1, R5 ;                /* 0x0000f5f1040c7816 */
        /*0085*/                   SHF.R.U32.HI R13, RZ, 0x4, R4 ;           /* 0x00000004ff0d7819 */
        /*0090*/                   HMUL2.BF16_V2 R11, R11, R14 ;             /* 0x0000000e0b0b7232 */
        /*00a0*/                   HMMA.16816.F32.BF16 R16, R20, R10, R16 ;  /* 0x0000000a14107237 */
        /*00a8*/                   HMMA.16816.F32.BF16 R16, R24, R10, R16 ;  /* 0x0000000a18107237 */
        /*00b0*/               @P0 BRA 0x40 ;                                 /* 0xffffff8000000947 */
        /*00d0*/                   IADD3 R2, R2, 0x1, RZ ;                   /* 0x0000000102027810 */
        /*00e0*/               @P1 BRA 0xd0 ;                                 /* 0xfffffff000001947 */
        /*00f0*/                   EXIT ;                                     /* 0x000000000000794d */
		..........
		Function : _Z2wgv
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                     /* 0x00000a0000017a02 */
        /*0010*/                   SHFL.BFLY PT, R8, R7, 0x8, 0x1f ;          /* 0x0d001f0007087f89 */
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;                   /* 0x0000000102027810 */
        /*0030*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R24, R64, gdesc[UR12], RZ, !UPT ; /* 0x0 */
        /*0040*/                   LOP3.LUT R11, R9, 0x81c081c0, R10, 0xc8, !PT ; /* 0x81c081c0090b7812 */
        /*0050*/                   LDS R12, [R3] ;                            /* 0x0000000003007984 */
        /*0060*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R24, R64, gdesc[UR12], RZ, !UPT ; /* 0x0 */
        /*0070*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R28, R68, gdesc[UR16], RZ, !UPT, gsb0 ; /* 0x0 */
        /*0080*/               @P0 BRA 0x40 ;                                 /* 0xfffffff000000947 */
        /*0090*/                   QGMMA.64x8x32.F32.E4M3.E4M3 R24, R64, gdesc[UR12], RZ, !UPT ; /* 0x0 */
        /*00a0*/                   EXIT ;                                     /* 0x000000000000794d */
        /*00b0*/                   SHFL.BFLY P0, R8, R7, R2, R3 ;             /* 0x0d001f0007087f89 */
        /*00c0*/                   BRA 0x10 ;                                 /* 0xffffff4000007947 */
		..........
		Function : _Z6simplev
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   MOV R1, c[0x0][0x28] ;                     /* 0x00000a0000017a02 */
        /*0010*/                   EXIT ;                                     /* 0x000000000000794d */
"""


def run(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sass_mix.py"), *args],
                          capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.sass")
        with open(path, "w") as f:
            f.write(LISTING)
        r = run("--sass", path, "--kernel", "loopy")
        assert r.returncode == 0, r.stderr
        assert "main loop: 11 instructions, 2 tensor-core MMAs" in r.stdout, r.stdout
        assert "per MMA: alu 2.00, fma 1.50, tensor 1.00, memory 0.50, other 0.50, all 5.50" in r.stdout, r.stdout
        assert "simple" not in r.stdout, r.stdout
        r = run("--sass", path, "--kernel", "wg")
        assert r.returncode == 0, r.stderr
        assert "main loop: 5 instructions, 2 tensor-core MMAs" in r.stdout, r.stdout
        assert "per MMA: alu 0.50, fma 0.00, tensor 1.00, memory 0.50, other 0.50, all 2.50" in r.stdout, r.stdout
        # Per weight: 2 MMAs x 4 weights = 8; alu 4 / 8, fma 3 / 8, all 11 / 8.
        r = run("--sass", path, "--kernel", "loopy", "--weights-per-mma", "4")
        assert "per weight (4 a lane per MMA): alu 0.50, fma 0.38, all 1.38" in r.stdout, r.stdout
        r = run("--sass", path, "--weights-per-mma", "-1")
        assert r.returncode != 0 and "positive" in r.stderr, r.stderr
        # A kernel without MMAs: the whole function, "-" per MMA.
        r = run("--sass", path, "--kernel", "simple")
        assert r.returncode == 0 and "main loop: 2 instructions, 0 tensor-core MMAs" in r.stdout, r.stdout + r.stderr
        # Bad input: a clear error, no traceback.
        r = run("--sass", path, "--kernel", "nothing_like_it")
        assert r.returncode != 0 and "no kernel matches" in r.stderr and "Traceback" not in r.stderr, r.stderr
        r = run("--sass", os.path.join(d, "missing.sass"))
        assert r.returncode != 0 and "missing.sass" in r.stderr and "Traceback" not in r.stderr, r.stderr
        r = run(os.path.join(d, "missing.o"))
        assert r.returncode != 0 and "no such file" in r.stderr and "Traceback" not in r.stderr, r.stderr
    print("sass_mix: ok")


if __name__ == "__main__":
    main()
