# fuzz/clang_build.cmake — the test fuzz_clang_build (a ctest fixture, see CMakeLists.txt):
# configures SRC with CLANG, -DCT_FUZZ=ON and no CUDA into BIN, then builds only TARGETS (the
# libFuzzer targets and what they link). Fails, naming the step, when either fails.
#   cmake -DSRC=... -DBIN=... -DCLANG=... -DTARGETS="a;b" -P clang_build.cmake
foreach(v SRC BIN CLANG TARGETS)
    if(NOT DEFINED ${v})
        message(FATAL_ERROR "clang_build.cmake: -D${v}=... is missing")
    endif()
endforeach()
cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
execute_process(COMMAND ${CMAKE_COMMAND} -E env CC=${CLANG} ${CMAKE_COMMAND} -S ${SRC} -B ${BIN}
                        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCT_FUZZ=ON -DCT_WITH_CUDA=OFF
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz_clang_build: configuring ${BIN} with ${CLANG} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN} -j ${jobs} --target ${TARGETS}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "fuzz_clang_build: building ${TARGETS} in ${BIN} failed (${rc})")
endif()
