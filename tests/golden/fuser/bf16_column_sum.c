void fusion0(char *const *restrict P, const int64_t *restrict S, const int64_t *restrict T) {
  {
    /* nest 0: columns over 2 dims, the first 1 reduced */
    const int64_t *D = S + 0;
    const uint16_t *restrict p0 = (const uint16_t *)P[0];
    uint16_t *restrict p1 = (uint16_t *)P[1];
    const int64_t nred = D[0];
    const int64_t ncols = D[1];
    const int64_t ninner = D[1];
    if (ncols > 0) {
      const int64_t nko = ncols / ninner;
      int ic = 1;
      ic &= D[1] <= 1 || T[1] == 1;
      double *const W = (double *)P[2];
      int64_t nt = nred * ncols >= 32768 ? S[2] : 1;
      nt = nt < nred ? nt : (nred > 0 ? nred : 1);
      int64_t nteam = 1;
      #pragma omp parallel num_threads(nt)
      {
        const int64_t t = omp_get_thread_num();
        const int64_t tn = omp_get_num_threads();
        if (t == 0) {
          nteam = tn;
        }
        const int64_t r0 = nred * t / tn;
        const int64_t r1 = nred * (t + 1) / tn;
        double *restrict s1_c = ((double *)(W + ((int64_t)(t) * 1 + 0) * ncols));
        #pragma omp simd
        for (int64_t k = 0; k < ncols; k++) {
          s1_c[k] = 0;
        }
        for (int64_t rr = r0; rr < r1; rr++) {
          const int64_t o0 = rr;
          for (int64_t ko = 0; ko < nko; ko++) {
            const int64_t kb = ko * ninner;
            const int64_t b0 = o0 * T[0];
            if (ic) {
              #pragma omp simd
              for (int64_t j = 0; j < ninner; j++) {
                const float a0 = th_sc_bf16_to_f32(p0[b0 + j]);
                const float v0 = a0;
                s1_c[kb + j] += (double)v0;
              }
            } else {
              for (int64_t j = 0; j < ninner; j++) {
                const float a0 = th_sc_bf16_to_f32(p0[b0 + j * T[1]]);
                const float v0 = a0;
                s1_c[kb + j] += (double)v0;
              }
            }
          }
        }
      }
      #pragma omp parallel for schedule(static) if (ncols >= 4096)
      for (int64_t row = 0; row < ncols; row++) {
        double s1 = ((double *)(W + ((int64_t)(0) * 1 + 0) * ncols))[row];
        for (int64_t t = 1; t < nteam; t++) {
          s1 += ((double *)(W + ((int64_t)(t) * 1 + 0) * ncols))[row];
        }
        const int64_t o1 = row;
        const float v1 = th_fz_d_f32(s1);
        const float v2 = th_fz_f_bf16(v1);
        p1[row] = th_fz_st_bf16(v2);
      }
    }
  }
}
