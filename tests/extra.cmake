# Python tests (pytest with the interpreter the extension is built for, NumPy and PyTorch as oracles), run from CTest
# with the build directory in THUNDER_BUILD_DIR.
# (Not in a sanitizer build: there the extension needs the sanitizer runtimes preloaded; see below.)
if(NOT THUNDER_SANITIZE)
  add_test(NAME python_tests
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(python_tests PROPERTIES LABELS python TIMEOUT 3600
    ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()

# The model zoo (tests/models: Hugging Face, torchvision, nanoGPT/minGPT/llama2.c and torch.nn models with
# random weights through thunder_c.jit against eager; the failures of today are strict xfails listed in
# tests/models/failures.json).
if(NOT THUNDER_SANITIZE)
  add_test(NAME model_zoo
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/models)
  set_tests_properties(model_zoo PROPERTIES LABELS "python;models" TIMEOUT 1800
    ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()

# In a sanitizer build: the Python frontend's tests against the ASan/UBSan-built extension, with the
# sanitizer runtimes preloaded into the interpreter (leak detection off: CPython and torch keep
# allocations until exit by design).
if(THUNDER_SANITIZE AND THUNDER_BUILD_PYTHON)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so OUTPUT_VARIABLE TH_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libubsan.so OUTPUT_VARIABLE TH_LIBUBSAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  add_test(NAME python_frontend_asan
    COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_jit_frontend.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_seeds.py
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_functionalization.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_autocast_jit.py
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_extend.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_random_stream.py
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_compile_stats.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_fuser_int_constants.py
      ${CMAKE_CURRENT_SOURCE_DIR}/python/test_flash_attention.py ${CMAKE_CURRENT_SOURCE_DIR}/python/test_fuse_attention.py)
  set_tests_properties(python_frontend_asan PROPERTIES LABELS asan TIMEOUT 1200
    ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR};LD_PRELOAD=${TH_LIBASAN}:${TH_LIBUBSAN};ASAN_OPTIONS=detect_leaks=0;UBSAN_OPTIONS=print_stacktrace=1")
endif()

# The C extension-API example (examples/user_executor.c): registers an op and an executor from C, runs
# a program using them and exits non-zero unless the result matches its double-precision reference.
if(TARGET user_executor)
  add_test(NAME example_user_executor COMMAND user_executor)
  set_tests_properties(example_user_executor PROPERTIES LABELS unit TIMEOUT 120)
endif()

# The C training example: a few AdamW steps of examples/train_gpt.c on the GPL-3 text (or, without
# it, the project's README); --check fails unless the loss falls below 0.85 x its first value.
if(TARGET train_gpt)
  if(EXISTS /usr/share/common-licenses/GPL-3)
    set(TH_TRAIN_TEXT /usr/share/common-licenses/GPL-3)
  else()
    set(TH_TRAIN_TEXT ${PROJECT_SOURCE_DIR}/README.md)
  endif()
  add_test(NAME example_train_gpt COMMAND train_gpt --steps 30 --batch 8 --check ${TH_TRAIN_TEXT})
  set_tests_properties(example_train_gpt PROPERTIES LABELS unit TIMEOUT 300)
endif()

# The static library, used through core's API only (tests/static/static_core_api.c: th_trace_call of
# ltorch.neg, print, parse, verify): passes only if linking libthunder.a still pulls in the op table
# (thunder_static's --undefined=th_ops_install, CMakeLists.txt). static_core_api links the CMake target;
# static_core_api_pkgconfig installs the build into a scratch prefix and links with the installed
# thunder.pc (`pkg-config --static`).
add_executable(static_core_api ${CMAKE_CURRENT_SOURCE_DIR}/static/static_core_api.c)
target_compile_options(static_core_api PRIVATE ${TH_WARN})
target_link_libraries(static_core_api PRIVATE thunder_static)
add_test(NAME static_core_api COMMAND static_core_api)
set_tests_properties(static_core_api PROPERTIES LABELS unit TIMEOUT 60)
if(PKG_CONFIG_EXECUTABLE)
  set(TH_STATIC_PC_FLAGS "")
  if(THUNDER_SANITIZE)
    set(TH_STATIC_PC_FLAGS "-fsanitize=address,undefined")
  endif()
  add_test(NAME static_core_api_pkgconfig
    COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
      -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/static_pkgconfig -DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/static/static_core_api.c
      -DCC=${CMAKE_C_COMPILER} -DPKG_CONFIG=${PKG_CONFIG_EXECUTABLE} "-DEXTRA_FLAGS=${TH_STATIC_PC_FLAGS}"
      -P ${CMAKE_CURRENT_SOURCE_DIR}/static/pkgconfig_link.cmake)
  set_tests_properties(static_core_api_pkgconfig PROPERTIES LABELS unit TIMEOUT 300)
endif()
