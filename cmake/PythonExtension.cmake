# The extension module ampcheck._native (harness/python/native_module.cpp) and, in a package build (scikit-build-core),
# the install rules of the wheel (component python_package): ampcheck/_native*.so and ampcheck/bin/ampcheck.
# pybind11 comes with the torch package (torch/include/pybind11, on LibTorch's include path); Python's headers from
# FindPython for the Python whose torch provides LibTorch. In the build tree the module lands in
# <build>/python/ampcheck/, where the package finds it in a source checkout (python/src/ampcheck/_loader.py).
if(NOT Python_EXECUTABLE)
  set(Python_EXECUTABLE ${AMPCHECK_PYTHON_EXE})
endif()
find_package(Python COMPONENTS Interpreter Development.Module)
if(NOT Python_Development.Module_FOUND)
  message(STATUS "ampcheck: no Python headers for ${Python_EXECUTABLE} (Debian: python3-dev): the extension module "
                 "ampcheck._native is not built")
  return()
endif()
file(MAKE_DIRECTORY ${AMPCHECK_INCLUDE_ROOTS}/python)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/harness/python ${AMPCHECK_INCLUDE_ROOTS}/python/python SYMBOLIC)
# The process's own libstdc++ (the shared libstdc++.so.6 torch loads), linked first by its file name: a compiler whose
# own library directory holds only libstdc++.a (the GPU machine's GCC 13 in /opt/gcc: `-lstdc++` finds the archive
# there before the system's .so) or a -static-libstdc++ from LDFLAGS would put a private copy of the C++ runtime into
# the module, and beside torch's it crashes `ostream << double` in the judge (issue 51; _loader.py refuses such a
# module). With libstdc++.so.6 first, no libstdc++.a member is left to pull.
set(AMPCHECK_SHARED_LIBSTDCXX "-Wl,--push-state,-Bdynamic" "-l:libstdc++.so.6" "-Wl,--pop-state")
# The module's code compiled once (an object library), linked into the module and into the tests' variants below.
add_library(ampcheck_native_objects OBJECT harness/python/native_module.cpp)
target_include_directories(ampcheck_native_objects PRIVATE ${AMPCHECK_INCLUDE_ROOTS}/python)
target_link_libraries(ampcheck_native_objects PRIVATE Python::Module ampcheck_usecases ampcheck_report ampcheck_io)
target_compile_options(ampcheck_native_objects PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ampcheck_native_objects PRIVATE AMPCHECK_VERSION="${PROJECT_VERSION}")
set_target_properties(ampcheck_native_objects PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden)
# (GCC reuses the library's precompiled header across the hidden visibility; clang refuses one built with another
# visibility, so under clang this one file parses the LibTorch headers itself)
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  ampcheck_use_pch(ampcheck_native_objects)
endif()
# ampcheck_native_module(TARGET DIR [UNGUARDED] [LINK_OPTIONS ...]): the module linked into DIR/_native*.so;
# UNGUARDED leaves the shared libstdc++ out (the tests' module that shows what it guards against).
function(ampcheck_native_module target dir)
  cmake_parse_arguments(M "UNGUARDED" "" "LINK_OPTIONS" ${ARGN})
  Python_add_library(${target} MODULE WITH_SOABI $<TARGET_OBJECTS:ampcheck_native_objects>)
  if(NOT M_UNGUARDED)
    target_link_libraries(${target} PRIVATE ${AMPCHECK_SHARED_LIBSTDCXX})
  endif()
  target_link_libraries(${target} PRIVATE ampcheck_usecases ampcheck_report ampcheck_io)
  target_link_options(${target} PRIVATE ${M_LINK_OPTIONS})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME _native LIBRARY_OUTPUT_DIRECTORY ${dir})
endfunction()
ampcheck_native_module(ampcheck_native ${PROJECT_BINARY_DIR}/python/ampcheck)
# For CTest cpu.python_native_safety: the module linked with -static-libstdc++ as the H100 machine's build was, once
# as it was (unguarded: the C++ runtime's streams inside it) and once with the guard above (none inside) — links of the
# same objects, a second each. Built with the tests where the compiler has a static libstdc++.
if(AMPCHECK_BUILD_TESTS AND NOT DEFINED SKBUILD)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.a OUTPUT_VARIABLE _ampcheck_libstdcxx_a
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(IS_ABSOLUTE "${_ampcheck_libstdcxx_a}" AND EXISTS "${_ampcheck_libstdcxx_a}")
    ampcheck_native_module(ampcheck_native_private_runtime ${PROJECT_BINARY_DIR}/private-runtime/unguarded/python/ampcheck
                           UNGUARDED LINK_OPTIONS -static-libstdc++)
    ampcheck_native_module(ampcheck_native_private_runtime_guarded ${PROJECT_BINARY_DIR}/private-runtime/guarded/python/ampcheck
                           LINK_OPTIONS -static-libstdc++)
  endif()
endif()
# the libtorch the module links: the installed torch package's, found beside the module in site-packages, else where
# this build found it
get_filename_component(_ampcheck_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
set_target_properties(ampcheck_native PROPERTIES INSTALL_RPATH "$ORIGIN/../torch/lib;${_ampcheck_torch_lib_dir}")
message(STATUS "ampcheck: extension module ampcheck._native for ${Python_EXECUTABLE} (${Python_SOABI})")

if(DEFINED SKBUILD)  # a package build: the wheel's contents (a build of the checkout installs nothing of this)
  install(TARGETS ampcheck_native LIBRARY DESTINATION ampcheck COMPONENT python_package)
  set_target_properties(ampcheck PROPERTIES INSTALL_RPATH "$ORIGIN/../../torch/lib;${_ampcheck_torch_lib_dir}")
  install(TARGETS ampcheck RUNTIME DESTINATION ampcheck/bin COMPONENT python_package)
endif()
