# Python tests (pytest with Debian's /usr/bin/python3, NumPy and PyTorch as oracles), run from CTest
# with the build directory in THUNDER_BUILD_DIR.
add_test(NAME python_tests
  COMMAND /usr/bin/python3 -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
set_tests_properties(python_tests PROPERTIES LABELS python TIMEOUT 1200
  ENVIRONMENT "THUNDER_BUILD_DIR=${PROJECT_BINARY_DIR};THUNDER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
