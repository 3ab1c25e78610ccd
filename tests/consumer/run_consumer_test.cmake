# Builds and runs the consumer project against psflow in the three ways a user may take it:
#   install:       `cmake --install` of BUILD_DIR into a scratch prefix, found through
#                  CMAKE_PREFIX_PATH;
#   build tree:    CMAKE_PREFIX_PATH=BUILD_DIR (psflow's export());
#   subdirectory:  add_subdirectory(PSFLOW_SOURCE_DIR) (as FetchContent does).
# Invoked by CTest with -DBUILD_DIR=... -DSOURCE_DIR=<this folder> -DPSFLOW_SOURCE_DIR=...
# -DWORK_DIR=... [-DMODES=install;build_tree;subdirectory].
file(REMOVE_RECURSE "${WORK_DIR}")
if(NOT MODES)
  set(MODES install build_tree subdirectory)
endif()

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "${step} failed (${rc}):\n${out}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

foreach(mode ${MODES})
  set(build "${WORK_DIR}/${mode}")
  if(mode STREQUAL "install")
    run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
    if(NOT EXISTS "${WORK_DIR}/prefix/share/cmake/psflow/psflowConfig.cmake")
      message(FATAL_ERROR "the package files are not under share/cmake/psflow")
    endif()
    set(how "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
  elseif(mode STREQUAL "build_tree")
    set(how "-DCMAKE_PREFIX_PATH=${BUILD_DIR}")
  elseif(mode STREQUAL "subdirectory")
    set(how "-DPSFLOW_SOURCE_DIR=${PSFLOW_SOURCE_DIR}")
  else()
    message(FATAL_ERROR "unknown mode '${mode}'")
  endif()
  # unoptimised, no debug info: this checks packaging, and compiles 3x faster
  # Compiled once (psflow::compiled, with a second program and a library) all three ways;
  # header-only from the install.
  if(mode STREQUAL "install")
    set(targets "consumer,consumer_compiled")
  else()
    set(targets "consumer_compiled")
  endif()
  run("configuring the consumer (${mode})" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${build}"
      -G Ninja "${how}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
      "-DPSFLOW_CONSUMER_TARGETS=${targets}")
  run("building the consumer (${mode})" "${CMAKE_COMMAND}" --build "${build}")
  string(REPLACE "," ";" target_list "${targets}")
  list(FIND target_list consumer_compiled compiled_at)  # (no IN_LIST in a -P script)
  if(NOT compiled_at EQUAL -1)
    # Two programs and a static library link psflow::compiled: its source compiled once.
    list(APPEND target_list consumer_compiled_with_library)
    file(GLOB_RECURSE objects "${build}/*compiled.cpp.o")
    list(LENGTH objects compiled_count)
    if(NOT compiled_count EQUAL 1)
      message(FATAL_ERROR "psflow's compiled.cpp was compiled ${compiled_count} times in the "
                          "consumer (${mode}), not once: ${objects}")
    endif()
  endif()
  foreach(target ${target_list})
    run("running ${target} (${mode})" "${build}/${target}")
    set(expected "array([[7., 7.],\n       [7., 7.]], dtype=float32)\n")
    if(NOT output STREQUAL expected)
      message(FATAL_ERROR "unexpected ${target} output (${mode}):\n${output}")
    endif()
    message(STATUS "${target} built and ran (${mode})")
  endforeach()
endforeach()
