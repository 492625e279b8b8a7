# Python tests (pytest with Debian's /usr/bin/python3, NumPy and PyTorch as oracles), run from CTest
# with the build directory in THUNDER_BUILD_DIR.
# (Not in a sanitizer build: there the extension needs the sanitizer runtimes preloaded; see below.)
if(NOT THUNDER_SANITIZE)
  add_test(NAME python_tests
    COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_tests PROPERTIES LABELS python TIMEOUT 1200
    ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()

# In a sanitizer build: the Python frontend's tests against the ASan/UBSan-built extension, with the
# sanitizer runtimes preloaded into /usr/bin/python3 (leak detection off: CPython and torch keep
# allocations until exit by design).
if(THUNDER_SANITIZE AND THUNDER_BUILD_PYTHON)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE TH_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libubsan.so OUTPUT_VARIABLE TH_LIBUBSAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  add_test(NAME python_frontend_asan
    COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_jit_frontend.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_seeds.py
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_functionalization.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_autocast_jit.py)
  set_tests_properties(python_frontend_asan PROPERTIES LABELS asan TIMEOUT 1200
    ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR};LD_PRELOAD=${TH_LIBASAN}:${TH_LIBUBSAN};ASAN_OPTIONS=detect_leaks=0;UBSAN_OPTIONS=print_stacktrace=1")
endif()
