void fusion0(char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T) {
  {
    /* nest 0: rows over 4 dims, the last 1 reduced */
    const int64_t *D = S + 0;
    const uint8_t *restrict p0 = (const uint8_t *)P[0];
    const float *restrict p1 = (const float *)P[1];
    float *restrict p2 = (float *)P[2];
    const int64_t nrows = D[0] * D[1] * D[2];
    const int64_t ninner = D[3];
    const int64_t w3 = 1;
    if (nrows > 0) {
      int ic = 1;
      ic &= D[3] <= 1 || T[3] == w3;
      ic &= D[3] <= 1 || T[11] == w3;
      ic &= D[3] <= 1 || T[19] == w3;
      const int uc = ic && ninner <= 8192;
      #pragma omp parallel for schedule(static) if (nrows * ninner >= 32768)
      for (int64_t row = 0; row < nrows; row++) {
        int64_t rem = row;
        const int64_t o2 = rem % D[2];
        rem /= D[2];
        const int64_t o1 = rem % D[1];
        rem /= D[1];
        const int64_t o0 = rem;
        const int64_t b0 = o0 * T[0] + o1 * T[1] + o2 * T[2];
        const int64_t b1 = o0 * T[8] + o1 * T[9] + o2 * T[10];
        const int64_t b2 = o0 * T[16] + o1 * T[17] + o2 * T[18];
        _Alignas(32) float rb5[8192];
        const char * pf0 = ic && row + 1 < nrows && T[2] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p0 <= 16384 ? (const char *)(p0 + b0 + ninner) : NULL;
        const char * pf1 = ic && row + 1 < nrows && T[10] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p1 <= 16384 ? (const char *)(p1 + b1 + ninner) : NULL;
        const char * pf2 = ic && row + 1 < nrows && T[18] == ninner && ninner >= 256 && ninner * (int64_t)sizeof *p2 <= 16384 ? (const char *)(p2 + b2 + ninner) : NULL;
        /* pass 1 */
        float m2 = -INFINITY;
        int n2 = 0;
        if (ic) {
          #pragma omp simd reduction(max:m2) reduction(|:n2)
          for (int64_t j = 0; j < ninner; j++) {
            const int64_t a0 = (int64_t)(p0[b0 + j] != 0);
            const float a1 = p1[b1 + j];
            const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
            m2 = v1 > m2 ? v1 : m2;
            n2 |= v1 != v1;
          }
        } else {
          for (int64_t j = 0; j < D[3]; j++) {
            const int64_t a0 = (int64_t)(p0[b0 + j * T[3]] != 0);
            const float a1 = p1[b1 + j * T[11]];
            const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
            m2 = v1 > m2 ? v1 : m2;
            n2 |= v1 != v1;
          }
        }
        const float v2 = (n2 ? (float)NAN : m2);
        /* pass 2 */
        double s6 = 0;
        if (uc) {
          for (int64_t jc = 0; jc < (ninner + 255) / 256; jc++) {
            const int64_t jb = 256 * jc;
            const int64_t je = jb + 256 < ninner ? jb + 256 : ninner;
            if (pf0) {
              __builtin_prefetch(pf0 + jb * 1 + 0, 0, 3);
              __builtin_prefetch(pf0 + jb * 1 + 64, 0, 3);
              __builtin_prefetch(pf0 + jb * 1 + 128, 0, 3);
              __builtin_prefetch(pf0 + jb * 1 + 192, 0, 3);
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
              __builtin_prefetch(pf2 + jb * 4 + 0, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 64, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 128, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 192, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 256, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 320, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 384, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 448, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 512, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 576, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 640, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 704, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 768, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 832, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 896, 1, 3);
              __builtin_prefetch(pf2 + jb * 4 + 960, 1, 3);
            }
            #pragma omp simd reduction(+:s6)
            for (int64_t j = jb; j < je; j++) {
              const int64_t a0 = (int64_t)(p0[b0 + j] != 0);
              const float a1 = p1[b1 + j];
              const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
              const float v4 = (float)((((float)v1) - ((float)v2)));
              const float v5 = (float)(exp(((float)v4)));
              rb5[j] = v5;
              s6 += (double)v5;
            }
          }
        } else {
          if (ic) {
            for (int64_t jc = 0; jc < (ninner + 255) / 256; jc++) {
              const int64_t jb = 256 * jc;
              const int64_t je = jb + 256 < ninner ? jb + 256 : ninner;
              if (pf0) {
                __builtin_prefetch(pf0 + jb * 1 + 0, 0, 3);
                __builtin_prefetch(pf0 + jb * 1 + 64, 0, 3);
                __builtin_prefetch(pf0 + jb * 1 + 128, 0, 3);
                __builtin_prefetch(pf0 + jb * 1 + 192, 0, 3);
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
                __builtin_prefetch(pf2 + jb * 4 + 0, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 64, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 128, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 192, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 256, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 320, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 384, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 448, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 512, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 576, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 640, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 704, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 768, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 832, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 896, 1, 3);
                __builtin_prefetch(pf2 + jb * 4 + 960, 1, 3);
              }
              #pragma omp simd reduction(+:s6)
              for (int64_t j = jb; j < je; j++) {
                const int64_t a0 = (int64_t)(p0[b0 + j] != 0);
                const float a1 = p1[b1 + j];
                const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
                const float v4 = (float)((((float)v1) - ((float)v2)));
                const float v5 = (float)(exp(((float)v4)));
                s6 += (double)v5;
              }
            }
          } else {
            for (int64_t j = 0; j < D[3]; j++) {
              const int64_t a0 = (int64_t)(p0[b0 + j * T[3]] != 0);
              const float a1 = p1[b1 + j * T[11]];
              const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
              const float v4 = (float)((((float)v1) - ((float)v2)));
              const float v5 = (float)(exp(((float)v4)));
              s6 += (double)v5;
            }
          }
        }
        const float v6 = th_fz_d_f32(s6);
        /* the outputs */
        if (uc) {
          #pragma omp simd
          for (int64_t j = 0; j < ninner; j++) {
            const float v5 = rb5[j];
            const float v8 = (float)((((float)v5) / ((float)v6)));
            p2[b2 + j] = (float)v8;
          }
        } else {
          if (ic) {
            #pragma omp simd
            for (int64_t j = 0; j < ninner; j++) {
              const int64_t a0 = (int64_t)(p0[b0 + j] != 0);
              const float a1 = p1[b1 + j];
              const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
              const float v4 = (float)((((float)v1) - ((float)v2)));
              const float v5 = (float)(exp(((float)v4)));
              const float v8 = (float)((((float)v5) / ((float)v6)));
              p2[b2 + j] = (float)v8;
            }
          } else {
            for (int64_t j = 0; j < D[3]; j++) {
              const int64_t a0 = (int64_t)(p0[b0 + j * T[3]] != 0);
              const float a1 = p1[b1 + j * T[11]];
              const float v1 = (float)(th_fz_where((a0), (-(float)INFINITY), ((float)a1)));
              const float v4 = (float)((((float)v1) - ((float)v2)));
              const float v5 = (float)(exp(((float)v4)));
              const float v8 = (float)((((float)v5) / ((float)v6)));
              p2[b2 + j * T[19]] = (float)v8;
            }
          }
        }
      }
    }
  }
}
