# The installed static library through pkg-config: installs the build tree BUILD_DIR into a scratch
# prefix (WORK_DIR/prefix), builds SOURCE with `pkg-config --static --cflags --libs thunder` from that
# prefix's thunder.pc, and runs it (tests/static/static_core_api.c: core's API only, so it passes only if
# Libs.private pulls in the op table). Run by CTest (tests/extra.cmake, static_core_api_pkgconfig):
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE=... -DCC=... -DPKG_CONFIG=... [-DEXTRA_FLAGS=...] -P pkgconfig_link.cmake
foreach(v BUILD_DIR WORK_DIR SOURCE CC PKG_CONFIG)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "pkgconfig_link.cmake: -D${v}=... is required")
  endif()
endforeach()
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${prefix})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${prefix} failed (${rc})")
endif()
file(GLOB_RECURSE pc_files ${prefix}/*/thunder.pc)
list(LENGTH pc_files npc)
if(NOT npc EQUAL 1)
  message(FATAL_ERROR "expected one thunder.pc under ${prefix}, found: ${pc_files}")
endif()
get_filename_component(pc_dir ${pc_files} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND ${PKG_CONFIG} --static --cflags --libs thunder
  RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config --static --cflags --libs thunder failed: ${err}")
endif()
if(NOT flags MATCHES "--undefined=th_ops_install")
  message(FATAL_ERROR "thunder.pc's static flags do not name th_ops_install: ${flags}")
endif()
# -lthunder would pick libthunder.so where both exist; the static archive is what is tested
string(REGEX REPLACE "(^| )-lthunder( |$)" "\\1-l:libthunder.a\\2" flags "${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
separate_arguments(extra UNIX_COMMAND "${EXTRA_FLAGS}")
set(exe ${WORK_DIR}/static_core_api_pc)
execute_process(COMMAND ${CC} -std=c11 ${extra} ${SOURCE} -o ${exe} ${flags}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc)
  message(FATAL_ERROR "building ${SOURCE} against the installed libthunder.a failed:\n${CC} ${SOURCE} ${flags}\n${out}")
endif()
execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(rc)
  message(FATAL_ERROR "${exe} failed (${rc})")
endif()
