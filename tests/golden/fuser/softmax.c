void fusion0(char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T) {
  {
    /* nest 0: rows over 2 dims, the last 1 reduced */
    const int64_t *D = S + 0;
    const float *restrict p0 = (const float *)P[0];
    float *restrict p1 = (float *)P[1];
    const int64_t nrows = D[0];
    const int64_t ninner = D[1];
    const int64_t w1 = 1;
    if (nrows > 0) {
      int ic = 1;
      ic &= D[1] <= 1 || T[1] == w1;
      ic &= D[1] <= 1 || T[9] == w1;
      const int uc = ic && ninner <= 8192;
      #pragma omp parallel for schedule(static) if (nrows * ninner >= 32768)
      for (int64_t row = 0; row < nrows; row++) {
        const int64_t o0 = row;
        const int64_t b0 = o0 * T[0];
        const int64_t b1 = o0 * T[8];
        _Alignas(32) float rb4[8192];
        const char * pf0 = ic && row + 1 < nrows && T[0] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p0 <= 16384 ? (const char *)(p0 + b0 + ninner) : NULL;
        const char * pf1 = ic && row + 1 < nrows && T[8] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p1 <= 16384 ? (const char *)(p1 + b1 + ninner) : NULL;
        /* pass 1 */
        float m0 = -INFINITY;
        int n0 = 0;
        if (ic) {
          #pragma omp simd reduction(max:m0) reduction(|:n0)
          for (int64_t j = 0; j < ninner; j++) {
            const float a0 = p0[b0 + j];
            m0 = a0 > m0 ? a0 : m0;
            n0 |= a0 != a0;
          }
        } else {
          for (int64_t j = 0; j < D[1]; j++) {
            const float a0 = p0[b0 + j * T[1]];
            m0 = a0 > m0 ? a0 : m0;
            n0 |= a0 != a0;
          }
        }
        const float v0 = (n0 ? (float)NAN : m0);
        /* pass 2 */
        double s5 = 0;
        if (uc) {
          for (int64_t jc = 0; jc < (ninner + 255) / 256; jc++) {
            const int64_t jb = 256 * jc;
            const int64_t je = jb + 256 < ninner ? jb + 256 : ninner;
            if (pf0) {
              __builtin_prefetch(pf0 + jb * 4 + 0, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 64, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 128, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 192, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 256, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 320, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 384, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 448, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 512, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 576, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 640, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 704, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 768, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 832, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 896, 0, 3);
              __builtin_prefetch(pf0 + jb * 4 + 960, 0, 3);
            }
            if (pf1) {
              __builtin_prefetch(pf1 + jb * 4 + 0, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 64, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 128, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 192, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 256, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 320, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 384, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 448, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 512, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 576, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 640, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 704, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 768, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 832, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 896, 1, 3);
              __builtin_prefetch(pf1 + jb * 4 + 960, 1, 3);
            }
            #pragma omp simd reduction(+:s5)
            for (int64_t j = jb; j < je; j++) {
              const float a0 = p0[b0 + j];
              const float v3 = (float)((((float)a0) - ((float)v0)));
              const float v4 = (float)(exp(((float)v3)));
              rb4[j] = v4;
              s5 += (double)v4;
            }
          }
        } else {
          if (ic) {
            for (int64_t jc = 0; jc < (ninner + 255) / 256; jc++) {
              const int64_t jb = 256 * jc;
              const int64_t je = jb + 256 < ninner ? jb + 256 : ninner;
              if (pf0) {
                __builtin_prefetch(pf0 + jb * 4 + 0, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 64, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 128, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 192, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 256, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 320, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 384, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 448, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 512, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 576, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 640, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 704, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 768, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 832, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 896, 0, 3);
                __builtin_prefetch(pf0 + jb * 4 + 960, 0, 3);
              }
              if (pf1) {
                __builtin_prefetch(pf1 + jb * 4 + 0, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 64, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 128, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 192, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 256, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 320, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 384, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 448, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 512, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 576, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 640, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 704, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 768, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 832, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 896, 1, 3);
                __builtin_prefetch(pf1 + jb * 4 + 960, 1, 3);
              }
              #pragma omp simd reduction(+:s5)
              for (int64_t j = jb; j < je; j++) {
                const float a0 = p0[b0 + j];
                const float v3 = (float)((((float)a0) - ((float)v0)));
                const float v4 = (float)(exp(((float)v3)));
                s5 += (double)v4;
              }
            }
          } else {
            for (int64_t j = 0; j < D[1]; j++) {
              const float a0 = p0[b0 + j * T[1]];
              const float v3 = (float)((((float)a0) - ((float)v0)));
              const float v4 = (float)(exp(((float)v3)));
              s5 += (double)v4;
            }
          }
        }
        const float v5 = th_fz_d_f32(s5);
        /* the outputs */
        if (uc) {
          #pragma omp simd
          for (int64_t j = 0; j < ninner; j++) {
            const float v4 = rb4[j];
            const float v8 = (float)((((float)v4) / ((float)v5)));
            p1[b1 + j] = (float)v8;
          }
        } else {
          if (ic) {
            #pragma omp simd
            for (int64_t j = 0; j < ninner; j++) {
              const float a0 = p0[b0 + j];
              const float v3 = (float)((((float)a0) - ((float)v0)));
              const float v4 = (float)(exp(((float)v3)));
              const float v8 = (float)((((float)v4) / ((float)v5)));
              p1[b1 + j] = (float)v8;
            }
          } else {
            for (int64_t j = 0; j < D[1]; j++) {
              const float a0 = p0[b0 + j * T[1]];
              const float v3 = (float)((((float)a0) - ((float)v0)));
              const float v4 = (float)(exp(((float)v3)));
              const float v8 = (float)((((float)v4) / ((float)v5)));
              p1[b1 + j * T[9]] = (float)v8;
            }
          }
        }
      }
    }
  }
}
