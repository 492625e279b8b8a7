void fusion0(char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T) {
  {
    /* nest 0: rows over 3 dims, the last 1 reduced */
    const int64_t *D = S + 0;
    const uint16_t *restrict p0 = (const uint16_t *)P[0];
    const float *restrict p1 = (const float *)P[1];
    const float *restrict p2 = (const float *)P[2];
    uint16_t *restrict p3 = (uint16_t *)P[3];
    const int64_t nrows = D[0] * D[1];
    const int64_t ninner = D[2];
    const int64_t w2 = 1;
    if (nrows > 0) {
      int ic = 1;
      ic &= D[2] <= 1 || T[2] == w2;
      ic &= D[2] <= 1 || T[10] == w2;
      ic &= D[2] <= 1 || T[18] == w2;
      ic &= D[2] <= 1 || T[26] == w2;
      #pragma omp parallel for schedule(static) if (nrows * ninner >= 32768)
      for (int64_t row = 0; row < nrows; row++) {
        int64_t rem = row;
        const int64_t o1 = rem % D[1];
        rem /= D[1];
        const int64_t o0 = rem;
        const int64_t b0 = o0 * T[0] + o1 * T[1];
        const int64_t b1 = o0 * T[8] + o1 * T[9];
        const int64_t b2 = o0 * T[16] + o1 * T[17];
        const int64_t b3 = o0 * T[24] + o1 * T[25];
        const char * pf0 = ic && row + 1 < nrows && T[1] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p0 <= 16384 ? (const char *)(p0 + b0 + ninner) : NULL;
        const char * pf1 = ic && row + 1 < nrows && T[9] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p1 <= 16384 ? (const char *)(p1 + b1 + ninner) : NULL;
        const char * pf2 = ic && row + 1 < nrows && T[17] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p2 <= 16384 ? (const char *)(p2 + b2 + ninner) : NULL;
        const char * pf3 = ic && row + 1 < nrows && T[25] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p3 <= 16384 ? (const char *)(p3 + b3 + ninner) : NULL;
        /* pass 1 */
        double s1 = 0;
        if (ic) {
          #pragma omp simd reduction(+:s1)
          for (int64_t j = 0; j < ninner; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j]);
            const float v0 = a0;
            s1 += (double)v0;
          }
        } else {
          for (int64_t j = 0; j < D[2]; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j * T[2]]);
            const float v0 = a0;
            s1 += (double)v0;
          }
        }
        double u1 = s1 / (double)ninner;
        /* pass 2 */
        double q1 = 0;
        if (ic) {
          #pragma omp simd reduction(+:q1)
          for (int64_t j = 0; j < ninner; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j]);
            const float v0 = a0;
            q1 += ((double)v0 - u1) * ((double)v0 - u1);
          }
        } else {
          for (int64_t j = 0; j < D[2]; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j * T[2]]);
            const float v0 = a0;
            q1 += ((double)v0 - u1) * ((double)v0 - u1);
          }
        }
        if (!isfinite(q1)) {
          double wk1 = 0;
          u1 = 0;
          q1 = 0;
          for (int64_t j = 0; j < D[2]; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j * T[2]]);
            const float v0 = a0;
            const double wd1 = (double)v0 - u1;
            wk1 += 1;
            u1 += wd1 / wk1;
            q1 += wd1 * ((double)v0 - u1);
          }
        }
        const double dof1 = (double)(ninner) - 0x0p+0;
        const float v2 = th_fz_d_f32((ninner) == 0 ? (double)NAN : u1);
        const float v1 = th_fz_d_f32((ninner) == 0 ? (double)NAN : q1 / (dof1 > 0 ? dof1 : 0.0));
        const float v3 = (float)((((float)v1) + ((float)0x1.4f8b58p-17)));
        const float v4 = (float)((1 / sqrt(((float)v3))));
        /* the outputs */
        if (ic) {
          for (int64_t jc = 0; jc < (ninner + 255) / 256; jc++) {
            const int64_t jb = 256 * jc;
            const int64_t je = jb + 256 < ninner ? jb + 256 : ninner;
            if (pf0) {
              __builtin_prefetch(pf0 + jb * 2 + 0, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 64, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 128, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 192, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 256, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 320, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 384, 0, 3);
              __builtin_prefetch(pf0 + jb * 2 + 448, 0, 3);
            }
            if (pf1) {
              __builtin_prefetch(pf1 + jb * 4 + 0, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 64, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 128, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 192, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 256, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 320, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 384, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 448, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 512, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 576, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 640, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 704, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 768, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 832, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 896, 0, 3);
              __builtin_prefetch(pf1 + jb * 4 + 960, 0, 3);
            }
            if (pf2) {
              __builtin_prefetch(pf2 + jb * 4 + 0, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 64, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 128, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 192, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 256, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 320, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 384, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 448, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 512, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 576, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 640, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 704, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 768, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 832, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 896, 0, 3);
              __builtin_prefetch(pf2 + jb * 4 + 960, 0, 3);
            }
            if (pf3) {
              __builtin_prefetch(pf3 + jb * 2 + 0, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 64, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 128, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 192, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 256, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 320, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 384, 1, 3);
              __builtin_prefetch(pf3 + jb * 2 + 448, 1, 3);
            }
            #pragma omp simd
            for (int64_t j = jb; j < je; j++) {
              const float a0 = th_sc_bf16_to_f32(p0[b0 + j]);
              const float a1 = p1[b1 + j];
              const float a2 = p2[b2 + j];
              const float v0 = a0;
              const float v7 = (float)((((float)v0) - ((float)v2)));
              const float v8 = (float)((((float)v7) * ((float)v4)));
              const float v10 = (float)((((float)v8) * ((float)a1)));
              const float v12 = (float)((((float)v10) + ((float)a2)));
              const float v13 = th_fz_f_bf16(v12);
              p3[b3 + j] = th_fz_st_bf16(v13);
            }
          }
        } else {
          for (int64_t j = 0; j < D[2]; j++) {
            const float a0 = th_sc_bf16_to_f32(p0[b0 + j * T[2]]);
            const float a1 = p1[b1 + j * T[10]];
            const float a2 = p2[b2 + j * T[18]];
            const float v0 = a0;
            const float v7 = (float)((((float)v0) - ((float)v2)));
            const float v8 = (float)((((float)v7) * ((float)v4)));
            const float v10 = (float)((((float)v8) * ((float)a1)));
            const float v12 = (float)((((float)v10) + ((float)a2)));
            const float v13 = th_fz_f_bf16(v12);
            p3[b3 + j * T[26]] = th_fz_st_bf16(v13);
          }
        }
      }
    }
  }
}
