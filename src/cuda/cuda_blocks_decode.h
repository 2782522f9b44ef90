/*
 * cuda_blocks_decode.h: the block types' device decoders of ops_linear_blocks.cu (its header comment
 * describes the layout and the units): per type the unit loads and the groups of 16 integer quants with
 * their scales, and the groups' values. Device code only, no launches: kept apart so that the decoders can
 * be checked on their own (every unit of every type against gq_dequantize_row). CUDA C++ only.
 */
#ifndef VLLM_CUDA_CUDA_BLOCKS_DECODE_H
#define VLLM_CUDA_CUDA_BLOCKS_DECODE_H

#define QMAGIC 8388608.0f /* 2^23: the float 0x4B000000 */

/* ---- loads ---- */

/* Where a unit's bytes are read from: global memory (quants streamed, scales through the read-only
 * cache) or any address space (the raw-rows kernel's shared-memory copy). */
#define LD_ANY 0
#define LD_GLOBAL 1

template <int L> __device__ __forceinline__ uint4 ldq16(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldcs((const uint4 *)p);
    else return *(const uint4 *)p;
}
template <int L> __device__ __forceinline__ uint4 lds16(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldg((const uint4 *)p);
    else return *(const uint4 *)p;
}
template <int L> __device__ __forceinline__ uint2 lds8(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldg((const uint2 *)p);
    else return *(const uint2 *)p;
}
template <int L> __device__ __forceinline__ uint32_t lds4(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldg((const unsigned int *)p);
    else return *(const uint32_t *)p;
}
template <int L> __device__ __forceinline__ uint32_t lds2(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldg((const unsigned short *)p);
    else return *(const unsigned short *)p;
}
template <int L> __device__ __forceinline__ uint32_t lds1(const uint8_t *p) {
    if constexpr (L == LD_GLOBAL) return __ldg((const unsigned char *)p);
    else return *p;
}

/* f16 bits (the low 16 of h) widened */
__device__ __forceinline__ float h2f(uint32_t h) { return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu))); }

/* 2^23 + byte k of w, exactly (the float whose bits are 0x4B0000 << 8 | byte) */
__device__ __forceinline__ float qbyte(uint32_t w, int k) {
    return __int_as_float((int)__byte_perm(w, 0x4B000000u, 0x7440u | (unsigned)k));
}

/* bits 0..3 of b spread to bit 0 of bytes 0..3 */
__device__ __forceinline__ uint32_t spread4(uint32_t b) { return ((b & 0xfu) * 0x00204081u) & 0x01010101u; }

/* byte k (runtime) of w */
__device__ __forceinline__ uint32_t byte_of(uint32_t w, int k) { return (w >> (8 * k)) & 0xffu; }

/* IQ4_NL's levels + 128 (gq_kvalues_iq4nl: -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53,
 * 69, 89, 113), 4 per word, little-endian */
#define IQ4_T0 0x3F2D1801u /* 1, 24, 45, 63 */
#define IQ4_T1 0x766A5D4Fu /* 79, 93, 106, 118 */
#define IQ4_T2 0xA6998D81u /* 129, 141, 153, 166 */
#define IQ4_T3 0xF1D9C5B5u /* 181, 197, 217, 241 */

/* MXFP4's levels (gq_kvalues_mxfp4: twice the E2M1 values 0, 1, 2, 3, 4, 6, 8, 12, then negated) + 128 */
#define MXFP4_T0 0x83828180u /* 128, 129, 130, 131 */
#define MXFP4_T1 0x8C888684u /* 132, 134, 136, 140 */
#define MXFP4_T2 0x7D7E7F80u /* 128, 127, 126, 125 */
#define MXFP4_T3 0x74787A7Cu /* 124, 122, 120, 116 */

/* The 8 nibbles of w (bytes b0..b3: low nibble = element j, high = element j + 16) as the levels of the table
 * T0..T3 (16 bytes, 4 per word), one per byte: lo = levels of the low nibbles of b0..b3, hi = of the high
 * nibbles. */
template <uint32_t T0, uint32_t T1, uint32_t T2, uint32_t T3>
__device__ __forceinline__ void nib_levels(uint32_t w, uint32_t &lo, uint32_t &hi) {
    uint32_t r[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint32_t s = w >> (16 * h); /* 4 nibbles: lo(b), hi(b), lo(b+1), hi(b+1) */
        const uint32_t sel = s & 0x7777u;
        const uint32_t a = __byte_perm(T0, T1, sel), b = __byte_perm(T2, T3, sel);
        r[h] = __byte_perm(a, b, 0x3210u | ((s & 0x8888u) >> 1)); /* nibble >= 8: from b */
    }
    lo = __byte_perm(r[0], r[1], 0x6420u);
    hi = __byte_perm(r[0], r[1], 0x7531u);
}
__device__ __forceinline__ void iq4_levels(uint32_t w, uint32_t &lo, uint32_t &hi) {
    nib_levels<IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3>(w, lo, hi);
}

/* A 32-element block of 16 nibble bytes (element j low, j + 16 high) whose levels + 128 are the table T0..T3, scale
 * d: decode's two groups (IQ4_NL, MXFP4). */
template <uint32_t T0, uint32_t T1, uint32_t T2, uint32_t T3, class F>
__device__ __forceinline__ void nib_table_decode(const uint4 &q, float d, F &&f) {
    uint32_t lo[4], hi[4];
    nib_levels<T0, T1, T2, T3>(q.x, lo[0], hi[0]);
    nib_levels<T0, T1, T2, T3>(q.y, lo[1], hi[1]);
    nib_levels<T0, T1, T2, T3>(q.z, lo[2], hi[2]);
    nib_levels<T0, T1, T2, T3>(q.w, lo[3], hi[3]);
    f(0, lo[0], lo[1], lo[2], lo[3], d, -128.0f);
    f(16, hi[0], hi[1], hi[2], hi[3], d, -128.0f);
}

/* ggml_e8m0_to_fp32_half: 2^(e - 128) from the E8M0 byte e (a float subnormal for e < 2) */
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* ---- the block types ----
 *
 * Each type: its ggml block (BS bytes, ELEMS elements), the device layout's QB / SB, UPB units per block,
 * U units in flight per lane (per row) in the GEMV, MIN (values a * q + b rather than a * (q + c)), and
 *   raw                  the registers of one unit
 *   load<L>(r, Q, S, j)  unit j of the block whose quants are at Q and scales at S
 *   decode(r, j, f)      calls f(e0, q0, q1, q2, q3, a, b) for each group: 16 elements at e0.. of the block
 *                        with integer quants in the bytes of q0..q3 (element e0 + i: byte i % 4 of q(i / 4))
 *                        and value a * (q + b) (b an integer offset) or, MIN, a * q + b
 *   relayout(i, s)       where byte i of the ggml block goes: offset in S (s true) or Q
 */

struct QK_Q8_0 {
    static constexpr int BS = 34, ELEMS = 32, QB = 32, SB = 2, UPB = 2, U = 4;
    static constexpr bool MIN = false;
    struct raw { uint4 q; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        r.q = ldq16<L>(Q + 16 * j);
        r.d = h2f(lds2<L>(S));
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const uint32_t x = 0x80808080u; /* int8 -> q + 128 */
        f(16 * j, r.q.x ^ x, r.q.y ^ x, r.q.z ^ x, r.q.w ^ x, r.d, -128.0f);
    }
    __device__ static int relayout(int i, bool &s) { return (s = i < 2) ? i : i - 2; }
};

/* the 32-element 4-bit types: a unit is a block, lo = elements 0..15, hi = 16..31 */
__device__ __forceinline__ void nib_split(const uint4 &q, uint32_t lo[4], uint32_t hi[4]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lo[i] = w[i] & 0x0f0f0f0fu;
        hi[i] = (w[i] >> 4) & 0x0f0f0f0fu;
    }
}

struct QK_Q4_0 {
    static constexpr int BS = 18, ELEMS = 32, QB = 16, SB = 2, UPB = 1, U = 4;
    static constexpr bool MIN = false;
    struct raw { uint4 q; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        r.d = h2f(lds2<L>(S));
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        uint32_t lo[4], hi[4];
        nib_split(r.q, lo, hi);
        f(0, lo[0], lo[1], lo[2], lo[3], r.d, -8.0f);
        f(16, hi[0], hi[1], hi[2], hi[3], r.d, -8.0f);
    }
    __device__ static int relayout(int i, bool &s) { return (s = i < 2) ? i : i - 2; }
};

struct QK_Q4_1 {
    static constexpr int BS = 20, ELEMS = 32, QB = 16, SB = 4, UPB = 1, U = 4;
    static constexpr bool MIN = true;
    struct raw { uint4 q; float d, m; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        const uint32_t dm = lds4<L>(S);
        r.d = h2f(dm);
        r.m = h2f(dm >> 16);
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        uint32_t lo[4], hi[4];
        nib_split(r.q, lo, hi);
        f(0, lo[0], lo[1], lo[2], lo[3], r.d, r.m);
        f(16, hi[0], hi[1], hi[2], hi[3], r.d, r.m);
    }
    __device__ static int relayout(int i, bool &s) { return (s = i < 4) ? i : i - 4; }
};

/* Q5_0 / Q5_1: bit 4 of element j is bit j of qh */
__device__ __forceinline__ void nib5_split(const uint4 &q, uint32_t qh, uint32_t lo[4], uint32_t hi[4]) {
    nib_split(q, lo, hi);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lo[i] |= spread4(qh >> (4 * i)) << 4;
        hi[i] |= spread4(qh >> (16 + 4 * i)) << 4;
    }
}

struct QK_Q5_0 {
    static constexpr int BS = 22, ELEMS = 32, QB = 16, SB = 8, UPB = 1, U = 4;
    static constexpr bool MIN = false;
    struct raw { uint4 q; uint32_t qh; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        const uint2 s = lds8<L>(S); /* qh, d */
        r.qh = s.x;
        r.d = h2f(s.y);
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        uint32_t lo[4], hi[4];
        nib5_split(r.q, r.qh, lo, hi);
        f(0, lo[0], lo[1], lo[2], lo[3], r.d, -16.0f);
        f(16, hi[0], hi[1], hi[2], hi[3], r.d, -16.0f);
    }
    /* ggml: d[0..2) qh[2..6) qs[6..22) -> S: qh at 0, d at 4 */
    __device__ static int relayout(int i, bool &s) {
        s = i < 6;
        return i < 2 ? 4 + i : i < 6 ? i - 2 : i - 6;
    }
};

struct QK_Q5_1 {
    static constexpr int BS = 24, ELEMS = 32, QB = 16, SB = 8, UPB = 1, U = 4;
    static constexpr bool MIN = true;
    struct raw { uint4 q; uint32_t qh; float d, m; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        const uint2 s = lds8<L>(S); /* qh, d | m */
        r.qh = s.x;
        r.d = h2f(s.y);
        r.m = h2f(s.y >> 16);
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        uint32_t lo[4], hi[4];
        nib5_split(r.q, r.qh, lo, hi);
        f(0, lo[0], lo[1], lo[2], lo[3], r.d, r.m);
        f(16, hi[0], hi[1], hi[2], hi[3], r.d, r.m);
    }
    /* ggml: d[0..2) m[2..4) qh[4..8) qs[8..24) -> S: qh at 0, d at 4, m at 6 */
    __device__ static int relayout(int i, bool &s) {
        s = i < 8;
        return i < 4 ? 4 + i : i < 8 ? i - 4 : i - 8;
    }
};

struct QK_IQ4_NL {
    static constexpr int BS = 18, ELEMS = 32, QB = 16, SB = 2, UPB = 1, U = 4;
    static constexpr bool MIN = false;
    struct raw { uint4 q; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        r.d = h2f(lds2<L>(S));
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        nib_table_decode<IQ4_T0, IQ4_T1, IQ4_T2, IQ4_T3>(r.q, r.d, f);
    }
    __device__ static int relayout(int i, bool &s) { return (s = i < 2) ? i : i - 2; }
};

/* MXFP4 (gpt-oss's experts): IQ4_NL's layout with an E8M0 scale byte and the FP4 levels */
struct QK_MXFP4 {
    static constexpr int BS = 17, ELEMS = 32, QB = 16, SB = 1, UPB = 1, U = 4;
    static constexpr bool MIN = false;
    struct raw { uint4 q; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int) {
        r.q = ldq16<L>(Q);
        r.d = e8m0_half(lds1<L>(S));
    }
    template <class F> __device__ static void decode(const raw &r, int, F &&f) {
        nib_table_decode<MXFP4_T0, MXFP4_T1, MXFP4_T2, MXFP4_T3>(r.q, r.d, f);
    }
    /* ggml: e[0], qs[1..17) */
    __device__ static int relayout(int i, bool &s) { return (s = i < 1) ? i : i - 1; }
};

/* Q2_K: unit j = 2h + s: qs[32h + 16s ..+16); group g = elements 128h + 32g + 16s.. (bits 2g of those
 * bytes), sub-block 8h + 2g + s */
struct QK_Q2_K {
    static constexpr int BS = 84, ELEMS = 256, QB = 64, SB = 20, UPB = 4, U = 2;
    static constexpr bool MIN = true;
    struct raw { uint4 q; uint32_t sc; float d, dmin; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        const int h = j >> 1, s = j & 1;
        r.q = ldq16<L>(Q + 32 * h + 16 * s);
        const uint32_t w0 = lds4<L>(S + 8 * h), w1 = lds4<L>(S + 8 * h + 4);
        r.sc = __byte_perm(w0, w1, s ? 0x7531u : 0x6420u); /* scales[8h + s + 2g], g = 0..3 */
        const uint32_t dd = lds4<L>(S + 16);
        r.d = h2f(dd);
        r.dmin = h2f(dd >> 16);
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const int h = j >> 1, s = j & 1;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const uint32_t sc = (r.sc >> (8 * g)) & 0xffu, m = 0x03030303u;
            const float a = r.d * (float)(sc & 15), b = -(r.dmin * (float)(sc >> 4));
            f(128 * h + 32 * g + 16 * s, (r.q.x >> (2 * g)) & m, (r.q.y >> (2 * g)) & m, (r.q.z >> (2 * g)) & m,
              (r.q.w >> (2 * g)) & m, a, b);
        }
    }
    /* ggml: scales[0..16) qs[16..80) d, dmin [80..84) -> S: scales at 0, d at 16 */
    __device__ static int relayout(int i, bool &s) {
        s = i < 16 || i >= 80;
        return i < 16 ? i : i < 80 ? i - 16 : i - 64;
    }
};

/* Q3_K: unit j = 2h + s: qs[32h + 16s ..+16) and hmask[16s ..+16); group g as Q2_K's, the high bit of
 * element 128h + 32g + l in bit 4h + g of hmask[l] */
struct QK_Q3_K {
    static constexpr int BS = 110, ELEMS = 256, QB = 96, SB = 16, UPB = 4, U = 1;
    static constexpr bool MIN = false;
    struct raw { uint4 qs, hm, s; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        const int h = j >> 1, s = j & 1;
        r.qs = ldq16<L>(Q + 32 + 32 * h + 16 * s);
        r.hm = ldq16<L>(Q + 16 * s);
        r.s = lds16<L>(S);
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const int h = j >> 1, s = j & 1;
        const float d = h2f(r.s.w);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            /* the 6-bit code of sub-block 8h + 2g + s (gq_q3_K_scales) */
            const int k = 2 * g + s; /* 0..7 */
            const uint32_t lo4 = (byte_of(g < 2 ? r.s.x : r.s.y, k & 3) >> (4 * h)) & 15u;
            const uint32_t hi2 = (byte_of(r.s.z, k & 3) >> (2 * (2 * h + (g >> 1)))) & 3u;
            const float a = d * (float)((int)(lo4 | (hi2 << 4)) - 32);
            const uint32_t m = 0x03030303u, hb = 4 * h + g;
            f(128 * h + 32 * g + 16 * s, ((r.qs.x >> (2 * g)) & m) | (((r.hm.x >> hb) & 0x01010101u) << 2),
              ((r.qs.y >> (2 * g)) & m) | (((r.hm.y >> hb) & 0x01010101u) << 2),
              ((r.qs.z >> (2 * g)) & m) | (((r.hm.z >> hb) & 0x01010101u) << 2),
              ((r.qs.w >> (2 * g)) & m) | (((r.hm.w >> hb) & 0x01010101u) << 2), a, -4.0f);
        }
    }
    /* ggml: hmask[0..32) qs[32..96) scales[96..108) d[108..110) -> Q the first 96, S the rest */
    __device__ static int relayout(int i, bool &s) { return (s = i >= 96) ? i - 96 : i; }
};

/* Q4_K / Q5_K scales: (sc, m) of sub-block sub (0..7) from the scale words y, z, w (scales 0-3, 4-7, 8-11) */
__device__ __forceinline__ void k4_scale_min(uint32_t y, uint32_t z, uint32_t w, int sub, float &sc, float &m) {
    const int k = sub & 3;
    if (sub < 4) {
        sc = (float)(byte_of(y, k) & 63u);
        m = (float)(byte_of(z, k) & 63u);
    } else {
        sc = (float)((byte_of(w, k) & 15u) | ((byte_of(y, k) >> 6) << 4));
        m = (float)((byte_of(w, k) >> 4) | ((byte_of(z, k) >> 6) << 4));
    }
}

/* Q4_K: unit j = 2c + s: qs[32c + 16s ..+16): low nibbles elements 64c + 16s.. (sub-block 2c), high
 * nibbles 64c + 32 + 16s.. (sub-block 2c + 1) */
struct QK_Q4_K {
    static constexpr int BS = 144, ELEMS = 256, QB = 128, SB = 16, UPB = 8, U = 2;
    static constexpr bool MIN = true;
    struct raw { uint4 q, s; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        r.q = ldq16<L>(Q + 16 * j);
        r.s = lds16<L>(S);
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const int c = j >> 1, s = j & 1;
        const float d = h2f(r.s.x), dmin = h2f(r.s.x >> 16);
        uint32_t lo[4], hi[4];
        nib_split(r.q, lo, hi);
        float sc, m;
        k4_scale_min(r.s.y, r.s.z, r.s.w, 2 * c, sc, m);
        f(64 * c + 16 * s, lo[0], lo[1], lo[2], lo[3], d * sc, -(dmin * m));
        k4_scale_min(r.s.y, r.s.z, r.s.w, 2 * c + 1, sc, m);
        f(64 * c + 32 + 16 * s, hi[0], hi[1], hi[2], hi[3], d * sc, -(dmin * m));
    }
    /* ggml: d, dmin, scales [0..16) qs[16..144) */
    __device__ static int relayout(int i, bool &s) { return (s = i < 16) ? i : i - 16; }
};

/* Q5_K: Q4_K's units plus qh[16s ..+16): bit 2c (low nibbles) / 2c + 1 (high) is bit 4 */
struct QK_Q5_K {
    static constexpr int BS = 176, ELEMS = 256, QB = 160, SB = 16, UPB = 8, U = 1;
    static constexpr bool MIN = true;
    struct raw { uint4 q, h, s; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        r.q = ldq16<L>(Q + 32 + 16 * j);
        r.h = ldq16<L>(Q + 16 * (j & 1));
        r.s = lds16<L>(S);
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const int c = j >> 1, s = j & 1;
        const float d = h2f(r.s.x), dmin = h2f(r.s.x >> 16);
        uint32_t lo[4], hi[4];
        nib_split(r.q, lo, hi);
        const uint32_t hw[4] = {r.h.x, r.h.y, r.h.z, r.h.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo[i] |= ((hw[i] >> (2 * c)) & 0x01010101u) << 4;
            hi[i] |= ((hw[i] >> (2 * c + 1)) & 0x01010101u) << 4;
        }
        float sc, m;
        k4_scale_min(r.s.y, r.s.z, r.s.w, 2 * c, sc, m);
        f(64 * c + 16 * s, lo[0], lo[1], lo[2], lo[3], d * sc, -(dmin * m));
        k4_scale_min(r.s.y, r.s.z, r.s.w, 2 * c + 1, sc, m);
        f(64 * c + 32 + 16 * s, hi[0], hi[1], hi[2], hi[3], d * sc, -(dmin * m));
    }
    /* ggml: d, dmin, scales [0..16) qh[16..48) qs[48..176) */
    __device__ static int relayout(int i, bool &s) { return (s = i < 16) ? i : i - 16; }
};

/* Q6_K: unit j = 2h + s: ql[64h + 16s ..+16) (a), ql[64h + 32 + 16s ..+16) (b), qh[32h + 16s ..+16);
 * groups: elements 128h + 16s + {0, 32, 64, 96}.. = a lo, b lo, a hi, b hi with qh bits 0-1, 2-3, 4-5,
 * 6-7; sub-block 8h + 2g + s */
struct QK_Q6_K {
    static constexpr int BS = 210, ELEMS = 256, QB = 192, SB = 20, UPB = 4, U = 1;
    static constexpr bool MIN = false;
    struct raw { uint4 qa, qb, qh; uint32_t sc; float d; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        const int h = j >> 1, s = j & 1;
        r.qa = ldq16<L>(Q + 64 * h + 16 * s);
        r.qb = ldq16<L>(Q + 64 * h + 32 + 16 * s);
        r.qh = ldq16<L>(Q + 128 + 32 * h + 16 * s);
        const uint32_t w0 = lds4<L>(S + 8 * h), w1 = lds4<L>(S + 8 * h + 4);
        r.sc = __byte_perm(w0, w1, s ? 0x7531u : 0x6420u); /* scales[8h + s + 2g] */
        r.d = h2f(lds2<L>(S + 16));
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const int h = j >> 1, s = j & 1;
        const uint32_t qa[4] = {r.qa.x, r.qa.y, r.qa.z, r.qa.w}, qb[4] = {r.qb.x, r.qb.y, r.qb.z, r.qb.w},
                       qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
#pragma unroll
        for (int g = 0; g < 4; g++) {
            uint32_t q[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t l = g & 1 ? qb[i] : qa[i];
                q[i] = ((g < 2 ? l : l >> 4) & 0x0f0f0f0fu) | (((qh[i] >> (2 * g)) & 0x03030303u) << 4);
            }
            const float a = r.d * (float)(int8_t)((r.sc >> (8 * g)) & 0xffu);
            f(128 * h + 32 * g + 16 * s, q[0], q[1], q[2], q[3], a, -32.0f);
        }
    }
    /* ggml: ql[0..128) qh[128..192) scales[192..208) d[208..210) */
    __device__ static int relayout(int i, bool &s) { return (s = i >= 192) ? i - 192 : i; }
};

/* IQ4_XS: unit j = sub-block ib: qs[16ib ..+16): low nibbles elements 32ib.., high 32ib + 16.. */
struct QK_IQ4_XS {
    static constexpr int BS = 136, ELEMS = 256, QB = 128, SB = 8, UPB = 8, U = 2;
    static constexpr bool MIN = false;
    struct raw { uint4 q; uint2 s; };
    template <int L> __device__ static void load(raw &r, const uint8_t *Q, const uint8_t *S, int j) {
        r.q = ldq16<L>(Q + 16 * j);
        r.s = lds8<L>(S);
    }
    template <class F> __device__ static void decode(const raw &r, int j, F &&f) {
        const float d = h2f(r.s.x);
        const uint32_t ls = ((r.s.y >> (8 * (j >> 1) + 4 * (j & 1))) & 15u) | (((r.s.x >> (16 + 2 * j)) & 3u) << 4);
        const float a = d * (float)((int)ls - 32);
        uint32_t lo[4], hi[4];
        iq4_levels(r.q.x, lo[0], hi[0]);
        iq4_levels(r.q.y, lo[1], hi[1]);
        iq4_levels(r.q.z, lo[2], hi[2]);
        iq4_levels(r.q.w, lo[3], hi[3]);
        f(32 * j, lo[0], lo[1], lo[2], lo[3], a, -128.0f);
        f(32 * j + 16, hi[0], hi[1], hi[2], hi[3], a, -128.0f);
    }
    /* ggml: d, scales_h, scales_l [0..8) qs[8..136) */
    __device__ static int relayout(int i, bool &s) { return (s = i < 8) ? i : i - 8; }
};

/* ---- group helpers ---- */

/* v[i] = the group's 16 values as the GEMV uses them: q + c (not MIN: the scale a comes after the dot
 * product) or a * q + b (MIN) */
template <bool MIN>
__device__ __forceinline__ void grp_values(const uint32_t (&q)[4], float a, float b, float (&v)[16]) {
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const float f = qbyte(q[i >> 2], i & 3);
        if constexpr (MIN) v[i] = fmaf(a, f - QMAGIC, b);
        else v[i] = f - (QMAGIC - b); /* q + c exactly (c an integer) */
    }
}

/* the group's 16 values exactly as gq_dequantize_row computes them in f32 */
template <bool MIN>
__device__ __forceinline__ void grp_exact(const uint32_t (&q)[4], float a, float b, float (&v)[16]) {
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const float f = qbyte(q[i >> 2], i & 3);
        if constexpr (MIN) v[i] = __fadd_rn(__fmul_rn(a, __fsub_rn(f, QMAGIC)), b);
        else v[i] = __fmul_rn(a, __fsub_rn(f, QMAGIC - b));
    }
}

#endif
